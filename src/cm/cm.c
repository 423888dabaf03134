/*
 * The IB CM state machine (IBTA vol. 1 ch. 12.9), one per id, following
 * what the Linux kernel's ib_cm does where the spec leaves room: which
 * duplicates are answered, when MRAs go out, the timers and TimeWait.
 *
 * Locking: one mutex per NIC guards every id.  Events are collected while
 * it is held and handed to the handlers after it is dropped; an id counts
 * the handler calls in flight so that destroy can wait them out.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cm/cm_id.h"
#include "net/gid.h"
#include "transport/transport.h"
#include "verbs/ops.h"

/* ---- ids ----------------------------------------------------------------- */

static uint32_t new_comm_id(struct uroce_cm *cm)
{
	const uint32_t mask = (1u << CM_ID_SLOT_SHIFT) - 1;

	for (;;) {
		uint32_t id = ++cm->next_id & mask;
		bool used = !id;

		for (struct uroce_cm_id *i = cm->ids; i && !used; i = i->next)
			used = (i->local_id & mask) == id;
		if (!used)
			return (uint32_t)cm->nic->slot << CM_ID_SLOT_SHIFT | id;
	}
}

struct uroce_cm_id *cm_id_alloc(struct uroce_cm *cm,
				uroce_cm_handler handler, void *context)
{
	struct uroce_cm_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->cm = cm;
	id->handler = handler;
	id->context = context;
	id->state = CM_IDLE;
	id->local_id = new_comm_id(cm);
	id->timewait_ms = CM_DEFAULT_TIMEWAIT_MS;
	id->next = cm->ids;
	cm->ids = id;
	return id;
}

/* A passive id stops counting against its listener's backlog. */
void cm_id_unwait(struct uroce_cm_id *id)
{
	if (id->listener) {
		id->listener->waiting--;
		id->listener = NULL;
	}
}

/* Frees the id once nothing refers to it: the consumer destroyed it, no
 * handler call is running and the protocol needs it no more. */
void cm_id_maybe_free(struct uroce_cm_id *id)
{
	struct uroce_cm *cm = id->cm;

	if (!id->destroyed || id->calls || id->state != CM_IDLE)
		return;
	cm_id_unwait(id);
	for (struct uroce_cm_id *i = cm->ids; i; i = i->next)
		if (i->listener == id)
			i->listener = NULL;
	for (struct uroce_cm_id **p = &cm->ids; *p; p = &(*p)->next) {
		if (*p == id) {
			*p = id->next;
			break;
		}
	}
	free(id);
}

void cm_set_timer(struct uroce_cm_id *id, uint64_t deadline)
{
	struct uroce_cm *cm = id->cm;

	id->deadline = deadline;
	if (deadline && deadline < atomic_load(&cm->next_deadline)) {
		atomic_store(&cm->next_deadline, deadline);
		uroce_engine_kick(cm->nic, deadline);
	}
}

void cm_enter_idle(struct uroce_cm_id *id)
{
	id->state = CM_IDLE;
	id->deadline = 0;
	cm_id_unwait(id);
}

void cm_enter_timewait(struct uroce_cm_id *id)
{
	id->state = CM_TIMEWAIT;
	cm_id_unwait(id);
	cm_set_timer(id, uroce_now_ns() + cm_ms_ns(id->timewait_ms));
}

/* ---- events -------------------------------------------------------------- */

struct uroce_cm_event *cm_queue_event(struct pending_list *pl,
				      struct uroce_cm_id *id,
				      enum uroce_cm_event_type type,
				      const uint8_t *data, unsigned len)
{
	struct pending *p;

	if (id->destroyed || pl->n == CM_MAX_EVENTS)
		return NULL;
	p = &pl->p[pl->n++];
	memset(&p->ev, 0, sizeof(p->ev));
	p->id = id;
	p->ev.type = type;
	if (len > sizeof(p->data))
		len = sizeof(p->data);
	if (len)
		memcpy(p->data, data, len);
	p->ev.private_data = len ? p->data : NULL;
	p->ev.private_data_len = len;
	id->calls++;
	return &p->ev;
}

/* The consumer did not take a new passive id. */
static void id_refuse(struct uroce_cm_id *id)
{
	if (id->state == CM_REQ_RCVD)
		cm_id_send_rej(id, CM_MSG_REQ, UROCE_CM_REJ_CONSUMER_DEFINED,
			       NULL, 0, NULL, 0);
	else if (id->state == CM_SIDR_REQ_RCVD)
		cm_id_send_sidr_rej(id);
	cm_enter_idle(id);
	id->destroyed = true;
}

