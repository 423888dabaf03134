/*
 * The CM's receive side: each MAD that gsi.c hands over moves the state
 * machine of the id it names (or of the listener its service ID names), as
 * IBTA vol. 1 ch. 12.9 and the Linux kernel's ib_cm do; MADs no id owns get
 * the stateless answers of cm_reply.c.
 */
#include <string.h>

#include "cm/cm_id.h"
#include "net/gid.h"
#include "verbs/ops.h"

static struct uroce_cm_id *find_local(struct uroce_cm *cm, uint32_t local_id)
{
	for (struct uroce_cm_id *i = cm->ids; i; i = i->next)
		if (i->local_id == local_id)
			return i;
	return NULL;
}

static struct uroce_cm_id *find_listener(struct uroce_cm *cm, uint64_t sid)
{
	for (struct uroce_cm_id *i = cm->ids; i; i = i->next)
		if (i->state == CM_LISTEN && i->service_id == sid)
			return i;
	return NULL;
}

/* The GID index a received MAD arrived on (the RoCE v1 one if it came as
 * v1), or -1 if none of ours. */
static int gid_index_of(struct uroce_nic *nic, const struct uroce_rxpkt *rx)
{
	union ibv_gid gid;

	uroce_sockaddr_to_gid(&rx->dst, &gid);
	return uroce_gid_find_type(nic, &gid, rx->roce1 ? IBV_GID_TYPE_ROCE_V1
							 : IBV_GID_TYPE_ROCE_V2);
}

/* The path back to the sender of a request, as seen from here. */
static bool reply_path(struct uroce_nic *nic, const struct cm_mad_rx *m,
		       struct uroce_cm_path *path)
{
	int index = gid_index_of(nic, m->rx);

	if (index < 0)
		return false;
	memset(path, 0, sizeof(*path));
	path->sgid_index = index;
	path->sgid = nic->gids[index].gid;
	uroce_sockaddr_to_gid(&m->rx->src, &path->dgid);
	path->hop_limit = 64;
	return true;
}

static void rx_req(struct uroce_cm *cm, const struct cm_mad_rx *m,
		   struct pending_list *pl)
{
	struct uroce_nic *nic = cm->nic;
	const uint8_t *req = m->mad + MAD_HDR_LEN;
	uint32_t remote_id = mad_be32(req, REQ_LOCAL_COMM_ID);
	uint64_t guid = mad_be64(req, REQ_LOCAL_CA_GUID);
	uint32_t qpn = mad_be24(req, REQ_LOCAL_QPN);
	uint64_t sid = mad_be64(req, REQ_SERVICE_ID);
	struct uroce_cm_id *listener, *id;
	struct uroce_cm_event *ev;
	struct uroce_cm_path path;

	for (id = cm->ids; id; id = id->next) {
		if (id->remote_guid != guid || id->state == CM_IDLE ||
		    id->state == CM_LISTEN)
			continue;
		if (id->remote_id == remote_id) {
			/* a duplicate: the consumer has the request, so the
			 * peer is told to wait longer; in TimeWait it is
			 * stale */
			STAT_INC(nic, mad_duplicates);
			if (id->state == CM_REQ_RCVD)
				cm_id_send_mra(id, CM_MSG_REQ);
			else if (id->state == CM_TIMEWAIT)
				uroce_cm_reply_rej(nic, m,
						   UROCE_CM_REJ_STALE_CONN);
			return;
		}
		if (id->remote_qpn == qpn && id->state != CM_TIMEWAIT) {
			/* the peer's QP is still ours in another connection:
			 * refuse the new one, tear the old one down */
			uroce_cm_reply_rej(nic, m, UROCE_CM_REJ_STALE_CONN);
			if (id->state == CM_ESTABLISHED &&
			    cm_id_send_dreq(id, NULL, 0))
				STAT_INC(nic, tx_errors);
			return;
		}
	}
	listener = find_listener(cm, sid);
	if (!listener) {
		uroce_cm_reply_rej(nic, m, UROCE_CM_REJ_INVALID_SERVICE_ID);
		return;
	}
	unsigned transport = mad_bits(req, REQ_BYTE43, 0x06);
	bool known = transport == UROCE_CM_TRANSPORT_RC ||
		     transport == UROCE_CM_TRANSPORT_UC ||
		     (transport == UROCE_CM_TRANSPORT_XRC &&
		      mad_bits(req, REQ_BYTE51, 0x07) == CM_EXT_TRANSPORT_XRC);

