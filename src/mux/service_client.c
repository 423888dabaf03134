/*
 * A uroce process served by the per-host service, uroced (see service.h):
 * finding and checking the service, and the requests it answers.  Without a
 * service the process is in single-user mode and shares the port with its
 * user's other processes itself (forward.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "mux/service.h"

bool uroce_mux_service_role;

bool svc_socket_path(struct sockaddr_un *un, const char *dir, uint16_t port)
{
	struct stat ns;
	int len;

	/* one service per network namespace: its sockets are that
	 * namespace's */
	if (stat("/proc/self/ns/net", &ns))
		ns.st_ino = 0;
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	len = snprintf(un->sun_path, sizeof(un->sun_path), "%s/uroced.%llu.%u",
		       dir, (unsigned long long)ns.st_ino, port);
	return len > 0 && (size_t)len < sizeof(un->sun_path);
}

long uroce_port_holder(uint16_t port, bool others_only)
{
	static const char *const tables[] = { "/proc/net/udp", "/proc/net/udp6" };
	long holder = -1;
	char line[512];

	for (size_t t = 0; t < ARRAY_SIZE(tables) && holder < 0; t++) {
		FILE *f = fopen(tables[t], "re");

		if (!f)
			continue;
		while (holder < 0 && fgets(line, sizeof(line), f)) {
			unsigned lport, uid;
			char local[64], *colon;

			/* sl local_address rem_address st queues tr retrnsmt uid */
			if (sscanf(line, " %*s %63s %*s %*s %*s %*s %*s %u",
				   local, &uid) != 2)
				continue;
			colon = strchr(local, ':');
			if (colon && sscanf(colon + 1, "%x", &lport) == 1 &&
			    lport == port && (!others_only || uid != getuid()))
				holder = uid;
		}
		fclose(f);
	}
	return holder;
}

/* Another uid's processes hold the port (the kernel shares a port only
 * among sockets of one uid), or another program: say whose, and what to
 * do. */
void uroce_port_taken(uint16_t port)
{
	long holder = uroce_port_holder(port, true);

	if (holder >= 0)
		fprintf(stderr,
			"uroce: UDP port %u is held by uid %ld's programs and the "
			"kernel shares a port only within one uid: start the "
			"per-host service uroced (scripts/setup.sh does, as root) "
			"so that every user shares it, or use another port "
			"(UROCE_PORT)\n", port, holder);
	else
		fprintf(stderr,
			"uroce: UDP port %u is held by another program: stop it, "
			"or use another port (UROCE_PORT)\n", port);
}

/* The service is genuine if its directory can only have been set up by root
 * or by the service's own uid. */
static bool svc_trusted(const char *dir, uid_t svc_uid)
{
	struct stat st;

	if (stat(dir, &st) || !S_ISDIR(st.st_mode) ||
	    (st.st_mode & (S_IWGRP | S_IWOTH)))
		return false;
	if (st.st_uid != 0 && st.st_uid != svc_uid)
		return false;
	return svc_uid == 0 || svc_uid == st.st_uid;
}

/* One request, one reply: sockets that come with it go to fds (the rest
 * closed).  Returns how many arrived, or -errno.  svc_lock held. */
static int svc_call(struct uroce_mux *m, const struct svc_req *req,
		    struct svc_reply *rep, int *fds, unsigned max_fds)
{
	union {
		uint8_t buf[CMSG_SPACE(SVC_HELLO_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctrl;
	struct iovec iov = { rep, sizeof(*rep) };
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctrl.buf,
		.msg_controllen = sizeof(ctrl.buf),
	};
	unsigned got = 0;
	ssize_t n;

	if (send(m->svc_fd, req, sizeof(*req), MSG_NOSIGNAL) != sizeof(*req))
		return errno ? -errno : -EIO;
	do
		n = recvmsg(m->svc_fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN ? -ETIMEDOUT : -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		size_t nfd;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t k = 0; k < nfd; k++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof(fd));
			if (got < max_fds)
				fds[got++] = fd;
			else
				close(fd);
		}
	}
	if (n != sizeof(*rep) || rep->magic != SVC_MAGIC || rep->err) {
		while (got)
			close(fds[--got]);
		if (n == 0)
			return -ECONNRESET;
		return n == sizeof(*rep) && rep->magic == SVC_MAGIC &&
				       rep->err < 0
			       ? rep->err
			       : -EPROTO;
	}
	return got;
}

