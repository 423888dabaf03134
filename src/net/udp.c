/*
 * RoCEv2 over the kernel's UDP sockets.
 *
 * Every uroce process of a user is its own NIC, yet all of them must receive
 * on the one RoCEv2 port.  They share it with SO_REUSEPORT; the kernel hands
 * each datagram to some member of the group by a hash of its addresses, so a
 * process that gets a datagram for a QP of another process (the QPN's slot
 * bits name the owner) forwards it to the owner over an AF_UNIX
 * SOCK_SEQPACKET connection to the abstract name derived from the owner's
 * slot.  Connections, unlike unconnected AF_UNIX datagrams, are not held to
 * net.unix.max_dgram_qlen (10) queued messages, which a burst overruns.
 *
 * Forwarding costs a hop and AF_UNIX datagram queues are short, so a
 * connected QP also gets a socket bound to its own address and port 4791 and
 * connected to the peer's address and source port: the kernel prefers a
 * connected socket to the shared ones, so its traffic arrives directly.
 *
 * Transmission uses a socket bound to the QP's RoCEv2 source port, sending
 * with an explicit source address so that the IP header matches the one the
 * transport computed the ICRC over.
 *
 * Neither kind of socket is a QP's own: a source port names the sending
 * process and one of 16 flow classes (uroce_qp_sport), so the QPs of a
 * class share one transmit socket, and the QPs that talk to one peer
 * process's class share one connected receive socket.  A process needs a
 * few dozen descriptors however many QPs it has (ulimit -n 1024 and 10,000
 * QPs); the sockets are counted and closed with their last QP.
 */
#include <errno.h>
#include <linux/filter.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "net/pcap.h"
#include "uroce.h"

enum {
	BTH_BYTES = 12,		/* shortest datagram that has a DestQP */
	SOCK_BUF = 16 << 20,	/* socket buffers: a whole 8 MiB UC message */
	TX_CHUNK = 256,		/* tx handles per lazily allocated table chunk */
	TX_MAX = UROCE_MAX_QP + 1,	/* one endpoint per QP at most */
	TX_CHUNKS = TX_MAX / TX_CHUNK,
	TX_RETRIES = 20,	/* EAGAIN/ENOBUFS: ~1 ms before giving up */
	TX_RETRY_NS = 50000,
	FWD_MAGIC = 0x75524f46,	/* catches a peer of another uroce build */
	RX_CTRL = 128,		/* pktinfo + tos, or credentials */
	RX_READY_MAX = 16,	/* sockets read per receive call */
	FWD_ACCEPT_MAX = 256,	/* processes forwarding to us at once */
	FWD_BACKLOG = 64,
	DRAIN_ROUNDS = 16,	/* recvmmsg calls when closing */
	DRAIN_GRACE_MS = 1,	/* for a datagram the kernel still delivers */
};

/* Prefixed to a datagram forwarded to the process that owns its QP: what
 * that process would have learnt had the kernel delivered it there. */
union fwd_addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
};

struct fwd_hdr {
	uint32_t magic;
	uint8_t tos;
	uint8_t pad[3];
	union fwd_addr src, dst;
};

/* A receive buffer holds a forwarding header followed by a UDP payload, so
 * that datagrams from either kind of socket end up with their payload at the
 * same offset. */
enum {
	RX_MSGS = 16,			/* datagrams per recvmmsg */
	RX_DGRAM_MAX = 65536,		/* a GRO datagram: many packets */
	RX_STRIDE = sizeof(struct fwd_hdr) + RX_DGRAM_MAX,
	RX_GRO_SEGS = 64,		/* most segments the kernel merges */
};

struct tx_chunk {
	atomic_int fd[TX_CHUNK];	/* -1 = free */
	atomic_int rxfd[TX_CHUNK];	/* its direct receive socket, or -1 */
	uint16_t sport[TX_CHUNK];	/* its UDP source port, for captures */
};

/* What a socket in the epoll set is (the high half of its epoll data). */
enum rx_kind { RX_UDP, RX_LISTEN, RX_FWD };

/* A CM service ID this process holds: a listening socket bound to the
 * service's abstract name, through which other processes forward its REQs
 * (and, for the same service, the connection that forwards to it). */
struct sid_claim {
	uint64_t sid;
	int fd;
};

enum { SID_FWD_CACHE = 64 };	/* services we forward to, connected */

/* A socket QPs share: a transmit socket (family, source port), or a
 * connected receive socket (our address, the peer's address and port). */
struct shared_sock {
	int fd;
	unsigned refs;
	bool rx;
	int family;
	uint16_t sport;
	union uroce_sockaddr self, peer;
};

struct udp_priv {
	int fd4, fd6;			/* -1 when absent */
	int fdu;			/* our slot's forwarding listener */
	int fwd_to[UROCE_MAX_SLOTS];	/* connection to each slot, or -1 */
	int fwd_from[FWD_ACCEPT_MAX];	/* accepted connections */
	unsigned nfwd_from;
	int epfd;			/* every receiving socket */
	pthread_mutex_t sid_lock;
	struct sid_claim *sids;
	unsigned nsids, sids_cap;
	/* connections to the holders of services we forwarded REQs to;
	 * used only by the receiver (rx_lock) */
	struct sid_claim sid_fwd[SID_FWD_CACHE];
	unsigned sid_fwd_next;
	uid_t uid;
	uint16_t port;
	struct uroce_pcap *pcap;	/* UROCE_PCAP, or NULL */

