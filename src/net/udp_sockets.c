/*
 * The UDP backend's sockets: setting up receiving and transmitting ones,
 * the table of per-QP transmit handles, and the sockets QPs share (a
 * transmit socket per family and source port, a connected receive socket
 * per local address and peer), counted and closed with their last QP.
 */
#include <errno.h>
#include <linux/filter.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "net/udp.h"

static int setopt(int fd, int level, int name, int val)
{
	return setsockopt(fd, level, name, &val, sizeof(val)) ? -errno : 0;
}

/* The wildcard address of a family with the given port. */
static socklen_t any_addr(union uroce_sockaddr *a, int family, uint16_t port)
{
	memset(a, 0, sizeof(*a));
	a->sa.sa_family = family;
	if (family == AF_INET)
		a->in4.sin_port = htons(port);
	else
		a->in6.sin6_port = htons(port);
	return addr_len(family);
}

/* A receiving socket bound to a (port 4791), in the shared group, with a
 * filter if given (attached before bind, so that nothing arrives
 * unfiltered). */
static int rx_socket_at(const union uroce_sockaddr *a,
			const struct sock_fprog *filter, int *out)
{
	int family = a->sa.sa_family;
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err;

	if (fd < 0)
		return -errno;
	err = setopt(fd, SOL_SOCKET, SO_REUSEPORT, 1);
	if (!err && filter &&
	    setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, filter,
		       sizeof(*filter)))
		err = -errno;
	if (!err)
		err = uroce_sock_set_buf(fd, SO_RCVBUF);
	if (family == AF_INET) {
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_PKTINFO, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_RECVTOS, 1);
		/* only the multicast groups joined on this very socket
		 * (net/udp_mcast.c) */
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, 0);
	} else {
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0);
		/* rxe and RoCE hardware send a zero UDP checksum over IPv6
		 * too; the ICRC protects the packet instead. */
		if (!err)
			err = setopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, 1);
	}
	/* GSO datagrams from a local sender arrive whole, GRO-merged ones
	 * from a NIC too: one receive call for up to 64 packets.  A kernel
	 * without UDP_GRO (before 5.0) delivers them one by one. */
	if (!err)
		setopt(fd, SOL_UDP, UDP_GRO, 1);
	if (!err && bind(fd, &a->sa, addr_len(family)))
		err = -errno;
	if (err) {
		close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

int udp_rx_socket(int family, uint16_t port, int *out)
{
	union uroce_sockaddr a;

	any_addr(&a, family, port);
	return rx_socket_at(&a, NULL, out);
}

int udp_group_socket(const union uroce_sockaddr *group, uint16_t port,
		     int *out)
{
	union uroce_sockaddr a = *group;

	a.in4.sin_port = htons(port);	/* the same place in both families */
	return rx_socket_at(&a, NULL, out);
}

/* A receive socket bound to self and connected to peer's address and port,
 * with a filter if given.  A connected socket scores above the shared ones
 * in the kernel's lookup; connecting never blocks or sends anything for
 * UDP. */
static int connected_rx_socket(const union uroce_sockaddr *self,
			       const union uroce_sockaddr *peer,
			       const struct sock_fprog *filter, int *out)
{
	int fd, err;

	if (self->sa.sa_family != peer->sa.sa_family)
		return -EAFNOSUPPORT;
	err = rx_socket_at(self, filter, &fd);
	if (err)
		return err;
	if (connect(fd, &peer->sa, addr_len(peer->sa.sa_family))) {
		err = -errno;
		close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

/* uroced: a receive socket for one process, bound to self and connected to
 * peer, that takes only packets for the QPs of slot (DestQP's top bits). */
int udp_steer_socket(const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer, unsigned slot, int *out)
{
	enum { UDP_HDR = 8, DESTQP_HI = UDP_HDR + 5 };
	/* A socket filter sees the datagram from its UDP header on; an
	 * out-of-range load (a short datagram) drops it.  A GRO run is judged
	 * by its first packet: every packet of a run comes from the one
	 * sender of the pair, so the run holds nothing that sender could not
	 * have sent to slot's QPs anyway, and the process drops the rest. */
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, DESTQP_HI),
		BPF_STMT(BPF_ALU | BPF_RSH | BPF_K,
			 UROCE_QPN_SLOT_SHIFT - 8),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, slot, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFF),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	const struct sock_fprog prog = { .len = ARRAY_SIZE(code),
					 .filter = code };

	return connected_rx_socket(self, peer, &prog, out);
}

/* ---- per-QP handles and shared sockets ----------------------------------- */

static int tx_insert(struct udp_priv *p, int fd, uint16_t sport)
{
	int ret = -ENOSPC;

	pthread_mutex_lock(&p->tx_lock);
	for (unsigned k = 0; k < TX_MAX; k++) {
		unsigned h = (p->tx_hint + k) % TX_MAX;
		struct tx_chunk *c = atomic_load(&p->tx[h / TX_CHUNK]);

		if (!c) {
			c = malloc(sizeof(*c));
			if (!c) {
				ret = -ENOMEM;
				break;
			}
			for (unsigned i = 0; i < TX_CHUNK; i++) {
				atomic_init(&c->fd[i], -1);
				atomic_init(&c->rxfd[i], -1);
			}
			atomic_store(&p->tx[h / TX_CHUNK], c);
		}
		if (atomic_load(&c->fd[h % TX_CHUNK]) < 0) {
			c->sport[h % TX_CHUNK] = sport;
			atomic_store(&c->fd[h % TX_CHUNK], fd);
			p->tx_hint = h + 1;
			ret = h;
			break;
		}
	}
	pthread_mutex_unlock(&p->tx_lock);
	return ret;
}

int udp_tx_fd(struct udp_priv *p, int tx)
{
	struct tx_chunk *c;

	if (tx < 0 || tx >= TX_MAX)
		return -1;
	c = atomic_load(&p->tx[tx / TX_CHUNK]);
	return c ? atomic_load(&c->fd[tx % TX_CHUNK]) : -1;
}

int udp_tx_socket(int family, uint16_t sport)
{
	/* drop everything: this socket shares sport with others and only
	 * sends; it is attached before bind so nothing is ever queued */
	static struct sock_filter drop_all = BPF_STMT(BPF_RET | BPF_K, 0);
	const struct sock_fprog prog = { .len = 1, .filter = &drop_all };
	union uroce_sockaddr a;
	socklen_t alen = any_addr(&a, family, sport);
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err;

	if (fd < 0)
		return -errno;
	/* A flow class's port is shared by the QPs of the processes that
	 * have the slot in turn.  SO_REUSEPORT, unlike SO_REUSEADDR, shares
	 * it within one uid only: another user's program cannot send from it
	 * into our flows.  A port the kernel picks stays ours alone. */
	err = sport ? setopt(fd, SOL_SOCKET, SO_REUSEPORT, 1) : 0;
	if (!err && setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog,
			       sizeof(prog)))
		err = -errno;
	if (!err)	/* the kernel rounds up to its minimum */
		err = setopt(fd, SOL_SOCKET, SO_RCVBUF, 1);
	/* room for a whole window of MTU-sized packets in the qdisc */
	if (!err)
		err = uroce_sock_set_buf(fd, SO_SNDBUF);
	if (family == AF_INET) {
		/* The ICRC covers the IPv4 identification and flags.  With
		 * DF set, Linux gives datagrams of an unconnected socket ID 0
		 * (a connected one counts), which is what the transport
		 * assumes when it computes the ICRC. */
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_MTU_DISCOVER,
				     IP_PMTUDISC_DO);
		/* multicast goes as far as unicast, with the hop limit the
		 * kernel's rdma_cm puts in a group's address handle */
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_MULTICAST_TTL,
				     MCAST_HOPS);
		/* rxe and hardware send UDP checksum 0 (the ICRC covers the
		 * payload), but the kernel refuses UDP GSO without checksums,
		 * and GSO saves far more than the checksum costs: it is
		 * offloaded to the NIC or, on loopback and veth, skipped. */
	} else {
		/* RoCE packets must not be fragmented; oversize ones fail with
		 * EMSGSIZE instead.  The UDP checksum stays on: IPv6 forbids
		 * zero, a receiver accepts it only after opting in
		 * (UDP_NO_CHECK6_RX), a non-zero one is accepted by everyone,
		 * and the ICRC masks the field so it costs nothing there. */
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER,
				     IPV6_PMTUDISC_DO);
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS,
				     MCAST_HOPS);
	}
	if (!err && bind(fd, &a.sa, alen))
		err = -errno;
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