/* Called with the lock held; drops it to run the handlers. */
void cm_deliver_unlock(struct uroce_cm *cm, struct pending_list *pl)
{
	int refused[CM_MAX_EVENTS];

	pthread_mutex_unlock(&cm->lock);
	for (unsigned i = 0; i < pl->n; i++) {
		struct pending *p = &pl->p[i];

		refused[i] = p->id->handler(p->id, &p->ev, p->id->context);
	}
	if (!pl->n)
		return;
	pthread_mutex_lock(&cm->lock);
	for (unsigned i = 0; i < pl->n; i++) {
		struct uroce_cm_id *id = pl->p[i].id, *new_id = pl->p[i].ev.new_id;

		id->calls--;
		if (new_id) {
			new_id->calls--;
			if (refused[i])
				id_refuse(new_id);
			cm_id_maybe_free(new_id);
		}
		cm_id_maybe_free(id);
	}
	pthread_cond_broadcast(&cm->calls_done);
	pthread_mutex_unlock(&cm->lock);
}

/* ---- the consumer's calls ------------------------------------------------ */

UROCE_EXPORT struct uroce_cm_id *uroce_cm_create_id(struct ibv_context *ctx,
						     uroce_cm_handler handler,
						     void *context)
{
	struct uroce_cm *cm;
	struct uroce_cm_id *id;

	if (!ctx || !handler) {
		errno = EINVAL;
		return NULL;
	}
	cm = to_uctx(ctx)->nic->cm;
	pthread_mutex_lock(&cm->lock);
	id = cm_id_alloc(cm, handler, context);
	pthread_mutex_unlock(&cm->lock);
	if (!id)
		errno = ENOMEM;
	return id;
}

UROCE_EXPORT enum ibv_gid_type uroce_cm_gid_type(void)
{
	return uroce_config()->cm_roce_v1 ? IBV_GID_TYPE_ROCE_V1
					  : IBV_GID_TYPE_ROCE_V2;
}

UROCE_EXPORT void uroce_cm_set_context(struct uroce_cm_id *id, void *context)
{
	pthread_mutex_lock(&id->cm->lock);
	id->context = context;
	pthread_mutex_unlock(&id->cm->lock);
}

UROCE_EXPORT void uroce_cm_destroy_id(struct uroce_cm_id *id)
{
	struct uroce_cm *cm = id->cm;
	uint64_t guid_be;

	pthread_mutex_lock(&cm->lock);
	id->destroyed = true;
	switch (id->state) {
	case CM_REQ_SENT:
		/* the passive side knows us by CA GUID and comm ID only */
		guid_be = htobe64(cm->guid);
		id->remote_id = 0;
		cm_id_send_rej(id, CM_MSG_OTHER, UROCE_CM_REJ_TIMEOUT, &guid_be,
			       sizeof(guid_be), NULL, 0);
		cm_enter_idle(id);
		break;
	case CM_REQ_RCVD:
	case CM_REP_SENT:
		cm_id_send_rej(id, CM_MSG_REQ, UROCE_CM_REJ_CONSUMER_DEFINED,
			       NULL, 0, NULL, 0);
		cm_enter_idle(id);
		break;
	case CM_REP_RCVD:
		cm_id_send_rej(id, CM_MSG_REP, UROCE_CM_REJ_CONSUMER_DEFINED,
			       NULL, 0, NULL, 0);
		cm_enter_idle(id);
		break;
	case CM_ESTABLISHED:
		/* the CM goes on alone: DREQ, DREP or timeout, TimeWait */
		if (cm_id_send_dreq(id, NULL, 0))
			STAT_INC(cm->nic, tx_errors);
		break;
	case CM_DREQ_RCVD:
		if (cm_id_send_drep(id, NULL, 0))
			STAT_INC(cm->nic, tx_errors);
		break;
	case CM_SIDR_REQ_RCVD:
		cm_id_send_sidr_rej(id);
		cm_enter_idle(id);
		break;
	case CM_LISTEN:
	case CM_SIDR_REQ_SENT:
		cm_enter_idle(id);
		break;
	case CM_IDLE:
	case CM_DREQ_SENT:
	case CM_TIMEWAIT:
		break;
	}
	/* a listener's claim goes at once, even while its connections
	 * linger in TimeWait; released unlocked, since the receiver may need
	 * the lock before it lets go of the claim's socket */
	bool bound = id->bound;
	uint64_t sid = id->bound_sid;

	id->bound = false;
	/* a port shared with other ids of the process stays claimed */
	if (bound && cm_sid_taken(cm, sid))
		bound = false;
	while (id->calls)
		pthread_cond_wait(&cm->calls_done, &cm->lock);
	cm_id_maybe_free(id);
	pthread_mutex_unlock(&cm->lock);
	if (bound)
		cm->nic->net->sid_release(cm->nic, sid);
}