	/* Handle -> socket.  Chunks are never freed before close, so xmit
	 * looks up without the lock while tx_open grows the table. */
	pthread_mutex_t tx_lock;
	unsigned tx_hint;
	_Atomic(struct tx_chunk *) tx[TX_CHUNKS];
	struct shared_sock *shared;	/* under tx_lock */
	unsigned nshared, shared_cap;

	/* recvmmsg state, used only by the single receiver (rx_lock) */
	struct mmsghdr msg[RX_MSGS];
	struct iovec iov[RX_MSGS];
	union uroce_sockaddr name[RX_MSGS];
	union {
		uint8_t buf[RX_CTRL];
		struct cmsghdr align;
	} ctrl[RX_MSGS];
	uint8_t buf[RX_MSGS][RX_STRIDE];
};

static int setopt(int fd, int level, int name, int val)
{
	return setsockopt(fd, level, name, &val, sizeof(val)) ? -errno : 0;
}

/* A socket buffer of SOCK_BUF bytes.  The kernel caps SO_RCVBUF/SO_SNDBUF
 * at net.core.[rw]mem_max (212992 by default: some 50 MTU-sized packets,
 * less than a window); with CAP_NET_ADMIN the *FORCE options go past it.
 * uroce never needs the capability, it only uses it when it has it. */
static int set_buf(int fd, int name)
{
	int force = name == SO_RCVBUF ? SO_RCVBUFFORCE : SO_SNDBUFFORCE;

	if (!setopt(fd, SOL_SOCKET, force, SOCK_BUF))
		return 0;
	return setopt(fd, SOL_SOCKET, name, SOCK_BUF);
}

static socklen_t addr_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in)
				 : sizeof(struct sockaddr_in6);
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

/* A receiving socket bound to a (port 4791), in the shared group. */
static int rx_socket_at(const union uroce_sockaddr *a, int *out)
{
	int family = a->sa.sa_family;
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err;

	if (fd < 0)
		return -errno;
	err = setopt(fd, SOL_SOCKET, SO_REUSEPORT, 1);
	if (!err)
		err = set_buf(fd, SO_RCVBUF);
	if (family == AF_INET) {
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_PKTINFO, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_RECVTOS, 1);
	} else {
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
		if (!err)
			err = setopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1);
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

static int rx_socket(int family, uint16_t port, int *out)
{
	union uroce_sockaddr a;

	any_addr(&a, family, port);
	return rx_socket_at(&a, out);
}

static int rx_watch(struct udp_priv *p, int fd, enum rx_kind kind)
{
	struct epoll_event ev = {
		.events = EPOLLIN,
		.data.u64 = (uint64_t)kind << 32 | (uint32_t)fd,
	};

	return epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

/* Claim a free slot by binding its abstract name.  Starting at a
 * pseudo-random slot keeps a restarted process from reusing the QPNs its
 * predecessor's peers may still be sending to. */
static int slot_alloc(struct uroce_nic *nic, struct udp_priv *p)
{
	const unsigned nslots = UROCE_MAX_SLOTS - 1;
	struct timespec ts;
	unsigned start;
	int err;

	p->fdu = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK,
			0);
	if (p->fdu < 0)
		return -errno;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	start = (unsigned)(ts.tv_nsec ^ getpid() * 2654435761u) % nslots;
	for (unsigned i = 0; i < nslots; i++) {
		unsigned slot = 1 + (start + i) % nslots;
		struct sockaddr_un un;
		socklen_t len = slot_name(&un, p->port, p->uid, slot);

		if (!bind(p->fdu, (struct sockaddr *)&un, len)) {
			nic->slot = slot;
			err = listen(p->fdu, FWD_BACKLOG) ? -errno : 0;
			return err;
		}
		if (errno != EADDRINUSE)
			return -errno;
	}
	return -EADDRINUSE;
}

static void drain_shared(struct uroce_nic *nic, int fd, int family);

static void udp_close(struct uroce_nic *nic)
{
	struct udp_priv *p = nic->net_priv;

	if (!p)
		return;
	if (p->fd4 >= 0) {
		drain_shared(nic, p->fd4, AF_INET);
		close(p->fd4);
	}
	if (p->fd6 >= 0) {
		drain_shared(nic, p->fd6, AF_INET6);
		close(p->fd6);
	}
	if (p->fdu >= 0)
		close(p->fdu);
	for (unsigned i = 0; i < p->nsids; i++)
		close(p->sids[i].fd);
	free(p->sids);
	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		if (p->sid_fwd[i].fd >= 0)
			close(p->sid_fwd[i].fd);
	pthread_mutex_destroy(&p->sid_lock);
	for (unsigned i = 0; i < UROCE_MAX_SLOTS; i++)
		if (p->fwd_to[i] >= 0)
			close(p->fwd_to[i]);
	for (unsigned i = 0; i < p->nfwd_from; i++)
		close(p->fwd_from[i]);
	if (p->epfd >= 0)
		close(p->epfd);
	for (unsigned c = 0; c < TX_CHUNKS; c++)
		free(atomic_load(&p->tx[c]));
	for (unsigned i = 0; i < p->nshared; i++)
		close(p->shared[i].fd);
	free(p->shared);
	uroce_pcap_close(p->pcap);
	pthread_mutex_destroy(&p->tx_lock);
	free(p);
	nic->net_priv = NULL;
}