/* The port a socket is bound to, 0 if unknown. */
static uint16_t bound_port(int fd)
{
	union uroce_sockaddr a;
	socklen_t len = sizeof(a);

	if (getsockname(fd, &a.sa, &len))
		return 0;
	return ntohs(a.sa.sa_family == AF_INET ? a.in4.sin_port
					       : a.in6.sin6_port);
}

static bool same_sockaddr(const union uroce_sockaddr *a,
			  const union uroce_sockaddr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return false;
	if (a->sa.sa_family == AF_INET)
		return a->in4.sin_port == b->in4.sin_port &&
		       a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr;
	return a->in6.sin6_port == b->in6.sin6_port &&
	       !memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr,
		       sizeof(a->in6.sin6_addr));
}

/* The shared socket for a key, counted once more; -1 if there is none.
 * tx_lock held. */
static int shared_get(struct udp_priv *p, const struct shared_sock *key)
{
	for (unsigned i = 0; i < p->nshared; i++) {
		struct shared_sock *s = &p->shared[i];

		if (s->rx != key->rx)
			continue;
		if (s->rx ? same_sockaddr(&s->self, &key->self) &&
				    same_sockaddr(&s->peer, &key->peer)
			  : s->family == key->family && s->sport == key->sport) {
			s->refs++;
			return s->fd;
		}
	}
	return -1;
}