/* Takes the sockets HELLO brought: the datagram channel, then each family's
 * transmit sockets. */
static int svc_hello(struct uroce_nic *nic, struct uroce_mux *m)
{
	struct svc_req req = { .magic = SVC_MAGIC, .op = SVC_HELLO };
	struct svc_reply rep;
	int fds[SVC_HELLO_FDS], n, at = 1;

	pthread_mutex_lock(&m->svc_lock);
	n = svc_call(m, &req, &rep, fds, SVC_HELLO_FDS);
	pthread_mutex_unlock(&m->svc_lock);
	if (n < 0)
		return n;
	if (n < 1 + SVC_TX_PER_FAMILY || !(rep.families & 1) ||
	    n != 1 + SVC_TX_PER_FAMILY * __builtin_popcount(rep.families & 3) ||
	    rep.slot <= SERVICE_SLOT || rep.slot >= UROCE_MAX_SLOTS) {
		while (n)
			close(fds[--n]);
		return -EPROTO;
	}
	m->svc_data = fds[0];
	for (unsigned f = 0; f < 2; f++) {
		if (!(rep.families & (1u << f)))
			continue;
		memcpy(m->svc_tx[f], &fds[at], sizeof(m->svc_tx[f]));
		at += SVC_TX_PER_FAMILY;
	}
	nic->slot = rep.slot;
	return 0;
}

int uroce_mux_svc_open(struct uroce_nic *nic)
{
	struct uroce_mux *m = nic->mux;
	const char *dir = nic->cfg->service;
	struct timeval timeout = { SVC_TIMEOUT_MS / 1000,
				   SVC_TIMEOUT_MS % 1000 * 1000 };
	struct sockaddr_un un;
	struct ucred uc;
	socklen_t len = sizeof(uc);
	int fd, err;

	if (!dir[0] || !svc_socket_path(&un, dir, m->port))
		return 0;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&un, sizeof(un))) {
		err = errno;
		close(fd);
		/* no service (or a dead one's name): single-user mode */
		if (err == ENOENT || err == ECONNREFUSED || err == ENOTDIR) {
			uroce_log("no per-host service at %s (%s): single-user "
				  "mode", un.sun_path, strerror(err));
			return 0;
		}
		fprintf(stderr, "uroce: cannot reach the per-host service at "
			"%s: %s (fix its permissions, or set UROCE_SERVICE=none "
			"if no service should be used)\n", un.sun_path,
			strerror(err));
		return -err;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) ||
	    !svc_trusted(dir, uc.uid)) {
		fprintf(stderr, "uroce: not using %s: it is not run by root or "
			"by the owner of %s, or that directory is writable by "
			"others (make it the service's own, mode 0755, or set "
			"UROCE_SERVICE=none)\n", un.sun_path, dir);
		close(fd);
		return -EACCES;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
	m->svc_fd = fd;
	m->svc_uid = uc.uid;
	err = svc_hello(nic, m);
	if (err) {
		fprintf(stderr, "uroce: the per-host service at %s refused us: "
			"%s\n", un.sun_path, strerror(-err));
		close(fd);
		m->svc_fd = -1;
		return err;
	}
	uroce_log("served by uroced (uid %u) at %s: slot %u",
		  (unsigned)uc.uid, un.sun_path, nic->slot);
	return 1;
}