static int udp_open(struct uroce_nic *nic)
{
	struct udp_priv *p = calloc(1, sizeof(*p));
	int err;

	if (!p)
		return -ENOMEM;
	p->fd4 = p->fd6 = p->fdu = p->epfd = -1;
	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		p->sid_fwd[i].fd = -1;
	pthread_mutex_init(&p->sid_lock, NULL);
	for (unsigned i = 0; i < UROCE_MAX_SLOTS; i++)
		p->fwd_to[i] = -1;
	p->uid = getuid();	/* what SCM_CREDENTIALS reports for a sender */
	p->port = nic->cfg->udp_port;
	/* UDP GSO exists since Linux 4.18 */
	nic->gso = true;
	pthread_mutex_init(&p->tx_lock, NULL);
	nic->net_priv = p;
	if (nic->cfg->pcap[0])
		p->pcap = uroce_pcap_open(nic->cfg->pcap);

	err = rx_socket(AF_INET, p->port, &p->fd4);
	if (!err) {
		err = rx_socket(AF_INET6, p->port, &p->fd6);
		/* a host without IPv6 runs IPv4-only */
		if (err == -EAFNOSUPPORT || err == -EADDRNOTAVAIL)
			err = 0;
	}
	if (!err)
		err = slot_alloc(nic, p);
	if (!err) {
		p->epfd = epoll_create1(EPOLL_CLOEXEC);
		err = p->epfd < 0 ? -errno : rx_watch(p, p->fd4, RX_UDP);
	}
	if (!err && p->fd6 >= 0)
		err = rx_watch(p, p->fd6, RX_UDP);
	if (!err)
		err = rx_watch(p, p->fdu, RX_LISTEN);
	if (err)
		udp_close(nic);
	return err;
}

/* ---- transmit ------------------------------------------------------------ */

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

static int tx_fd(struct udp_priv *p, int tx)
{
	struct tx_chunk *c;

	if (tx < 0 || tx >= TX_MAX)
		return -1;
	c = atomic_load(&p->tx[tx / TX_CHUNK]);
	return c ? atomic_load(&c->fd[tx % TX_CHUNK]) : -1;
}

static int tx_socket(int family, uint16_t sport)
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
	/* QPs of this and other processes may hash to the same source port */
	err = setopt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
	if (!err)
		err = setopt(fd, SOL_SOCKET, SO_REUSEPORT, 1);
	if (!err && setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog,
			       sizeof(prog)))
		err = -errno;
	if (!err)	/* the kernel rounds up to its minimum */
		err = setopt(fd, SOL_SOCKET, SO_RCVBUF, 1);
	/* room for a whole window of MTU-sized packets in the qdisc */
	if (!err)
		err = set_buf(fd, SO_SNDBUF);
	if (family == AF_INET) {
		/* The ICRC covers the IPv4 identification and flags.  With
		 * DF set, Linux gives datagrams of an unconnected socket ID 0
		 * (a connected one counts), which is what the transport
		 * assumes when it computes the ICRC. */
		if (!err)
			err = setopt(fd, IPPROTO_IP, IP_MTU_DISCOVER,
				     IP_PMTUDISC_DO);
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
	}
	if (!err && bind(fd, &a.sa, alen))
		err = -errno;
	if (err) {
		close(fd);
		return err;
	}
	return fd;
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
 * when the caller closes it.  tx_lock held. */
static bool shared_put(struct udp_priv *p, int fd)
{
	for (unsigned i = 0; i < p->nshared; i++) {
		if (p->shared[i].fd != fd)
			continue;
		if (--p->shared[i].refs)
			return false;
		p->shared[i] = p->shared[--p->nshared];
		return true;
	}
	return true;
}

static int udp_tx_open(struct uroce_nic *nic, int family, uint16_t sport)
{
	struct udp_priv *p = nic->net_priv;
	struct shared_sock key = { .family = family, .sport = sport };
	int fd, h, err = 0;

	if (family != AF_INET && family != AF_INET6) {
		STAT_INC(nic, tx_errors);
		return -EAFNOSUPPORT;
	}
	pthread_mutex_lock(&p->tx_lock);
	fd = shared_get(p, &key);
	if (fd < 0) {
		fd = tx_socket(family, sport);
		err = fd < 0 ? fd : shared_add(p, &key, fd);
		if (err && fd >= 0)
			close(fd);
	}
	pthread_mutex_unlock(&p->tx_lock);
	if (err) {
		STAT_INC(nic, tx_errors);
		return err;
	}
	h = tx_insert(p, fd, sport);
	if (h < 0) {
		pthread_mutex_lock(&p->tx_lock);
		if (shared_put(p, fd))
			close(fd);
		pthread_mutex_unlock(&p->tx_lock);
		STAT_INC(nic, tx_errors);
	}
	return h;
}

