/*
 * Connections: QPs on ids, and rdma_connect / accept / reject / disconnect
 * over the CM, with the QP moved through INIT, RTR and RTS the way the
 * kernel's rdma_cm and rdma-core's librdmacm do it between them.  What the
 * CM's events become is in conn_events.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cma.h"

static bool is_ud(const struct cma_id *id)
{
	return id->id.qp_type == IBV_QPT_UD;
}

int cma_qp_attr(struct cma_id *id, struct ibv_qp_attr *attr, int *mask)
{
	enum ibv_qp_state state = attr->qp_state;
	/* XRC QPs are RC's halves; the verbs drop the half they lack */
	bool rc = id->id.qp_type == IBV_QPT_RC ||
		  id->id.qp_type == IBV_QPT_XRC_SEND ||
		  id->id.qp_type == IBV_QPT_XRC_RECV;

	memset(attr, 0, sizeof(*attr));
	attr->qp_state = state;
	switch (state) {
	case IBV_QPS_INIT:
		attr->pkey_index = 0;
		attr->port_num = id->id.port_num ? id->id.port_num : 1;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (is_ud(id)) {
			attr->qkey = id->qkey;
			*mask |= IBV_QP_QKEY;
		} else {
			attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
			if (id->responder_resources)
				attr->qp_access_flags |=
					IBV_ACCESS_REMOTE_READ |
					IBV_ACCESS_REMOTE_ATOMIC;
			*mask |= IBV_QP_ACCESS_FLAGS;
		}
		return 0;
	case IBV_QPS_RTR:
		*mask = IBV_QP_STATE;
		if (is_ud(id))
			return 0;
		if (id->state != CMA_CONNECT_REQUEST &&
		    id->state != CMA_CONNECT_RESPONSE &&
		    id->state != CMA_ACCEPTED && id->state != CMA_ESTABLISHED)
			return EINVAL;
		attr->ah_attr.is_global = 1;
		attr->ah_attr.grh.dgid = id->path.dgid;
		attr->ah_attr.grh.sgid_index = id->path.sgid_index;
		attr->ah_attr.grh.hop_limit = id->path.hop_limit;
		attr->ah_attr.grh.traffic_class = id->path.traffic_class;
		attr->ah_attr.grh.flow_label = id->path.flow_label;
		attr->ah_attr.sl = id->path.sl;
		attr->ah_attr.port_num = id->id.port_num;
		attr->path_mtu = id->peer.mtu ? id->peer.mtu : id->path.mtu;
		attr->dest_qp_num = id->peer.qp_num;
		attr->rq_psn = id->seq_num;
		*mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			 IBV_QP_RQ_PSN;
		if (rc) {
			attr->max_dest_rd_atomic = id->responder_resources;
			attr->min_rnr_timer = 0;	/* as Linux's CM */
			*mask |= IBV_QP_MAX_DEST_RD_ATOMIC |
				 IBV_QP_MIN_RNR_TIMER;
		}
		return 0;
	case IBV_QPS_RTS:
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (is_ud(id))
			return 0;
		if (id->state != CMA_CONNECT_REQUEST &&
		    id->state != CMA_CONNECT_RESPONSE &&
		    id->state != CMA_ACCEPTED && id->state != CMA_ESTABLISHED)
			return EINVAL;
		attr->sq_psn = id->peer.psn;
		if (rc) {
			attr->timeout = id->ack_timeout ? id->ack_timeout
							: id->peer.local_ack_timeout;
			attr->retry_cnt = id->retry_count;
			attr->rnr_retry = id->rnr_retry_count;
			attr->max_rd_atomic = id->initiator_depth;
			*mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		}
		return 0;
	default:
		return EINVAL;
	}
}

CMA_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id,
				 struct ibv_qp_attr *attr, int *mask)
{
	if (!id || !attr || !mask)
		return cma_errno(EINVAL);
	return cma_errno(cma_qp_attr(to_cma(id), attr, mask));
}

static int modify(struct cma_id *id, enum ibv_qp_state state)
{
	struct ibv_qp_attr attr = { .qp_state = state };
	int mask, err;

	err = cma_qp_attr(id, &attr, &mask);
	return err ? err : ibv_modify_qp(id->id.qp, &attr, mask);
}

/* INIT again with the access the connection grants, then RTR and RTS. */
static int qp_connect(struct cma_id *id)
{
	int err;

	if (!id->id.qp)
		return 0;
	err = modify(id, IBV_QPS_INIT);
	if (!err)
		err = modify(id, IBV_QPS_RTR);
	if (!err)
		err = modify(id, IBV_QPS_RTS);
	return err;
}

