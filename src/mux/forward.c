/*
 * Reaching the other uroce processes of the host over AF_UNIX: each
 * process's slot name, through which the others forward it the datagrams
 * of its QPs that the kernel delivered to them, and the names of the CM
 * service IDs, through which REQs reach the process that listens.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mux/mux.h"

void uroce_mux_init(struct uroce_mux *m, const struct uroce_mux_link *link,
		    uint16_t port)
{
	m->link = link;
	m->uid = getuid();	/* what SCM_CREDENTIALS reports for a sender */
	m->port = port;
	m->fdu = m->svc_fd = m->svc_data = -1;
	memset(m->svc_tx, -1, sizeof(m->svc_tx));
	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		m->sid_fwd[i].fd = -1;
	for (unsigned i = 0; i < UROCE_MAX_SLOTS; i++)
		m->fwd_to[i] = -1;
	pthread_mutex_init(&m->sid_lock, NULL);
	pthread_mutex_init(&m->svc_lock, NULL);
}

void uroce_mux_close(struct uroce_mux *m)
{
	if (m->fdu >= 0)
		close(m->fdu);
	for (unsigned i = 0; i < m->nsids; i++)
		close(m->sids[i].fd);
	free(m->sids);
	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		if (m->sid_fwd[i].fd >= 0)
			close(m->sid_fwd[i].fd);
	pthread_mutex_destroy(&m->sid_lock);
	uroce_mux_svc_close(m);
	pthread_mutex_destroy(&m->svc_lock);
	for (unsigned i = 0; i < UROCE_MAX_SLOTS; i++)
		if (m->fwd_to[i] >= 0)
			close(m->fwd_to[i]);
	for (unsigned i = 0; i < m->nfwd_from; i++)
		close(m->fwd_from[i]);
}

/* The kernel caps SO_RCVBUF/SO_SNDBUF at net.core.[rw]mem_max (212992 by
 * default: some 50 MTU-sized packets, less than a window); with
 * CAP_NET_ADMIN the *FORCE options go past it.  uroce never needs the
 * capability, it only uses it when it has it. */
int uroce_sock_set_buf(int fd, int name)
{
	int force = name == SO_RCVBUF ? SO_RCVBUFFORCE : SO_SNDBUFFORCE;
	int val = SOCK_BUF;

	if (!setsockopt(fd, SOL_SOCKET, force, &val, sizeof(val)))
		return 0;
	return setsockopt(fd, SOL_SOCKET, name, &val, sizeof(val)) ? -errno : 0;
}

/* "\0uroce2.<port>.<uid>.<slot>": abstract, so the kernel keeps the names
 * unique and releases them when the owner exits.  The 2 is the forwarding
 * protocol (SOCK_SEQPACKET + struct fwd_hdr): builds that speak another
 * cannot forward to each other, so they keep to their own names. */
static socklen_t slot_name(struct sockaddr_un *un, uint16_t port, uid_t uid,
			   unsigned slot)
{
	int len;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	len = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		       "uroce2.%u.%u.%u", port, (unsigned)uid, slot);
	return offsetof(struct sockaddr_un, sun_path) + 1 + len;
}

/* Claim a free slot by binding its abstract name.  Starting at a
 * pseudo-random slot keeps a restarted process from reusing the QPNs its
 * predecessor's peers may still be sending to. */
int uroce_mux_slot_alloc(struct uroce_nic *nic)
{
	struct uroce_mux *m = nic->mux;
	const unsigned nslots = UROCE_MAX_SLOTS - 1;
	struct timespec ts;
	unsigned start;
	int err;

	m->fdu = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
			0);
	if (m->fdu < 0)
		return -errno;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	start = (unsigned)(ts.tv_nsec ^ getpid() * 2654435761u) % nslots;
	for (unsigned i = 0; i < nslots; i++) {
		unsigned slot = 1 + (start + i) % nslots;
		struct sockaddr_un un;
		socklen_t len = slot_name(&un, m->port, m->uid, slot);

		if (!bind(m->fdu, (struct sockaddr *)&un, len)) {
			nic->slot = slot;
			err = listen(m->fdu, FWD_BACKLOG) ? -errno : 0;
			return err;
		}
		if (errno != EADDRINUSE)
			return -errno;
	}
	return -EADDRINUSE;
}

/* The connection to slot's owner, made on first use; -1 if it has none. */
static int fwd_conn(struct uroce_mux *m, unsigned slot)
{
	struct sockaddr_un un;
	socklen_t len;
	int fd = m->fwd_to[slot];

	if (fd >= 0)
		return fd;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	len = slot_name(&un, m->port, m->uid, slot);
	/* deep enough for a window of MTU-sized packets */
	if (uroce_sock_set_buf(fd, SO_SNDBUF) ||
	    connect(fd, (struct sockaddr *)&un, len)) {
		close(fd);
		return -1;
	}
	m->fwd_to[slot] = fd;
	return fd;
}

/* Sends rx, prefixed with what its receiver would have learnt from the
 * kernel, over a forwarding connection; 0 or -errno.  Never blocks the
 * receive path on a slow or vanished owner: its transport retransmits what
 * is dropped here. */
