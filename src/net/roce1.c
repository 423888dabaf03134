/*
 * The RoCE v1 link (IBTA Annex A16): the transport's packets in Ethernet
 * frames of ethertype 0x8915, a 40-byte GRH (the GIDs, next header 0x1B)
 * ahead of the BTH and the ICRC behind, no IP and no UDP.  A GID of type
 * RoCE v1 carries the same address as its v2 twin, and a QP or AH whose
 * source GID is a v1 one sends here.
 *
 * One AF_PACKET socket (SOCK_DGRAM: the kernel writes the Ethernet header)
 * sends and receives on every interface, which takes CAP_NET_RAW.  Where
 * uroced has one, it holds the host's only such socket: it hands each
 * process the frames for its QPNs as it hands it datagrams (mux/forward.c),
 * and sends the frames a process passes it over a channel of their own
 * (SVC_ROCE1, uroce_roce1_relay), checking them first; the process itself
 * needs no privilege.  Without such a service a process with CAP_NET_RAW
 * holds a socket of its own, whose classic BPF program in the kernel passes
 * only the frames that arrived (not our own leaving) for its QPNs, so that
 * every process of the host may hold one.  Destination MACs come from the
 * kernel's neighbour tables (net/neigh.c), resolved when a QP or AH is
 * given its address; a frame to one of the host's own GIDs goes over the
 * loopback interface, as an RNIC loops it back.
 *
 * QP1's frames (the CM's MADs) go to whoever answers for QP1 on the host:
 * uroced, or a process in single-user mode; the MACs of their senders are
 * learnt, so that the CM's replies need not wait for ARP.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <net/if_arp.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/gid.h"
#include "net/icrc.h"
#include "net/neigh.h"
#include "mux/service.h"
#include "nic.h"
#include "transport/hdr.h"

enum {
	ETH_P_ROCE = 0x8915,
	GRH_HOP_LIMIT = 64,
	FRAME_MSGS = 16,
	RX_FRAME_MAX = 9216,	/* a jumbo frame's payload */
	TX_MSGS = 32,
	RELAY_MSGS = 16,	/* frames taken from a process at once */
	NEIGH_MAX = 256,	/* peers whose MACs are kept */
	RESOLVE_MS = 1000,	/* longest wait for ARP/ND */
	FRAME_SOCK_BUF = 8 << 20,
};

/* How to reach one peer from one of our addresses. */
struct neigh {
	union ibv_gid self, peer;
	unsigned ifindex;
	uint8_t mac[UROCE_ETH_ALEN];
};

struct roce1_priv {
	int fd;			/* the packet socket, or -1 */
	int relay;		/* served: the channel to uroced, or -1 */
	unsigned lo_ifindex;
	pthread_mutex_t neigh_lock;
	struct neigh neigh[NEIGH_MAX];
	unsigned nneigh, neigh_next, neigh_hint;

	/* recvmmsg state, used only by the single receiver (rx_lock) */
	struct mmsghdr msg[FRAME_MSGS];
	struct iovec iov[FRAME_MSGS];
	struct sockaddr_ll from[FRAME_MSGS];
	uint8_t buf[FRAME_MSGS][RX_FRAME_MAX];
};

/* ---- the socket ------------------------------------------------------------ */

/*
 * Passes a frame that arrived for us (not one leaving, nor one for another
 * host seen in promiscuous mode) whose DestQP is in this process's slot, or
 * is QP1 where this process answers for it (single-user mode); uroced,
 * which hands frames on, takes them all.  A SOCK_DGRAM socket's filter sees
 * the frame from its GRH: DestQP is the low 24 bits of the word at 40 + 4.
 */
static int attach_filter(int fd, unsigned slot, bool any_slot, bool qp1)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 6, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OTHERHOST, 5, 0),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, UROCE_GRH_LEN + 4),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xFFFFFF),
		/* a DestQP never equals 1 << 24: no QP1 */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, qp1 ? 1 : 1u << 24, 3, 0),
		BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, UROCE_QPN_SLOT_SHIFT),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
			 slot & (UROCE_MAX_SLOTS - 1), 1, 0),
		BPF_STMT(BPF_RET | BPF_K, 0),
		BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFF),
	};
	struct sock_filter any[] = {
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OTHERHOST, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFF),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = { .len = ARRAY_SIZE(code), .filter = code };

	if (any_slot)
		prog = (struct sock_fprog){ .len = ARRAY_SIZE(any),
					    .filter = any };
	return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog,
			  sizeof(prog)) ? -errno : 0;
}