static int qp_to_error(struct cma_id *id)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	return id->id.qp ? ibv_modify_qp(id->id.qp, &attr, IBV_QP_STATE) : 0;
}

/* ---- QPs on ids ---------------------------------------------------------- */

static int create_cqs(struct cma_id *id, uint32_t send_size,
		      uint32_t recv_size)
{
	struct ibv_context *verbs = id->id.verbs;

	if (recv_size && !id->id.recv_cq) {
		id->id.recv_cq_channel = ibv_create_comp_channel(verbs);
		if (!id->id.recv_cq_channel)
			goto fail;
		id->id.recv_cq = ibv_create_cq(verbs, recv_size, id, id->id.recv_cq_channel, 0);
		if (!id->id.recv_cq)
			goto fail;
	}
	if (send_size && !id->id.send_cq) {
		id->id.send_cq_channel = ibv_create_comp_channel(verbs);
		if (!id->id.send_cq_channel)
			goto fail;
		id->id.send_cq = ibv_create_cq(verbs, send_size, id, id->id.send_cq_channel, 0);
		if (!id->id.send_cq)
			goto fail;
	}
	id->own_cqs = true;
	return 0;
fail:
	id->own_cqs = true;
	cma_destroy_cqs(id);
	return errno ? errno : ENOMEM;
}

void cma_destroy_cqs(struct cma_id *id)
{
	struct rdma_cm_id *i = &id->id;

	if (!id->own_cqs)
		return;
	if (i->recv_cq)
		ibv_destroy_cq(i->recv_cq);
	if (i->recv_cq_channel)
		ibv_destroy_comp_channel(i->recv_cq_channel);
	if (i->send_cq)
		ibv_destroy_cq(i->send_cq);
	if (i->send_cq_channel)
		ibv_destroy_comp_channel(i->send_cq_channel);
	i->recv_cq = i->send_cq = NULL;
	i->recv_cq_channel = i->send_cq_channel = NULL;
	id->own_cqs = false;
}

/* A new QP goes to INIT (UD all the way to RTS: it needs no peer). */
static int qp_init(struct cma_id *id)
{
	int err = modify(id, IBV_QPS_INIT);

	if (!err && is_ud(id))
		err = modify(id, IBV_QPS_RTR);
	if (!err && is_ud(id)) {
		id->peer.psn = 0;
		err = modify(id, IBV_QPS_RTS);
	}
	return err;
}

CMA_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cm_id,
				 struct ibv_qp_init_attr_ex *attr)
{
	struct cma_id *id = to_cma(cm_id);
	struct ibv_qp *qp;
	int err;

	if (!cm_id || !attr || !cm_id->verbs || cm_id->qp)
		return cma_errno(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = cm_id->pd;
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	/* RDMA_PS_IB ids take the type of their QP; the others have one */
	if (cm_id->ps == RDMA_PS_IB && !cm_id->qp)
		cm_id->qp_type = attr->qp_type;
	if (attr->pd->context != cm_id->verbs ||
	    attr->qp_type != cm_id->qp_type)
		return cma_errno(EINVAL);
	if (attr->qp_type == IBV_QPT_XRC_RECV) {
		/* a target QP has no queues: its domain's SRQs receive */
		if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd) {
			attr->xrcd = cma_xrcd(id->dev);
			if (!attr->xrcd)
				return -1;
			attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
		}
	} else if (!attr->srq && cm_id->srq) {
		attr->srq = cm_id->srq;
	}
	if (attr->qp_type == IBV_QPT_XRC_SEND)
		attr->cap.max_recv_wr = 0;	/* and so no receive CQ */
	if (attr->qp_type != IBV_QPT_XRC_RECV &&
	    (!attr->send_cq || !attr->recv_cq)) {
		err = create_cqs(id, attr->send_cq ? 0 : attr->cap.max_send_wr,
				 attr->recv_cq ? 0 : attr->cap.max_recv_wr);
		if (err)
			return cma_errno(err);
		if (!attr->send_cq)
			attr->send_cq = cm_id->send_cq;
		if (!attr->recv_cq)
			attr->recv_cq = cm_id->recv_cq;
	}
	qp = ibv_create_qp_ex(cm_id->verbs, attr);
	if (!qp) {
		err = errno;
		cma_destroy_cqs(id);
		return cma_errno(err);
	}
	cm_id->qp = qp;
	err = qp_init(id);
	if (err) {
		ibv_destroy_qp(qp);
		cm_id->qp = NULL;
		cma_destroy_cqs(id);
		return cma_errno(err);
	}
	return 0;
}

