/*
 * CM events: they arrive in cma_cm_handler (the NIC's receiving thread) and
 * become rdma_cm events on the id's channel; a connection request makes a
 * new id, a reply moves the active side's QP on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cma.h"

static struct cma_event *event_for(struct cma_id *id, enum rdma_cm_event_type t,
				   int status, const struct uroce_cm_event *ev,
				   unsigned skip)
{
	struct cma_event *e = cma_event_new(id, t, status);
	unsigned len;

	if (!e)
		return NULL;
	len = ev->private_data_len > skip ? ev->private_data_len - skip : 0;
	if (len > sizeof(e->private_data))
		len = sizeof(e->private_data);
	if (len)
		memcpy(e->private_data, ev->private_data + skip, len);
	e->event.param.conn.private_data = len ? e->private_data : NULL;
	e->event.param.conn.private_data_len = len;
	return e;
}

/* An RDMA_PS_IB connection is of the type its REQ asks for (the kernel's
 * cma_ib_new_conn_id); the passive end of XRC is the target. */
static enum ibv_qp_type qp_type_of(uint8_t transport)
{
	switch (transport) {
	case UROCE_CM_TRANSPORT_UC:
		return IBV_QPT_UC;
	case UROCE_CM_TRANSPORT_XRC:
		return IBV_QPT_XRC_RECV;
	default:
		return IBV_QPT_RC;
	}
}

/* A new passive id for a request the listener takes; nonzero refuses it. */
static int new_conn(struct cma_id *listener, const struct uroce_cm_event *ev,
		    uint64_t sid)
{
	bool sidr = ev->type == UROCE_CM_SIDR_REQ_RECEIVED;
	const struct uroce_cm_path *path = sidr ? &ev->sidr_req.path
						: &ev->req.path;
	struct cma_id *id;
	struct cma_event *e;

	id = cma_id_new(listener->chan, listener->id.context, listener->id.ps,
			listener->id.ps == RDMA_PS_IB && !sidr
				? qp_type_of(ev->req.transport)
				: listener->id.qp_type);
	if (!id)
		return 1;
	if (!cma_parse_hdr(listener, id, ev->private_data, sid)) {
		pthread_cond_destroy(&id->acked);
		free(id);
		return 1;
	}
	id->cm = ev->new_id;
	id->listener = listener;
	id->path = *path;
	id->path.packet_life_time = CMA_PACKET_LIFE_TIME;
	if (!id->path.mtu)
		id->path.mtu = IBV_MTU_1024;
	id->service_id = sid;
	id->qkey = listener->qkey;
	id->tos = listener->tos;
	id->ack_timeout = listener->ack_timeout;
	cma_set_verbs(id);
	id->id.route.addr.addr.ibaddr.sgid = path->sgid;
	id->id.route.addr.addr.ibaddr.dgid = path->dgid;
	if (!sidr) {
		id->peer.qp_num = ev->req.qp_num;
		id->peer.psn = ev->req.starting_psn;
		id->peer.responder_resources = ev->req.responder_resources;
		id->peer.initiator_depth = ev->req.initiator_depth;
		id->peer.local_ack_timeout = ev->req.local_ack_timeout;
		id->peer.mtu = ev->req.path.mtu;
		id->peer.srq = ev->req.srq;
		id->peer.flow_control = ev->req.flow_control;
		id->peer.transport = ev->req.transport;
		id->retry_count = ev->req.retry_count;
		id->rnr_retry_count = ev->req.rnr_retry_count;
	}
	cma_build_path(id);
	id->state = CMA_CONNECT_REQUEST;
	uroce_cm_set_context(ev->new_id, id);

	e = event_for(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, ev, CMA_HDR_LEN);
	if (!e) {
		/* the CM refuses the REQ; the id never reached anyone */
		pthread_cond_destroy(&id->acked);
		free(id);
		return 1;
	}
	e->event.listen_id = &listener->id;
	if (!sidr) {
		/* the peer's view, as the kernel reports it: what it offers
		 * to serve is what we may initiate, and the other way round */
		e->event.param.conn.responder_resources =
			ev->req.initiator_depth;
		e->event.param.conn.initiator_depth =
			ev->req.responder_resources;
		e->event.param.conn.flow_control = ev->req.flow_control;
		e->event.param.conn.retry_count = ev->req.retry_count;
		e->event.param.conn.rnr_retry_count = ev->req.rnr_retry_count;
		e->event.param.conn.srq = ev->req.srq;
		e->event.param.conn.qp_num = ev->req.qp_num;
	}
	pthread_mutex_lock(&cma_lock);
	cma_queue(e);
	pthread_mutex_unlock(&cma_lock);
	return 0;
}

/* The CM hands a request to one listener of its service ID; the port may be
 * shared by several, of which the rdma_cm header picks one. */
static int on_request(struct cma_id *got, const struct uroce_cm_event *ev)
{
	uint64_t sid = ev->type == UROCE_CM_SIDR_REQ_RECEIVED
			       ? ev->sidr_req.service_id
			       : ev->req.service_id;
	struct cma_id *listener;
	int refused;

	if (ev->private_data_len < CMA_HDR_LEN)
		return 1;
	listener = cma_listener_for(got, ev->private_data, sid);
	if (!listener)
		return 1;
	refused = new_conn(listener, ev, sid);
	cma_listener_done();
	return refused;
}

