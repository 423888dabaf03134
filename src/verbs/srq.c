/*
 * Receive rings (a QP's RQ and SRQs share them) and the SRQ verbs.
 *
 * A ring has max_wr + 1 slots, one kept empty, and a fixed array of
 * max_sge scatter elements per slot, so posting never allocates.  SGEs are
 * resolved against their lkeys when posted, and checked again (cheaply, by
 * the MR's generation) when the responder consumes the WQE.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs/ops.h"

/* ---- receive rings --------------------------------------------------------- */

static uint32_t rq_count(const struct uroce_rq *rq)
{
	return (rq->head + rq->size - rq->tail) % rq->size;
}

int uroce_rq_init(struct uroce_rq *rq, uint32_t max_wr, uint32_t max_sge)
{
	/* at least one element per slot, so calloc never sees a zero size */
	size_t per_slot = max_sge ? max_sge : 1;

	memset(rq, 0, sizeof(*rq));
	rq->max_wr = max_wr;
	rq->max_sge = max_sge;
	rq->size = max_wr + 1;
	rq->wqe = calloc(rq->size, sizeof(*rq->wqe));
	rq->sges = calloc(rq->size * per_slot, sizeof(*rq->sges));
	if (!rq->wqe || !rq->sges) {
		free(rq->wqe);
		free(rq->sges);
		rq->wqe = NULL;
		rq->sges = NULL;
		return ENOMEM;
	}
	for (uint32_t i = 0; i < rq->size; i++)
		rq->wqe[i].sge = &rq->sges[i * per_slot];
	pthread_mutex_init(&rq->lock, NULL);
	return 0;
}

void uroce_rq_destroy(struct uroce_rq *rq)
{
	if (!rq->wqe)
		return;		/* never set up, or init failed */
	pthread_mutex_destroy(&rq->lock);
	free(rq->wqe);
	free(rq->sges);
	rq->wqe = NULL;
	rq->sges = NULL;
}

int uroce_rq_post(struct uroce_nic *nic, struct uroce_pd *pd, struct uroce_rq *rq,
		  struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	int err = 0;

	pthread_mutex_lock(&rq->lock);
	for (; wr; wr = wr->next) {
		uint32_t next = (rq->head + 1) % rq->size;
		struct uroce_recv_wqe *w = &rq->wqe[rq->head];

		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge) {
			err = EINVAL;
			break;
		}
		if (next == rq->tail) {
			err = ENOMEM;	/* the queue is full */
			break;
		}
		/* the responder writes into every element; as with a NIC, a
		 * bad lkey is the consuming message's error, not the post's */
		err = uroce_resolve_sges(nic, pd, wr->sg_list, wr->num_sge,
					 true, true, w->sge, &w->length);
		if (err)
			break;
		w->wr_id = wr->wr_id;
		w->num_sge = (uint32_t)wr->num_sge;
		rq->head = next;
	}
	pthread_mutex_unlock(&rq->lock);
	if (err)
		*bad_wr = wr;
	return err;
}

bool uroce_rq_pop(struct uroce_rq *rq, struct uroce_recv_wqe *out,
		  struct uroce_sge *sge_store)
{
	const struct uroce_recv_wqe *w;

	if (rq->tail == rq->head)
		return false;
	w = &rq->wqe[rq->tail];
	out->wr_id = w->wr_id;
	out->num_sge = w->num_sge;
	out->length = w->length;
	/* copied out: the slot is reused by the next post at once */
	memcpy(sge_store, w->sge, w->num_sge * sizeof(*sge_store));
	out->sge = sge_store;
	rq->tail = (rq->tail + 1) % rq->size;
	return true;
}

/* ---- shared receive queues ------------------------------------------------- */

/* The number an XRC request names this SRQ by; 0 if the table is full. */
static uint32_t srq_publish(struct uroce_nic *nic, struct uroce_srq *srq)
{
	uint32_t num = 0;

	pthread_mutex_lock(&nic->lock);
	for (unsigned tries = 0; tries < UROCE_MAX_SRQ; tries++) {
		unsigned idx = nic->next_srq_index % UROCE_MAX_SRQ + 1;

		nic->next_srq_index = idx;
		if (!atomic_load(&nic->srqs[idx])) {
			atomic_store(&nic->srqs[idx], srq);
			num = idx;
			break;
		}
	}
	pthread_mutex_unlock(&nic->lock);
	return num;
}