CMA_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex attr;
	int ret;

	if (!id || !qp_init_attr)
		return cma_errno(EINVAL);
	memset(&attr, 0, sizeof(attr));
	memcpy(&attr, qp_init_attr, sizeof(*qp_init_attr));
	attr.comp_mask = IBV_QP_INIT_ATTR_PD;
	attr.pd = pd;
	ret = rdma_create_qp_ex(id, &attr);
	if (!ret) {
		/* what was created for it, and the caps granted */
		qp_init_attr->send_cq = attr.send_cq;
		qp_init_attr->recv_cq = attr.recv_cq;
		qp_init_attr->srq = attr.srq;
		qp_init_attr->cap = attr.cap;
	}
	return ret;
}

CMA_EXPORT void rdma_destroy_qp(struct rdma_cm_id *cm_id)
{
	if (!cm_id || !cm_id->qp)
		return;
	ibv_destroy_qp(cm_id->qp);
	cm_id->qp = NULL;
	if (!cm_id->srq)
		cma_destroy_cqs(to_cma(cm_id));
}

/* ---- the active side ----------------------------------------------------- */

/* 255 stands for the device's most; more than that is an error. */
static int resources(const struct cma_id *id, unsigned asked, int max,
		     uint8_t *out)
{
	(void)id;
	if (asked == RDMA_MAX_RESP_RES)
		asked = max;
	if (asked > (unsigned)max)
		return EINVAL;
	*out = asked;
	return 0;
}

static int connect_ud(struct cma_id *id, struct rdma_conn_param *param)
{
	uint8_t data[CMA_HDR_LEN + 216];
	unsigned len = param ? param->private_data_len : 0;
	struct uroce_cm_sidr_req_param p = {
		.path = id->path,
		.service_id = id->service_id,
		.timeout_ms = uroce_cm_time_ms(CMA_CM_RESPONSE_TIMEOUT),
		.max_retries = CMA_MAX_CM_RETRIES,
	};

	if (len > sizeof(data) - CMA_HDR_LEN ||
	    (len && !param->private_data))
		return EINVAL;
	memset(data, 0, sizeof(data));
	cma_format_hdr(id, data);
	if (len)
		memcpy(data + CMA_HDR_LEN, param->private_data, len);
	p.private_data = data;
	p.private_data_len = CMA_HDR_LEN + len;
	cma_set_state(id, CMA_CONNECT);
	return -uroce_cm_send_sidr_req(id->cm, &p);
}

CMA_EXPORT int rdma_connect(struct rdma_cm_id *cm_id,
			    struct rdma_conn_param *param)
{
	struct cma_id *id = to_cma(cm_id);
	uint8_t data[92];	/* a REQ's private data */
	struct uroce_cm_req_param p;
	unsigned len;
	int err;

