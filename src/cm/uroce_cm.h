/*
 * uroce's InfiniBand Communication Manager, as libibverbs.so.1 exports it to
 * uroce's librdmacm.so.1 (version node UROCE_CM_1).  It plays the part of
 * the kernel's ib_cm: one CM per NIC, whose ids each hold one connection's
 * state machine (IBTA vol. 1 ch. 12), retransmit their MADs and answer
 * duplicates.  librdmacm builds rdma_cm on top of it, as the kernel's
 * rdma_cm builds on ib_cm.
 *
 * Events are delivered by calling the id's handler from the thread that
 * received the MAD or ran the timer (the progress engine, or an application
 * thread polling a CQ), with no CM lock held.  A handler must not block,
 * nor destroy an id.  For a REQ or SIDR_REQ it returns nonzero to refuse
 * the new id, which the CM then rejects (REJ consumer defined, SIDR_REP
 * rejected) and frees; otherwise the new id is the consumer's.
 */
#ifndef UROCE_CM_API_H
#define UROCE_CM_API_H

#include <stdbool.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/socket.h>

struct uroce_cm_id;

enum uroce_cm_event_type {
	UROCE_CM_REQ_RECEIVED,		/* on the listening id; ev->new_id */
	UROCE_CM_REP_RECEIVED,
	UROCE_CM_RTU_RECEIVED,		/* also from uroce_cm_establish() */
	UROCE_CM_REJ_RECEIVED,
	UROCE_CM_DREQ_RECEIVED,
	UROCE_CM_DREP_RECEIVED,
	UROCE_CM_TIMEWAIT_EXIT,
	UROCE_CM_REQ_ERROR,		/* REQ unanswered after every retry */
	UROCE_CM_REP_ERROR,		/* REP unanswered after every retry */
	UROCE_CM_DREQ_ERROR,		/* DREQ unanswered after every retry */
	UROCE_CM_SIDR_REQ_RECEIVED,	/* on the listening id; ev->new_id */
	UROCE_CM_SIDR_REP_RECEIVED,
	UROCE_CM_SIDR_REQ_ERROR,
};

/* A path as RoCEv2 has it: GIDs are the IP addresses. */
struct uroce_cm_path {
	union ibv_gid sgid, dgid;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t sl;
	uint32_t flow_label;
	uint8_t mtu;			/* enum ibv_mtu */
	uint8_t packet_life_time;	/* 4.096 us * 2^n */
};

/* XRC is the REQ's "extended" transport (3) with extended type 1 */
enum {
	UROCE_CM_TRANSPORT_RC = 0,
	UROCE_CM_TRANSPORT_UC = 1,
	UROCE_CM_TRANSPORT_XRC = 3,
};

struct uroce_cm_req_param {
	struct uroce_cm_path path;
	uint64_t service_id;
	uint32_t qp_num;
	uint32_t starting_psn;		/* the PSN this side expects */
	uint8_t transport;		/* UROCE_CM_TRANSPORT_* */
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t flow_control;
	uint8_t local_ack_timeout;
	uint8_t remote_cm_response_timeout;
	uint8_t local_cm_response_timeout;
	uint8_t max_cm_retries;
	const void *private_data;
	uint8_t private_data_len;	/* at most 92 */
};

struct uroce_cm_rep_param {
	uint32_t qp_num;		/* an XRC target's goes in the EECN */
	bool xrc_target;
	uint32_t starting_psn;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t target_ack_delay;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t flow_control;
	const void *private_data;
	uint8_t private_data_len;	/* at most 196 */
};

struct uroce_cm_sidr_req_param {
	struct uroce_cm_path path;
	uint64_t service_id;
	unsigned timeout_ms;
	unsigned max_retries;
	const void *private_data;
	uint8_t private_data_len;	/* at most 216 */
};

struct uroce_cm_sidr_rep_param {
	uint8_t status;			/* 0 success, 1 no service, 2 reject */
	uint32_t qp_num;
	uint32_t qkey;
	const void *private_data;
	uint8_t private_data_len;	/* at most 136 */
};

/* REJ reasons (IBTA table 112) that uroce sends or reports */
enum {
	UROCE_CM_REJ_TIMEOUT = 4,
	UROCE_CM_REJ_INVALID_SERVICE_ID = 8,
	UROCE_CM_REJ_STALE_CONN = 10,
	UROCE_CM_REJ_CONSUMER_DEFINED = 28,
};