/* Best effort: without it the datagrams still arrive, maybe forwarded. */
static int udp_steer(struct uroce_nic *nic, int tx,
		     const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer, uint16_t peer_sport)
{
	struct udp_priv *p = nic->net_priv;
	union uroce_sockaddr from = *peer;
	struct tx_chunk *c;
	int fd, err;

	struct shared_sock key = { .rx = true, .self = *self };

	if (tx_fd(p, tx) < 0)
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
		err = rx_socket_at(self, &fd);
		/* A socket connected to the peer's address and port scores
		 * above the shared ones in the kernel's lookup.  Connecting
		 * never blocks or sends anything for UDP. */
		if (!err && connect(fd, &from.sa, addr_len(from.sa.sa_family)))
			err = -errno;
		if (!err)
			err = rx_watch(p, fd, RX_UDP);
		if (!err)
			err = shared_add(p, &key, fd);
		if (err && fd >= 0) {
			epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
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

/* The caller guarantees no xmit on tx is in progress or follows. */
static void udp_tx_close(struct uroce_nic *nic, int tx)
{
	struct udp_priv *p = nic->net_priv;
	struct tx_chunk *c;
	int fd, rxfd;

	if (tx_fd(p, tx) < 0)
		return;
	c = atomic_load(&p->tx[tx / TX_CHUNK]);
	pthread_mutex_lock(&p->tx_lock);
	fd = atomic_exchange(&c->fd[tx % TX_CHUNK], -1);
	rxfd = atomic_exchange(&c->rxfd[tx % TX_CHUNK], -1);
	p->tx_hint = tx;
	/* other QPs may still use them */
	if (fd >= 0 && !shared_put(p, fd))
		fd = -1;
	if (rxfd >= 0 && !shared_put(p, rxfd))
		rxfd = -1;
	pthread_mutex_unlock(&p->tx_lock);
	if (fd >= 0)
		close(fd);
	if (rxfd >= 0) {
		epoll_ctl(p->epfd, EPOLL_CTL_DEL, rxfd, NULL);
		/* the receiver may hold it from an earlier epoll_wait */
		uroce_nic_quiesce(nic);
		close(rxfd);
	}
}

/* sendmmsg, retried on EINTR and, briefly, while the socket or device queue
 * is full.  Returns datagrams sent (>= 1) or -errno. */
static int send_batch(int fd, struct mmsghdr *msg, unsigned n)
{
	const struct timespec pause = { 0, TX_RETRY_NS };

	for (unsigned tries = 0;; tries++) {
		int r = sendmmsg(fd, msg, n, MSG_DONTWAIT);

		if (r > 0)
			return r;
		if ((errno != EINTR && errno != EAGAIN && errno != ENOBUFS) ||
		    tries == TX_RETRIES)
			return -errno;
		if (errno != EINTR)
			nanosleep(&pause, NULL);
	}
}

/* Capturing is a debugging aid: kept out of line, the hot paths pay one
 * test of p->pcap.  One datagram: a GSO run of n packets, segment i of
 * which leaves with IPv4 identification i. */
static void __attribute__((cold)) capture_tx(struct uroce_nic *nic, int tx,
					     const struct uroce_txpkt *pkts,
					     unsigned n)
{
	struct udp_priv *p = nic->net_priv;
	struct tx_chunk *c = atomic_load(&p->tx[tx / TX_CHUNK]);

	for (unsigned i = 0; i < n; i++)
		if (!uroce_pcap_tx(p->pcap, &pkts[i], c->sport[tx % TX_CHUNK],
				   i))
			STAT_INC(nic, pcap_drops);
}

static void __attribute__((cold)) capture_rx(struct uroce_nic *nic,
					     const struct uroce_rxpkt *rx)
{
	struct udp_priv *p = nic->net_priv;

	if (!uroce_pcap_rx(p->pcap, rx))
		STAT_INC(nic, pcap_drops);
}

/* Control messages of one datagram: the source address (it must be the
 * SGID the ICRC used) and, for a GSO run, the segment size. */
static size_t tx_cmsgs(uint8_t *buf, const struct uroce_txpkt *pkt,
		       uint16_t gso_size)
{
	struct cmsghdr *cm = (struct cmsghdr *)buf;
	size_t len;

	if (pkt->dst->sa.sa_family == AF_INET) {
		struct in_pktinfo pi = { .ipi_spec_dst = pkt->src->in4.sin_addr };

		cm->cmsg_level = IPPROTO_IP;
		cm->cmsg_type = IP_PKTINFO;
		cm->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
		len = CMSG_SPACE(sizeof(pi));
	} else {
		struct in6_pktinfo pi = {
			.ipi6_addr = pkt->src->in6.sin6_addr,
			.ipi6_ifindex = pkt->src->in6.sin6_scope_id,
		};

		cm->cmsg_level = IPPROTO_IPV6;
		cm->cmsg_type = IPV6_PKTINFO;
		cm->cmsg_len = CMSG_LEN(sizeof(pi));
		memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
		len = CMSG_SPACE(sizeof(pi));
	}
	if (gso_size) {
		cm = (struct cmsghdr *)(buf + len);
		cm->cmsg_level = SOL_UDP;
		cm->cmsg_type = UDP_SEGMENT;
		cm->cmsg_len = CMSG_LEN(sizeof(gso_size));
		memcpy(CMSG_DATA(cm), &gso_size, sizeof(gso_size));
		len += CMSG_SPACE(sizeof(gso_size));
	}
	return len;
}

enum {
	TX_MSGS = 16,		/* datagrams (GSO runs) per sendmmsg */
	TX_CTRL = CMSG_SPACE(sizeof(struct in6_pktinfo)) +
		  CMSG_SPACE(sizeof(uint16_t)),
};

static int udp_xmit(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n)
{
	struct udp_priv *p = nic->net_priv;
	int fd = tx_fd(p, tx);
	unsigned sent = 0;
	int err = -EBADF;

	while (fd >= 0 && sent < n) {
		struct mmsghdr msg[TX_MSGS];
		unsigned npkts[TX_MSGS];
		struct iovec iov[UROCE_GSO_MAX_IOV];
		union {
			uint8_t buf[TX_CTRL];
			struct cmsghdr align;
		} ctrl[TX_MSGS];
		unsigned nmsg = 0, niov = 0, at = sent;
		int r;

		/* one datagram per GSO run (as the ICRCs were computed) */
		while (at < n && nmsg < TX_MSGS) {
			struct uroce_txpkt *pkt = &pkts[at];
			unsigned k = nic->gso ? uroce_gso_run(pkt, n - at) : 1;
			struct iovec *first;
			unsigned run_iov = 0;

			for (unsigned j = 0; j < k; j++)
				run_iov += pkt[j].niov;
			if (niov + run_iov > ARRAY_SIZE(iov)) {
				if (nmsg)
					break;
				k = 1;	/* a run never exceeds the array */
			}
			first = &iov[niov];
			for (unsigned j = 0; j < k; j++) {
				memcpy(&iov[niov], pkt[j].iov,
				       pkt[j].niov * sizeof(*iov));
				niov += pkt[j].niov;
			}
			msg[nmsg].msg_hdr = (struct msghdr){
				.msg_name = (void *)pkt->dst,
				.msg_namelen = addr_len(pkt->dst->sa.sa_family),
				.msg_iov = first,
				.msg_iovlen = &iov[niov] - first,
				.msg_control = ctrl[nmsg].buf,
				.msg_controllen = tx_cmsgs(ctrl[nmsg].buf, pkt,
							   k > 1 ? pkt->len : 0),
			};
			npkts[nmsg++] = k;
			at += k;
		}
		if (p->pcap)
			uroce_pcap_hold(p->pcap);
		r = send_batch(fd, msg, nmsg);
		for (int m = 0; m < r; m++) {
			/* what the kernel took, as it leaves */
			if (p->pcap)
				capture_tx(nic, tx, &pkts[sent], npkts[m]);
			sent += npkts[m];
		}
		if (p->pcap)
			uroce_pcap_release(p->pcap);
		if (r < 0) {
			err = r;
			break;
		}
	}
	atomic_fetch_add_explicit(&nic->stats.tx_packets, sent,
				  memory_order_relaxed);
	if (sent < n)
		atomic_fetch_add_explicit(&nic->stats.tx_errors, n - sent,
					  memory_order_relaxed);
	return sent || !n ? (int)sent : err;
}

/* ---- receive ------------------------------------------------------------- */

static int udp_rx_fds(struct uroce_nic *nic, int *fds, int max)
{
	struct udp_priv *p = nic->net_priv;

	if (max < 1)
		return 0;
	fds[0] = p->epfd;
	return 1;
}

static unsigned dest_slot(const uint8_t *bth)
{
	uint32_t qpn = (uint32_t)bth[5] << 16 | bth[6] << 8 | bth[7];

	return qpn >> UROCE_QPN_SLOT_SHIFT;
}

/* Fills rx->dst and rx->tos from the control messages of a UDP datagram;
 * false if the destination address is missing. */
static bool rx_cmsgs(struct udp_priv *p, struct msghdr *mh,
		     struct uroce_rxpkt *rx, uint32_t *gso_size)
{
	bool have_dst = false;

	memset(&rx->dst, 0, sizeof(rx->dst));
	rx->tos = 0;
	*gso_size = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm;
	     cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
			int size;

			memcpy(&size, CMSG_DATA(cm), sizeof(size));
			*gso_size = size > 0 ? (uint32_t)size : 0;
		} else if (cm->cmsg_level == IPPROTO_IP &&
			   cm->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;

			memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
			rx->dst.in4.sin_family = AF_INET;
			rx->dst.in4.sin_addr = pi.ipi_addr;
			rx->dst.in4.sin_port = htons(p->port);
			have_dst = true;
		} else if (cm->cmsg_level == IPPROTO_IP &&
			   cm->cmsg_type == IP_TOS) {
			rx->tos = *CMSG_DATA(cm);
		} else if (cm->cmsg_level == IPPROTO_IPV6 &&
			   cm->cmsg_type == IPV6_PKTINFO) {
			struct in6_pktinfo pi;

			memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
			rx->dst.in6.sin6_family = AF_INET6;
			rx->dst.in6.sin6_addr = pi.ipi6_addr;
			rx->dst.in6.sin6_port = htons(p->port);
			if (IN6_IS_ADDR_LINKLOCAL(&pi.ipi6_addr))
				rx->dst.in6.sin6_scope_id = pi.ipi6_ifindex;
			have_dst = true;
		} else if (cm->cmsg_level == IPPROTO_IPV6 &&
			   cm->cmsg_type == IPV6_TCLASS) {
			int tclass;

			memcpy(&tclass, CMSG_DATA(cm), sizeof(tclass));
			rx->tos = tclass;
		}
	}
	return have_dst;
}