/* Adds a new socket under key with one reference; tx_lock held. */
static int shared_add(struct udp_priv *p, const struct shared_sock *key,
		      int fd)
{
	if (p->nshared == p->shared_cap) {
		unsigned cap = p->shared_cap ? 2 * p->shared_cap : 32;
		struct shared_sock *n = realloc(p->shared, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		p->shared = n;
		p->shared_cap = cap;
	}
	p->shared[p->nshared] = *key;
	p->shared[p->nshared].fd = fd;
	p->shared[p->nshared].refs = 1;
	p->nshared++;
	return 0;
}

/* Drops a reference to the shared socket fd; true if it was the last,
 * when the caller closes it (and *gone, if given, is what it was).
 * tx_lock held. */
static bool shared_put(struct udp_priv *p, int fd, struct shared_sock *gone)
{
	for (unsigned i = 0; i < p->nshared; i++) {
		if (p->shared[i].fd != fd)
			continue;
		if (--p->shared[i].refs)
			return false;
		if (gone)
			*gone = p->shared[i];
		p->shared[i] = p->shared[--p->nshared];
		return true;
	}
	return true;
}

int udp_tx_open(struct uroce_nic *nic, int family, uint16_t sport)
{
	struct udp_priv *p = nic->net_priv;
	struct shared_sock key = { .family = family, .sport = sport };
	int fd, h, err = 0;

	if (family != AF_INET && family != AF_INET6) {
		STAT_INC(nic, tx_errors);
		return -EAFNOSUPPORT;
	}
	pthread_mutex_lock(&p->tx_lock);
	fd = sport ? shared_get(p, &key) : -1;
	if (fd < 0) {
		/* a port of our own is ours to bind, served or not */
		fd = p->mux.svc_fd >= 0 && sport
			     ? uroce_mux_svc_tx_socket(nic, family, sport)
			     : udp_tx_socket(family, sport);
		/* Another program holds the port (it lies in the kernel's
		 * ephemeral range): the source port is only entropy for the
		 * peer's ECMP and steering, so take one the kernel picks and
		 * share it under the class's key. */
		if (fd == -EADDRINUSE && p->mux.svc_fd < 0) {
			uroce_log("UDP source port %u is taken by another "
				  "program: its flows leave from another port",
				  sport);
			fd = udp_tx_socket(family, 0);
		}
		if (fd >= 0 && !sport)
			key.sport = sport = bound_port(fd);
		err = fd < 0 ? fd : !sport ? -EADDRNOTAVAIL
					   : shared_add(p, &key, fd);
		if (err && fd >= 0)
			close(fd);
	}
	pthread_mutex_unlock(&p->tx_lock);
	if (err) {
		STAT_INC(nic, tx_errors);
		return err;
	}
	h = tx_insert(p, fd, bound_port(fd));
	if (h < 0) {
		pthread_mutex_lock(&p->tx_lock);
		if (shared_put(p, fd, NULL))
			close(fd);
		pthread_mutex_unlock(&p->tx_lock);
		STAT_INC(nic, tx_errors);
	}
	return h;
}

/* Best effort: without it the datagrams still arrive, maybe forwarded. */
int udp_steer(struct uroce_nic *nic, int tx,
	      const union uroce_sockaddr *self,
	      const union uroce_sockaddr *peer, uint16_t peer_sport)
{
	struct udp_priv *p = nic->net_priv;
	union uroce_sockaddr from = *peer;
	struct tx_chunk *c;
	int fd, err;

	struct shared_sock key = { .rx = true, .self = *self };

	if (udp_tx_fd(p, tx) < 0)
		return -EBADF;
	c = atomic_load(&p->tx[tx / TX_CHUNK]);
	if (atomic_load(&c->rxfd[tx % TX_CHUNK]) >= 0)
		return -EBUSY;
	if (from.sa.sa_family == AF_INET)
		from.in4.sin_port = htons(peer_sport);
	else
		from.in6.sin6_port = htons(peer_sport);
	key.peer = from;
	pthread_mutex_lock(&p->tx_lock);
	fd = shared_get(p, &key);
	err = 0;
	if (fd < 0) {
		/* served: the service makes it, filtered to our QPs */
		err = p->mux.svc_fd >= 0 ? uroce_mux_svc_steer(&p->mux, self, &from, &fd)
				     : connected_rx_socket(self, &from, NULL,
							   &fd);
		if (!err)
			err = udp_rx_watch(p, fd, RX_UDP);
		if (!err)
			err = shared_add(p, &key, fd);
		if (err && fd >= 0) {
			udp_rx_unwatch(p, fd);
			close(fd);
		}
	}
	pthread_mutex_unlock(&p->tx_lock);
	if (err) {
		STAT_INC(nic, rx_errors);
		return err;
	}
	atomic_store(&c->rxfd[tx % TX_CHUNK], fd);
	return 0;
}

uint16_t udp_tx_sport(struct uroce_nic *nic, int tx)
{
	struct udp_priv *p = nic->net_priv;

	if (udp_tx_fd(p, tx) < 0)
		return 0;
	return atomic_load(&p->tx[tx / TX_CHUNK])->sport[tx % TX_CHUNK];
}

/* The caller guarantees no xmit on tx is in progress or follows. */
void udp_tx_close(struct uroce_nic *nic, int tx)
{
	struct udp_priv *p = nic->net_priv;
	struct tx_chunk *c;
	struct shared_sock gone;
	int fd, rxfd;

	if (udp_tx_fd(p, tx) < 0)
		return;
	c = atomic_load(&p->tx[tx / TX_CHUNK]);
	pthread_mutex_lock(&p->tx_lock);
	fd = atomic_exchange(&c->fd[tx % TX_CHUNK], -1);
	rxfd = atomic_exchange(&c->rxfd[tx % TX_CHUNK], -1);
	p->tx_hint = tx;
	/* other QPs may still use them */
	if (fd >= 0 && !shared_put(p, fd, NULL))
		fd = -1;
	if (rxfd >= 0 && !shared_put(p, rxfd, &gone))
		rxfd = -1;
	pthread_mutex_unlock(&p->tx_lock);
	if (fd >= 0)
		close(fd);
	if (rxfd >= 0) {
		udp_rx_unwatch(p, rxfd);
		/* the receiver may hold it from an earlier epoll_wait */
		udp_rx_quiesce(p);
		close(rxfd);
		if (p->mux.svc_fd >= 0)
			uroce_mux_svc_release(&p->mux, &gone.self, &gone.peer);
	}
}