/* No arriving request reaches the SRQ once this returns: the table entry
 * is gone and no XRC target QP still points at it (both under rx_lock,
 * which every receiver holds). */
static void srq_unpublish(struct uroce_nic *nic, struct uroce_srq *srq)
{
	pthread_mutex_lock(&nic->rx_lock);
	pthread_mutex_lock(&nic->lock);
	atomic_store(&nic->srqs[srq->srq_num], NULL);
	for (int i = 0; i < atomic_load(&nic->num_live_qps); i++) {
		struct uroce_qp *qp = atomic_load(&nic->live_qps[i]);

		if (qp && qp->xrcd && qp->srq == srq) {
			/* a message into it that was under way is lost with
			 * it: its next packet is refused */
			qp->srq = NULL;
			qp->resp.in_send = false;
			qp->resp.cur_held = false;
		}
	}
	pthread_mutex_unlock(&nic->lock);
	pthread_mutex_unlock(&nic->rx_lock);
}

struct uroce_srq *uroce_srq_lookup(struct uroce_nic *nic, uint32_t srq_num)
{
	if (!srq_num || srq_num > UROCE_MAX_SRQ)
		return NULL;
	return atomic_load(&nic->srqs[srq_num]);
}

static struct ibv_srq *srq_create(struct ibv_context *ctx, struct ibv_pd *ibpd,
				  struct ibv_srq_attr *a, void *srq_context,
				  struct uroce_xrcd *xrcd, struct ibv_cq *cq)
{
	struct uroce_nic *nic = to_uctx(ctx)->nic;
	struct uroce_srq *srq;
	uint32_t max_sge;
	int err;

	if (!ibpd || ibpd->context != ctx || !a->max_wr ||
	    a->max_wr > UROCE_MAX_SRQ_WR || a->max_sge > UROCE_MAX_SRQ_SGE) {
		errno = EINVAL;
		return NULL;
	}
	/* every SRQ counts, numbered (XRC) or not */
	if (!uroce_nic_take(&nic->used.srq, UROCE_MAX_SRQ)) {
		errno = ENOMEM;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	/* An SRQ that can hold no data is no use: round 0 elements up to
	 * one, as the man page allows (at least what was asked for). */
	max_sge = a->max_sge ? a->max_sge : 1;
	err = srq ? uroce_rq_init(&srq->rq, a->max_wr, max_sge) : ENOMEM;
	if (err) {
		free(srq);
		atomic_fetch_sub(&nic->used.srq, 1);
		errno = err;
		return NULL;
	}
	atomic_init(&srq->use_cnt, 0);
	srq->ibsrq.context = ctx;
	srq->ibsrq.srq_context = srq_context;
	srq->ibsrq.pd = ibpd;
	srq->xrcd = xrcd;
	srq->cq = cq;
	/* numbered last: a request may find it the moment it is */
	if (xrcd) {
		srq->srq_num = srq_publish(nic, srq);
		if (!srq->srq_num) {
			uroce_rq_destroy(&srq->rq);
			free(srq);
			atomic_fetch_sub(&nic->used.srq, 1);
			errno = ENOMEM;
			return NULL;
		}
	}
	pthread_mutex_init(&srq->ibsrq.mutex, NULL);
	pthread_cond_init(&srq->ibsrq.cond, NULL);
	uroce_pd_hold(ibpd, 1);
	if (xrcd) {
		atomic_fetch_add(&xrcd->use_cnt, 1);
		atomic_fetch_add(&to_ucq(cq)->use_cnt, 1);
	}
	a->max_wr = srq->rq.max_wr;
	a->max_sge = srq->rq.max_sge;
	return &srq->ibsrq;
}

UROCE_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *ibpd,
					    struct ibv_srq_init_attr *attr)
{
	if (!ibpd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	return srq_create(ibpd->context, ibpd, &attr->attr, attr->srq_context,
			  NULL, NULL);
}

struct ibv_srq *uroce_create_srq_ex(struct ibv_context *ctx,
				    struct ibv_srq_init_attr_ex *attr)
{
	enum ibv_srq_type type = IBV_SRQT_BASIC;
	const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			       IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;

