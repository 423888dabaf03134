/*
 * uroce's librdmacm: rdma_cm (rdma-core 44's <rdma/rdma_cma.h>) over the
 * IB CM in uroce's libibverbs (src/cm/uroce_cm.h).  Where rdma-core's
 * librdmacm asks the kernel's rdma_ucm, this one does the kernel's part
 * itself: address and route resolution, the rdma_cm header and service IDs,
 * and turning CM events into rdma_cm events.
 *
 * cma.c   event channels, ids, events, devices
 * addr.c  binding, address and route resolution, options, rdma_getaddrinfo
 * conn.c  QPs on ids, connect / accept / reject / disconnect
 * ep.c    the synchronous API (rdma_create_ep, rdma_get_request), SRQs
 *         and ECE
 * mcast.c multicast groups
 */
#ifndef UROCE_RDMACM_H
#define UROCE_RDMACM_H

#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm/uroce_cm.h"

#define CMA_EXPORT __attribute__((visibility("default")))

enum {
	CMA_HDR_LEN = 36,		/* rdma_cm header in REQ / SIDR_REQ */
	CMA_CM_RESPONSE_TIMEOUT = 20,	/* what Linux sends */
	CMA_MAX_CM_RETRIES = 15,
	CMA_PACKET_LIFE_TIME = 18,	/* Linux <= 6.1 */
	CMA_HOP_LIMIT = 64,
	CMA_TARGET_ACK_DELAY = 15,	/* the device's local_ca_ack_delay */
	CMA_PRIVATE_DATA_MAX = 256,
	CMA_DEFAULT_BACKLOG = 1024,	/* net.rdma_ucm.max_backlog */
};

enum cma_state {
	CMA_IDLE,
	CMA_ADDR_BOUND,
	CMA_ADDR_RESOLVED,
	CMA_ROUTE_RESOLVED,
	CMA_CONNECT,		/* REQ / SIDR_REQ sent */
	CMA_CONNECT_RESPONSE,	/* REP in, RTU not yet sent */
	CMA_LISTEN,
	CMA_CONNECT_REQUEST,	/* passive: REQ in, not yet answered */
	CMA_ACCEPTED,		/* passive: REP sent */
	CMA_ESTABLISHED,
	CMA_DISCONNECT,		/* DREQ sent or received */
	CMA_ERROR,		/* rejected, unreachable: connect no more */
};

struct cma_device {
	struct ibv_context *verbs;
	struct ibv_pd *pd;		/* shared by every id on the device */
	struct ibv_xrcd *xrcd;		/* XRC ids' domain, opened when needed */
	int max_resp_res, max_init_depth;
};

struct cma_channel;
struct cma_mc;

/* What the connection needs from the REQ or REP that the peer sent. */
struct cma_peer {
	uint32_t qp_num;
	uint32_t psn;
	uint8_t responder_resources;	/* as the peer asked (its own) */
	uint8_t initiator_depth;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t local_ack_timeout;
	uint8_t mtu;
	uint8_t srq;
	uint8_t flow_control;
	uint8_t transport;
};

struct cma_id {
	struct rdma_cm_id id;		/* what the application holds */
	enum cma_state state;
	struct cma_channel *chan;	/* id.channel's */
	bool sync;			/* created without a channel */
	struct cma_device *dev;
	struct uroce_cm_id *cm;
	struct cma_id *listener;	/* passive: the id it came from */

	uint32_t seq_num;		/* our starting PSN */
	struct ibv_sa_path_rec path_rec;
	struct uroce_cm_path path;
	bool bound;			/* holds its port (service ID) */
	uint64_t service_id;
	uint8_t tos;
	bool tos_set;
	uint8_t ack_timeout;		/* RDMA_OPTION_ID_ACK_TIMEOUT, 0 = unset */
	int reuseaddr, afonly;
	bool afonly_set;		/* by RDMA_OPTION_ID_AFONLY */
	struct cma_id *bound_next;	/* the process's ids holding ports */
	bool listening;			/* under the ports' lock */
	uint32_t qkey;			/* UD */
	struct cma_mc *mc_list;		/* groups joined, under cma_lock */

	/* negotiated for our QP */
	uint8_t responder_resources, initiator_depth;
	uint8_t retry_count, rnr_retry_count;
	struct cma_peer peer;
	bool dreq_received;

	/* QP resources rdma_create_qp made for the id */
	bool own_cqs;
	/* the synchronous API: the QP attributes a listener's connections
	 * get (the last event of a synchronous id is the public id.event,
	 * where rdma_xclient reads the REP's private data) */
	struct ibv_qp_init_attr *qp_init_attr;

	unsigned events_reported, events_acked;
	pthread_cond_t acked;
};

/* An event: the application's copy, and what librdmacm still has to do
 * with it before handing it out. */
enum cma_internal {
	CMA_EV_REPORT,			/* as it is */
	CMA_EV_CONNECT_RESPONSE,	/* REP: move the QP, send the RTU */
};

struct cma_event {
	struct rdma_cm_event event;
	struct cma_id *id_priv;
	enum cma_internal internal;
	struct cma_event *next;
	uint8_t private_data[CMA_PRIVATE_DATA_MAX];
};

