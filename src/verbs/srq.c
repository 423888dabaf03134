/*
 * Receive rings (a QP's RQ and SRQs share them) and the SRQ verbs.
 *
 * A ring has max_wr + 1 slots, one kept empty, and a fixed array of
 * max_sge scatter elements per slot, so posting never allocates.  SGEs are
 * resolved against their lkeys when posted: the responder then only copies
 * into host memory.
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
		/* the responder writes into every element */
		err = uroce_resolve_sges(nic, pd, wr->sg_list, wr->num_sge,
					 true, w->sge, &w->length);
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

UROCE_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *ibpd,
					    struct ibv_srq_init_attr *attr)
{
	struct uroce_srq *srq;
	uint32_t max_sge;
	int err;

	if (!ibpd || !attr || !attr->attr.max_wr ||
	    attr->attr.max_wr > UROCE_MAX_SRQ_WR ||
	    attr->attr.max_sge > UROCE_MAX_SRQ_SGE) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	/* An SRQ that can hold no data is no use: round 0 elements up to
	 * one, as the man page allows (at least what was asked for). */
	max_sge = attr->attr.max_sge ? attr->attr.max_sge : 1;
	err = uroce_rq_init(&srq->rq, attr->attr.max_wr, max_sge);
	if (err) {
		free(srq);
		errno = err;
		return NULL;
	}
	atomic_init(&srq->use_cnt, 0);
	srq->ibsrq.context = ibpd->context;
	srq->ibsrq.srq_context = attr->srq_context;
	srq->ibsrq.pd = ibpd;
	pthread_mutex_init(&srq->ibsrq.mutex, NULL);
	pthread_cond_init(&srq->ibsrq.cond, NULL);
	atomic_fetch_add(&to_upd(ibpd)->use_cnt, 1);
	attr->attr.max_wr = srq->rq.max_wr;
	attr->attr.max_sge = srq->rq.max_sge;
	return &srq->ibsrq;
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
	atomic_fetch_sub(&to_upd(ibsrq->pd)->use_cnt, 1);
	uroce_rq_destroy(&srq->rq);
	pthread_cond_destroy(&ibsrq->cond);
	pthread_mutex_destroy(&ibsrq->mutex);
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