/* The connection to slot's owner, made on first use; -1 if it has none. */
static int fwd_conn(struct udp_priv *p, unsigned slot)
{
	struct sockaddr_un un;
	socklen_t len;
	int fd = p->fwd_to[slot];

	if (fd >= 0)
		return fd;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	len = slot_name(&un, p->port, p->uid, slot);
	/* deep enough for a window of MTU-sized packets */
	if (set_buf(fd, SO_SNDBUF) ||
	    connect(fd, (struct sockaddr *)&un, len)) {
		close(fd);
		return -1;
	}
	p->fwd_to[slot] = fd;
	return fd;
}

static int forward(struct uroce_nic *nic, unsigned slot,
		   const struct uroce_rxpkt *rx)
{
	struct udp_priv *p = nic->net_priv;
	struct fwd_hdr h = { .magic = FWD_MAGIC, .tos = rx->tos };
	struct iovec iov[2] = {
		{ .iov_base = &h, .iov_len = sizeof(h) },
		{ .iov_base = rx->data, .iov_len = rx->len },
	};
	struct msghdr mh = {
		.msg_iov = iov,
		.msg_iovlen = ARRAY_SIZE(iov),
	};
	int fd = fwd_conn(p, slot);

	memcpy(&h.src, &rx->src, sizeof(h.src));
	memcpy(&h.dst, &rx->dst, sizeof(h.dst));
	/* never block the receive path on a slow or vanished owner: its
	 * transport retransmits what is dropped here */
	int err;

	if (fd >= 0 && sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
		STAT_INC(nic, rx_forwarded);
		return 0;
	}
	err = fd >= 0 ? -errno : -ENOENT;
	STAT_INC(nic, rx_forward_failed);
	/* the owner is gone (a new process may take its slot): reconnect
	 * next time */
	if (fd >= 0 && err != -EAGAIN) {
		close(fd);
		p->fwd_to[slot] = -1;
	}
	return err;
}