	if (!known || !reply_path(nic, m, &path)) {
		uroce_cm_reply_rej(nic, m, UROCE_CM_REJ_CONSUMER_DEFINED);
		return;
	}
	/* a full backlog drops the REQ: the peer retransmits it */
	if (listener->waiting >= (unsigned)listener->backlog ||
	    listener->destroyed) {
		STAT_INC(nic, mad_backlog_drops);
		return;
	}
	id = cm_id_alloc(cm, listener->handler, listener->context);
	if (!id) {
		STAT_INC(nic, mad_backlog_drops);
		return;
	}
	id->state = CM_REQ_RCVD;
	id->remote_id = remote_id;
	id->remote_guid = guid;
	id->remote_qpn = qpn;
	id->xrc = transport == UROCE_CM_TRANSPORT_XRC;
	id->service_id = sid;
	id->tid = mad_be64(m->mad, MADH_TID);
	id->cm_response_timeout = mad_bits(req, REQ_BYTE47, 0xF8);
	id->max_retries = mad_bits(req, REQ_BYTE51, 0xF0);
	id->timewait_ms = uroce_cm_time_ms(mad_bits(req, REQ_BYTE95, 0xF8));
	uroce_cm_reply_addrs(nic, m, &id->self, &id->peer);
	id->roce1 = m->rx->roce1;
	id->listener = listener;
	listener->waiting++;

	path.flow_label = mad_be32(req, REQ_FLOW_LABEL) >> 12;
	path.traffic_class = req[REQ_TRAFFIC_CLASS];
	path.sl = mad_bits(req, REQ_BYTE94, 0xF0);
	path.mtu = mad_bits(req, REQ_BYTE50, 0xF0);
	ev = cm_queue_event(pl, listener, UROCE_CM_REQ_RECEIVED,
			 req + REQ_PRIVATE_DATA, REQ_PRIVATE_DATA_LEN);
	if (!ev) {
		cm_enter_idle(id);
		id->destroyed = true;
		cm_id_maybe_free(id);
		return;
	}
	/* the new id is the consumer's once the handler has seen it */
	ev->new_id = id;
	id->calls++;
	ev->req.path = path;
	ev->req.service_id = sid;
	ev->req.qp_num = qpn;
	ev->req.starting_psn = mad_be24(req, REQ_STARTING_PSN);
	ev->req.transport = transport;
	ev->req.flow_control = mad_bits(req, REQ_BYTE43, 0x01);
	ev->req.responder_resources = req[REQ_RESP_RESOURCES];
	ev->req.initiator_depth = req[REQ_INIT_DEPTH];
	ev->req.retry_count = mad_bits(req, REQ_BYTE47, 0x07);
	ev->req.rnr_retry_count = mad_bits(req, REQ_BYTE50, 0x07);
	ev->req.srq = mad_bits(req, REQ_BYTE51, 0x08);
	ev->req.local_ack_timeout = mad_bits(req, REQ_BYTE95, 0xF8);
}