bool cm_sid_taken(struct uroce_cm *cm, uint64_t sid)
{
	for (struct uroce_cm_id *i = cm->ids; i; i = i->next)
		if (i->bound && i->bound_sid == sid)
			return true;
	return false;
}

static int claim(struct uroce_cm *cm, uint64_t sid)
{
	if (cm_sid_taken(cm, sid))
		return -EADDRINUSE;
	return cm->nic->net->sid_claim(cm->nic, sid);
}

/* The id holds sid from now on; cm->lock held. */
static void hold_sid(struct uroce_cm_id *id, uint64_t sid)
{
	id->bound = true;
	id->bound_sid = sid;
	id->service_id = sid;
}

UROCE_EXPORT int uroce_cm_bind_shared(struct uroce_cm_id *id, uint64_t sid)
{
	struct uroce_cm *cm = id->cm;
	int err = 0;

	pthread_mutex_lock(&cm->lock);
	if (id->bound || id->state != CM_IDLE)
		err = -EINVAL;
	else if (!cm_sid_taken(cm, sid))
		err = cm->nic->net->sid_claim(cm->nic, sid);
	if (!err)
		hold_sid(id, sid);
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_bind(struct uroce_cm_id *id, uint64_t *service_id,
			       int pick_port)
{
	struct uroce_cm *cm = id->cm;
	const unsigned range = CM_EPHEMERAL_HI - CM_EPHEMERAL_LO + 1;
	uint64_t sid = *service_id;
	int err = -EADDRINUSE;

	pthread_mutex_lock(&cm->lock);
	if (id->bound || id->state != CM_IDLE) {
		err = -EINVAL;
	} else if (!pick_port) {
		err = claim(cm, sid);
	} else {
		unsigned start;

		if (getrandom(&start, sizeof(start), 0) != sizeof(start))
			start = (unsigned)uroce_now_ns();
		for (unsigned i = 0; i < range && err == -EADDRINUSE; i++) {
			sid = (*service_id & ~0xFFFFull) |
			      (CM_EPHEMERAL_LO + (start + i) % range);
			err = claim(cm, sid);
		}
	}
	if (!err) {
		hold_sid(id, sid);
		*service_id = sid;
	}
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_listen(struct uroce_cm_id *id, int backlog)
{
	struct uroce_cm *cm = id->cm;
	int err = 0;

	pthread_mutex_lock(&cm->lock);
	if (!id->bound || (id->state != CM_IDLE && id->state != CM_LISTEN))
		err = -EINVAL;
	else {
		id->state = CM_LISTEN;
		id->backlog = backlog > 0 ? backlog : 1;
	}
	pthread_mutex_unlock(&cm->lock);
	return err;
}

/* ---- timers -------------------------------------------------------------- */

/* One id's timer went off (lock held). */
static void id_timeout(struct uroce_cm_id *id, uint64_t now,
		       struct pending_list *pl)
{
	static const enum uroce_cm_event_type error_of[] = {
		[CM_REQ_SENT] = UROCE_CM_REQ_ERROR,
		[CM_REP_SENT] = UROCE_CM_REP_ERROR,
		[CM_DREQ_SENT] = UROCE_CM_DREQ_ERROR,
		[CM_SIDR_REQ_SENT] = UROCE_CM_SIDR_REQ_ERROR,
	};
	struct uroce_cm_event *ev;
	enum cm_state state = id->state;

	id->deadline = 0;
	switch (state) {
	case CM_REQ_SENT:
	case CM_REP_SENT:
	case CM_DREQ_SENT:
	case CM_SIDR_REQ_SENT:
		if (id->retries_left) {
			id->retries_left--;
			STAT_INC(id->cm->nic, mad_retransmits);
			if (cm_id_send(id))
				STAT_INC(id->cm->nic, tx_errors);
			cm_set_timer(id, now + id->timeout_ns);
			return;
		}
		/* a DREQ nobody answered still ends in TimeWait */
		if (state == CM_DREQ_SENT)
			cm_enter_timewait(id);
		else
			cm_enter_idle(id);
		ev = cm_queue_event(pl, id, error_of[state], NULL, 0);
		if (ev)
			ev->status = -ETIMEDOUT;
		break;
	case CM_TIMEWAIT:
		cm_enter_idle(id);
		cm_queue_event(pl, id, UROCE_CM_TIMEWAIT_EXIT, NULL, 0);
		break;
	default:
		break;
	}
}

uint64_t uroce_cm_timers(struct uroce_nic *nic, uint64_t now)
{
	struct uroce_cm *cm = nic->cm;
	uint64_t next;

	if (!cm || now < atomic_load(&cm->next_deadline))
		return cm ? atomic_load(&cm->next_deadline) : UINT64_MAX;
	for (;;) {
		struct pending_list events = { 0 };
		struct uroce_cm_id *due = NULL;

		pthread_mutex_lock(&cm->lock);
		next = UINT64_MAX;
		for (struct uroce_cm_id *i = cm->ids; i; i = i->next) {
			if (!i->deadline)
				continue;
			if (i->deadline <= now && !due)
				due = i;
			else if (i->deadline < next)
				next = i->deadline;
		}
		if (!due) {
			atomic_store(&cm->next_deadline, next);
			pthread_mutex_unlock(&cm->lock);
			return next;
		}
		/* one at a time: its handlers run unlocked */
		id_timeout(due, now, &events);
		if (due->destroyed && !due->calls)
			cm_id_maybe_free(due);
		cm_deliver_unlock(cm, &events);
	}
}

/* ---- the NIC's CM -------------------------------------------------------- */

/*
 * A process that exits with connections up tells its peers, as the kernel
 * does when it closes a dying process's rdma_cm ids: DREQ for a connection,
 * REJ for one being set up, DREP for a DREQ it never answered.  Once only,
 * and best effort: nothing waits for an answer.
 */
void uroce_cm_exit(struct uroce_nic *nic)
{
	struct uroce_cm *cm = nic->cm;
	uint64_t guid_be;

	if (!cm || pthread_mutex_trylock(&cm->lock))
		return;
	guid_be = htobe64(cm->guid);
	for (struct uroce_cm_id *id = cm->ids; id; id = id->next) {
		switch (id->state) {
		case CM_ESTABLISHED:
			cm_id_send_dreq(id, NULL, 0);
			break;
		case CM_DREQ_RCVD:
			cm_id_send_drep(id, NULL, 0);
			break;
		case CM_REQ_SENT:
			id->remote_id = 0;
			cm_id_send_rej(id, CM_MSG_OTHER, UROCE_CM_REJ_TIMEOUT,
				       &guid_be, sizeof(guid_be), NULL, 0);
			break;
		case CM_REQ_RCVD:
		case CM_REP_SENT:
			cm_id_send_rej(id, CM_MSG_REQ,
				       UROCE_CM_REJ_CONSUMER_DEFINED, NULL, 0,
				       NULL, 0);
			break;
		default:
			break;
		}
	}
	pthread_mutex_unlock(&cm->lock);
}

/* The CM is the service on QP1 (transport.h): set before the engine
 * starts, cleared after it stopped. */
static const struct uroce_qp1_ops cm_qp1 = {
	.rx = uroce_gsi_rx,
	.timers = uroce_cm_timers,
};

int uroce_cm_init(struct uroce_nic *nic)
{
	struct uroce_cm *cm = calloc(1, sizeof(*cm));

	if (!cm)
		return -ENOMEM;
	pthread_mutex_init(&cm->lock, NULL);
	pthread_cond_init(&cm->calls_done, NULL);
	cm->nic = nic;
	cm->guid = be64toh(uroce_node_guid());
	if (getrandom(&cm->next_id, sizeof(cm->next_id), 0) !=
	    sizeof(cm->next_id))
		cm->next_id = (uint32_t)uroce_now_ns();
	atomic_init(&cm->next_deadline, UINT64_MAX);
	nic->cm = cm;
	nic->qp1 = &cm_qp1;
	return 0;
}

void uroce_cm_fini(struct uroce_nic *nic)
{
	struct uroce_cm *cm = nic->cm;

	if (!cm)
		return;
	nic->qp1 = NULL;
	while (cm->ids) {
		struct uroce_cm_id *id = cm->ids;

		cm->ids = id->next;
		/* a shared port is released with the last id holding it */
		if (id->bound && !cm_sid_taken(cm, id->bound_sid))
			nic->net->sid_release(nic, id->bound_sid);
		free(id);
	}
	pthread_cond_destroy(&cm->calls_done);
	pthread_mutex_destroy(&cm->lock);
	free(cm);
	nic->cm = NULL;
}