static int udp_forward(struct uroce_nic *nic, unsigned slot,
		       const struct uroce_rxpkt *rx)
{
	if (slot == 0 || slot >= UROCE_MAX_SLOTS || slot == nic->slot)
		return -EINVAL;
	return forward(nic, slot, rx);
}

/* ---- CM service IDs ------------------------------------------------------ */

static int udp_sid_claim(struct uroce_nic *nic, uint64_t sid)
{
	struct udp_priv *p = nic->net_priv;
	struct sockaddr_un un;
	socklen_t len = sid_name(&un, p->port, sid);
	int fd, err = 0;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&un, len) || listen(fd, FWD_BACKLOG))
		err = -errno;
	pthread_mutex_lock(&p->sid_lock);
	if (!err && p->nsids == p->sids_cap) {
		unsigned cap = p->sids_cap ? 2 * p->sids_cap : 8;
		struct sid_claim *n = realloc(p->sids, cap * sizeof(*n));

		if (n) {
			p->sids = n;
			p->sids_cap = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err)
		err = rx_watch(p, fd, RX_LISTEN);
	if (!err)
		p->sids[p->nsids++] = (struct sid_claim){ sid, fd };
	pthread_mutex_unlock(&p->sid_lock);
	if (err)
		close(fd);
	return err;
}

/* Not called with the CM's lock held: the receiver may be using fd. */
static void udp_sid_release(struct uroce_nic *nic, uint64_t sid)
{
	struct udp_priv *p = nic->net_priv;
	int fd = -1;

	pthread_mutex_lock(&p->sid_lock);
	for (unsigned i = 0; i < p->nsids; i++) {
		if (p->sids[i].sid == sid) {
			fd = p->sids[i].fd;
			p->sids[i] = p->sids[--p->nsids];
			break;
		}
	}
	pthread_mutex_unlock(&p->sid_lock);
	if (fd < 0)
		return;
	epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
	uroce_nic_quiesce(nic);
	close(fd);
}

/* The cached connection to a service's holder, made on first use. */
static int sid_conn(struct udp_priv *p, uint64_t sid)
{
	struct sockaddr_un un;
	socklen_t len = sid_name(&un, p->port, sid);
	struct sid_claim *c;
	int fd;

	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		if (p->sid_fwd[i].fd >= 0 && p->sid_fwd[i].sid == sid)
			return p->sid_fwd[i].fd;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (set_buf(fd, SO_SNDBUF) || connect(fd, (struct sockaddr *)&un, len)) {
		int err = -errno;

		close(fd);
		return err;
	}
	c = &p->sid_fwd[p->sid_fwd_next++ % SID_FWD_CACHE];
	if (c->fd >= 0)
		close(c->fd);
	*c = (struct sid_claim){ sid, fd };
	return fd;
}

static void sid_conn_drop(struct udp_priv *p, int fd)
{
	for (unsigned i = 0; i < SID_FWD_CACHE; i++)
		if (p->sid_fwd[i].fd == fd)
			p->sid_fwd[i].fd = -1;
	close(fd);
}

/* Only the receiver (under rx_lock) forwards, so the cache needs no lock.
 * A connection outlives its holder's claim: a failed send reconnects
 * once, to whoever holds the service now, if anyone. */