struct cma_channel {
	struct rdma_event_channel ch;
	int wfd;			/* a byte in the pipe iff events queued */
	struct cma_event *head, *tail;
	unsigned waiters;		/* threads blocked in rdma_get_cm_event */
	bool destroyed;			/* its callers block for good */
	struct cma_channel *grave_next;	/* destroyed channels kept a while */
};

/* One lock for ids' states and event queues, never held across a verb or
 * a CM call (those may wait for the thread that delivers events). */
extern pthread_mutex_t cma_lock;

static inline struct cma_id *to_cma(struct rdma_cm_id *id)
{
	return (struct cma_id *)id;
}

/* cma.c */
struct cma_device *cma_device(void);
/* The device's XRC domain (NULL and errno when it cannot be opened). */
struct ibv_xrcd *cma_xrcd(struct cma_device *dev);
int cma_errno(int err);			/* -errno -> -1 with errno set */
struct cma_event *cma_event_new(struct cma_id *id, enum rdma_cm_event_type t,
				int status);
void cma_queue(struct cma_event *ev);	/* cma_lock held */
/* Sets the state of an id whose events may already arrive (the receiving
 * thread moves it on too, under cma_lock).  The state a message leads to
 * is set before the message goes: its answer may arrive before the send
 * call returns. */
void cma_set_state(struct cma_id *id, enum cma_state state);
/* The same, only if the id is still in state from: a send that failed
 * takes back its state unless an event moved the id on meanwhile. */
void cma_revert_state(struct cma_id *id, enum cma_state from,
		      enum cma_state to);
void cma_queue_event(struct cma_id *id, enum rdma_cm_event_type type,
		     int status);
struct cma_id *cma_id_new(struct cma_channel *chan, void *context,
			  enum rdma_port_space ps, enum ibv_qp_type qp_type);
void cma_set_verbs(struct cma_id *id);
/* Synchronous ids: wait for the event of the call just made. */
int cma_complete(struct cma_id *id);
int cma_cm_handler(struct uroce_cm_id *cm, const struct uroce_cm_event *ev,
		    void *context);
struct cma_channel *cma_channel_new(void);
void cma_channel_free(struct cma_channel *chan);

/* addr.c */
int cma_family(const struct cma_id *id);
uint16_t cma_port(const struct sockaddr *sa);
void cma_set_port(struct sockaddr *sa, uint16_t port);
socklen_t cma_addr_len(const struct sockaddr *sa);
int cma_bind_port(struct cma_id *id, struct sockaddr *addr);
/* The GID (IPv4-mapped for IPv4) of an IP address. */
void cma_addr_gid(const struct sockaddr *sa, union ibv_gid *gid);
/* The index of the GID that is this address, or -1. */
/* The GID index of an address: of the type rdma_cm connects over
 * (UROCE_RDMA_CM_ROCE), or of the one type given. */
int cma_gid_index(struct cma_id *id, const struct sockaddr *sa);
int cma_gid_index_type(struct cma_id *id, const struct sockaddr *sa,
		       enum ibv_gid_type type);
/* The port goes with the id's last reference; no request reaches it. */
void cma_unbind_port(struct cma_id *id);
/* A listener's port may be shared (another family, another address, both
 * REUSEADDR): the one of them that takes a request with this header, as
 * the kernel's cma_find_listener picks it, or NULL.  Returns with the
 * ports' lock held, so that the listener stays until cma_listener_done. */
struct cma_id *cma_listener_for(struct cma_id *listener, const uint8_t *hdr,
				uint64_t sid);
void cma_listener_done(void);
/* rdma_listen's part: requests to the port may reach the id from now on
 * (a listener shares its port only by family or address, not by REUSEADDR) */
int cma_listen_port(struct cma_id *id, int backlog);
/* Fills the path from the id's addresses (a resolved or passive id). */
int cma_build_path(struct cma_id *id);
/* The rdma_cm header of a REQ / SIDR_REQ. */
void cma_format_hdr(const struct cma_id *id, uint8_t *hdr);
/* Checks a received header and fills the new id's addresses from it;
 * false when the listener must refuse the request. */
bool cma_parse_hdr(struct cma_id *listener, struct cma_id *id,
		   const uint8_t *hdr, uint64_t sid);

/* conn.c */
static inline uint8_t cma_min_u8(unsigned a, unsigned b)
{
	return a < b ? a : b;
}

/* Linux's cm_ack_timeout: the peer's ACK delay plus the packet's round
 * trip, in the encoding of the QP timeout. */
static inline uint8_t cma_ack_timeout(uint8_t ca_ack_delay,
				      uint8_t packet_life)
{
	int t = packet_life + 1;

	if (t >= ca_ack_delay)
		t += ca_ack_delay >= t - 1;
	else
		t = ca_ack_delay + (t >= ca_ack_delay - 1);
	return t > 31 ? 31 : t;
}

int cma_qp_attr(struct cma_id *id, struct ibv_qp_attr *attr, int *mask);
int cma_process_conn_resp(struct cma_id *id, struct cma_event *ev);
void cma_destroy_cqs(struct cma_id *id);

/* mcast.c: the id's groups are forgotten (rdma_destroy_id) */
void cma_forget_groups(struct cma_id *id);

#endif