static int fwd_sendmsg(int fd, const struct uroce_rxpkt *rx)
{
	struct fwd_hdr h = { .magic = FWD_MAGIC, .tos = rx->tos,
			     .roce1 = rx->roce1 };
	/* a RoCE v1 frame's GRH, which its ICRC covers, goes along */
	unsigned grh = rx->roce1 ? UROCE_GRH_LEN : 0;
	struct iovec iov[2] = {
		{ .iov_base = &h, .iov_len = sizeof(h) },
		{ .iov_base = rx->data - grh, .iov_len = rx->len + grh },
	};
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = ARRAY_SIZE(iov) };

	memcpy(&h.src, &rx->src, sizeof(h.src));
	memcpy(&h.dst, &rx->dst, sizeof(h.dst));
	return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0 ? 0 : -errno;
}

int uroce_mux_fwd_send(struct uroce_nic *nic, unsigned slot,
		       const struct uroce_rxpkt *rx)
{
	struct uroce_mux *m = nic->mux;
	int fd, err;

	/* served by uroced: only the service hands datagrams on */
	if (m->svc_fd >= 0) {
		STAT_INC(nic, rx_forward_failed);
		return -ENOENT;
	}
	fd = fwd_conn(m, slot);
	err = fd >= 0 ? fwd_sendmsg(fd, rx) : -ENOENT;

	if (!err) {
		STAT_INC(nic, rx_forwarded);
		return 0;
	}
	STAT_INC(nic, rx_forward_failed);
	/* the owner is gone (a new process may take its slot): reconnect
	 * next time */
	if (fd >= 0 && err != -EAGAIN) {
		close(fd);
		m->fwd_to[slot] = -1;
	}
	return err;
}

int uroce_mux_forward(struct uroce_nic *nic, unsigned slot,
		      const struct uroce_rxpkt *rx)
{
	if (slot == 0 || slot >= UROCE_MAX_SLOTS || slot == nic->slot)
		return -EINVAL;
	return uroce_mux_fwd_send(nic, slot, rx);
}

void uroce_mux_fwd_set(struct uroce_nic *nic, unsigned slot, int fd)
{
	struct uroce_mux *m = nic->mux;
	int old;

	pthread_mutex_lock(&nic->rx_lock);
	old = m->fwd_to[slot];
	m->fwd_to[slot] = fd;
	pthread_mutex_unlock(&nic->rx_lock);
	if (old >= 0)
		close(old);
}

/* A process of our user, or the per-host service, connects to forward
 * datagrams to us. */
void uroce_mux_fwd_accept(struct uroce_nic *nic, int listen_fd)
{
	struct uroce_mux *m = nic->mux;
	struct ucred uc;
	socklen_t len = sizeof(uc);
	int fd;

	while ((fd = accept4(listen_fd, NULL, NULL,
			     SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) ||
		    (uc.uid != m->uid &&
		     (m->svc_fd < 0 || uc.uid != m->svc_uid))) {
			STAT_INC(nic, rx_bad_source);
			close(fd);
			continue;
		}
		if (m->nfwd_from == FWD_ACCEPT_MAX || m->link->watch(nic, fd, false)) {
			STAT_INC(nic, rx_errors);
			close(fd);
			continue;
		}
		m->fwd_from[m->nfwd_from++] = fd;
	}
}

/* The forwarding process closed its end. */
void uroce_mux_fwd_close(struct uroce_mux *m, int fd)
{
	if (fd == m->svc_data) {
		fprintf(stderr, "uroce: the per-host service uroced has gone: "
			"from now on only connected QPs receive; restart this "
			"program once the service runs again\n");
		m->svc_data = -1;
	}
	for (unsigned i = 0; i < m->nfwd_from; i++) {
		if (m->fwd_from[i] == fd) {
			m->fwd_from[i] = m->fwd_from[--m->nfwd_from];
			break;
		}
	}
	close(fd);
}

static bool fwd_addr_get(const union fwd_addr *in, int family,
			 union uroce_sockaddr *out)
{
	memset(out, 0, sizeof(*out));
	if (in->sa.sa_family != family)
		return false;
	if (family == AF_INET)
		out->in4 = in->in4;
	else
		out->in6 = in->in6;
	return true;
}

/* A datagram forwarded by another process of our user (checked when it
 * connected) or by the service: true when it is well formed. */