	if (!cm_id || id->state != CMA_ROUTE_RESOLVED)
		return cma_errno(EINVAL);
	id->service_id = (uint64_t)cm_id->ps << 16 |
			 cma_port(&cm_id->route.addr.dst_addr);
	if (is_ud(id)) {
		err = connect_ud(id, param);
	} else {
		len = param ? param->private_data_len : 0;
		if ((!param && !cm_id->qp) ||
		    len > sizeof(data) - CMA_HDR_LEN ||
		    (len && !param->private_data))
			return cma_errno(EINVAL);
		err = resources(id, param ? param->responder_resources
					  : RDMA_MAX_RESP_RES,
				id->dev->max_resp_res,
				&id->responder_resources);
		if (!err)
			err = resources(id, param ? param->initiator_depth
						  : RDMA_MAX_INIT_DEPTH,
					id->dev->max_init_depth,
					&id->initiator_depth);
		if (err)
			return cma_errno(err);
		id->retry_count = cma_min_u8(param ? param->retry_count : 7, 7);
		memset(data, 0, sizeof(data));
		cma_format_hdr(id, data);
		if (len)
			memcpy(data + CMA_HDR_LEN, param->private_data, len);
		memset(&p, 0, sizeof(p));
		p.path = id->path;
		p.service_id = id->service_id;
		p.qp_num = cm_id->qp ? cm_id->qp->qp_num : param->qp_num;
		p.starting_psn = id->seq_num;
		p.transport = cm_id->qp_type == IBV_QPT_UC
				      ? UROCE_CM_TRANSPORT_UC
			      : cm_id->qp_type == IBV_QPT_XRC_SEND
				      ? UROCE_CM_TRANSPORT_XRC
				      : UROCE_CM_TRANSPORT_RC;
		p.responder_resources = id->responder_resources;
		p.initiator_depth = id->initiator_depth;
		p.retry_count = id->retry_count;
		p.rnr_retry_count = cma_min_u8(param ? param->rnr_retry_count : 7, 7);
		p.srq = cm_id->srq || (cm_id->qp && cm_id->qp->srq) ||
			(param && param->srq);
		p.flow_control = param ? param->flow_control : 0;
		p.local_ack_timeout = id->ack_timeout ? id->ack_timeout
			: cma_ack_timeout(CMA_TARGET_ACK_DELAY, id->path.packet_life_time);
		p.remote_cm_response_timeout = CMA_CM_RESPONSE_TIMEOUT;
		p.local_cm_response_timeout = CMA_CM_RESPONSE_TIMEOUT;
		p.max_cm_retries = CMA_MAX_CM_RETRIES;
		p.private_data = data;
		p.private_data_len = CMA_HDR_LEN + len;
		cma_set_state(id, CMA_CONNECT);
		err = -uroce_cm_send_req(id->cm, &p);
	}
	if (err) {
		cma_revert_state(id, CMA_CONNECT, CMA_ROUTE_RESOLVED);
		return cma_errno(err);
	}
	return cma_complete(id);
}

/* The REP arrived: RTR and RTS with what it says, then the RTU. */
int cma_process_conn_resp(struct cma_id *id, struct cma_event *ev)
{
	int err;

	if (!id->id.qp) {
		/* the application moves its own QP, then rdma_establish */
		ev->event.event = RDMA_CM_EVENT_CONNECT_RESPONSE;
		return 0;
	}
	err = qp_connect(id);
	if (!err) {
		cma_set_state(id, CMA_ESTABLISHED);
		err = -uroce_cm_send_rtu(id->cm, NULL, 0);
	}
	if (err) {
		uroce_cm_send_rej(id->cm, UROCE_CM_REJ_CONSUMER_DEFINED, NULL, 0);
		qp_to_error(id);
		cma_set_state(id, CMA_ERROR);
		ev->event.event = RDMA_CM_EVENT_CONNECT_ERROR;
		ev->event.status = -err;
		return 0;
	}
	ev->event.event = RDMA_CM_EVENT_ESTABLISHED;
	return 0;
}

CMA_EXPORT int rdma_establish(struct rdma_cm_id *cm_id)
{
	struct cma_id *id = to_cma(cm_id);
	int err;

	if (!cm_id || id->state != CMA_CONNECT_RESPONSE)
		return cma_errno(EINVAL);
	cma_set_state(id, CMA_ESTABLISHED);
	err = -uroce_cm_send_rtu(id->cm, NULL, 0);
	if (err)
		cma_set_state(id, CMA_CONNECT_RESPONSE);
	return cma_errno(err);
}

/* ---- the passive side ---------------------------------------------------- */

CMA_EXPORT int rdma_accept(struct rdma_cm_id *cm_id,
			   struct rdma_conn_param *param)
{
	struct cma_id *id = to_cma(cm_id);
	unsigned len = param ? param->private_data_len : 0;
	int err;

