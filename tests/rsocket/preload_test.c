/*
 * A plain TCP program for librspreload.so: a server and a client (forked
 * before either opens a socket) exchange data with read / write, readv /
 * writev, send / recv(MSG_WAITALL), sendfile, through an fd dup2'ed over
 * an open file, with a nonblocking connect waited for by poll and a select
 * before the first read, then shutdown(SHUT_WR) and EOF both ways.  Every socket must turn
 * out to be an rsocket (getsockopt SOL_RDMA answers), or the test fails.
 *
 * usage: preload_test <port>
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define BULK (1 << 20)
#define FILE_LEN 200000

static void fail(const char *who, const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", who, what, strerror(errno));
	exit(1);
}

static void check(int ok, const char *who, const char *what)
{
	if (!ok) {
		fprintf(stderr, "%s: %s\n", who, what);
		exit(1);
	}
}

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 7 + (i >> 10));
}

static void need_rsocket(int fd, const char *who)
{
	int v = 0;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, SOL_RDMA, RDMA_SQSIZE, &v, &len) || v <= 0)
		fail(who, "not an rsocket (is librspreload.so preloaded?)");
}

static void read_all(int fd, void *buf, size_t len, const char *who)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n <= 0)
			fail(who, n ? "read" : "read: early EOF");
		got += (size_t)n;
	}
}

static void write_all(int fd, const void *buf, size_t len, const char *who)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);

		if (n <= 0)
			fail(who, "write");
		done += (size_t)n;
	}
}

static int server(int port)
{
	static unsigned char buf[BULK];
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in peer;
	socklen_t len = sizeof(peer);
	char a[100], b[200], tail[16];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	struct timeval tv = { 10, 0 };
	fd_set rfds;
	int one = 1, ls, fd;
	ssize_t n;

	ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0)
		fail("server", "socket");
	need_rsocket(ls, "server");
	if (setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(ls, (struct sockaddr *)&sin, sizeof(sin)) || listen(ls, 4))
		fail("server", "setsockopt/bind/listen");
	fd = accept(ls, (struct sockaddr *)&peer, &len);
	if (fd < 0)
		fail("server", "accept");
	need_rsocket(fd, "server");
	check(len == sizeof(peer) && peer.sin_family == AF_INET &&
		      peer.sin_addr.s_addr == htonl(INADDR_LOOPBACK),
	      "server", "accept's peer address");

	FD_ZERO(&rfds);
	FD_SET(fd, &rfds);
	check(select(fd + 1, &rfds, NULL, NULL, &tv) == 1 &&
		      FD_ISSET(fd, &rfds),
	      "server", "select: not readable");
	read_all(fd, buf, BULK, "server");
	for (size_t i = 0; i < BULK; i++)
		check(buf[i] == pattern(i), "server", "bulk data corrupt");
	/* the file sendfile sent */
	read_all(fd, buf, FILE_LEN, "server");
	for (size_t i = 0; i < FILE_LEN; i++)
		check(buf[i] == pattern(i + 3), "server", "sendfile data corrupt");
	n = recv(fd, a, sizeof(a), MSG_WAITALL);
	check(n == sizeof(a) && a[0] == 'w' && a[99] == 'w', "server",
	      "recv MSG_WAITALL");
	for (size_t got = 0; got < sizeof(a) + sizeof(b);) {
		n = readv(fd, iov, 2);
		if (n <= 0)
			fail("server", "readv");
		got += (size_t)n;
		/* whatever came, the rest goes into the remaining space */
		for (size_t left = (size_t)n; left;) {
			size_t k = left < iov[0].iov_len ? left : iov[0].iov_len;

			iov[0].iov_base = (char *)iov[0].iov_base + k;
			iov[0].iov_len -= k;
			left -= k;
			if (!iov[0].iov_len) {
				iov[0] = iov[1];
				iov[1].iov_len = 0;
			}
		}
	}
	check(a[0] == 'x' && b[199] == 'y', "server", "writev data");
	n = read(fd, tail, sizeof(tail));
	check(n == 3 && !memcmp(tail, "dup", 3), "server", "data via dup2 fd");
	n = read(fd, tail, sizeof(tail));
	check(n == 0, "server", "no EOF after the client's shutdown");
	write_all(fd, "done", 4, "server");
	if (close(fd) || close(ls))
		fail("server", "close");
	return 0;
}