static void rx_rep(struct uroce_cm *cm, struct uroce_cm_id *id,
		   const uint8_t *rep, struct pending_list *pl)
{
	uint32_t remote_id = mad_be32(rep, REP_LOCAL_COMM_ID);
	struct uroce_cm_event *ev;

	if (id->state != CM_REQ_SENT) {
		/* a duplicate: the RTU again once established, an MRA while
		 * the consumer still works on the first */
		if (id->remote_id != remote_id)
			return;
		STAT_INC(cm->nic, mad_duplicates);
		if (id->state == CM_ESTABLISHED &&
		    mad_be16(id->mad, MADH_ATTR_ID) == CM_ATTR_RTU) {
			if (cm_id_send(id))
				STAT_INC(cm->nic, tx_errors);
		} else if (id->state == CM_REP_RCVD) {
			cm_id_send_mra(id, CM_MSG_REP);
		}
		return;
	}
	id->remote_id = remote_id;
	id->remote_guid = mad_be64(rep, REP_LOCAL_CA_GUID);
	id->remote_qpn = mad_be24(rep, id->xrc ? REP_LOCAL_EECN : REP_LOCAL_QPN);
	id->state = CM_REP_RCVD;
	id->deadline = 0;
	ev = cm_queue_event(pl, id, UROCE_CM_REP_RECEIVED, rep + REP_PRIVATE_DATA,
			 REP_PRIVATE_DATA_LEN);
	if (!ev)
		return;
	ev->rep.qp_num = id->remote_qpn;
	ev->rep.starting_psn = mad_be24(rep, REP_STARTING_PSN);
	ev->rep.responder_resources = rep[REP_RESP_RESOURCES];
	ev->rep.initiator_depth = rep[REP_INIT_DEPTH];
	ev->rep.target_ack_delay = mad_bits(rep, REP_BYTE26, 0xF8);
	ev->rep.flow_control = mad_bits(rep, REP_BYTE26, 0x01);
	ev->rep.rnr_retry_count = mad_bits(rep, REP_BYTE27, 0xE0);
	ev->rep.srq = mad_bits(rep, REP_BYTE27, 0x10);
}

static void rx_rej(struct uroce_cm *cm, const uint8_t *rej,
		   struct pending_list *pl)
{
	uint32_t local_id = mad_be32(rej, MSG_REMOTE_COMM_ID);
	uint32_t remote_id = mad_be32(rej, MSG_LOCAL_COMM_ID);
	uint16_t reason = mad_be16(rej, REJ_REASON);
	struct uroce_cm_id *id = NULL;
	struct uroce_cm_event *ev;

	if (local_id) {
		id = find_local(cm, local_id);
		/* a REJ of anything but our REQ names both IDs */
		if (id && mad_bits(rej, REJ_BYTE8, 0xC0) != CM_MSG_REQ &&
		    id->remote_id != remote_id)
			id = NULL;
	} else if (reason == UROCE_CM_REJ_TIMEOUT &&
		   mad_bits(rej, REJ_BYTE9, 0xFE) >= 8) {
		/* the sender of a REQ gave up: it names itself by CA GUID */
		uint64_t guid = mad_be64(rej, REJ_ARI);

		for (id = cm->ids; id; id = id->next)
			if (id->remote_guid == guid &&
			    id->remote_id == remote_id &&
			    id->state != CM_IDLE && id->state != CM_LISTEN)
				break;
	}
	if (!id) {
		STAT_INC(cm->nic, mad_unknown_id);
		return;
	}
	switch (id->state) {
	case CM_REQ_SENT:
	case CM_REQ_RCVD:
	case CM_REP_SENT:
	case CM_REP_RCVD:
		cm_enter_idle(id);
		ev = cm_queue_event(pl, id, UROCE_CM_REJ_RECEIVED,
				 rej + REJ_PRIVATE_DATA, REJ_PRIVATE_DATA_LEN);
		if (ev)
			ev->status = reason;
		break;
	default:
		STAT_INC(cm->nic, mad_bad_state);
	}
}

static void rx_mra(struct uroce_cm_id *id, const uint8_t *mra)
{
	unsigned msg = mad_bits(mra, MRA_BYTE8, 0xC0);
	unsigned t = mad_bits(mra, MRA_BYTE9, 0xF8);

	if ((id->state == CM_REQ_SENT && msg == CM_MSG_REQ) ||
	    (id->state == CM_REP_SENT && msg == CM_MSG_REP)) {
		/* the peer needs longer than our timer: wait what it says
		 * before the next retransmission */
		cm_set_timer(id, uroce_now_ns() + cm_ms_ns(uroce_cm_time_ms(t)) +
				      id->timeout_ns);
		return;
	}
	STAT_INC(id->cm->nic, mad_bad_state);
}

