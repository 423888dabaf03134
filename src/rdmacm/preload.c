/*
 * librspreload.so: runs unmodified TCP programs over rsockets.  Loaded with
 * LD_PRELOAD, it takes the socket calls of AF_INET / AF_INET6 stream
 * sockets and makes them rsocket calls; everything else goes to libc.
 *
 * The application's fd is a real socket that keeps its number reserved
 * (and is what a failed rsocket() falls back to); a table maps it to the
 * rsocket's own number.  librdmacm and libibverbs open sockets and call
 * poll / read / write themselves: while this thread is inside an rsocket
 * call those go straight to libc, and from other threads they name fds that
 * are not in the table.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static struct {
	int (*socket)(int, int, int);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*close)(int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *,
			    socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int,
			  const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*shutdown)(int, int);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*fcntl)(int, int, ...);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*dup)(int);
	int (*dup2)(int, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
} real;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_real(void)
{
#define LOAD(name) real.name = (__typeof__(real.name))dlsym(RTLD_NEXT, #name)
	LOAD(socket);
	LOAD(bind);
	LOAD(listen);
	LOAD(accept);
	LOAD(accept4);
	LOAD(connect);
	LOAD(close);
	LOAD(read);
	LOAD(readv);
	LOAD(write);
	LOAD(writev);
	LOAD(recv);
	LOAD(recvfrom);
	LOAD(recvmsg);
	LOAD(send);
	LOAD(sendto);
	LOAD(sendmsg);
	LOAD(poll);
	LOAD(select);
	LOAD(shutdown);
	LOAD(setsockopt);
	LOAD(getsockopt);
	LOAD(fcntl);
	LOAD(getpeername);
	LOAD(getsockname);
	LOAD(dup);
	LOAD(dup2);
	LOAD(sendfile);
#undef LOAD
}

static void init(void)
{
	pthread_once(&init_once, init_real);
}

__attribute__((constructor)) static void preload_init(void)
{
	init();
}

/* ---- the fd table -------------------------------------------------------- */

/* Fds past the table stay ordinary sockets: a fixed size needs no lock
 * against a reader while it grows. */
enum { MAX_FDS = 65536 };

static int fd_map[MAX_FDS];	/* rsocket + 1, 0 for an ordinary fd */
static int rs_users[MAX_FDS];	/* application fds (dups) per rsocket */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

/* Nonzero while this thread runs librdmacm code for the application. */
static __thread int in_rs;

static int lookup(int fd)
{
	if (in_rs || fd < 0 || fd >= MAX_FDS)
		return -1;
	return __atomic_load_n(&fd_map[fd], __ATOMIC_ACQUIRE) - 1;
}

static void map_fd(int fd, int rs)
{
	pthread_mutex_lock(&map_lock);
	rs_users[rs]++;
	__atomic_store_n(&fd_map[fd], rs + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&map_lock);
}

/* Forgets fd; the last fd of an rsocket closes it. */
static void unmap_fd(int fd, int rs)
{
	bool last;

	pthread_mutex_lock(&map_lock);
	__atomic_store_n(&fd_map[fd], 0, __ATOMIC_RELEASE);
	last = --rs_users[rs] == 0;
	pthread_mutex_unlock(&map_lock);
	if (last) {
		in_rs++;
		rclose(rs);
		in_rs--;
	}
}

/* Runs an rsocket call with libc for everything it does itself. */
#define RS(call)                                   \
	({                                         \
		in_rs++;                           \
		__typeof__(call) ret_ = (call);    \
		in_rs--;                           \
		ret_;                              \
	})

static bool is_stream(int domain, int type, int protocol)
{
	type &= ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	return (domain == AF_INET || domain == AF_INET6) &&
	       type == SOCK_STREAM && (!protocol || protocol == IPPROTO_TCP);
}

/* ---- sockets ------------------------------------------------------------- */

EXPORT int socket(int domain, int type, int protocol)
{
	int fd, rs, err;

	init();
	fd = real.socket(domain, type, protocol);
	if (fd < 0 || in_rs || fd >= MAX_FDS || !is_stream(domain, type, protocol))
		return fd;
	err = errno;
	rs = RS(rsocket(domain, type, protocol));
	if (rs < 0 || rs >= MAX_FDS) {
		/* no RDMA device: the program keeps its TCP socket */
		if (rs >= 0)
			RS(rclose(rs));
		errno = err;
		return fd;
	}
	map_fd(fd, rs);
	return fd;
}

EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.bind(fd, addr, len) : RS(rbind(rs, addr, len));
}

EXPORT int listen(int fd, int backlog)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.listen(fd, backlog) : RS(rlisten(rs, backlog));
}

EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	int rs = lookup(fd), nrs, nfd;

	init();
	if (rs < 0)
		return real.accept4(fd, addr, len, flags);
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
		errno = EINVAL;
		return -1;
	}
	nrs = RS(raccept(rs, addr, len));
	if (nrs < 0)
		return -1;
	/* the new connection's fd number, reserved by a socket of its own */
	nfd = real.socket(AF_INET, SOCK_STREAM | (flags & SOCK_CLOEXEC), 0);
	if (nfd < 0 || nfd >= MAX_FDS || nrs >= MAX_FDS) {
		RS(rclose(nrs));
		if (nfd >= 0)
			real.close(nfd);
		errno = EMFILE;
		return -1;
	}
	if (flags & SOCK_NONBLOCK)
		RS(rfcntl(nrs, F_SETFL, O_NONBLOCK));
	map_fd(nfd, nrs);
	return nfd;
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	init();
	if (lookup(fd) < 0)
		return real.accept(fd, addr, len);
	return accept4(fd, addr, len, 0);
}

EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.connect(fd, addr, len) : RS(rconnect(rs, addr, len));
}

EXPORT int close(int fd)
{
	int rs = lookup(fd);

	init();
	if (rs >= 0)
		unmap_fd(fd, rs);
	return real.close(fd);
}

EXPORT int shutdown(int fd, int how)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.shutdown(fd, how) : RS(rshutdown(rs, how));
}

EXPORT int setsockopt(int fd, int level, int name, const void *val,
		      socklen_t len)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.setsockopt(fd, level, name, val, len)
		      : RS(rsetsockopt(rs, level, name, val, len));
}

EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.getsockopt(fd, level, name, val, len)
		      : RS(rgetsockopt(rs, level, name, val, len));
}

EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.getpeername(fd, addr, len)
		      : RS(rgetpeername(rs, addr, len));
}

EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.getsockname(fd, addr, len)
		      : RS(rgetsockname(rs, addr, len));
}

/* ---- data ---------------------------------------------------------------- */

EXPORT ssize_t read(int fd, void *buf, size_t count)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.read(fd, buf, count) : RS(rread(rs, buf, count));
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.readv(fd, iov, iovcnt) : RS(rreadv(rs, iov, iovcnt));
}

EXPORT ssize_t write(int fd, const void *buf, size_t count)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.write(fd, buf, count) : RS(rwrite(rs, buf, count));
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.writev(fd, iov, iovcnt)
		      : RS(rwritev(rs, iov, iovcnt));
}

EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.recv(fd, buf, len, flags)
		      : RS(rrecv(rs, buf, len, flags));
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags,
			struct sockaddr *addr, socklen_t *addrlen)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.recvfrom(fd, buf, len, flags, addr, addrlen)
		      : RS(rrecvfrom(rs, buf, len, flags, addr, addrlen));
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.recvmsg(fd, msg, flags) : RS(rrecvmsg(rs, msg, flags));
}

EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.send(fd, buf, len, flags)
		      : RS(rsend(rs, buf, len, flags));
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
		      const struct sockaddr *addr, socklen_t addrlen)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.sendto(fd, buf, len, flags, addr, addrlen)
		      : RS(rsendto(rs, buf, len, flags, addr, addrlen));
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	int rs = lookup(fd);

	init();
	return rs < 0 ? real.sendmsg(fd, msg, flags) : RS(rsendmsg(rs, msg, flags));
}

EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	int rs = lookup(out_fd);
	char buf[65536];
	size_t done = 0;

	init();
	if (rs < 0)
		return real.sendfile(out_fd, in_fd, offset, count);
	while (done < count) {
		size_t want = count - done < sizeof(buf) ? count - done
							 : sizeof(buf);
		ssize_t n = offset ? pread(in_fd, buf, want, *offset)
				   : real.read(in_fd, buf, want);
		ssize_t w;

		if (n <= 0) {
			if (n < 0 && !done)
				return -1;
			break;
		}
		w = RS(rwrite(rs, buf, (size_t)n));
		if (w <= 0) {
			if (!done)
				return -1;
			break;
		}
		done += (size_t)w;
		if (offset)
			*offset += w;
		else if (w < n)
			/* unsent bytes go back to the file for the next call */
			lseek(in_fd, w - n, SEEK_CUR);
		if (w < n)
			break;
	}
	return (ssize_t)done;
}

/* ---- readiness ----------------------------------------------------------- */

EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct pollfd *rfds;
	bool any = false;
	int ret;

	init();
	for (nfds_t i = 0; i < nfds && !any; i++)
		any = lookup(fds[i].fd) >= 0;
	if (!any)
		return real.poll(fds, nfds, timeout);
	rfds = malloc(nfds * sizeof(*rfds));
	if (!rfds) {
		errno = ENOMEM;
		return -1;
	}
	for (nfds_t i = 0; i < nfds; i++) {
		int rs = lookup(fds[i].fd);

		rfds[i] = fds[i];
		if (rs >= 0)
			rfds[i].fd = rs;
	}
	ret = RS(rpoll(rfds, nfds, timeout));
	for (nfds_t i = 0; i < nfds; i++)
		fds[i].revents = rfds[i].revents;
	free(rfds);
	return ret;
}

EXPORT int select(int nfds, fd_set *readfds, fd_set *writefds,
		  fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *fds;
	bool any = false;
	int n = 0, ret, timeout_ms = -1;

	init();
	for (int fd = 0; fd < nfds && !any; fd++)
		any = ((readfds && FD_ISSET(fd, readfds)) ||
		       (writefds && FD_ISSET(fd, writefds)) ||
		       (exceptfds && FD_ISSET(fd, exceptfds))) &&
		      lookup(fd) >= 0;
	if (!any)
		return real.select(nfds, readfds, writefds, exceptfds, timeout);
	if (nfds > FD_SETSIZE) {
		errno = EINVAL;
		return -1;
	}
	if (timeout)
		timeout_ms = (int)(timeout->tv_sec * 1000 +
				   (timeout->tv_usec + 999) / 1000);
	fds = calloc(nfds, sizeof(*fds));
	if (!fds) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++) {
		short events = 0;
		int rs = lookup(fd);

		if (readfds && FD_ISSET(fd, readfds))
			events |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			events |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			events |= POLLPRI;
		if (events)
			fds[n++] = (struct pollfd){ rs >= 0 ? rs : fd, events, 0 };
	}
	ret = RS(rpoll(fds, n, timeout_ms));
	if (ret < 0) {
		free(fds);
		return -1;
	}
	/* the same fds in the same order: the k-th entry is the k-th fd set */
	ret = 0;
	for (int fd = 0, k = 0; fd < nfds; fd++) {
		bool r = readfds && FD_ISSET(fd, readfds);
		bool w = writefds && FD_ISSET(fd, writefds);
		bool e = exceptfds && FD_ISSET(fd, exceptfds);
		short rev;

		if (!r && !w && !e)
			continue;
		rev = fds[k++].revents;
		if (rev & POLLNVAL) {
			free(fds);
			errno = EBADF;
			return -1;
		}
		if (r && !(rev & (POLLIN | POLLHUP | POLLERR)))
			FD_CLR(fd, readfds);
		if (w && !(rev & (POLLOUT | POLLERR)))
			FD_CLR(fd, writefds);
		if (e && !(rev & POLLPRI))
			FD_CLR(fd, exceptfds);
		ret += (r && FD_ISSET(fd, readfds)) +
		       (w && FD_ISSET(fd, writefds)) +
		       (e && FD_ISSET(fd, exceptfds));
	}
	free(fds);
	return ret;
}

/* ---- fd operations ------------------------------------------------------- */

EXPORT int fcntl(int fd, int cmd, ...)
{
	int rs = lookup(fd), ret;
	va_list ap;
	void *arg;

	/* one pointer-sized argument, as glibc's fcntl reads it */
	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	init();
	if (rs < 0)
		return real.fcntl(fd, cmd, arg);
	switch (cmd) {
	case F_GETFL:
	case F_SETFL:
		return RS(rfcntl(rs, cmd, arg));
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		ret = real.fcntl(fd, cmd, arg);
		if (ret >= 0 && ret < MAX_FDS)
			map_fd(ret, rs);
		return ret;
	default:
		/* close-on-exec, owners, locks: the reserving socket's */
		return real.fcntl(fd, cmd, arg);
	}
}

EXPORT int dup(int fd)
{
	int rs = lookup(fd), nfd;

	init();
	nfd = real.dup(fd);
	if (rs >= 0 && nfd >= 0) {
		if (nfd < MAX_FDS) {
			map_fd(nfd, rs);
		} else {
			real.close(nfd);
			errno = EMFILE;
			return -1;
		}
	}
	return nfd;
}

EXPORT int dup2(int oldfd, int newfd)
{
	int ors = lookup(oldfd), nrs = lookup(newfd), ret;

	init();
	if (oldfd == newfd || (ors < 0 && nrs < 0))
		return real.dup2(oldfd, newfd);
	if (ors >= 0 && newfd >= MAX_FDS) {
		errno = EBADF;
		return -1;
	}
	ret = real.dup2(oldfd, newfd);
	if (ret < 0)
		return ret;
	if (nrs >= 0)
		unmap_fd(newfd, nrs);
	if (ors >= 0)
		map_fd(newfd, ors);
	return ret;
}
