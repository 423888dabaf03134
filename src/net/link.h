/*
 * What the transport hands a link and gets from it: addresses, packets
 * and the backend's operations.
 */
#ifndef UROCE_NET_LINK_H
#define UROCE_NET_LINK_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "params.h"

/* ---- addresses ----------------------------------------------------------- */

union uroce_sockaddr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
	struct sockaddr_storage ss;
};

/* The IP address in sa: a struct in_addr or a struct in6_addr. */
static inline const void *uroce_sockaddr_ip(const union uroce_sockaddr *sa)
{
	return sa->sa.sa_family == AF_INET ? (const void *)&sa->in4.sin_addr
					   : (const void *)&sa->in6.sin6_addr;
}

/* ::ffff:a.b.c.d GIDs map to AF_INET, everything else to AF_INET6. */
void uroce_gid_to_sockaddr(const union ibv_gid *gid, uint16_t port,
			   union uroce_sockaddr *out);
void uroce_sockaddr_to_gid(const union uroce_sockaddr *sa, union ibv_gid *gid);
bool uroce_sockaddr_same_ip(const union uroce_sockaddr *a,
			    const union uroce_sockaddr *b);

/* A GID and the link that carries it: RoCE v2 (IBV_GID_TYPE_ROCE_V2,
 * the UDP link) or RoCE v1 (IBV_GID_TYPE_ROCE_V1, Ethernet frames). */
struct uroce_gid_entry {
	union ibv_gid gid;
	unsigned ifindex;
	enum ibv_gid_type type;
};

/* ---- packets between transport and network backend ---------------------- */

/* One RoCEv2 datagram being sent: UDP payload = iov[0..niov). The transport
 * fills hdr (BTH + extension headers) and the trailer's pad, leaves room
 * for the ICRC that the link seals, and points the payload iovecs straight
 * at registered memory (zero copy). */
enum { UROCE_TX_IOV = UROCE_MAX_SGE + 2 };

struct uroce_txpkt {
	const union uroce_sockaddr *dst;	/* peer IP, port 4791 */
	const union uroce_sockaddr *src;	/* our IP (the SGID), port ignored */
	uint32_t len;				/* UDP payload bytes */
	bool ud_roce1;				/* UD: its AH's source GID is
						 * RoCE v1 (the QP's tx says
						 * for the other types) */
	unsigned niov;
	struct iovec iov[UROCE_TX_IOV];
	uint8_t hdr[UROCE_MAX_HDR];
	uint8_t trailer[8];
};

/*
 * UDP GSO: consecutive packets of one QP with the same addresses, all of one
 * length except a shorter last one, leave as one datagram that the kernel
 * (or the NIC) cuts into segments.  Segment k of such a run carries IPv4
 * identification k (base 0 on an unconnected DF socket), which the ICRC
 * covers, so the link's sealing and sending must agree on the runs: both
 * use this function.
 */
enum {
	UROCE_GSO_MAX_SEGS = 64,
	UROCE_GSO_MAX_BYTES = 65535 - 40 - 8,	/* one IPv6 datagram */
	UROCE_GSO_MAX_IOV = 256,
};

static inline unsigned uroce_gso_run(const struct uroce_txpkt *pkts,
				     unsigned n)
{
	size_t bytes = pkts[0].len;
	unsigned iovs = pkts[0].niov, k = 1;

	while (k < n && k < UROCE_GSO_MAX_SEGS &&
	       pkts[k - 1].len == pkts[0].len && pkts[k].len <= pkts[0].len &&
	       bytes + pkts[k].len <= UROCE_GSO_MAX_BYTES &&
	       iovs + pkts[k].niov <= UROCE_GSO_MAX_IOV &&
	       pkts[k].dst == pkts[0].dst && pkts[k].src == pkts[0].src) {
		bytes += pkts[k].len;
		iovs += pkts[k].niov;
		k++;
	}
	return k;
}

/* One received datagram.  data/len cover the UDP payload (BTH .. ICRC).
 * Buffers belong to the backend and stay valid until its next recv call. */
struct uroce_rxpkt {
	uint8_t *data;
	uint32_t len;
	union uroce_sockaddr src;	/* peer IP and UDP source port */
	union uroce_sockaddr dst;	/* our IP it was sent to, UDP dest port */
	uint8_t tos;			/* IPv4 TOS / IPv6 traffic class (ECN) */
	bool roce1;			/* came as RoCE v1: a GRH precedes data */
};

struct uroce_nic;

