/*
 * Private to the UDP backend (udp.c, udp_sockets.c, udp_forward.c): its
 * state and the functions its files share.  udp.c describes the backend.
 */
#ifndef UROCE_NET_UDP_H
#define UROCE_NET_UDP_H

#include <stdbool.h>
#include <stdint.h>

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
	/* the transmit sockets uroced makes for a process, per family: one
	 * per flow class of its slot */
	SVC_TX_PER_FAMILY = 1 << UROCE_SPORT_CLASS_BITS,
	MCAST_HOPS = 64,	/* a multicast datagram's TTL / hop limit */
	SERVICE_SLOT = 1,	/* uroced's own: QP1 and the CM's replies */
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
	uint8_t roce1;		/* a RoCE v1 frame: its GRH leads the packet */
	uint8_t pad[2];
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
	RX_HOT_CALLS = 4,		/* receive calls per epoll_wait */
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

struct udp_mcast_group;

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
	/* the capture (UROCE_PCAP, `uroce capture`), or NULL; replaced
	 * captures stay allocated until close, as a sender may hold one */
	_Atomic(struct uroce_pcap *) pcap;
	struct uroce_pcap **pcap_retired;
	unsigned npcap_retired;

	/* The per-host service (udp_service.c), when one serves us: our
	 * request connection (-1: single-user mode), its uid, the channel
	 * its datagrams for us arrive on, and the sockets it made for us. */
	int svc_fd;
	uid_t svc_uid;
	int svc_data;
	pthread_mutex_t svc_lock;
	int svc_tx[2][SVC_TX_PER_FAMILY];

	/* multicast groups received and their member slots (udp_mcast.c) */
	pthread_mutex_t mcast_lock;
	struct udp_mcast_group *mcast;
	unsigned nmcast, mcast_cap;

	/* Handle -> socket.  Chunks are never freed before close, so xmit
	 * looks up without the lock while tx_open grows the table. */
	pthread_mutex_t tx_lock;
	unsigned tx_hint;
	_Atomic(struct tx_chunk *) tx[TX_CHUNKS];
	struct shared_sock *shared;	/* under tx_lock */
	unsigned nshared, shared_cap;

	/* recvmmsg state, used only by the single receiver (rx_lock) */
	int rx_hot;			/* the socket that last had data */
	enum rx_kind rx_hot_kind;
	unsigned rx_hot_gen, rx_hot_calls;
	atomic_uint rx_set_gen;		/* sockets removed from epfd */
	atomic_uint rx_seq;		/* odd while a receive call runs */
	struct mmsghdr msg[RX_MSGS];
	struct iovec iov[RX_MSGS];
	union uroce_sockaddr name[RX_MSGS];
	union {
		uint8_t buf[RX_CTRL];
		struct cmsghdr align;
	} ctrl[RX_MSGS];
	uint8_t buf[RX_MSGS][RX_STRIDE];
};

static inline socklen_t addr_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in)
				 : sizeof(struct sockaddr_in6);
}

/* udp.c */
int udp_rx_watch(struct udp_priv *p, int fd, enum rx_kind kind);
void udp_rx_unwatch(struct udp_priv *p, int fd);
/* Waits until a receive call that may have found an unwatched socket (in
 * epoll_wait or as its hot one) has returned: then it may be closed. */
void udp_rx_quiesce(struct udp_priv *p);

/* Set by uroced before it opens the device: this process owns the port for
 * the host's uroce processes (service.h). */
extern bool udp_service_role;

/* udp_sockets.c: socket setup, the per-QP handles and the sockets they
 * share */
int udp_set_buf(int fd, int name);
int udp_rx_socket(int family, uint16_t port, int *out);
/* A receiving socket bound to a multicast group's address and port. */
int udp_group_socket(const union uroce_sockaddr *group, uint16_t port,
		     int *out);
int udp_tx_socket(int family, uint16_t sport);
int udp_steer_socket(const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer, unsigned slot, int *out);
int udp_tx_fd(struct udp_priv *p, int tx);
int udp_tx_open(struct uroce_nic *nic, int family, uint16_t sport);
uint16_t udp_tx_sport(struct uroce_nic *nic, int tx);
int udp_steer(struct uroce_nic *nic, int tx, const union uroce_sockaddr *self,
	      const union uroce_sockaddr *peer, uint16_t peer_sport);
void udp_tx_close(struct uroce_nic *nic, int tx);

/* udp_forward.c: the other uroce processes of the host, over AF_UNIX */
int udp_slot_alloc(struct uroce_nic *nic, struct udp_priv *p);
int udp_fwd_send(struct uroce_nic *nic, unsigned slot,
		 const struct uroce_rxpkt *rx);
int udp_forward(struct uroce_nic *nic, unsigned slot,
		const struct uroce_rxpkt *rx);
void udp_fwd_accept(struct uroce_nic *nic, int listen_fd);
void udp_fwd_close(struct udp_priv *p, int fd);
bool udp_rx_unix(struct uroce_nic *nic, unsigned i, struct uroce_rxpkt *rx);
int udp_sid_claim(struct uroce_nic *nic, uint64_t sid);
void udp_sid_release(struct uroce_nic *nic, uint64_t sid);
int udp_sid_forward(struct uroce_nic *nic, uint64_t sid,
		    const struct uroce_rxpkt *rx);
void udp_fwd_set(struct uroce_nic *nic, unsigned slot, int fd);

/* udp_service.c: a process of the per-host service */
int udp_svc_open(struct uroce_nic *nic, struct udp_priv *p);
void udp_svc_close(struct udp_priv *p);
int udp_svc_tx_socket(struct uroce_nic *nic, int family, uint16_t sport);
int udp_svc_steer(struct udp_priv *p, const union uroce_sockaddr *self,
		  const union uroce_sockaddr *peer, int *out);
void udp_svc_release(struct udp_priv *p, const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer);
int udp_svc_mcast(struct udp_priv *p, const union uroce_sockaddr *group,
		  bool join);
long udp_port_holder(uint16_t port, bool others_only);
void udp_port_taken(uint16_t port);

/* udp_mcast.c: multicast groups.  slot joins (or leaves) group on this
 * process's sockets: its own slot, or in uroced the slot of a process it
 * serves (udp_mcast_drop_slot when the process is gone).  route hands a
 * multicast datagram to the member processes, true if this one is one. */
int udp_mcast_member(struct uroce_nic *nic, unsigned slot,
		     const union uroce_sockaddr *group, bool join);
void udp_mcast_drop_slot(struct uroce_nic *nic, unsigned slot);
bool udp_mcast_route(struct uroce_nic *nic, const struct uroce_rxpkt *rx);
int udp_mcast_join(struct uroce_nic *nic, const union uroce_sockaddr *group);
void udp_mcast_leave(struct uroce_nic *nic,
		     const union uroce_sockaddr *group);
void udp_mcast_close(struct udp_priv *p);

#endif
