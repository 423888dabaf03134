/*
 * Private to the UDP link (udp.c, udp_sockets.c, udp_mcast.c): its state
 * and the functions its files share.  udp.c describes the link; the host
 * mux under it (mux/mux.h) shares the port with the host's other uroce
 * processes.
 */
#ifndef UROCE_NET_UDP_H
#define UROCE_NET_UDP_H

#include <stdbool.h>
#include <stdint.h>

#include "mux/mux.h"
#include "uroce.h"

enum {
	TX_CHUNK = 256,		/* tx handles per lazily allocated table chunk */
	TX_MAX = UROCE_MAX_QP + 1,	/* one endpoint per QP at most */
	TX_CHUNKS = TX_MAX / TX_CHUNK,
	TX_RETRIES = 20,	/* EAGAIN/ENOBUFS: ~1 ms before giving up */
	TX_RETRY_NS = 50000,
	RX_CTRL = 128,		/* pktinfo + tos, or credentials */
	RX_READY_MAX = 16,	/* sockets read per receive call */
	DRAIN_ROUNDS = 16,	/* recvmmsg calls when closing */
	DRAIN_GRACE_MS = 1,	/* for a datagram the kernel still delivers */
	MCAST_HOPS = 64,	/* a multicast datagram's TTL / hop limit */
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
	int epfd;			/* every receiving socket */
	/* slots, forwarding, service IDs, the per-host service; the
	 * port (mux.port) */
	struct uroce_mux mux;
	/* the capture (UROCE_PCAP, `uroce capture`), or NULL; replaced
	 * captures stay allocated until close, as a sender may hold one */
	_Atomic(struct uroce_pcap *) pcap;
	struct uroce_pcap **pcap_retired;
	unsigned npcap_retired;

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

/* udp_sockets.c: socket setup, the per-QP handles and the sockets they
 * share */
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