/* A network backend: how RoCEv2 datagrams leave and enter this process. */
struct uroce_net_ops {
	const char *name;
	/* Bind the shared RoCEv2 port; allocate nic->slot. */
	int (*open)(struct uroce_nic *nic);
	void (*close)(struct uroce_nic *nic);
	/* A transmit endpoint for one UDP source port and address family,
	 * or with sport 0 one of its own on a port the kernel picks (see
	 * tx_sport).  Returns a handle >= 0 or -errno. */
	int (*tx_open)(struct uroce_nic *nic, int family, uint16_t sport);
	/* The UDP source port a transmit endpoint sends from. */
	uint16_t (*tx_sport)(struct uroce_nic *nic, int tx);
	/* Capture every packet sent and received into a pcap file from now
	 * on (path NULL: stop); the file being written, or NULL. */
	int (*capture)(struct uroce_nic *nic, const char *path);
	const char *(*capture_path)(struct uroce_nic *nic);
	void (*tx_close)(struct uroce_nic *nic, int tx);
	/* Ask for the datagrams that peer sends from UDP port peer_sport to
	 * self to be delivered to this process directly, for as long as tx
	 * is open.  Optional and best effort; -errno when it cannot. */
	int (*steer)(struct uroce_nic *nic, int tx,
		     const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer, uint16_t peer_sport);
	/* Learn the link address of peer, reached from self, before packets
	 * go there (a link that writes its own Ethernet headers asks the
	 * neighbour tables, blocking briefly).  Optional; 0 or -errno. */
	int (*resolve)(struct uroce_nic *nic, const union uroce_sockaddr *self,
		       const union uroce_sockaddr *peer);
	/* Put the ICRC into the trailers of pkts, about to leave in one xmit
	 * call on tx. */
	void (*seal)(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		     unsigned n);
	/* Whether a received packet's ICRC holds. */
	bool (*icrc_ok)(struct uroce_nic *nic, const struct uroce_rxpkt *rx);
	/* A UD receive's GRH area (UROCE_GRH_LEN bytes) for a received
	 * packet; returns what the work completion reports as its SL. */
	uint8_t (*rx_grh)(const struct uroce_rxpkt *rx, uint8_t *grh);
	/* Send n datagrams, sealed; returns how many left (>= 0) or
	 * -errno. */
	int (*xmit)(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n);
	/* File descriptors the engine polls for POLLIN before calling recv. */
	int (*rx_fds)(struct uroce_nic *nic, int *fds, int max);
	/* Receive up to max packets without blocking; 0 when none.  Sets
	 * *drained when another call would most likely find nothing. */
	int (*recv)(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		    unsigned max, bool *drained);
	/* Hand a received datagram to the process of another slot; -errno
	 * when no process has that slot. */
	int (*forward)(struct uroce_nic *nic, unsigned slot,
		       const struct uroce_rxpkt *rx);
	/* CM service IDs, held host-wide: claim one for this process
	 * (-EADDRINUSE if any process holds it), release it, and hand a
	 * received datagram to the process that holds one (-errno if none
	 * does). */
	int (*sid_claim)(struct uroce_nic *nic, uint64_t sid);
	void (*sid_release)(struct uroce_nic *nic, uint64_t sid);
	int (*sid_forward)(struct uroce_nic *nic, uint64_t sid,
			   const struct uroce_rxpkt *rx);
	/* Receive the datagrams sent to an IP multicast group (port 0),
	 * host-wide, until left; joins are not counted: one each. */
	int (*mcast_join)(struct uroce_nic *nic,
			  const union uroce_sockaddr *group);
	void (*mcast_leave)(struct uroce_nic *nic,
			    const union uroce_sockaddr *group);
};

extern const struct uroce_net_ops uroce_net_udp;
/* RoCE v1 (net/roce1.c): Ethernet frames of ethertype 0x8915, GRH + BTH.
 * Its transmit handles are offset by UROCE_TX_ROCE1 so that one handle
 * names its link too. */
extern const struct uroce_net_ops uroce_net_roce1;
enum {
	UROCE_TX_ROCE1 = 1 << 30,
	UROCE_GRH_NEXT_BTH = 0x1B,	/* a v1 GRH's next header: IBA's BTH */
};
/* uroced: send the RoCE v1 frames a served process handed over fd (its
 * SVC_ROCE1 channel); how many it took, or -errno (-EPIPE: it is gone). */
int uroce_roce1_relay(struct uroce_nic *nic, int fd);
/* The UDP link's headers (net/udp_headers.c) */
void uroce_udp_seal(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n);
bool uroce_udp_icrc_ok(struct uroce_nic *nic, const struct uroce_rxpkt *rx);
uint8_t uroce_udp_rx_grh(const struct uroce_rxpkt *rx, uint8_t *grh);

/* Every link's way in and out (net/link.c): fault injection, then the
 * ICRC.  xmit seals and sends n packets on tx: how many went, or -errno.
 * recv returns the packets whose ICRC holds (0: none arrived, *drained
 * set; or all were dropped), rx_verify keeps those of a batch. */
/* A transmit handle on the link of GIDs of type (family and sport as
 * tx_open takes them); steer and close go to the handle's link. */
int uroce_link_tx_open(struct uroce_nic *nic, enum ibv_gid_type type,
		       int family, uint16_t sport);
void uroce_link_tx_close(struct uroce_nic *nic, int tx);
int uroce_link_steer(struct uroce_nic *nic, int tx,
		     const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer, uint16_t peer_sport);
int uroce_link_resolve(struct uroce_nic *nic, enum ibv_gid_type type,
		       const union uroce_sockaddr *self,
		       const union uroce_sockaddr *peer);
/* Every link's receive descriptors (at most max). */
int uroce_link_rx_fds(struct uroce_nic *nic, int *fds, int max);
uint8_t uroce_link_rx_grh(struct uroce_nic *nic, const struct uroce_rxpkt *rx,
			  uint8_t *grh);
/* Whether GIDs of type have a link in this process. */
bool uroce_link_has(const struct uroce_nic *nic, enum ibv_gid_type type);
int uroce_link_xmit(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n);
/* The same without fault injection (QP1's MADs). */
int uroce_link_xmit_unfaulted(struct uroce_nic *nic, int tx,
			      struct uroce_txpkt *pkts, unsigned n);
int uroce_link_recv(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		    unsigned max, bool *drained);
unsigned uroce_link_rx_verify(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
			      unsigned n);

#endif
