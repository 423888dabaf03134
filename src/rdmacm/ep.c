/*
 * The synchronous API (rdma_create_ep, rdma_get_request), SRQs on ids, and
 * ECE, which uroce does not have.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cma.h"

CMA_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id,
				  struct ibv_srq_init_attr_ex *attr)
{
	struct cma_id *priv = to_cma(id);
	struct ibv_srq *srq;

	if (!id || !attr || !id->verbs || id->srq)
		return cma_errno(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
		attr->srq_type = IBV_SRQT_BASIC;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	/* an XRC SRQ is in the device's XRC domain unless told otherwise */
	if (attr->srq_type == IBV_SRQT_XRC &&
	    (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd)) {
		attr->xrcd = cma_xrcd(priv->dev);
		if (!attr->xrcd)
			return -1;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
	}
	/* an XRC SRQ completes on its own CQ: make one if none is given */
	if (attr->srq_type == IBV_SRQT_XRC &&
	    (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq)) {
		if (!id->recv_cq) {
			id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
			id->recv_cq = id->recv_cq_channel
				? ibv_create_cq(id->verbs, attr->attr.max_wr, priv,
						id->recv_cq_channel, 0) : NULL;
			if (!id->recv_cq) {
				int err = errno;

				if (id->recv_cq_channel)
					ibv_destroy_comp_channel(id->recv_cq_channel);
				id->recv_cq_channel = NULL;
				return cma_errno(err);
			}
			priv->own_cqs = true;
		}
		attr->cq = id->recv_cq;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

CMA_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
			       struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ex;
	int ret;

	if (!id || !attr)
		return cma_errno(EINVAL);
	memset(&ex, 0, sizeof(ex));
	ex.srq_context = attr->srq_context;
	ex.attr = attr->attr;
	ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ex.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC
						      : IBV_SRQT_BASIC;
	ex.pd = pd ? pd : id->pd;
	ret = rdma_create_srq_ex(id, &ex);
	if (!ret)
		attr->attr = ex.attr;
	return ret;
}

CMA_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id || !id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
	if (!id->qp)
		cma_destroy_cqs(to_cma(id));
}

CMA_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
			      struct ibv_pd *pd,
			      struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct cma_id *priv;

	if (!id || !res)
		return cma_errno(EINVAL);
	if (rdma_create_id(NULL, &cm_id, NULL, res->ai_port_space))
		return -1;
	priv = to_cma(cm_id);
	cm_id->qp_type = res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		if (!res->ai_src_addr ||
		    rdma_bind_addr(cm_id, res->ai_src_addr))
			goto fail;
	} else if (rdma_resolve_addr(cm_id, res->ai_src_addr,
				     res->ai_dst_addr, 2000) ||
		   rdma_resolve_route(cm_id, 2000)) {
		goto fail;
	}
	if (qp_init_attr) {
		if (res->ai_flags & RAI_PASSIVE) {
			/* each connection gets a QP like this one */
			priv->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!priv->qp_init_attr) {
				errno = ENOMEM;
				goto fail;
			}
			*priv->qp_init_attr = *qp_init_attr;
			priv->qp_init_attr->qp_type = res->ai_qp_type;
		} else {
			struct ibv_qp_init_attr attr = *qp_init_attr;

			attr.qp_type = res->ai_qp_type;
			if (rdma_create_qp(cm_id, pd, &attr))
				goto fail;
			qp_init_attr->cap = attr.cap;
		}
	}
	if (pd)
		cm_id->pd = pd;
	*id = cm_id;
	return 0;
fail: {
	int err = errno;

	rdma_destroy_id(cm_id);
	errno = err;
	return -1;
}
}

CMA_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	cma_destroy_cqs(to_cma(id));
	rdma_destroy_id(id);
}

CMA_EXPORT int rdma_get_request(struct rdma_cm_id *listen,
				struct rdma_cm_id **id)
{
	struct cma_id *lpriv = to_cma(listen);
	struct rdma_cm_event *event;
	struct rdma_cm_id *new_id;

	if (!listen || !id || !lpriv->sync || lpriv->state != CMA_LISTEN)
		return cma_errno(EINVAL);
	if (lpriv->id.event) {
		rdma_ack_cm_event(lpriv->id.event);
		lpriv->id.event = NULL;
	}
	for (;;) {
		if (rdma_get_cm_event(listen->channel, &event))
			return -1;
		if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		/* nothing else is for a listener; it has no status to give */
		rdma_ack_cm_event(event);
	}
	new_id = event->id;
	/* the new id is synchronous like its listener */
	if (rdma_migrate_id(new_id, NULL))
		goto fail;
	if (lpriv->qp_init_attr) {
		struct ibv_qp_init_attr attr = *lpriv->qp_init_attr;

		if (listen->pd && listen->pd != lpriv->dev->pd)
			new_id->pd = listen->pd;
		if (listen->srq && !attr.srq)
			attr.srq = listen->srq;
		if (rdma_create_qp(new_id, new_id->pd, &attr))
			goto fail;
	}
	new_id->event = event;
	*id = new_id;
	return 0;
fail: {
	int err = errno;

	rdma_ack_cm_event(event);
	rdma_reject(new_id, NULL, 0);
	rdma_destroy_id(new_id);
	errno = err;
	return -1;
}
}

/* Enhanced Connection Establishment is vendor-specific (mlx5): uroce
 * offers no options, which is ECE's "none" (vendor 0). */
CMA_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece)
		return cma_errno(EINVAL);
	if (ece->vendor_id || ece->options)
		return cma_errno(EOPNOTSUPP);
	return 0;
}

CMA_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece)
		return cma_errno(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return 0;
}

CMA_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			       uint8_t private_data_len)
{
	struct cma_id *priv = to_cma(id);

	if (!id || priv->state != CMA_CONNECT_REQUEST ||
	    id->qp_type == IBV_QPT_UD || private_data_len > 148)
		return cma_errno(EINVAL);
	/* IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED */
	if (uroce_cm_send_rej(priv->cm, 35, private_data, private_data_len))
		return cma_errno(EINVAL);
	priv->state = CMA_ERROR;
	return 0;
}
