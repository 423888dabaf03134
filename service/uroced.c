/*
 * uroced: the per-host service that owns the RoCEv2 UDP port for every uroce
 * process of the host, whoever runs it (src/mux/service.h tells why and what
 * it promises).
 *
 * Its receiving is uroce's own: it opens the device in the service role, so
 * that the UDP backend's engine thread receives on the port and hands each
 * datagram to the process whose slot its DestQP names (over the channel this
 * file made for that process), and its CM routes QP1's MADs (a REQ to the
 * process holding the service ID, the rest by comm ID) and answers what
 * nobody owns, as in single-user mode.  This file answers the processes'
 * requests: a slot and the sockets they send on, and their connected receive
 * sockets.
 *
 * Given CAP_NET_RAW (scripts/setup.sh gives it), it also carries RoCE v1
 * for them: its device's v1 link receives every frame of ethertype 0x8915
 * and hands each to its QP's process, and each process that asks gets a
 * channel through which this file sends its frames (net/roce1.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mux/service.h"
#include "net/udp.h"

enum {
	MAX_CLIENTS = UROCE_MAX_SLOTS - 1 - SERVICE_SLOT,
	/* a uid may hold half the slots and each process this many
	 * connected receive sockets: no user can starve the others */
	SLOTS_PER_UID = UROCE_MAX_SLOTS / 2,
	STEERS_PER_CLIENT = 4096,
	DISCARD_PORT = 9,
	ROCE1_FD = 1u << 31,	/* in the poll map: a client's v1 channel */
};

struct steer {
	union uroce_sockaddr self, peer;
	int fd;			/* our copy, to revoke it with */
	bool revoked;		/* contested: reconnected to nowhere */
};

struct client {
	int fd;			/* request connection; -1: a free entry */
	pid_t pid;
	uid_t uid;
	unsigned slot;		/* 0 until HELLO */
	int tx[2][SVC_TX_PER_FAMILY];
	struct steer *steers;
	unsigned nsteers;
	int roce1;		/* its RoCE v1 frames to send, or -1 */
};

static struct uroce_nic *nic;
static struct client clients[MAX_CLIENTS];
static bool slot_used[UROCE_MAX_SLOTS];
static unsigned slot_cursor;
static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
	stopping = sig;
}

/* An address as the kernel matches it (family, address, port, IPv6
 * scope), whatever else the request's bytes hold; false if not IP. */
static bool addr_norm(const union fwd_addr *in, union uroce_sockaddr *out)
{
	memset(out, 0, sizeof(*out));
	out->sa.sa_family = in->sa.sa_family;
	if (in->sa.sa_family == AF_INET) {
		out->in4.sin_port = in->in4.sin_port;
		out->in4.sin_addr = in->in4.sin_addr;
	} else if (in->sa.sa_family == AF_INET6) {
		out->in6.sin6_port = in->in6.sin6_port;
		out->in6.sin6_addr = in->in6.sin6_addr;
		out->in6.sin6_scope_id = in->in6.sin6_scope_id;
	} else {
		return false;
	}
	return true;
}

static bool same_pair(const struct steer *s, const union uroce_sockaddr *self,
		      const union uroce_sockaddr *peer)
{
	return !memcmp(&s->self, self, sizeof(*self)) &&
	       !memcmp(&s->peer, peer, sizeof(*peer));
}

