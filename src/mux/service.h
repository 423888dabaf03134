/*
 * The per-host service, uroced, and the uroce processes it serves.
 *
 * The kernel lets only sockets of one uid share a UDP port, so when several
 * users run uroce on a host, one service owns port 4791 for all of them
 * (service/uroced.c).  It receives every datagram no process receives
 * directly and hands it to the one process that owns its destination QP (the
 * QPN's slot), or for a CM REQ the process holding its service ID; it makes
 * every socket a process sends or receives RoCEv2 on, under its own uid, so
 * that no other user can bind them; and it gives each connected receive
 * socket to one process only, with a kernel filter that drops whatever is not
 * for that process's QPs.
 *
 * A process talks to it over one SOCK_SEQPACKET connection to
 * <dir>/uroced.<netns>.<port>, one request and one reply at a time, the
 * reply carrying sockets (SCM_RIGHTS).  <dir> (UROCE_SERVICE, default
 * /run/uroce) must belong to root or to the uid the service runs as and be
 * writable by nobody else: the directory, not the name, is what proves the
 * service genuine.
 */
#ifndef UROCE_MUX_SERVICE_H
#define UROCE_MUX_SERVICE_H

#include <stdint.h>
#include <sys/un.h>

#include "mux/mux.h"

enum {
	SVC_MAGIC = 0x75524f53,		/* "uROS"; a new layout, a new magic */
	/* HELLO's sockets: the datagram channel, then per family (IPv4,
	 * IPv6) the transmit sockets of the slot's flow classes */
	SVC_HELLO_FDS = 1 + 2 * SVC_TX_PER_FAMILY,
	SVC_TIMEOUT_MS = 2000,		/* a service that does not answer */
};

enum svc_op {
	/* first message: assigns a slot, returns the datagram channel and
	 * the transmit sockets */
	SVC_HELLO = 1,
	/* a receive socket bound to self, connected to peer; -EBUSY if
	 * another process needs the same pair */
	SVC_STEER,
	/* the socket of SVC_STEER for self and peer is closed */
	SVC_RELEASE,
	/* receive, or no longer, the multicast group self (port 0) */
	SVC_MCAST_JOIN,
	SVC_MCAST_LEAVE,
	/* a channel for RoCE v1 frames to send (struct roce1_relay_hdr
	 * each); the frames for the process arrive with its datagrams.
	 * -EOPNOTSUPP: the service has no RoCE v1 link (CAP_NET_RAW) */
	SVC_ROCE1,
};

/* Ahead of each RoCE v1 frame a process hands the service: where to send
 * it.  The service checks that the GRH's source GID is one of the host's,
 * on that interface (or the loopback one), and writes the Ethernet header
 * itself, ethertype 0x8915. */
struct roce1_relay_hdr {
	uint32_t magic;		/* ROCE1_RELAY_MAGIC */
	uint32_t ifindex;
	uint8_t mac[6];		/* destination */
	uint8_t pad[2];
};
enum { ROCE1_RELAY_MAGIC = 0x75523176 };	/* "uR1v" */

struct svc_req {
	uint32_t magic;
	uint32_t op;
	union fwd_addr self, peer;
};

struct svc_reply {
	uint32_t magic;
	int32_t err;		/* 0 or -errno */
	uint32_t slot;		/* HELLO */
	uint32_t families;	/* HELLO: bit 0 IPv4, bit 1 IPv6 sockets sent */
};

/* The service's socket for our network namespace and port; false if the
 * path does not fit. */
bool svc_socket_path(struct sockaddr_un *un, const char *dir, uint16_t port);

#endif