static void rx_dreq(struct uroce_cm *cm, const struct cm_mad_rx *m,
		    struct pending_list *pl)
{
	const uint8_t *dreq = m->mad + MAD_HDR_LEN;
	struct uroce_cm_id *id =
		find_local(cm, mad_be32(dreq, MSG_REMOTE_COMM_ID));

	if (!id || id->remote_id != mad_be32(dreq, MSG_LOCAL_COMM_ID) ||
	    id->state == CM_IDLE || id->state == CM_LISTEN) {
		uroce_cm_reply_drep(cm->nic, m);
		return;
	}
	/* a DREQ for another QP is not for this connection (Linux drops
	 * it too, without an answer) */
	if (mad_be24(dreq, DREQ_REMOTE_QPN) != id->local_qpn) {
		STAT_INC(cm->nic, mad_bad_state);
		return;
	}
	switch (id->state) {
	case CM_ESTABLISHED:
	case CM_REP_SENT:
	case CM_DREQ_SENT:
		id->state = CM_DREQ_RCVD;
		id->deadline = 0;
		id->tid = mad_be64(m->mad, MADH_TID);
		if (!cm_queue_event(pl, id, UROCE_CM_DREQ_RECEIVED, NULL, 0) &&
		    id->destroyed && cm_id_send_drep(id, NULL, 0))
			STAT_INC(cm->nic, tx_errors);
		break;
	case CM_TIMEWAIT:
		STAT_INC(cm->nic, mad_duplicates);
		if (mad_be16(id->mad, MADH_ATTR_ID) == CM_ATTR_DREP &&
		    cm_id_send(id))
			STAT_INC(cm->nic, tx_errors);
		break;
	default:
		STAT_INC(cm->nic, mad_duplicates);
	}
}

static void rx_sidr_req(struct uroce_cm *cm, const struct cm_mad_rx *m,
			struct pending_list *pl)
{
	struct uroce_nic *nic = cm->nic;
	const uint8_t *req = m->mad + MAD_HDR_LEN;
	uint32_t request_id = mad_be32(req, SIDR_REQ_REQUEST_ID);
	uint64_t sid = mad_be64(req, SIDR_REQ_SERVICE_ID);
	struct uroce_cm_id *listener, *id;
	struct uroce_cm_event *ev;
	struct uroce_cm_path path;

	for (id = cm->ids; id; id = id->next) {
		/* a retransmission while the consumer decides */
		if (id->state == CM_SIDR_REQ_RCVD &&
		    id->remote_id == request_id &&
		    uroce_sockaddr_same_ip(&id->peer, &m->rx->src)) {
			STAT_INC(nic, mad_duplicates);
			return;
		}
	}
	listener = find_listener(cm, sid);
	if (!listener || !reply_path(nic, m, &path)) {
		uroce_cm_reply_sidr(nic, m, 1);
		return;
	}
	if (listener->waiting >= (unsigned)listener->backlog ||
	    listener->destroyed) {
		STAT_INC(nic, mad_backlog_drops);
		return;
	}
	id = cm_id_alloc(cm, listener->handler, listener->context);
	if (!id)
		return;
	id->state = CM_SIDR_REQ_RCVD;
	id->remote_id = request_id;
	id->service_id = sid;
	id->tid = mad_be64(m->mad, MADH_TID);
	uroce_cm_reply_addrs(nic, m, &id->self, &id->peer);
	id->roce1 = m->rx->roce1;
	id->listener = listener;
	listener->waiting++;
	ev = cm_queue_event(pl, listener, UROCE_CM_SIDR_REQ_RECEIVED,
			 req + SIDR_REQ_PRIVATE_DATA,
			 SIDR_REQ_PRIVATE_DATA_LEN);
	if (!ev) {
		cm_enter_idle(id);
		id->destroyed = true;
		cm_id_maybe_free(id);
		return;
	}
	ev->new_id = id;
	id->calls++;
	ev->sidr_req.path = path;
	ev->sidr_req.service_id = sid;
}