bool uroce_mux_fwd_parse(struct uroce_nic *nic, struct msghdr *mh,
			 uint32_t len, uint8_t *buf, struct uroce_rxpkt *rx)
{
	struct fwd_hdr h;
	int family;

	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm;
	     cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET &&
		    cm->cmsg_type == SCM_RIGHTS) {
			/* nobody has reason to pass us descriptors; do not
			 * let them pile up */
			size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t k = 0; k < nfd; k++) {
				int fd;

				memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int),
				       sizeof(fd));
				close(fd);
			}
		}
	}
	if (len < sizeof(h) + BTH_BYTES || (mh->msg_flags & MSG_TRUNC)) {
		STAT_INC(nic, rx_malformed);
		return false;
	}
	memcpy(&h, buf, sizeof(h));
	family = h.src.sa.sa_family;
	if (h.magic != FWD_MAGIC || (family != AF_INET && family != AF_INET6) ||
	    !fwd_addr_get(&h.src, family, &rx->src) ||
	    !fwd_addr_get(&h.dst, family, &rx->dst)) {
		STAT_INC(nic, rx_malformed);
		return false;
	}
	rx->tos = h.tos;
	rx->roce1 = h.roce1;
	rx->data = buf + sizeof(h);
	rx->len = len - sizeof(h);
	if (rx->roce1) {
		if (rx->len < UROCE_GRH_LEN + BTH_BYTES) {
			STAT_INC(nic, rx_malformed);
			return false;
		}
		rx->data += UROCE_GRH_LEN;
		rx->len -= UROCE_GRH_LEN;
	}
	return true;
}

/* ---- CM service IDs ------------------------------------------------------ */

/* "\0uroce-sid.<port>.<service ID>": one name per CM service ID on the
 * host, whoever's process holds it, as a port space is one per host.
 * Abstract names vanish with their process, so a crashed listener never
 * blocks its port. */
static socklen_t sid_name(struct sockaddr_un *un, uint16_t port, uint64_t sid)
{
	int len;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	len = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		       "uroce-sid.%u.%016llx", port, (unsigned long long)sid);
	return offsetof(struct sockaddr_un, sun_path) + 1 + len;
}

int uroce_mux_sid_claim(struct uroce_nic *nic, uint64_t sid)
{
	struct uroce_mux *m = nic->mux;
	struct sockaddr_un un;
	socklen_t len = sid_name(&un, m->port, sid);
	int fd, err = 0;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&un, len) || listen(fd, FWD_BACKLOG))
		err = -errno;
	pthread_mutex_lock(&m->sid_lock);
	if (!err && m->nsids == m->sids_cap) {
		unsigned cap = m->sids_cap ? 2 * m->sids_cap : 8;
		struct sid_claim *n = realloc(m->sids, cap * sizeof(*n));

		if (n) {
			m->sids = n;
			m->sids_cap = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		err = m->link->watch(nic, fd, true);
	if (!err)
		m->sids[m->nsids++] = (struct sid_claim){ sid, fd };
	pthread_mutex_unlock(&m->sid_lock);
	if (err)
		close(fd);
	return err;
}

/* Not called with the CM's lock held: the receiver may be using fd. */
void uroce_mux_sid_release(struct uroce_nic *nic, uint64_t sid)
{
	struct uroce_mux *m = nic->mux;
	int fd = -1;

	pthread_mutex_lock(&m->sid_lock);
	for (unsigned i = 0; i < m->nsids; i++) {
		if (m->sids[i].sid == sid) {
			fd = m->sids[i].fd;
			m->sids[i] = m->sids[--m->nsids];
			break;
		}
	}
	pthread_mutex_unlock(&m->sid_lock);
	if (fd < 0)
		return;
	m->link->unwatch(nic, fd);
	m->link->quiesce(nic);
	close(fd);
}

/* The cached connection to a service's holder, made on first use. */
static int sid_conn(struct uroce_mux *m, uint64_t sid)
{
	struct sockaddr_un un;
	socklen_t len = sid_name(&un, m->port, sid);
	struct sid_claim *c;
	int fd;

	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		if (m->sid_fwd[i].fd >= 0 && m->sid_fwd[i].sid == sid)
			return m->sid_fwd[i].fd;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (uroce_sock_set_buf(fd, SO_SNDBUF) || connect(fd, (struct sockaddr *)&un, len)) {
		int err = -errno;

		close(fd);
		return err;
	}
	c = &m->sid_fwd[m->sid_fwd_next++ % SID_FWD_CACHE];
	if (c->fd >= 0)
		close(c->fd);
	*c = (struct sid_claim){ sid, fd };
	return fd;
}

static void sid_conn_drop(struct uroce_mux *m, int fd)
{
	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		if (m->sid_fwd[i].fd == fd)
			m->sid_fwd[i].fd = -1;
	close(fd);
}

/* Only the receiver (under rx_lock) forwards, so the cache needs no lock.
 * A connection outlives its holder's claim: a failed send reconnects
 * once, to whoever holds the service now, if anyone. */
int uroce_mux_sid_forward(struct uroce_nic *nic, uint64_t sid,
			  const struct uroce_rxpkt *rx)
{
	struct uroce_mux *m = nic->mux;

	for (unsigned tries = 0; tries < 2; tries++) {
		int fd = sid_conn(m, sid), err;

		if (fd < 0)
			return fd;
		err = fwd_sendmsg(fd, rx);
		/* a full queue loses the REQ as a full backlog would: the
		 * peer retransmits it */
		if (!err || err == -EAGAIN)
			return 0;
		sid_conn_drop(m, fd);
	}
	return -ECONNREFUSED;
}