	if (!attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD)) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask & ~known) {
		errno = EOPNOTSUPP;	/* tag matching */
		return NULL;
	}
	if (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)
		type = attr->srq_type;
	if (type == IBV_SRQT_BASIC)
		return srq_create(ctx, attr->pd, &attr->attr, attr->srq_context,
				  NULL, NULL);
	if (type != IBV_SRQT_XRC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* an XRC SRQ completes its receives on its own CQ */
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
	    attr->xrcd->context != ctx ||
	    !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq ||
	    attr->cq->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	return srq_create(ctx, attr->pd, &attr->attr, attr->srq_context,
			  to_uxrcd(attr->xrcd), attr->cq);
}

int uroce_get_srq_num(struct ibv_srq *ibsrq, uint32_t *srq_num)
{
	struct uroce_srq *srq;

	if (!ibsrq || !srq_num)
		return EINVAL;
	srq = to_usrq(ibsrq);
	if (!srq->xrcd)
		return EINVAL;	/* only XRC SRQs are named on the wire */
	*srq_num = srq->srq_num;
	return 0;
}

UROCE_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq,
				struct ibv_srq_attr *attr, int mask)
{
	struct uroce_srq *srq;

	if (!ibsrq || !attr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)))
		return EINVAL;
	/* The device does not advertise IBV_DEVICE_SRQ_RESIZE. */
	if (mask & IBV_SRQ_MAX_WR)
		return EOPNOTSUPP;
	srq = to_usrq(ibsrq);
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->rq.max_wr)
			return EINVAL;
		/* 0 disarms; the event fires at the next receive that
		 * leaves fewer WQEs than this */
		pthread_mutex_lock(&srq->rq.lock);
		srq->limit = attr->srq_limit;
		pthread_mutex_unlock(&srq->rq.lock);
	}
	return 0;
}

UROCE_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct uroce_srq *srq;

	if (!ibsrq || !attr)
		return EINVAL;
	srq = to_usrq(ibsrq);
	pthread_mutex_lock(&srq->rq.lock);
	attr->max_wr = srq->rq.max_wr;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->limit;
	pthread_mutex_unlock(&srq->rq.lock);
	return 0;
}

UROCE_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct uroce_srq *srq;

	if (!ibsrq)
		return EINVAL;
	srq = to_usrq(ibsrq);
	if (atomic_load(&srq->use_cnt))
		return EBUSY;
	if (srq->xrcd) {
		srq_unpublish(to_uctx(ibsrq->context)->nic, srq);
		atomic_fetch_sub(&srq->xrcd->use_cnt, 1);
		atomic_fetch_sub(&to_ucq(srq->cq)->use_cnt, 1);
	}
	uroce_pd_hold(ibsrq->pd, -1);
	uroce_rq_destroy(&srq->rq);
	pthread_cond_destroy(&ibsrq->cond);
	pthread_mutex_destroy(&ibsrq->mutex);
	atomic_fetch_sub(&to_uctx(ibsrq->context)->nic->used.srq, 1);
	free(srq);
	return 0;
}

int uroce_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad_wr)
{
	struct uroce_srq *srq = to_usrq(ibsrq);

	return uroce_rq_post(to_uctx(ibsrq->context)->nic, to_upd(ibsrq->pd),
			     &srq->rq, wr, bad_wr);
}

void uroce_srq_check_limit(struct uroce_srq *srq)
{
	bool fire = false;

	pthread_mutex_lock(&srq->rq.lock);
	if (srq->limit && rq_count(&srq->rq) < srq->limit) {
		srq->limit = 0;		/* one event per arming */
		fire = true;
	}
	pthread_mutex_unlock(&srq->rq.lock);
	if (fire) {
		struct ibv_async_event ev = {
			.element.srq = &srq->ibsrq,
			.event_type = IBV_EVENT_SRQ_LIMIT_REACHED,
		};

		uroce_async_event(to_uctx(srq->ibsrq.context), &ev);
	}
}