static void ud_param(struct cma_id *id, struct rdma_ud_param *ud,
		     const struct uroce_cm_event *ev)
{
	ud->ah_attr.is_global = 1;
	ud->ah_attr.grh.dgid = id->path.dgid;
	ud->ah_attr.grh.sgid_index = id->path.sgid_index;
	ud->ah_attr.grh.hop_limit = id->path.hop_limit;
	ud->ah_attr.grh.traffic_class = id->path.traffic_class;
	ud->ah_attr.grh.flow_label = id->path.flow_label;
	ud->ah_attr.port_num = id->id.port_num;
	ud->qp_num = ev->sidr_rep.qp_num;
	ud->qkey = ev->sidr_rep.qkey;
}

int cma_cm_handler(struct uroce_cm_id *cm, const struct uroce_cm_event *ev,
		   void *context)
{
	struct cma_id *id = context;
	struct cma_event *e = NULL;
	/* the state the event leads to; the application's threads change
	 * id->state too (under cma_lock), so it is read only under it */
	bool move = true;
	enum cma_state next = CMA_ERROR, now;

	(void)cm;
	switch (ev->type) {
	case UROCE_CM_REQ_RECEIVED:
	case UROCE_CM_SIDR_REQ_RECEIVED:
		return on_request(id, ev);
	case UROCE_CM_REP_RECEIVED:
		id->peer.qp_num = ev->rep.qp_num;
		id->peer.psn = ev->rep.starting_psn;
		id->peer.local_ack_timeout =
			cma_ack_timeout(ev->rep.target_ack_delay,
					id->path.packet_life_time);
		/* the REP's offer, seen from here */
		id->responder_resources = cma_min_u8(id->responder_resources,
						     ev->rep.initiator_depth);
		id->initiator_depth = cma_min_u8(id->initiator_depth,
					         ev->rep.responder_resources);
		id->rnr_retry_count = ev->rep.rnr_retry_count;
		e = event_for(id, RDMA_CM_EVENT_ESTABLISHED, 0, ev, 0);
		if (e) {
			e->internal = CMA_EV_CONNECT_RESPONSE;
			e->event.param.conn.responder_resources =
				ev->rep.initiator_depth;
			e->event.param.conn.initiator_depth =
				ev->rep.responder_resources;
			e->event.param.conn.flow_control = ev->rep.flow_control;
			e->event.param.conn.rnr_retry_count =
				ev->rep.rnr_retry_count;
			e->event.param.conn.srq = ev->rep.srq;
			e->event.param.conn.qp_num = ev->rep.qp_num;
		}
		next = CMA_CONNECT_RESPONSE;
		break;
	case UROCE_CM_RTU_RECEIVED:
		e = event_for(id, RDMA_CM_EVENT_ESTABLISHED, 0, ev, 0);
		next = CMA_ESTABLISHED;
		break;
	case UROCE_CM_REJ_RECEIVED:
		e = event_for(id, RDMA_CM_EVENT_REJECTED, ev->status, ev, 0);
		next = CMA_ERROR;
		break;
	case UROCE_CM_REQ_ERROR:
	case UROCE_CM_REP_ERROR:
	case UROCE_CM_SIDR_REQ_ERROR:
		e = event_for(id, RDMA_CM_EVENT_UNREACHABLE, ev->status, ev, 0);
		next = CMA_ERROR;
		break;
	case UROCE_CM_DREQ_RECEIVED:
		pthread_mutex_lock(&cma_lock);
		now = id->state;
		if (now != CMA_DISCONNECT)
			id->dreq_received = true;
		pthread_mutex_unlock(&cma_lock);
		if (now == CMA_DISCONNECT) {
			/* our DREQ crossed the peer's: answer it, we are
			 * done */
			uroce_cm_send_drep(id->cm, NULL, 0);
			e = event_for(id, RDMA_CM_EVENT_DISCONNECTED, 0, ev, 0);
		} else if (now == CMA_ESTABLISHED || now == CMA_ACCEPTED ||
			   now == CMA_CONNECT_RESPONSE) {
			e = event_for(id, RDMA_CM_EVENT_DISCONNECTED, 0, ev, 0);
		}
		next = CMA_DISCONNECT;
		break;
	case UROCE_CM_DREP_RECEIVED:
	case UROCE_CM_DREQ_ERROR:
		e = event_for(id, RDMA_CM_EVENT_DISCONNECTED, ev->status, ev, 0);
		move = false;
		break;
	case UROCE_CM_TIMEWAIT_EXIT:
		e = event_for(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, ev, 0);
		move = false;
		break;
	case UROCE_CM_SIDR_REP_RECEIVED:
		if (ev->status) {
			e = event_for(id, RDMA_CM_EVENT_UNREACHABLE, ev->status,
				      ev, 0);
			next = CMA_ERROR;
			break;
		}
		if (ev->sidr_rep.qkey != id->qkey && id->qkey &&
		    ev->sidr_rep.qkey) {
			e = event_for(id, RDMA_CM_EVENT_ADDR_ERROR, -EINVAL,
				      ev, 0);
			next = CMA_ERROR;
			break;
		}
		e = event_for(id, RDMA_CM_EVENT_ESTABLISHED, 0, ev, 0);
		if (e) {
			/* the conn and ud params share private data */
			e->event.param.ud.private_data =
				e->event.param.conn.private_data;
			e->event.param.ud.private_data_len =
				e->event.param.conn.private_data_len;
			ud_param(id, &e->event.param.ud, ev);
		}
		next = CMA_ESTABLISHED;
		break;
	}
	pthread_mutex_lock(&cma_lock);
	if (move && (id->state != CMA_DISCONNECT || next == CMA_DISCONNECT))
		id->state = next;
	if (e)
		cma_queue(e);
	pthread_mutex_unlock(&cma_lock);
	return 0;
}