static int udp_sid_forward(struct uroce_nic *nic, uint64_t sid,
			   const struct uroce_rxpkt *rx)
{
	struct udp_priv *p = nic->net_priv;
	struct fwd_hdr h = { .magic = FWD_MAGIC, .tos = rx->tos };
	struct iovec iov[2] = {
		{ .iov_base = &h, .iov_len = sizeof(h) },
		{ .iov_base = rx->data, .iov_len = rx->len },
	};
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = ARRAY_SIZE(iov) };

	memcpy(&h.src, &rx->src, sizeof(h.src));
	memcpy(&h.dst, &rx->dst, sizeof(h.dst));
	for (unsigned tries = 0; tries < 2; tries++) {
		int fd = sid_conn(p, sid);

		if (fd < 0)
			return fd;
		if (sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			return 0;
		/* a full queue loses the REQ as a full backlog would: the
		 * peer retransmits it */
		if (errno == EAGAIN)
			return 0;
		sid_conn_drop(p, fd);
	}
	return -ECONNREFUSED;
}

/* A process of our user connects to forward datagrams to us. */
static void fwd_accept(struct uroce_nic *nic, int listen_fd)
{
	struct udp_priv *p = nic->net_priv;
	struct ucred uc;
	socklen_t len = sizeof(uc);
	int fd;

	while ((fd = accept4(listen_fd, NULL, NULL,
			     SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) ||
		    uc.uid != p->uid) {
			STAT_INC(nic, rx_bad_source);
			close(fd);
			continue;
		}
		if (p->nfwd_from == FWD_ACCEPT_MAX || rx_watch(p, fd, RX_FWD)) {
			STAT_INC(nic, rx_errors);
			close(fd);
			continue;
		}
		p->fwd_from[p->nfwd_from++] = fd;
	}
}

/* The forwarding process closed its end. */
static void fwd_close(struct udp_priv *p, int fd)
{
	for (unsigned i = 0; i < p->nfwd_from; i++) {
		if (p->fwd_from[i] == fd) {
			p->fwd_from[i] = p->fwd_from[--p->nfwd_from];
			break;
		}
	}
	close(fd);
}

/* A datagram from a UDP socket, maybe several packets merged by GSO/GRO:
 * puts the packets that are ours in rx[0..room) and returns how many. */
static unsigned rx_udp(struct uroce_nic *nic, unsigned i,
		       struct uroce_rxpkt *rx, unsigned room)
{
	struct udp_priv *p = nic->net_priv;
	struct msghdr *mh = &p->msg[i].msg_hdr;
	uint8_t *data = p->buf[i] + sizeof(struct fwd_hdr);
	uint32_t len = p->msg[i].msg_len, seg, off;
	unsigned out = 0;

	if (len < BTH_BYTES || (mh->msg_flags & MSG_TRUNC)) {
		STAT_INC(nic, rx_malformed);
		return 0;
	}
	if (!rx_cmsgs(p, mh, &rx[0], &seg)) {
		STAT_INC(nic, rx_errors);
		return 0;
	}
	memset(&rx[0].src, 0, sizeof(rx[0].src));
	memcpy(&rx[0].src, &p->name[i], mh->msg_namelen);
	if (!seg || seg > len)
		seg = len;
	for (off = 0; off < len; off += seg) {
		struct uroce_rxpkt *r = &rx[out];
		unsigned slot;

		if (out == room) {
			/* more than the kernel merges: never expected */
			STAT_INC(nic, rx_errors);
			break;
		}
		if (out) {
			r->src = rx[0].src;
			r->dst = rx[0].dst;
			r->tos = rx[0].tos;
		}
		r->data = data + off;
		r->len = len - off < seg ? len - off : seg;
		if (r->len < BTH_BYTES) {
			STAT_INC(nic, rx_malformed);
			continue;
		}
		slot = dest_slot(r->data);
		/* slot 0 is no process's: its QPNs (QP1) are served by
		 * whichever process the kernel picked */
		if (slot == 0 || slot == nic->slot) {
			out++;
			continue;
		}
		forward(nic, slot, r);
	}
	return out;
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
 * connected): true when it is well formed. */
static bool rx_unix(struct uroce_nic *nic, unsigned i, struct uroce_rxpkt *rx)
{
	struct udp_priv *p = nic->net_priv;
	struct msghdr *mh = &p->msg[i].msg_hdr;
	uint32_t len = p->msg[i].msg_len;
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
	memcpy(&h, p->buf[i], sizeof(h));
	family = h.src.sa.sa_family;
	if (h.magic != FWD_MAGIC || (family != AF_INET && family != AF_INET6) ||
	    !fwd_addr_get(&h.src, family, &rx->src) ||
	    !fwd_addr_get(&h.dst, family, &rx->dst)) {
		STAT_INC(nic, rx_malformed);
		return false;
	}
	rx->tos = h.tos;
	rx->data = p->buf[i] + sizeof(h);
	rx->len = len - sizeof(h);
	return true;
}

