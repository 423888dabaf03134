/*
 * The host mux: how the uroce processes of one host share a RoCEv2 port.
 * Each process holds a slot (the high bits of its QPNs) and an AF_UNIX name
 * through which the others forward it the datagrams of its QPs the kernel
 * delivered to them; a CM service ID is a name of its own, through which
 * REQs reach the process that listens; the per-host service, uroced
 * (service.h), when it runs, owns the port for every user and hands each
 * process its slot, its sockets and its datagrams.
 *
 * Used by the UDP link alone.  The mux calls nothing above it: the link
 * hands it the few things it needs of the link's receiver (struct
 * uroce_mux_link).
 */
#ifndef UROCE_MUX_H
#define UROCE_MUX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "uroce.h"

enum {
	BTH_BYTES = 12,		/* shortest datagram that has a DestQP */
	SOCK_BUF = 16 << 20,	/* socket buffers: a whole 8 MiB UC message */
	FWD_MAGIC = 0x75524f46,	/* catches a peer of another uroce build */
	FWD_ACCEPT_MAX = 256,	/* processes forwarding to us at once */
	FWD_BACKLOG = 64,
	/* the transmit sockets uroced makes for a process, per family: one
	 * per flow class of its slot */
	SVC_TX_PER_FAMILY = 1 << UROCE_SPORT_CLASS_BITS,
	SERVICE_SLOT = 1,	/* uroced's own: QP1 and the CM's replies */
	SID_FWD_CACHE = 64,	/* services we forward to, connected */
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

/* A CM service ID this process holds: a listening socket bound to the
 * service's abstract name, through which other processes forward its REQs
 * (and, for the same service, the connection that forwards to it). */
struct sid_claim {
	uint64_t sid;
	int fd;
};

/* What the mux needs of the link's receiver: to watch a socket it made
 * (a listener, whose connections it accepts, or a connection datagrams
 * arrive on), to stop, and to wait until no receive call may still use an
 * unwatched socket, after which it may be closed. */
struct uroce_mux_link {
	int (*watch)(struct uroce_nic *nic, int fd, bool listener);
	void (*unwatch)(struct uroce_nic *nic, int fd);
	void (*quiesce)(struct uroce_nic *nic);
};

struct uroce_mux {
	const struct uroce_mux_link *link;
	uid_t uid;			/* what SCM_CREDENTIALS reports */
	uint16_t port;
	int fdu;			/* our slot's forwarding listener */
	int fwd_to[UROCE_MAX_SLOTS];	/* connection to each slot, or -1 */
	int fwd_from[FWD_ACCEPT_MAX];	/* accepted connections */
	unsigned nfwd_from;
	pthread_mutex_t sid_lock;
	struct sid_claim *sids;
	unsigned nsids, sids_cap;
	/* connections to the holders of services we forwarded REQs to;
	 * used only by the receiver (rx_lock) */
	struct sid_claim sid_fwd[SID_FWD_CACHE];
	unsigned sid_fwd_next;

	/* The per-host service (service_client.c), when one serves us: our
	 * request connection (-1: single-user mode), its uid, the channel
	 * its datagrams for us arrive on, and the sockets it made for us. */
	int svc_fd;
	uid_t svc_uid;
	int svc_data;
	pthread_mutex_t svc_lock;
	int svc_tx[2][SVC_TX_PER_FAMILY];
};

/* forward.c: the mux's state, made and undone with the link; nic->mux is
 * set by the link that embeds it */
void uroce_mux_init(struct uroce_mux *m, const struct uroce_mux_link *link,
		    uint16_t port);
void uroce_mux_close(struct uroce_mux *m);
/* A socket buffer of SOCK_BUF bytes (name: SO_RCVBUF or SO_SNDBUF). */
int uroce_sock_set_buf(int fd, int name);

/* forward.c: slots and forwarding, over AF_UNIX */
int uroce_mux_slot_alloc(struct uroce_nic *nic);
int uroce_mux_fwd_send(struct uroce_nic *nic, unsigned slot,
		       const struct uroce_rxpkt *rx);
int uroce_mux_forward(struct uroce_nic *nic, unsigned slot,
		      const struct uroce_rxpkt *rx);
void uroce_mux_fwd_accept(struct uroce_nic *nic, int listen_fd);
void uroce_mux_fwd_close(struct uroce_mux *m, int fd);
/* uroced: the datagrams for slot's QPs go over fd from now on (-1: to
 * nobody); the receiver owns fd and closes it when it fails. */
void uroce_mux_fwd_set(struct uroce_nic *nic, unsigned slot, int fd);
/* A forwarded datagram of len bytes at buf (its header first), with its
 * control messages in mh, as rx; false if malformed (counted). */
bool uroce_mux_fwd_parse(struct uroce_nic *nic, struct msghdr *mh,
			 uint32_t len, uint8_t *buf, struct uroce_rxpkt *rx);
int uroce_mux_sid_claim(struct uroce_nic *nic, uint64_t sid);
void uroce_mux_sid_release(struct uroce_nic *nic, uint64_t sid);
int uroce_mux_sid_forward(struct uroce_nic *nic, uint64_t sid,
			  const struct uroce_rxpkt *rx);

/* service_client.c: a process of the per-host service.  svc_open returns
 * 1 if a service serves us, 0 for single-user mode, or -errno. */
extern bool uroce_mux_service_role;	/* set by uroced before it opens */
int uroce_mux_svc_open(struct uroce_nic *nic);
void uroce_mux_svc_close(struct uroce_mux *m);
int uroce_mux_svc_tx_socket(struct uroce_nic *nic, int family,
			    uint16_t sport);
int uroce_mux_svc_steer(struct uroce_mux *m, const union uroce_sockaddr *self,
			const union uroce_sockaddr *peer, int *out);
void uroce_mux_svc_release(struct uroce_mux *m,
			   const union uroce_sockaddr *self,
			   const union uroce_sockaddr *peer);
int uroce_mux_svc_mcast(struct uroce_mux *m, const union uroce_sockaddr *group,
			bool join);
/* A served process's channel for RoCE v1 frames (SVC_ROCE1), or -errno. */
int uroce_mux_svc_roce1(struct uroce_nic *nic);
/* The uid whose programs hold UDP port (others': not ours), or -1. */
long uroce_port_holder(uint16_t port, bool others_only);
/* Another program holds the port: say whose, and what to do. */
void uroce_port_taken(uint16_t port);

#endif
