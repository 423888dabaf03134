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
#include <netinet/udp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "net/pcap.h"
#include "net/udp.h"
#include "section.h"

int udp_rx_watch(struct udp_priv *p, int fd, enum rx_kind kind)
{
	struct epoll_event ev = {
		.events = EPOLLIN,
		.data.u64 = (uint64_t)kind << 32 | (uint32_t)fd,
	};

	return epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

/* The receiver's hot socket, if this is it, is forgotten before the next
 * receive call: the caller quiesces the receiver before it closes fd.  The
 * count goes up after the removal, so that a receive call that saw the new
 * count can no longer get fd from epoll_wait. */
void udp_rx_unwatch(struct udp_priv *p, int fd)
{
	epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
	atomic_fetch_add(&p->rx_set_gen, 1);
}

void udp_rx_quiesce(struct udp_priv *p)
{
	uroce_section_wait(&p->rx_seq);
}

/* The host mux's sockets in the receiver's set (mux/mux.h) */
static int mux_watch(struct uroce_nic *nic, int fd, bool listener)
{
	return udp_rx_watch(nic->net_priv, fd, listener ? RX_LISTEN : RX_FWD);
}

static void mux_unwatch(struct uroce_nic *nic, int fd)
{
	udp_rx_unwatch(nic->net_priv, fd);
}

static void mux_quiesce(struct uroce_nic *nic)
{
	udp_rx_quiesce(nic->net_priv);
}

static const struct uroce_mux_link udp_mux_link = {
	.watch = mux_watch,
	.unwatch = mux_unwatch,
	.quiesce = mux_quiesce,
};

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
	uroce_mux_close(&p->mux);
	nic->mux = NULL;
	udp_mcast_close(p);
	if (p->epfd >= 0)
		close(p->epfd);
	for (unsigned c = 0; c < TX_CHUNKS; c++)
		free(atomic_load(&p->tx[c]));
	for (unsigned i = 0; i < p->nshared; i++)
		close(p->shared[i].fd);
	free(p->shared);
	uroce_pcap_close(atomic_load(&p->pcap));
	for (unsigned i = 0; i < p->npcap_retired; i++)
		uroce_pcap_close(p->pcap_retired[i]);
	free(p->pcap_retired);
	pthread_mutex_destroy(&p->tx_lock);
	free(p);
	nic->net_priv = NULL;
}

/* The wildcard sockets on the RoCEv2 port, shared with the user's other
 * processes (or, in uroced, with the sockets it makes for its clients). */
static int udp_bind_port(struct udp_priv *p)
{
	int err = udp_rx_socket(AF_INET, p->mux.port, &p->fd4);

	if (!err) {
		err = udp_rx_socket(AF_INET6, p->mux.port, &p->fd6);
		/* a host without IPv6 runs IPv4-only */
		if (err == -EAFNOSUPPORT || err == -EADDRNOTAVAIL)
			err = 0;
	}
	if (err == -EADDRINUSE)
		uroce_port_taken(p->mux.port);
	return err;
}

static int udp_open(struct uroce_nic *nic)
{
	struct udp_priv *p = calloc(1, sizeof(*p));
	int err = 0, served = 0;

	if (!p)
		return -ENOMEM;
	p->fd4 = p->fd6 = p->epfd = p->rx_hot = -1;
	uroce_mux_init(&p->mux, &udp_mux_link, nic->cfg->udp_port);
	nic->mux = &p->mux;
	pthread_mutex_init(&p->mcast_lock, NULL);
	/* UDP GSO exists since Linux 4.18 */
	nic->gso = true;
	pthread_mutex_init(&p->tx_lock, NULL);
	nic->net_priv = p;
	if (nic->cfg->pcap[0])
		atomic_init(&p->pcap, uroce_pcap_open(nic->cfg->pcap));

	if (uroce_mux_service_role) {
		/* uroced hands out the other slots */
		nic->slot = SERVICE_SLOT;
		nic->service = true;
		err = udp_bind_port(p);
	} else {
		served = uroce_mux_svc_open(nic);
		nic->served = served > 0;
		if (served < 0)
			err = served;
		else if (!served)
			err = udp_bind_port(p);
		if (!err && !served)
			err = uroce_mux_slot_alloc(nic);
	}
	if (!err) {
		p->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (p->epfd < 0)
			err = -errno;
	}
	if (!err && p->fd4 >= 0)
		err = udp_rx_watch(p, p->fd4, RX_UDP);
	if (!err && p->fd6 >= 0)
		err = udp_rx_watch(p, p->fd6, RX_UDP);
	if (!err && p->mux.fdu >= 0)
		err = udp_rx_watch(p, p->mux.fdu, RX_LISTEN);
	/* what the service receives for us */
	if (!err && p->mux.svc_data >= 0)
		err = udp_rx_watch(p, p->mux.svc_data, RX_FWD);
	if (err)
		udp_close(nic);
	return err;
}