/* recvmmsg into buffers [first, first + n). */
static int rx_batch(struct udp_priv *p, int fd, bool fwd, unsigned first,
		    unsigned n)
{
	int r;

	for (unsigned i = first; i < first + n; i++) {
		/* a forwarded datagram brings its header; a UDP one gets
		 * room for it left in front */
		p->iov[i].iov_base = fwd ? p->buf[i]
					 : p->buf[i] + sizeof(struct fwd_hdr);
		p->iov[i].iov_len = fwd ? RX_STRIDE : RX_DGRAM_MAX;
		p->msg[i].msg_hdr = (struct msghdr){
			.msg_name = fwd ? NULL : &p->name[i],
			.msg_namelen = fwd ? 0 : sizeof(p->name[i]),
			.msg_iov = &p->iov[i],
			.msg_iovlen = 1,
			.msg_control = p->ctrl[i].buf,
			.msg_controllen = sizeof(p->ctrl[i].buf),
		};
	}
	r = recvmmsg(fd, &p->msg[first], n, MSG_DONTWAIT | MSG_CMSG_CLOEXEC,
		     NULL);
	return r < 0 ? -errno : r;
}

/*
 * The kernel may have queued on our shared sockets datagrams for other
 * processes' QPs (a UD reply we sent ourselves, typically) that we have not
 * forwarded yet.  Closing would lose them, and UD and UC never resend: hand
 * them on first.  Our own are dropped, as they would be a moment later.  A
 * datagram we sent just now may still be on its way through the kernel's
 * receive path (softirq processing deferred to ksoftirqd on a busy
 * machine), so an empty socket gets a short grace before it is closed.
 */
static void drain_shared(struct uroce_nic *nic, int fd, int family)
{
	struct udp_priv *p = nic->net_priv;
	struct uroce_rxpkt ours[RX_GRO_SEGS];
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	union uroce_sockaddr sink;
	int got;

	/* First out of the group's choice: the kernel's SO_REUSEPORT hash
	 * passes over a connected member, so what arrives from now on goes
	 * to the other processes, and what is queued here stays readable.
	 * The sink is loopback's discard port, which sends nothing. */
	memset(&sink, 0, sizeof(sink));
	if (family == AF_INET) {
		sink.in4.sin_family = AF_INET;
		sink.in4.sin_port = htons(9);
		sink.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	} else {
		sink.in6.sin6_family = AF_INET6;
		sink.in6.sin6_port = htons(9);
		sink.in6.sin6_addr = in6addr_loopback;
	}
	/* (without a loopback route it stays a member: the grace covers it) */
	connect(fd, &sink.sa, addr_len(family));

	/* bounded: a busy sender must not keep a closing process alive */
	for (unsigned round = 0; round < DRAIN_ROUNDS; round++) {
		got = rx_batch(p, fd, false, 0, RX_MSGS);
		if (got <= 0 && poll(&pfd, 1, DRAIN_GRACE_MS) <= 0)
			return;
		for (int i = 0; i < got; i++)
			rx_udp(nic, i, ours, RX_GRO_SEGS);
	}
}

static int udp_recv(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		    unsigned max)
{
	struct udp_priv *p = nic->net_priv;
	struct epoll_event ev[RX_READY_MAX];
	unsigned used = 0, out = 0;
	int nready, err = 0;

	nready = epoll_wait(p->epfd, ev, RX_READY_MAX, 0);
	if (nready < 0)
		return errno == EINTR ? 0 : -errno;
	/* Buffers of forwarded or dropped datagrams are not reused within a
	 * call, which keeps those of returned ones untouched. */
	for (int k = 0; k < nready && used < RX_MSGS; k++) {
		int fd = (int)(uint32_t)ev[k].data.u64;
		enum rx_kind kind = ev[k].data.u64 >> 32;
		bool fwd = kind == RX_FWD;
		/* as many datagrams as surely fit, each up to RX_GRO_SEGS
		 * packets; at least one */
		unsigned want = (max - out) / RX_GRO_SEGS;
		int got;

		if (kind == RX_LISTEN) {
			fwd_accept(nic, fd);
			continue;
		}
		if (want > RX_MSGS - used)
			want = RX_MSGS - used;
		if (!want) {
			if (out)
				break;
			want = 1;
		}
		got = rx_batch(p, fd, fwd, used, want);

		if (got < 0) {
			if (got != -EAGAIN && got != -EINTR) {
				STAT_INC(nic, rx_errors);
				err = got;
			}
			continue;
		}
		for (unsigned i = used; i < used + got; i++) {
			/* a forwarded datagram is never empty: end of file */
			if (fwd && p->msg[i].msg_len == 0) {
				fwd_close(p, fd);
				got = i - used;
				break;
			}
			unsigned ours = fwd ? rx_unix(nic, i, &pkts[out])
					    : rx_udp(nic, i, &pkts[out],
						     max - out);

			/* Fault injection comes later: the packets it drops
			 * are captured too. */
			for (unsigned j = 0; p->pcap && j < ours; j++)
				capture_rx(nic, &pkts[out + j]);
			out += ours;
		}
		used += got;
	}
	return out ? (int)out : err;
}

const struct uroce_net_ops uroce_net_udp = {
	.name = "udp",
	.open = udp_open,
	.close = udp_close,
	.tx_open = udp_tx_open,
	.tx_close = udp_tx_close,
	.steer = udp_steer,
	.xmit = udp_xmit,
	.rx_fds = udp_rx_fds,
	.recv = udp_recv,
	.forward = udp_forward,
	.sid_claim = udp_sid_claim,
	.sid_release = udp_sid_release,
	.sid_forward = udp_sid_forward,
};