void uroce_mux_svc_close(struct uroce_mux *m)
{
	for (unsigned f = 0; f < 2; f++)
		for (unsigned i = 0; i < SVC_TX_PER_FAMILY; i++)
			if (m->svc_tx[f][i] >= 0)
				close(m->svc_tx[f][i]);
	if (m->svc_data >= 0)
		close(m->svc_data);
	if (m->svc_fd >= 0)
		close(m->svc_fd);
	m->svc_fd = m->svc_data = -1;
}

/* Our own copy of the transmit socket the service made for one of our
 * slot's flow classes. */
int uroce_mux_svc_tx_socket(struct uroce_nic *nic, int family,
			    uint16_t sport)
{
	struct uroce_mux *m = nic->mux;
	unsigned f = family == AF_INET6, i;
	int fd;

	if (sport < UROCE_SPORT_BASE ||
	    (unsigned)(sport - UROCE_SPORT_BASE) >> UROCE_SPORT_CLASS_BITS !=
		    nic->slot)
		return -EPERM;
	i = sport & (SVC_TX_PER_FAMILY - 1);
	if (m->svc_tx[f][i] < 0)
		return -EAFNOSUPPORT;
	fd = fcntl(m->svc_tx[f][i], F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* the service may not be allowed to raise it past the default */
	uroce_sock_set_buf(fd, SO_SNDBUF);
	return fd;
}

static void svc_addrs(struct svc_req *req, const union uroce_sockaddr *self,
		      const union uroce_sockaddr *peer)
{
	memcpy(&req->self, self, sizeof(req->self));
	memcpy(&req->peer, peer, sizeof(req->peer));
}

int uroce_mux_svc_steer(struct uroce_mux *m, const union uroce_sockaddr *self,
			const union uroce_sockaddr *peer, int *out)
{
	struct svc_req req = { .magic = SVC_MAGIC, .op = SVC_STEER };
	struct svc_reply rep;
	int n;

	svc_addrs(&req, self, peer);
	pthread_mutex_lock(&m->svc_lock);
	n = svc_call(m, &req, &rep, out, 1);
	pthread_mutex_unlock(&m->svc_lock);
	if (n == 1) {
		uroce_sock_set_buf(*out, SO_RCVBUF);
		return 0;
	}
	return n < 0 ? n : -EPROTO;
}

void uroce_mux_svc_release(struct uroce_mux *m,
			   const union uroce_sockaddr *self,
			   const union uroce_sockaddr *peer)
{
	struct svc_req req = { .magic = SVC_MAGIC, .op = SVC_RELEASE };
	struct svc_reply rep;

	svc_addrs(&req, self, peer);
	pthread_mutex_lock(&m->svc_lock);
	/* nothing to do if it fails: the service closes its copy when we
	 * exit */
	svc_call(m, &req, &rep, NULL, 0);
	pthread_mutex_unlock(&m->svc_lock);
}

int uroce_mux_svc_roce1(struct uroce_nic *nic)
{
	struct uroce_mux *m = nic->mux;
	struct svc_req req = { .magic = SVC_MAGIC, .op = SVC_ROCE1 };
	struct svc_reply rep;
	int n, fd;

	if (!m || m->svc_fd < 0)
		return -ENOTCONN;
	pthread_mutex_lock(&m->svc_lock);
	n = svc_call(m, &req, &rep, &fd, 1);
	pthread_mutex_unlock(&m->svc_lock);
	if (n == 1)
		return fd;
	return n < 0 ? n : -EPROTO;
}

int uroce_mux_svc_mcast(struct uroce_mux *m, const union uroce_sockaddr *group,
			bool join)
{
	struct svc_req req = {
		.magic = SVC_MAGIC,
		.op = join ? SVC_MCAST_JOIN : SVC_MCAST_LEAVE,
	};
	struct svc_reply rep;
	int n;

	memcpy(&req.self, group, sizeof(req.self));
	pthread_mutex_lock(&m->svc_lock);
	n = svc_call(m, &req, &rep, NULL, 0);
	pthread_mutex_unlock(&m->svc_lock);
	return n < 0 ? n : 0;
}