static void rx_sidr_rep(struct uroce_cm_id *id, const uint8_t *rep,
			struct pending_list *pl)
{
	struct uroce_cm_event *ev;

	if (id->state != CM_SIDR_REQ_SENT) {
		STAT_INC(id->cm->nic, mad_duplicates);
		return;
	}
	cm_enter_idle(id);
	ev = cm_queue_event(pl, id, UROCE_CM_SIDR_REP_RECEIVED,
			 rep + SIDR_REP_PRIVATE_DATA,
			 SIDR_REP_PRIVATE_DATA_LEN);
	if (!ev)
		return;
	ev->status = rep[SIDR_REP_STATUS];
	ev->sidr_rep.qp_num = mad_be24(rep, SIDR_REP_QPN);
	ev->sidr_rep.qkey = mad_be32(rep, SIDR_REP_QKEY);
}

void uroce_cm_rx(struct uroce_nic *nic, const struct cm_mad_rx *m)
{
	struct uroce_cm *cm = nic->cm;
	const uint8_t *pl = m->mad + MAD_HDR_LEN;
	uint16_t attr = mad_be16(m->mad, MADH_ATTR_ID);
	struct pending_list events = { 0 };
	struct uroce_cm_id *id;

	pthread_mutex_lock(&cm->lock);
	switch (attr) {
	case CM_ATTR_REQ:
		rx_req(cm, m, &events);
		break;
	case CM_ATTR_SIDR_REQ:
		rx_sidr_req(cm, m, &events);
		break;
	case CM_ATTR_REJ:
		rx_rej(cm, pl, &events);
		break;
	case CM_ATTR_DREQ:
		rx_dreq(cm, m, &events);
		break;
	default:
		id = find_local(cm, attr == CM_ATTR_SIDR_REP ?
					    mad_be32(pl, SIDR_REP_REQUEST_ID) :
					    mad_be32(pl, MSG_REMOTE_COMM_ID));
		if (!id) {
			STAT_INC(nic, mad_unknown_id);
			break;
		}
		if (attr == CM_ATTR_REP) {
			rx_rep(cm, id, pl, &events);
		} else if (attr == CM_ATTR_SIDR_REP) {
			rx_sidr_rep(id, pl, &events);
		} else if (id->remote_id != mad_be32(pl, MSG_LOCAL_COMM_ID)) {
			STAT_INC(nic, mad_unknown_id);
		} else if (attr == CM_ATTR_MRA) {
			rx_mra(id, pl);
		} else if (attr == CM_ATTR_RTU) {
			if (id->state == CM_REP_SENT) {
				id->state = CM_ESTABLISHED;
				id->deadline = 0;
				cm_id_unwait(id);
				cm_queue_event(&events, id, UROCE_CM_RTU_RECEIVED,
					    NULL, 0);
			} else {
				STAT_INC(nic, mad_duplicates);
			}
		} else if (attr == CM_ATTR_DREP) {
			if (id->state == CM_DREQ_SENT) {
				cm_enter_timewait(id);
				cm_queue_event(&events, id, UROCE_CM_DREP_RECEIVED,
					    NULL, 0);
			} else {
				STAT_INC(nic, mad_duplicates);
			}
		}
	}
	cm_deliver_unlock(cm, &events);
}

bool uroce_cm_sid_local(struct uroce_nic *nic, uint64_t sid)
{
	struct uroce_cm *cm = nic->cm;
	bool local;

	pthread_mutex_lock(&cm->lock);
	local = cm_sid_taken(cm, sid);
	pthread_mutex_unlock(&cm->lock);
	return local;
}

unsigned uroce_cm_num_ids(struct uroce_nic *nic)
{
	unsigned n = 0;

	pthread_mutex_lock(&nic->cm->lock);
	for (struct uroce_cm_id *i = nic->cm->ids; i; i = i->next)
		n++;
	pthread_mutex_unlock(&nic->cm->lock);
	return n;
}

uint32_t uroce_cm_local_id(struct uroce_cm_id *id)
{
	return id->local_id;
}