static int connect_retry(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	/* until the server listens: a refused connect is retried */
	for (int tries = 0; tries < 100; tries++) {
		struct pollfd p;
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
		socklen_t len = sizeof(err);

		if (fd < 0)
			fail("client", "socket");
		need_rsocket(fd, "client");
		if (!connect(fd, (struct sockaddr *)&sin, sizeof(sin)))
			return fd;
		/* refused at once (the REJ came back within the call, as
		 * it may from a process of this host) or after the poll */
		if (errno != EINPROGRESS && errno != ECONNREFUSED)
			fail("client", "nonblocking connect");
		if (errno == EINPROGRESS) {
			p = (struct pollfd){ .fd = fd, .events = POLLOUT };
			if (poll(&p, 1, 10000) != 1)
				fail("client", "poll for the connect");
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
				fail("client", "SO_ERROR");
			if (!err)
				return fd;
		}
		close(fd);
		usleep(50000);
	}
	errno = ECONNREFUSED;
	fail("client", "connect");
	return -1;
}

static int client(int port)
{
	static unsigned char buf[BULK];
	char path[] = "/tmp/preload_test.XXXXXX";
	char a[100], b[200], reply[16];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	int fd, file, fd2;
	off_t off = 3;
	ssize_t n;

	fd = connect_retry(port);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK))
		fail("client", "fcntl");
	check(!(fcntl(fd, F_GETFL) & O_NONBLOCK), "client", "still nonblocking");

	for (size_t i = 0; i < BULK; i++)
		buf[i] = pattern(i);
	write_all(fd, buf, BULK, "client");

	file = mkstemp(path);
	if (file < 0)
		fail("client", "mkstemp");
	unlink(path);
	write_all(file, buf, FILE_LEN + 3, "client file");
	for (size_t sent = 0; sent < FILE_LEN;) {
		n = sendfile(fd, file, &off, FILE_LEN - sent);
		if (n <= 0)
			fail("client", "sendfile");
		sent += (size_t)n;
	}
	close(file);

	memset(a, 'w', sizeof(a));
	if (send(fd, a, sizeof(a), 0) != sizeof(a))
		fail("client", "send");
	memset(a, 'x', sizeof(a));
	memset(b, 'y', sizeof(b));
	if (writev(fd, iov, 2) != sizeof(a) + sizeof(b))
		fail("client", "writev");

	/* onto an fd the program holds itself: the libraries' own fds (uroce's
	 * sockets, pipes, eventfds) make any other number unsafe to assume free,
	 * as for any program that links libraries holding fds */
	fd2 = open("/dev/null", O_RDONLY);
	if (fd2 < 0 || dup2(fd, fd2) != fd2 || close(fd))
		fail("client", "dup2 / close");
	write_all(fd2, "dup", 3, "client");
	if (shutdown(fd2, SHUT_WR))
		fail("client", "shutdown");
	read_all(fd2, reply, 4, "client");
	check(!memcmp(reply, "done", 4), "client", "reply");
	n = read(fd2, reply, sizeof(reply));
	check(n == 0, "client", "no EOF after the server's close");
	if (close(fd2))
		fail("client", "close");
	return 0;
}

int main(int argc, char **argv)
{
	int port, status;
	pid_t pid;

	if (argc != 2) {
		fprintf(stderr, "usage: %s <port>\n", argv[0]);
		return 2;
	}
	port = atoi(argv[1]);
	signal(SIGPIPE, SIG_IGN);
	pid = fork();
	if (pid < 0)
		fail("main", "fork");
	if (!pid)
		_exit(client(port));
	if (server(port)) {
		kill(pid, SIGKILL);
		return 1;
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "client failed\n");
		return 1;
	}
	printf("preload_test: passed\n");
	return 0;
}
