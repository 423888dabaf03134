/*
 * What the two halves of the CM state machine share: cm.c (ids, sending,
 * the consumer's calls, timers) and cm_receive.c (the MADs that arrive).
 * Every function here is called with cm->lock held.
 */
#ifndef UROCE_CM_ID_H
#define UROCE_CM_ID_H

#include "cm/cm.h"

enum cm_state {
	CM_IDLE,
	CM_LISTEN,
	CM_REQ_SENT,
	CM_REQ_RCVD,
	CM_REP_SENT,
	CM_REP_RCVD,
	CM_ESTABLISHED,
	CM_DREQ_SENT,
	CM_DREQ_RCVD,
	CM_TIMEWAIT,
	CM_SIDR_REQ_SENT,
	CM_SIDR_REQ_RCVD,
};

enum {
	MRA_SERVICE_TIMEOUT = 24,	/* what Linux puts in its MRAs */
	CM_DEFAULT_TIMEWAIT_MS = 2048,
	CM_MAX_EVENTS = 2,		/* events one MAD or destroy causes */
};

struct uroce_cm_id {
	struct uroce_cm *cm;
	uroce_cm_handler handler;
	void *context;
	enum cm_state state;
	bool destroyed;			/* the consumer let go of it */
	unsigned calls;			/* handler calls in flight */
	struct uroce_cm_id *next;

	uint32_t local_id, remote_id;
	uint64_t remote_guid;		/* host order */
	uint32_t local_qpn, remote_qpn;
	bool xrc;			/* XRC initiator or target */
	uint64_t tid;

	uint64_t service_id;		/* listened on, or connected to */
	uint64_t bound_sid;
	bool bound;			/* holds bound_sid's host-wide claim */
	int backlog;
	unsigned waiting;		/* listener: REQs not yet answered */
	struct uroce_cm_id *listener;	/* passive: counted in its waiting */

	/* where its MADs go, and the last one sent (retransmissions,
	 * answers to duplicates) */
	union uroce_sockaddr self, peer;
	bool roce1;			/* over RoCE v1 */
	uint8_t mad[MAD_LEN];
	uint64_t deadline;		/* ns, 0 = no timer */
	uint64_t timeout_ns;		/* per transmission */
	unsigned retries_left;
	unsigned max_retries;
	unsigned timewait_ms;
	uint8_t cm_response_timeout;	/* the peer's, for our DREQ */
};

struct uroce_cm {
	pthread_mutex_t lock;
	pthread_cond_t calls_done;
	struct uroce_nic *nic;
	struct uroce_cm_id *ids;
	uint32_t next_id;
	uint64_t guid;			/* host order */
	atomic_uint_fast64_t next_deadline;
};

struct pending {
	struct uroce_cm_id *id;
	struct uroce_cm_event ev;
	uint8_t data[RTU_PRIVATE_DATA_LEN];
};

struct pending_list {
	unsigned n;
	struct pending p[CM_MAX_EVENTS];
};

static inline uint64_t cm_ms_ns(unsigned ms)
{
	return (uint64_t)ms * 1000000;
}

/* ---- cm.c ---- */
struct uroce_cm_id *cm_id_alloc(struct uroce_cm *cm,
				uroce_cm_handler handler, void *context);
void cm_id_unwait(struct uroce_cm_id *id);
void cm_id_maybe_free(struct uroce_cm_id *id);
void cm_set_timer(struct uroce_cm_id *id, uint64_t deadline);
void cm_enter_idle(struct uroce_cm_id *id);
void cm_enter_timewait(struct uroce_cm_id *id);
/* An event for id's handler, delivered by cm_deliver_unlock. */
struct uroce_cm_event *cm_queue_event(struct pending_list *pl,
				      struct uroce_cm_id *id,
				      enum uroce_cm_event_type type,
				      const uint8_t *data, unsigned len);
/* Drops cm->lock, then calls the handlers of the queued events. */
void cm_deliver_unlock(struct uroce_cm *cm, struct pending_list *pl);
/* cm_send.c */
int cm_id_send(struct uroce_cm_id *id);
/* id->mad initialized for attr; returns its payload */
uint8_t *cm_id_mad(struct uroce_cm_id *id, uint16_t attr);
/* sends id->mad and again every timeout_ns until answered */
int cm_id_send_timed(struct uroce_cm_id *id, uint64_t timeout_ns,
		     unsigned retries);
void cm_id_send_rej(struct uroce_cm_id *id, unsigned msg, uint16_t reason,
		    const void *ari, unsigned ari_len, const void *data,
		    unsigned len);
void cm_id_send_sidr_rej(struct uroce_cm_id *id);
void cm_id_send_mra(struct uroce_cm_id *id, unsigned msg);
int cm_id_send_dreq(struct uroce_cm_id *id, const void *data, unsigned len);
int cm_id_send_drep(struct uroce_cm_id *id, const void *data, unsigned len);
bool cm_sid_taken(struct uroce_cm *cm, uint64_t sid);

#endif