static void close_family(int fds[SVC_TX_PER_FAMILY])
{
	for (unsigned i = 0; i < SVC_TX_PER_FAMILY; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

static void close_tx(int tx[2][SVC_TX_PER_FAMILY])
{
	close_family(tx[0]);
	close_family(tx[1]);
}

static void client_drop(struct client *c)
{
	if (c->slot) {
		udp_mcast_drop_slot(nic, c->slot);
		uroce_mux_fwd_set(nic, c->slot, -1);
		slot_used[c->slot] = false;
	}
	close_tx(c->tx);
	for (unsigned i = 0; i < c->nsteers; i++)
		close(c->steers[i].fd);
	free(c->steers);
	if (c->roce1 >= 0)
		close(c->roce1);
	close(c->fd);
	*c = (struct client){ .fd = -1, .roce1 = -1 };
}

/* The transmit sockets of slot, bound under our uid so that no other user
 * can send from its ports.  -EADDRINUSE: a port of the slot is taken. */
static int make_tx(unsigned slot, int tx[2][SVC_TX_PER_FAMILY],
		   uint32_t *families)
{
	static const int family[2] = { AF_INET, AF_INET6 };
	int err = 0;

	*families = 0;
	for (unsigned f = 0; f < 2 && !err; f++) {
		for (unsigned i = 0; i < SVC_TX_PER_FAMILY; i++) {
			uint16_t sport = UROCE_SPORT_BASE |
					 slot << UROCE_SPORT_CLASS_BITS | i;
			int fd = udp_tx_socket(family[f], sport);

			if (fd < 0) {
				err = fd;
				break;
			}
			tx[f][i] = fd;
		}
		if (!err)
			*families |= 1u << f;
		else if (f == 1 && (err == -EAFNOSUPPORT ||
				    err == -EADDRNOTAVAIL)) {
			/* a host without IPv6 */
			close_family(tx[1]);
			err = 0;
			break;
		}
	}
	if (err)
		close_tx(tx);
	return err;
}

static int slot_alloc(struct client *c, uint32_t *families)
{
	const unsigned nslots = UROCE_MAX_SLOTS - 1 - SERVICE_SLOT;
	unsigned held = 0;
	int err = -ENOSPC;

	for (unsigned i = 0; i < MAX_CLIENTS; i++)
		held += clients[i].fd >= 0 && clients[i].slot &&
			clients[i].uid == c->uid;
	if (held >= SLOTS_PER_UID)
		return -EUSERS;
	/* round robin: a slot and its QPNs are reused as late as possible,
	 * as a restarted process's peers may still send to the old ones */
	for (unsigned i = 0; i < nslots; i++) {
		unsigned slot = SERVICE_SLOT + 1 + (slot_cursor + i) % nslots;

		if (slot_used[slot])
			continue;
		err = make_tx(slot, c->tx, families);
		if (err == -EADDRINUSE)
			continue;	/* someone sits on one of its ports */
		if (err)
			return err;
		slot_used[slot] = true;
		slot_cursor = slot - SERVICE_SLOT;
		c->slot = slot;
		return 0;
	}
	return err;
}

static void reply(struct client *c, int err, uint32_t slot, uint32_t families,
		  const int *fds, unsigned nfds)
{
	struct svc_reply rep = { .magic = SVC_MAGIC, .err = err, .slot = slot,
				 .families = families };
	union {
		uint8_t buf[CMSG_SPACE(SVC_HELLO_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctrl;
	struct iovec iov = { &rep, sizeof(rep) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		struct cmsghdr *cm;

		mh.msg_control = ctrl.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	/* a client that does not read its replies loses its place */
	if (sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof(rep))
		client_drop(c);
}

static void do_hello(struct client *c)
{
	int fds[SVC_HELLO_FDS], chan[2], n = 1;
	uint32_t families;
	int err;

	if (c->slot) {
		reply(c, -EALREADY, 0, 0, NULL, 0);
		return;
	}
	err = slot_alloc(c, &families);
	if (!err && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC |
					SOCK_NONBLOCK, 0, chan))
		err = -errno;
	if (err) {
		if (c->slot) {
			slot_used[c->slot] = false;
			c->slot = 0;
			close_tx(c->tx);
		}
		fprintf(stderr, "uroced: no slot for pid %d (uid %u): %s\n",
			(int)c->pid, (unsigned)c->uid, strerror(-err));
		reply(c, err, 0, 0, NULL, 0);
		return;
	}
	/* deep enough for a window of MTU-sized packets */
	uroce_sock_set_buf(chan[0], SO_SNDBUF);
	uroce_mux_fwd_set(nic, c->slot, chan[0]);
	fds[0] = chan[1];
	for (unsigned f = 0; f < 2; f++) {
		if (!(families & (1u << f)))
			continue;
		memcpy(&fds[n], c->tx[f], sizeof(c->tx[f]));
		n += SVC_TX_PER_FAMILY;
	}
	reply(c, 0, c->slot, families, fds, n);
	close(chan[1]);
}

/* Takes a connected socket out of the kernel's choice for its pair: it is
 * reconnected to loopback's discard port, which sends nothing. */
static void steer_revoke(struct steer *s)
{
	union uroce_sockaddr sink;

	memset(&sink, 0, sizeof(sink));
	sink.sa.sa_family = s->self.sa.sa_family;
	if (sink.sa.sa_family == AF_INET) {
		sink.in4.sin_port = htons(DISCARD_PORT);
		sink.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	} else {
		sink.in6.sin6_port = htons(DISCARD_PORT);
		sink.in6.sin6_addr = in6addr_loopback;
	}
	if (connect(s->fd, &sink.sa, addr_len(sink.sa.sa_family)))
		fprintf(stderr, "uroced: cannot revoke a connected socket: "
			"%s\n", strerror(errno));
	s->revoked = true;
}

/* A connected receive socket is one process's only: the kernel delivers a
 * pair's datagrams to one socket, whose filter admits only that process's
 * QPs.  When a second process needs the pair, the first loses its socket to
 * it and both receive that pair's datagrams through us. */
static void do_steer(struct client *c, const struct svc_req *req)
{
	union uroce_sockaddr self, peer;
	struct steer *n;
	int fd, err;

	if (!c->slot || !addr_norm(&req->self, &self) ||
	    !addr_norm(&req->peer, &peer) ||
	    self.sa.sa_family != peer.sa.sa_family) {
		reply(c, -EINVAL, 0, 0, NULL, 0);
		return;
	}
	if (c->nsteers == STEERS_PER_CLIENT) {
		reply(c, -ENOSPC, 0, 0, NULL, 0);
		return;
	}
	for (unsigned i = 0; i < MAX_CLIENTS; i++) {
		struct client *o = &clients[i];

		for (unsigned k = 0; o->fd >= 0 && k < o->nsteers; k++) {
			struct steer *s = &o->steers[k];

			if (!same_pair(s, &self, &peer))
				continue;
			if (!s->revoked && o != c)
				steer_revoke(s);
			reply(c, -EBUSY, 0, 0, NULL, 0);
			return;
		}
	}
	n = realloc(c->steers, (c->nsteers + 1) * sizeof(*n));
	if (!n) {
		reply(c, -ENOMEM, 0, 0, NULL, 0);
		return;
	}
	c->steers = n;
	err = udp_steer_socket(&self, &peer, c->slot, &fd);
	if (err) {
		reply(c, err, 0, 0, NULL, 0);
		return;
	}
	c->steers[c->nsteers++] = (struct steer){ self, peer, fd, false };
	reply(c, 0, 0, 0, &fd, 1);
}

static void do_release(struct client *c, const struct svc_req *req)
{
	union uroce_sockaddr self, peer;

	if (addr_norm(&req->self, &self) && addr_norm(&req->peer, &peer)) {
		for (unsigned k = 0; k < c->nsteers; k++) {
			if (!same_pair(&c->steers[k], &self, &peer))
				continue;
			close(c->steers[k].fd);
			c->steers[k] = c->steers[--c->nsteers];
			reply(c, 0, 0, 0, NULL, 0);
			return;
		}
	}
	reply(c, -ENOENT, 0, 0, NULL, 0);
}

/* A group the process's QPs receive: its datagrams go to the process. */
static void do_mcast(struct client *c, const struct svc_req *req, bool join)
{
	union uroce_sockaddr group;
	int err = -EINVAL;

	if (c->slot && addr_norm(&req->self, &group)) {
		group.in4.sin_port = 0;	/* the same place in both families */
		err = udp_mcast_member(nic, c->slot, &group, join);
	}
	reply(c, err, 0, 0, NULL, 0);
}

/* A channel for the process's RoCE v1 frames, which we send for it. */
static void do_roce1(struct client *c)
{
	int chan[2];

	if (!nic->roce1 || !c->slot) {
		reply(c, !c->slot ? -EINVAL : -EOPNOTSUPP, 0, 0, NULL, 0);
		return;
	}
	if (c->roce1 >= 0) {
		reply(c, -EALREADY, 0, 0, NULL, 0);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
		       0, chan)) {
		reply(c, -errno, 0, 0, NULL, 0);
		return;
	}
	uroce_sock_set_buf(chan[0], SO_RCVBUF);
	c->roce1 = chan[0];
	reply(c, 0, 0, 0, &chan[1], 1);
	close(chan[1]);
}

static void client_request(struct client *c)
{
	struct svc_req req;
	ssize_t n = recv(c->fd, &req, sizeof(req), MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n != sizeof(req) || req.magic != SVC_MAGIC) {
		/* gone, or not speaking our protocol */
		client_drop(c);
		return;
	}
	switch (req.op) {
	case SVC_HELLO:
		do_hello(c);
		break;
	case SVC_STEER:
		do_steer(c, &req);
		break;
	case SVC_RELEASE:
		do_release(c, &req);
		break;
	case SVC_MCAST_JOIN:
	case SVC_MCAST_LEAVE:
		do_mcast(c, &req, req.op == SVC_MCAST_JOIN);
		break;
	case SVC_ROCE1:
		do_roce1(c);
		break;
	default:
		reply(c, -EOPNOTSUPP, 0, 0, NULL, 0);
	}
}

static void client_accept(int lfd)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len)) {
		close(fd);
		return;
	}
	for (unsigned i = 0; i < MAX_CLIENTS; i++) {
		if (clients[i].fd < 0) {
			clients[i] = (struct client){ .fd = fd, .pid = uc.pid,
						      .uid = uc.uid,
						      .roce1 = -1 };
			memset(clients[i].tx, -1, sizeof(clients[i].tx));
			return;
		}
	}
	close(fd);	/* every slot is taken */
}

/* The directory proves us genuine to the processes (mux/service_client.c), so it
 * must be ours or root's and writable by nobody else. */
static int check_dir(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "uroced: cannot create %s: %s\n", dir,
			strerror(errno));
		return -1;
	}
	if (stat(dir, &st) || !S_ISDIR(st.st_mode) ||
	    (st.st_uid != 0 && st.st_uid != getuid()) ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		fprintf(stderr, "uroced: %s must be a directory of root or of "
			"uid %u, writable by nobody else, or uroce processes "
			"will not trust this service\n", dir,
			(unsigned)getuid());
		return -1;
	}
	return 0;
}