static int roce1_open(struct uroce_nic *nic)
{
	struct roce1_priv *p = calloc(1, sizeof(*p));
	int buf = FRAME_SOCK_BUF, err;

	if (!p)
		return -ENOMEM;
	p->fd = p->relay = -1;
	if (nic->served) {
		p->relay = uroce_mux_svc_roce1(nic);
		if (p->relay < 0 && p->relay != -EOPNOTSUPP) {
			err = p->relay;
			free(p);
			return err;
		}
	}
	if (p->relay < 0) {
		p->fd = socket(AF_PACKET,
			       SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			       htons(ETH_P_ROCE));
		err = p->fd < 0 ? -errno
				: attach_filter(p->fd, nic->slot, nic->service,
						!nic->served);
		if (err) {
			if (p->fd >= 0)
				close(p->fd);
			free(p);
			return err;
		}
		setsockopt(p->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
		setsockopt(p->fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	} else {
		setsockopt(p->relay, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	}
	p->lo_ifindex = if_nametoindex("lo");
	pthread_mutex_init(&p->neigh_lock, NULL);
	for (unsigned i = 0; i < FRAME_MSGS; i++) {
		p->iov[i] = (struct iovec){ p->buf[i], sizeof(p->buf[i]) };
		p->msg[i].msg_hdr = (struct msghdr){
			.msg_name = &p->from[i],
			.msg_namelen = sizeof(p->from[i]),
			.msg_iov = &p->iov[i],
			.msg_iovlen = 1,
		};
	}
	nic->roce1_priv = p;
	return 0;
}

static void roce1_close(struct uroce_nic *nic)
{
	struct roce1_priv *p = nic->roce1_priv;

	if (!p)
		return;
	if (p->fd >= 0)
		close(p->fd);
	if (p->relay >= 0)
		close(p->relay);
	pthread_mutex_destroy(&p->neigh_lock);
	free(p);
	nic->roce1_priv = NULL;
}

/* One socket serves every QP: handles name nothing more. */
static int roce1_tx_open(struct uroce_nic *nic, int family, uint16_t sport)
{
	(void)nic;
	(void)sport;
	return family == AF_INET || family == AF_INET6 ? 0 : -EAFNOSUPPORT;
}

static void roce1_tx_close(struct uroce_nic *nic, int tx)
{
	(void)nic;
	(void)tx;
}

static uint16_t roce1_tx_sport(struct uroce_nic *nic, int tx)
{
	(void)nic;
	(void)tx;
	return 0;
}

static int roce1_capture(struct uroce_nic *nic, const char *path)
{
	(void)nic;
	(void)path;
	return -EOPNOTSUPP;
}

static const char *roce1_capture_path(struct uroce_nic *nic)
{
	(void)nic;
	return NULL;
}

static int roce1_rx_fds(struct uroce_nic *nic, int *fds, int max)
{
	struct roce1_priv *p = nic->roce1_priv;

	/* served: the frames come with the datagrams */
	if (max < 1 || p->fd < 0)
		return 0;
	fds[0] = p->fd;
	return 1;
}

/* ---- addresses ------------------------------------------------------------- */

static struct neigh *neigh_find(struct roce1_priv *p, const union ibv_gid *self,
				const union ibv_gid *peer)
{
	unsigned hint = p->neigh_hint;

	for (unsigned k = 0; k < p->nneigh; k++) {
		unsigned i = (hint + k) % p->nneigh;
		struct neigh *n = &p->neigh[i];

		if (!memcmp(&n->peer, peer, sizeof(*peer)) &&
		    !memcmp(&n->self, self, sizeof(*self))) {
			p->neigh_hint = i;
			return n;
		}
	}
	return NULL;
}

/* Keep how to reach n.peer from n.self, replacing what was known. */
static void neigh_store(struct roce1_priv *p, const struct neigh *n)
{
	struct neigh *slot;

	pthread_mutex_lock(&p->neigh_lock);
	slot = neigh_find(p, &n->self, &n->peer);
	if (!slot) {
		if (p->nneigh < NEIGH_MAX)
			slot = &p->neigh[p->nneigh++];
		else
			slot = &p->neigh[p->neigh_next++ % NEIGH_MAX];
	}
	*slot = *n;
	pthread_mutex_unlock(&p->neigh_lock);
}

static int roce1_resolve(struct uroce_nic *nic, const union uroce_sockaddr *self,
			 const union uroce_sockaddr *peer)
{
	struct roce1_priv *p = nic->roce1_priv;
	struct neigh n = { 0 };
	bool known;
	int i, err = 0;

	uroce_sockaddr_to_gid(self, &n.self);
	uroce_sockaddr_to_gid(peer, &n.peer);
	/* known already (a MAD's sender, a second QP to the same peer) */
	pthread_mutex_lock(&p->neigh_lock);
	known = neigh_find(p, &n.self, &n.peer);
	pthread_mutex_unlock(&p->neigh_lock);
	if (known)
		return 0;
	i = uroce_gid_find(nic, &n.self);
	if (i < 0)
		return -EADDRNOTAVAIL;
	n.ifindex = nic->gids[i].ifindex;
	if (uroce_gid_find(nic, &n.peer) >= 0) {
		/* one of our own: the loopback interface, as an RNIC turns
		 * such a packet around itself */
		n.ifindex = p->lo_ifindex;
	} else if (uroce_if_hwtype(n.ifindex) != ARPHRD_LOOPBACK) {
		err = uroce_neigh_resolve(n.ifindex, self, peer, n.mac,
					  RESOLVE_MS);
		if (err)
			return err;
	}
	neigh_store(p, &n);
	return 0;
}

/* ---- sending --------------------------------------------------------------- */

static void put_grh(uint8_t *grh, const struct uroce_txpkt *pkt)
{
	union ibv_gid sgid, dgid;

	uroce_sockaddr_to_gid(pkt->src, &sgid);
	uroce_sockaddr_to_gid(pkt->dst, &dgid);
	memset(grh, 0, 8);
	grh[0] = 0x60;			/* IPVer 6, traffic class and flow 0 */
	grh[4] = pkt->len >> 8;		/* PayLen: BTH up to the ICRC */
	grh[5] = pkt->len;
	grh[6] = UROCE_GRH_NEXT_BTH;
	grh[7] = GRH_HOP_LIMIT;
	memcpy(grh + 8, sgid.raw, 16);
	memcpy(grh + 24, dgid.raw, 16);
}

static void roce1_seal(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		       unsigned n)
{
	(void)nic;
	(void)tx;
	for (unsigned i = 0; i < n; i++) {
		struct uroce_txpkt *pkt = &pkts[i];
		struct iovec *tail = &pkt->iov[pkt->niov - 1];
		size_t pad = tail->iov_len - ICRC_LEN;
		uint8_t grh[UROCE_GRH_LEN];

		put_grh(grh, pkt);
		tail->iov_len = pad;
		uroce_icrc_put(pkt->trailer + pad,
			       uroce_icrc_roce1(grh, pkt->iov, pkt->niov));
		tail->iov_len = pad + ICRC_LEN;
	}
}

static int roce1_xmit(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		      unsigned n)
{
	struct roce1_priv *p = nic->roce1_priv;
	unsigned sent = 0, lost = 0;
	uint64_t bytes = 0;
	int err = 0;

	(void)tx;
	while (sent + lost < n) {
		struct mmsghdr msg[TX_MSGS];
		struct sockaddr_ll to[TX_MSGS];
		struct roce1_relay_hdr via[TX_MSGS];
		struct iovec iov[TX_MSGS][UROCE_TX_IOV + 2];
		uint8_t grh[TX_MSGS][UROCE_GRH_LEN];
		unsigned nmsg = 0, first = sent + lost;
		int r;

		pthread_mutex_lock(&p->neigh_lock);
		for (unsigned i = first; i < n && nmsg < TX_MSGS; i++) {
			const struct uroce_txpkt *pkt = &pkts[i];
			union ibv_gid self, peer;
			const struct neigh *nb;

			uroce_sockaddr_to_gid(pkt->src, &self);
			uroce_sockaddr_to_gid(pkt->dst, &peer);
			nb = neigh_find(p, &self, &peer);
			if (!nb)
				break;
			struct iovec *v = iov[nmsg];

			put_grh(grh[nmsg], pkt);
			msg[nmsg].msg_hdr = (struct msghdr){ .msg_iov = v };
			if (p->relay >= 0) {
				via[nmsg] = (struct roce1_relay_hdr){
					.magic = ROCE1_RELAY_MAGIC,
					.ifindex = nb->ifindex,
				};
				memcpy(via[nmsg].mac, nb->mac, UROCE_ETH_ALEN);
				*v++ = (struct iovec){ &via[nmsg],
						       sizeof(via[nmsg]) };
			} else {
				to[nmsg] = (struct sockaddr_ll){
					.sll_family = AF_PACKET,
					.sll_protocol = htons(ETH_P_ROCE),
					.sll_ifindex = (int)nb->ifindex,
					.sll_halen = UROCE_ETH_ALEN,
				};
				memcpy(to[nmsg].sll_addr, nb->mac,
				       UROCE_ETH_ALEN);
				msg[nmsg].msg_hdr.msg_name = &to[nmsg];
				msg[nmsg].msg_hdr.msg_namelen = sizeof(to[nmsg]);
			}
			*v++ = (struct iovec){ grh[nmsg], UROCE_GRH_LEN };
			memcpy(v, pkt->iov, pkt->niov * sizeof(pkt->iov[0]));
			msg[nmsg].msg_hdr.msg_iovlen =
				(size_t)(v - iov[nmsg]) + pkt->niov;
			nmsg++;
		}
		pthread_mutex_unlock(&p->neigh_lock);
		if (!nmsg) {
			/* no address for this peer any more (more peers than
			 * NEIGH_MAX): lost, as to an unreachable host */
			STAT_INC(nic, roce1_no_neigh);
			lost++;
			continue;
		}
		r = sendmmsg(p->relay >= 0 ? p->relay : p->fd, msg, nmsg,
			     MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r <= 0) {
			err = r < 0 ? -errno : -EAGAIN;
			break;
		}
		for (int m = 0; m < r; m++)
			bytes += pkts[first + m].len;
		sent += (unsigned)r;
		if ((unsigned)r < nmsg)
			break;
	}
	atomic_fetch_add_explicit(&nic->stats.tx_packets, sent,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&nic->stats.tx_bytes, bytes,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&nic->stats.roce1_tx, sent,
				  memory_order_relaxed);
	sent += lost;
	if (sent < n)
		atomic_fetch_add_explicit(&nic->stats.tx_errors, n - sent,
					  memory_order_relaxed);
	return sent || !n ? (int)sent : err;
}

/* ---- receiving ------------------------------------------------------------- */

/* A frame's GRH and what follows it as a packet; false if malformed or
 * not for one of our v1 GIDs. */
static bool parse_frame(struct uroce_nic *nic, uint8_t *frame, size_t len,
			struct uroce_rxpkt *rx)
{
	union ibv_gid sgid, dgid;
	size_t paylen;
	int i;

	if (len < UROCE_GRH_LEN + BTH_LEN + ICRC_LEN || frame[0] >> 4 != 6 ||
	    frame[6] != UROCE_GRH_NEXT_BTH)
		return false;
	/* PayLen, not the frame: Ethernet pads short frames */
	paylen = (size_t)frame[4] << 8 | frame[5];
	if (paylen < BTH_LEN + ICRC_LEN || paylen > len - UROCE_GRH_LEN)
		return false;
	memcpy(sgid.raw, frame + 8, 16);
	memcpy(dgid.raw, frame + 24, 16);
	i = uroce_gid_find(nic, &dgid);
	if (i < 0)
		return false;
	memset(rx, 0, sizeof(*rx));
	rx->data = frame + UROCE_GRH_LEN;
	rx->len = (uint32_t)paylen;
	uroce_gid_to_sockaddr(&sgid, nic->cfg->udp_port, &rx->src);
	uroce_gid_to_sockaddr(&dgid, nic->cfg->udp_port, &rx->dst);
	rx->tos = (uint8_t)(frame[0] << 4 | frame[1] >> 4);
	rx->roce1 = true;
	return true;
}

/* The sender's MAC, as its frame came: how to answer it. */
static void learn(struct uroce_nic *nic, const struct sockaddr_ll *from,
		  const struct uroce_rxpkt *rx)
{
	struct neigh n = { .ifindex = (unsigned)from->sll_ifindex };

	if (from->sll_halen != UROCE_ETH_ALEN)
		return;
	memcpy(n.mac, from->sll_addr, UROCE_ETH_ALEN);
	uroce_sockaddr_to_gid(&rx->dst, &n.self);
	uroce_sockaddr_to_gid(&rx->src, &n.peer);
	neigh_store(nic->roce1_priv, &n);
}

static int roce1_recv(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		      unsigned max, bool *drained)
{
	struct roce1_priv *p = nic->roce1_priv;
	unsigned want = max < FRAME_MSGS ? max : FRAME_MSGS, out = 0;
	int got;

	if (p->fd < 0) {
		*drained = true;
		return 0;
	}
	for (unsigned i = 0; i < want; i++)
		p->msg[i].msg_hdr.msg_namelen = sizeof(p->from[i]);
	got = recvmmsg(p->fd, p->msg, want, MSG_DONTWAIT, NULL);
	if (got < 0) {
		*drained = true;
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	}
	*drained = (unsigned)got < want;
	for (int i = 0; i < got; i++) {
		struct uroce_rxpkt *rx = &pkts[out];
		uint32_t qpn;

		if (!parse_frame(nic, p->buf[i], p->msg[i].msg_len, rx)) {
			STAT_INC(nic, rx_malformed);
			continue;
		}
		qpn = (uint32_t)rx->data[5] << 16 | rx->data[6] << 8 |
		      rx->data[7];
		if (qpn == UROCE_QPN_MULTICAST) {
			/* no multicast over v1 (yet) */
			STAT_INC(nic, rx_unknown_qp);
		} else if (qpn == 1) {
			/* a MAD: the CM answers where it came from */
			learn(nic, &p->from[i], rx);
			out++;
		} else if (uroce_qpn_slot(qpn) != nic->slot) {
			/* uroced: the owner's, as a datagram would be */
			nic->net->forward(nic, uroce_qpn_slot(qpn), rx);
		} else {
			out++;
		}
	}
	atomic_fetch_add_explicit(&nic->stats.roce1_rx, out,
				  memory_order_relaxed);
	return (int)out;
}

static bool roce1_icrc_ok(struct uroce_nic *nic, const struct uroce_rxpkt *rx)
{
	struct iovec iov = { rx->data, rx->len - ICRC_LEN };

	(void)nic;
	return uroce_icrc_roce1(rx->data - UROCE_GRH_LEN, &iov, 1) ==
	       uroce_icrc_get(rx->data + rx->len - ICRC_LEN);
}

/* The GRH as it came: that is what a UD receive's first 40 bytes hold on
 * RoCE v1.  mlx5 reports such a packet's kind, a GRH of no UDP frame, as
 * SL 0. */
static uint8_t roce1_rx_grh(const struct uroce_rxpkt *rx, uint8_t *grh)
{
	memcpy(grh, rx->data - UROCE_GRH_LEN, UROCE_GRH_LEN);
	return 0;
}

/* ---- uroced: sending for the processes it serves -------------------------- */

/* A frame a process handed us may leave if it is RoCE v1 from one of the
 * host's GIDs, on that GID's interface or the loopback one. */
static bool relay_ok(struct uroce_nic *nic, const struct roce1_relay_hdr *h,
		     const uint8_t *frame, size_t len)
{
	struct roce1_priv *p = nic->roce1_priv;
	union ibv_gid sgid;
	int i;

	if (h->magic != ROCE1_RELAY_MAGIC ||
	    len < UROCE_GRH_LEN + BTH_LEN + ICRC_LEN ||
	    frame[0] >> 4 != 6 || frame[6] != UROCE_GRH_NEXT_BTH ||
	    ((size_t)frame[4] << 8 | frame[5]) != len - UROCE_GRH_LEN)
		return false;
	memcpy(sgid.raw, frame + 8, 16);
	i = uroce_gid_find(nic, &sgid);
	return i >= 0 && (h->ifindex == nic->gids[i].ifindex ||
			  h->ifindex == p->lo_ifindex);
}

int uroce_roce1_relay(struct uroce_nic *nic, int fd)
{
	/* uroced's main thread alone calls this */
	static uint8_t buf[RELAY_MSGS][sizeof(struct roce1_relay_hdr) +
				       RX_FRAME_MAX];
	struct roce1_priv *p = nic->roce1_priv;
	struct mmsghdr in[RELAY_MSGS], out[RELAY_MSGS];
	struct iovec iov[RELAY_MSGS], frame[RELAY_MSGS];
	struct sockaddr_ll to[RELAY_MSGS];
	unsigned n = 0;
	int got;

	if (!p || p->fd < 0)
		return -EOPNOTSUPP;
	for (unsigned i = 0; i < RELAY_MSGS; i++) {
		iov[i] = (struct iovec){ buf[i], sizeof(buf[i]) };
		in[i].msg_hdr = (struct msghdr){ .msg_iov = &iov[i],
						 .msg_iovlen = 1 };
	}
	got = recvmmsg(fd, in, RELAY_MSGS, MSG_DONTWAIT, NULL);
	if (got < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	for (int i = 0; i < got; i++) {
		struct roce1_relay_hdr h;
		size_t len = in[i].msg_len;

		/* the process closed its end */
		if (!len)
			return -EPIPE;
		if (len < sizeof(h) || (in[i].msg_hdr.msg_flags & MSG_TRUNC)) {
			STAT_INC(nic, rx_malformed);
			continue;
		}
		memcpy(&h, buf[i], sizeof(h));
		len -= sizeof(h);
		if (!relay_ok(nic, &h, buf[i] + sizeof(h), len)) {
			STAT_INC(nic, rx_malformed);
			continue;
		}
		frame[n] = (struct iovec){ buf[i] + sizeof(h), len };
		to[n] = (struct sockaddr_ll){
			.sll_family = AF_PACKET,
			.sll_protocol = htons(ETH_P_ROCE),
			.sll_ifindex = (int)h.ifindex,
			.sll_halen = UROCE_ETH_ALEN,
		};
		memcpy(to[n].sll_addr, h.mac, UROCE_ETH_ALEN);
		out[n].msg_hdr = (struct msghdr){
			.msg_name = &to[n], .msg_namelen = sizeof(to[n]),
			.msg_iov = &frame[n], .msg_iovlen = 1,
		};
		n++;
	}
	if (n) {
		/* a frame the link does not take is lost, as on a busy wire:
		 * the sender's transport recovers it */
		int sent = sendmmsg(p->fd, out, n, MSG_DONTWAIT);

		sent = sent < 0 ? 0 : sent;
		atomic_fetch_add_explicit(&nic->stats.roce1_tx, (unsigned)sent,
					  memory_order_relaxed);
		if ((unsigned)sent < n)
			atomic_fetch_add_explicit(&nic->stats.tx_errors,
						  n - (unsigned)sent,
						  memory_order_relaxed);
	}
	return got;
}

const struct uroce_net_ops uroce_net_roce1 = {
	.name = "roce1",
	.open = roce1_open,
	.close = roce1_close,
	.tx_open = roce1_tx_open,
	.tx_sport = roce1_tx_sport,
	.capture = roce1_capture,
	.capture_path = roce1_capture_path,
	.tx_close = roce1_tx_close,
	.resolve = roce1_resolve,
	.seal = roce1_seal,
	.icrc_ok = roce1_icrc_ok,
	.rx_grh = roce1_rx_grh,
	.xmit = roce1_xmit,
	.rx_fds = roce1_rx_fds,
	.recv = roce1_recv,
};