/* ---- transmit ------------------------------------------------------------ */

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
static void __attribute__((cold)) capture_tx(struct uroce_nic *nic,
					     struct uroce_pcap *pc, int tx,
					     const struct uroce_txpkt *pkts,
					     unsigned n)
{
	struct udp_priv *p = nic->net_priv;
	struct tx_chunk *c = atomic_load(&p->tx[tx / TX_CHUNK]);

	for (unsigned i = 0; i < n; i++)
		if (!uroce_pcap_tx(pc, &pkts[i], c->sport[tx % TX_CHUNK], i))
			STAT_INC(nic, pcap_drops);
}

static void __attribute__((cold)) capture_rx(struct uroce_nic *nic,
					     struct uroce_pcap *pc,
					     const struct uroce_rxpkt *rx)
{
	if (!uroce_pcap_rx(pc, rx))
		STAT_INC(nic, pcap_drops);
}

/* `uroce capture`: from now on into path (NULL: no more). */
static int udp_capture(struct uroce_nic *nic, const char *path)
{
	struct udp_priv *p = nic->net_priv;
	struct uroce_pcap *pc = NULL, *old, **r;

	if (path && !(pc = uroce_pcap_open(path)))
		return -errno;
	r = realloc(p->pcap_retired,
		    (p->npcap_retired + 1) * sizeof(*p->pcap_retired));
	if (!r) {
		uroce_pcap_close(pc);
		return -ENOMEM;
	}
	p->pcap_retired = r;
	old = atomic_exchange(&p->pcap, pc);
	if (old) {
		uroce_pcap_stop(old);
		p->pcap_retired[p->npcap_retired++] = old;
	}
	return 0;
}