	if (!cm_id || id->state != CMA_CONNECT_REQUEST ||
	    (len && !param->private_data))
		return cma_errno(EINVAL);
	if (is_ud(id)) {
		struct uroce_cm_sidr_rep_param p = {
			.status = 0,
			.qp_num = cm_id->qp ? cm_id->qp->qp_num
					    : (param ? param->qp_num : 0),
			.qkey = id->qkey,
			.private_data = param ? param->private_data : NULL,
			.private_data_len = len,
		};

		if (len > 136)
			return cma_errno(EINVAL);
		err = -uroce_cm_send_sidr_rep(id->cm, &p);
		if (!err)
			cma_set_state(id, CMA_ESTABLISHED);
		return cma_errno(err);
	}
	/* 255 (or no parameters) takes what the peer offers, as far as the
	 * device goes */
	err = len > 196 ? EINVAL : 0;
	if (!err)
		err = resources(id, param ? param->responder_resources
					  : RDMA_MAX_RESP_RES,
				id->dev->max_resp_res, &id->responder_resources);
	if (!err && (!param || param->responder_resources == RDMA_MAX_RESP_RES))
		id->responder_resources = cma_min_u8(id->responder_resources,
						     id->peer.initiator_depth);
	if (!err)
		err = resources(id, param ? param->initiator_depth
					  : RDMA_MAX_INIT_DEPTH,
				id->dev->max_init_depth, &id->initiator_depth);
	if (!err && (!param || param->initiator_depth == RDMA_MAX_INIT_DEPTH))
		id->initiator_depth = cma_min_u8(id->initiator_depth,
					         id->peer.responder_resources);
	if (!err)
		err = qp_connect(id);
	if (!err) {
		struct uroce_cm_rep_param p = {
			.qp_num = cm_id->qp ? cm_id->qp->qp_num
					    : (param ? param->qp_num : 0),
			.xrc_target = cm_id->qp_type == IBV_QPT_XRC_RECV,
			.starting_psn = id->seq_num,
			.responder_resources = id->responder_resources,
			.initiator_depth = id->initiator_depth,
			.target_ack_delay = CMA_TARGET_ACK_DELAY,
			.rnr_retry_count = cma_min_u8(param ? param->rnr_retry_count : 7, 7),
			    .srq = cm_id->srq || (cm_id->qp && cm_id->qp->srq) ||
			           (param && param->srq),
			    .flow_control = param ? param->flow_control : 0,
			    .private_data = param ? param->private_data : NULL,
			    .private_data_len = len,
		    };

		cma_set_state(id, CMA_ACCEPTED);
		err = -uroce_cm_send_rep(id->cm, &p);
	}
	if (err) {
		/* the kernel's rdma_accept failure path: refuse the peer */
		qp_to_error(id);
		uroce_cm_send_rej(id->cm, UROCE_CM_REJ_CONSUMER_DEFINED, NULL, 0);
		cma_set_state(id, CMA_ERROR);
		return cma_errno(err);
	}
	return cma_complete(id);
}

CMA_EXPORT int rdma_reject(struct rdma_cm_id *cm_id, const void *data,
			   uint8_t len)
{
	struct cma_id *id = to_cma(cm_id);
	int err;

	if (!cm_id || id->state != CMA_CONNECT_REQUEST || (len && !data))
		return cma_errno(EINVAL);
	if (is_ud(id)) {
		struct uroce_cm_sidr_rep_param p = {
			.status = 2,	/* rejected */
			.private_data = data,
			.private_data_len = len,
		};

		err = len > 136 ? EINVAL : -uroce_cm_send_sidr_rep(id->cm, &p);
	} else {
		err = len > 148 ? EINVAL
				: -uroce_cm_send_rej(id->cm,
						     UROCE_CM_REJ_CONSUMER_DEFINED,
						     data, len);
	}
	if (!err)
		cma_set_state(id, CMA_ERROR);
	return cma_errno(err);
}

CMA_EXPORT int rdma_notify(struct rdma_cm_id *cm_id, enum ibv_event_type event)
{
	struct cma_id *id = to_cma(cm_id);

	if (!cm_id)
		return cma_errno(EINVAL);
	if (event != IBV_EVENT_COMM_EST)
		return cma_errno(EINVAL);
	/* traffic before the RTU: the connection is up */
	if (id->state == CMA_ACCEPTED)
		return cma_errno(-uroce_cm_establish(id->cm));
	return 0;
}

CMA_EXPORT int rdma_disconnect(struct rdma_cm_id *cm_id)
{
	struct cma_id *id = to_cma(cm_id);
	bool answer;
	int err;

	if (!cm_id)
		return cma_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	answer = id->dreq_received;
	if (!answer && id->state != CMA_ESTABLISHED &&
	    id->state != CMA_ACCEPTED && id->state != CMA_CONNECT_RESPONSE) {
		pthread_mutex_unlock(&cma_lock);
		return cma_errno(EINVAL);
	}
	id->state = CMA_DISCONNECT;
	pthread_mutex_unlock(&cma_lock);
	/* the QP flushes first, as rdma-core's does */
	err = qp_to_error(id);
	if (err)
		return cma_errno(err);
	if (answer)
		err = -uroce_cm_send_drep(id->cm, NULL, 0);
	else
		err = -uroce_cm_send_dreq(id->cm, NULL, 0);
	/* a DREQ that crossed ours was answered already */
	if (err == EINVAL)
		err = 0;
	if (err)
		return cma_errno(err);
	return cma_complete(id);
}