struct uroce_cm_event {
	enum uroce_cm_event_type type;
	struct uroce_cm_id *new_id;	/* REQ / SIDR_REQ received */
	int status;			/* 0, -ETIMEDOUT, REJ reason, SIDR status */
	union {
		struct {		/* REQ */
			struct uroce_cm_path path;	/* as seen from here */
			uint64_t service_id;
			uint32_t qp_num;
			uint32_t starting_psn;
			uint8_t transport;
			uint8_t responder_resources;
			uint8_t initiator_depth;
			uint8_t retry_count;
			uint8_t rnr_retry_count;
			uint8_t srq;
			uint8_t flow_control;
			uint8_t local_ack_timeout;
		} req;
		struct {		/* REP */
			uint32_t qp_num;
			uint32_t starting_psn;
			uint8_t responder_resources;
			uint8_t initiator_depth;
			uint8_t target_ack_delay;
			uint8_t rnr_retry_count;
			uint8_t srq;
			uint8_t flow_control;
		} rep;
		struct {		/* SIDR_REQ */
			struct uroce_cm_path path;
			uint64_t service_id;
		} sidr_req;
		struct {		/* SIDR_REP */
			uint32_t qp_num;
			uint32_t qkey;
		} sidr_rep;
	};
	const uint8_t *private_data;	/* valid during the call */
	uint8_t private_data_len;
};

typedef int (*uroce_cm_handler)(struct uroce_cm_id *id,
				 const struct uroce_cm_event *ev, void *context);

struct uroce_cm_id *uroce_cm_create_id(struct ibv_context *ctx,
				       uroce_cm_handler handler, void *context);
/* Sends what the state calls for (REJ, DREQ, DREP) and returns once no
 * handler call for the id is running; the CM keeps its own state through
 * TimeWait.  Never call from a handler. */
void uroce_cm_destroy_id(struct uroce_cm_id *id);
void uroce_cm_set_context(struct uroce_cm_id *id, void *context);

/* Service IDs are claimed host-wide.  A service ID whose low 16 bits are 0
 * with pick_port asks for a free port in the ephemeral range; the ID
 * claimed is stored back.  -EADDRINUSE when another id holds it. */
int uroce_cm_bind(struct uroce_cm_id *id, uint64_t *service_id,
		  int pick_port);
/* Binds to a service ID that other ids of this process may hold already
 * (rdma_cm shares a port between addresses and families, as it decides);
 * the host-wide claim goes with the last of them. */
int uroce_cm_bind_shared(struct uroce_cm_id *id, uint64_t service_id);
/* Deliver REQs / SIDR_REQs for the bound service ID (backlog: most
 * connections waiting for an accept before further REQs are dropped). */
int uroce_cm_listen(struct uroce_cm_id *id, int backlog);
/* The GID type rdma_cm connects over (UROCE_RDMA_CM_ROCE). */
enum ibv_gid_type uroce_cm_gid_type(void);

int uroce_cm_send_req(struct uroce_cm_id *id,
		      const struct uroce_cm_req_param *param);
int uroce_cm_send_rep(struct uroce_cm_id *id,
		      const struct uroce_cm_rep_param *param);
int uroce_cm_send_rtu(struct uroce_cm_id *id, const void *private_data,
		      uint8_t len);
int uroce_cm_send_rej(struct uroce_cm_id *id, int reason,
		      const void *private_data, uint8_t len);
int uroce_cm_send_dreq(struct uroce_cm_id *id, const void *private_data,
		       uint8_t len);
int uroce_cm_send_drep(struct uroce_cm_id *id, const void *private_data,
		       uint8_t len);
/* The passive side saw traffic before the RTU (rdma_notify). */
int uroce_cm_establish(struct uroce_cm_id *id);
int uroce_cm_send_sidr_req(struct uroce_cm_id *id,
			   const struct uroce_cm_sidr_req_param *param);
int uroce_cm_send_sidr_rep(struct uroce_cm_id *id,
			   const struct uroce_cm_sidr_rep_param *param);

/* What a CM timer value (4.096 us * 2^t) is in ms, as Linux rounds it. */
static inline unsigned uroce_cm_time_ms(unsigned t)
{
	return 1u << (t > 8 ? t - 8 : 0);
}

#endif