static const char *udp_capture_path(struct uroce_nic *nic)
{
	struct udp_priv *p = nic->net_priv;
	struct uroce_pcap *pc = atomic_load(&p->pcap);

	return pc ? uroce_pcap_path(pc) : NULL;
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
	int fd = udp_tx_fd(p, tx);
	struct uroce_pcap *pc;
	unsigned sent = 0;
	uint64_t bytes = 0;
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
		pc = atomic_load_explicit(&p->pcap, memory_order_acquire);
		if (pc)
			uroce_pcap_hold(pc);
		r = send_batch(fd, msg, nmsg);
		for (int m = 0; m < r; m++) {
			/* what the kernel took, as it leaves */
			if (pc)
				capture_tx(nic, pc, tx, &pkts[sent], npkts[m]);
			sent += npkts[m];
		}
		if (pc)
			uroce_pcap_release(pc);
		if (r < 0) {
			err = r;
			break;
		}
	}
	for (unsigned i = 0; i < sent; i++)
		bytes += pkts[i].len;
	atomic_fetch_add_explicit(&nic->stats.tx_packets, sent,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&nic->stats.tx_bytes, bytes,
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

static uint32_t dest_qpn(const uint8_t *bth)
{
	return (uint32_t)bth[5] << 16 | bth[6] << 8 | bth[7];
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
			rx->dst.in4.sin_port = htons(p->mux.port);
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
			rx->dst.in6.sin6_port = htons(p->mux.port);
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
		uint32_t qpn;

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
		r->roce1 = false;
		r->len = len - off < seg ? len - off : seg;
		if (r->len < BTH_BYTES) {
			STAT_INC(nic, rx_malformed);
			continue;
		}
		qpn = dest_qpn(r->data);
		if (qpn == UROCE_QPN_MULTICAST) {
			out += udp_mcast_route(nic, r);
			continue;
		}
		slot = uroce_qpn_slot(qpn);
		/* slot 0 is no process's: its QPNs (QP1) are served by
		 * whichever process the kernel picked */
		if (slot == 0 || slot == nic->slot) {
			out++;
			continue;
		}
		uroce_mux_fwd_send(nic, slot, r);
	}
	return out;
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

/* A receive call's progress through the buffers and the caller's array. */
struct rx_pass {
	struct uroce_rxpkt *pkts;
	unsigned max, used, out;
	struct uroce_pcap *pc;
	unsigned gen;		/* rx_set_gen when the call began */
	bool drained;
	int err;
};

/* Reads what one socket holds into the pass; false if it had nothing. */
static bool rx_socket(struct uroce_nic *nic, struct rx_pass *rp, int fd,
		      enum rx_kind kind)
{
	struct udp_priv *p = nic->net_priv;
	bool fwd = kind == RX_FWD;
	/* as many datagrams as surely fit, each up to RX_GRO_SEGS packets;
	 * at least one */
	unsigned want = (rp->max - rp->out) / RX_GRO_SEGS;
	int got;

	if (kind == RX_LISTEN) {
		uroce_mux_fwd_accept(nic, fd);
		return false;
	}
	if (want > RX_MSGS - rp->used)
		want = RX_MSGS - rp->used;
	if (!want)
		want = 1;
	got = rx_batch(p, fd, fwd, rp->used, want);
	if (got < 0) {
		if (got != -EAGAIN && got != -EINTR) {
			STAT_INC(nic, rx_errors);
			rp->err = got;
		}
		return false;
	}
	if ((unsigned)got == want)
		rp->drained = false;
	if (got > 0) {
		p->rx_hot = fd;
		p->rx_hot_kind = kind;
		p->rx_hot_gen = rp->gen;
	}
	for (unsigned i = rp->used; i < rp->used + got; i++) {
		/* a forwarded datagram is never empty: end of file */
		if (fwd && p->msg[i].msg_len == 0) {
			if (fd == p->rx_hot)
				p->rx_hot = -1;
			uroce_mux_fwd_close(&p->mux, fd);
			got = i - rp->used;
			break;
		}
		unsigned ours = fwd ? uroce_mux_fwd_parse(nic,
						&p->msg[i].msg_hdr,
						p->msg[i].msg_len, p->buf[i],
						&rp->pkts[rp->out])
				    : rx_udp(nic, i, &rp->pkts[rp->out],
					     rp->max - rp->out);

		/* Fault injection comes later: the packets it drops are
		 * captured too. */
		for (unsigned j = 0; rp->pc && j < ours; j++)
			if (!rp->pkts[rp->out + j].roce1)
				capture_rx(nic, rp->pc, &rp->pkts[rp->out + j]);
		rp->out += ours;
	}
	rp->used += got;
	return got > 0;
}

static int recv_pass(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		     unsigned max, bool *drained)
{
	struct udp_priv *p = nic->net_priv;
	struct epoll_event ev[RX_READY_MAX];
	struct rx_pass rp = {
		.pkts = pkts, .max = max, .drained = true,
		.pc = atomic_load_explicit(&p->pcap, memory_order_acquire),
		.gen = atomic_load(&p->rx_set_gen),
	};
	int nready;

	/* The socket that last had data is read straight away, which saves
	 * the epoll_wait before the recvmmsg on the latency path; every
	 * RX_HOT_CALLS-th call looks at all of them.  Only while it was the
	 * one socket with data: among several busy ones it would get three
	 * reads in four, and the QPs behind the others, their ACKs left
	 * waiting, time out (16 QPs' streams: round trips of 8 ms, and ~200
	 * ACK timeouts in 4 s). */
	if (p->rx_hot >= 0 && p->rx_hot_gen == rp.gen &&
	    ++p->rx_hot_calls < RX_HOT_CALLS) {
		rx_socket(nic, &rp, p->rx_hot, p->rx_hot_kind);
		*drained = rp.drained;
		return rp.out ? (int)rp.out : rp.err;
	}
	p->rx_hot_calls = 0;
	nready = epoll_wait(p->epfd, ev, RX_READY_MAX, 0);
	if (nready < 0)
		return errno == EINTR ? 0 : -errno;
	if (nready == RX_READY_MAX)
		rp.drained = false;
	/* Buffers of forwarded or dropped datagrams are not reused within a
	 * call, which keeps those of returned ones untouched. */
	for (int k = 0; k < nready && rp.used < RX_MSGS; k++) {
		if (rp.out && rp.max - rp.out < RX_GRO_SEGS) {
			rp.drained = false;
			break;
		}
		rx_socket(nic, &rp, (int)(uint32_t)ev[k].data.u64,
			  ev[k].data.u64 >> 32);
	}
	if (nready > 1)
		p->rx_hot = -1;
	*drained = rp.drained;
	return rp.out ? (int)rp.out : rp.err;
}

static int udp_recv(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		    unsigned max, bool *drained)
{
	struct udp_priv *p = nic->net_priv;
	int n;

	atomic_fetch_add(&p->rx_seq, 1);
	n = recv_pass(nic, pkts, max, drained);
	atomic_fetch_add(&p->rx_seq, 1);
	return n;
}

const struct uroce_net_ops uroce_net_udp = {
	.name = "udp",
	.open = udp_open,
	.close = udp_close,
	.tx_open = udp_tx_open,
	.tx_close = udp_tx_close,
	.tx_sport = udp_tx_sport,
	.capture = udp_capture,
	.capture_path = udp_capture_path,
	.steer = udp_steer,
	.seal = uroce_udp_seal,
	.icrc_ok = uroce_udp_icrc_ok,
	.rx_grh = uroce_udp_rx_grh,
	.xmit = udp_xmit,
	.rx_fds = udp_rx_fds,
	.recv = udp_recv,
	.forward = uroce_mux_forward,
	.sid_claim = uroce_mux_sid_claim,
	.sid_release = uroce_mux_sid_release,
	.sid_forward = uroce_mux_sid_forward,
	.mcast_join = udp_mcast_join,
	.mcast_leave = udp_mcast_leave,
};