static int listen_at(const struct sockaddr_un *un)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
			0);

	if (fd < 0)
		return -1;
	/* a service still answering there is another uroced */
	if (!connect(fd, (const struct sockaddr *)un, sizeof(*un))) {
		fprintf(stderr, "uroced: another uroced serves %s\n",
			un->sun_path);
		close(fd);
		return -1;
	}
	close(fd);
	unlink(un->sun_path);	/* a dead service's name */
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (const struct sockaddr *)un, sizeof(*un)) ||
	    chmod(un->sun_path, 0666) || listen(fd, 64)) {
		fprintf(stderr, "uroced: cannot listen at %s: %s\n",
			un->sun_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uroced [--dir DIR] [--port PORT]\n"
		"\n"
		"The per-host uroce service: owns UDP port PORT (default 4791,\n"
		"or UROCE_PORT) for every user's uroce programs and hands each\n"
		"one only its own traffic.  Listens at DIR/uroced.<netns>.<port>\n"
		"(DIR: UROCE_SERVICE, default " UROCE_SERVICE_DIR "), which must\n"
		"belong to root or to the service's uid and be writable by no\n"
		"one else.  Runs in the foreground until SIGTERM or SIGINT; run\n"
		"it as an unprivileged user of its own (scripts/setup.sh does).\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "port", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const struct sigaction sa = { .sa_handler = on_signal };
	const char *dir = NULL;
	struct sockaddr_un un;
	struct pollfd *pfd;
	struct rlimit rl;
	struct timespec ts;
	int opt, lfd;
	long holder;

	while ((opt = getopt_long(argc, argv, "d:p:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'd':
			dir = optarg;
			break;
		case 'p':
			setenv("UROCE_PORT", optarg, 1);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (dir)
		setenv("UROCE_SERVICE", dir, 1);
	/* our own device publishes no same-host segment: it has no memory
	 * to offer (set before the configuration is first read); it carries
	 * RoCE v1 unless told not to, if it may */
	setenv("UROCE_SHM", "0", 1);
	setenv("UROCE_ROCE_V1", "1", 0);
	dir = uroce_config()->service;
	if (dir[0] != '/') {
		fprintf(stderr, "uroced: --dir must be an absolute path\n");
		return 2;
	}
	/* each client holds some forty sockets here */
	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	for (unsigned i = 0; i < MAX_CLIENTS; i++)
		clients[i] = (struct client){ .fd = -1, .roce1 = -1 };
	clock_gettime(CLOCK_MONOTONIC, &ts);
	slot_cursor = (unsigned)(ts.tv_nsec ^ getpid());

	if (check_dir(dir))
		return 1;
	if (!svc_socket_path(&un, dir, uroce_config()->udp_port)) {
		fprintf(stderr, "uroced: %s: path too long\n", dir);
		return 1;
	}
	/* sockets of our own uid could share the port with us: another
	 * uroced, or programs of ours in single-user mode */
	holder = uroce_port_holder(uroce_config()->udp_port, false);
	if (holder >= 0) {
		fprintf(stderr, "uroced: UDP port %u is in use (by uid %ld): "
			"stop what holds it (another uroced, or uroce programs "
			"started before this service) and start uroced again\n",
			uroce_config()->udp_port, holder);
		return 1;
	}
	uroce_mux_service_role = true;
	nic = uroce_nic_get(&uroce_verbs_objects);
	if (!nic) {
		fprintf(stderr, "uroced: cannot own UDP port %u: %s\n",
			uroce_config()->udp_port, strerror(errno));
		return 1;
	}
	lfd = listen_at(&un);
	pfd = calloc(2 * MAX_CLIENTS + 1, sizeof(*pfd));
	if (lfd < 0 || !pfd) {
		uroce_nic_put(nic);
		return 1;
	}
	fprintf(stderr, "uroced: serving UDP port %u at %s\n",
		uroce_config()->udp_port, un.sun_path);
	if (nic->roce1)
		fprintf(stderr, "uroced: carrying RoCE v1 for the processes "
			"that ask (UROCE_ROCE_V1=1)\n");
	else if (nic->roce1_absent[0])
		fprintf(stderr, "uroced: not carrying RoCE v1: %s\n",
			nic->roce1_absent);

	while (!stopping) {
		/* each client's requests, then its RoCE v1 frames */
		static unsigned map[2 * MAX_CLIENTS];
		unsigned n = 1;

		pfd[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (unsigned i = 0; i < MAX_CLIENTS; i++) {
			if (clients[i].fd < 0)
				continue;
			map[n - 1] = i;
			pfd[n++] = (struct pollfd){ .fd = clients[i].fd,
						    .events = POLLIN };
			if (clients[i].roce1 < 0)
				continue;
			map[n - 1] = i | ROCE1_FD;
			pfd[n++] = (struct pollfd){ .fd = clients[i].roce1,
						    .events = POLLIN };
		}
		if (poll(pfd, n, -1) < 0)
			continue;	/* EINTR: a signal */
		for (unsigned k = 1; k < n; k++) {
			struct client *c = &clients[map[k - 1] & ~ROCE1_FD];

			if (!pfd[k].revents || c->fd < 0)
				continue;
			if (!(map[k - 1] & ROCE1_FD))
				client_request(c);
			else if (c->roce1 == pfd[k].fd &&
				 uroce_roce1_relay(nic, c->roce1) < 0) {
				close(c->roce1);
				c->roce1 = -1;
			}
		}
		if (pfd[0].revents & POLLIN)
			client_accept(lfd);
	}
	fprintf(stderr, "uroced: stopping (%s)\n", strsignal(stopping));
	unlink(un.sun_path);
	close(lfd);
	for (unsigned i = 0; i < MAX_CLIENTS; i++)
		if (clients[i].fd >= 0)
			client_drop(&clients[i]);
	free(pfd);
	uroce_nic_put(nic);
	return 0;
}
