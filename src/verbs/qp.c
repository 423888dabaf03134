/*
 * Queue pairs: create / modify / query / destroy (the post verbs are in
 * qp_post.c, the state rules in qp_state.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/gid.h"
#include "samehost/samehost.h"
#include "transport/hdr.h"
#include "transport/transport.h"
#include "verbs/ops.h"

/*
 * The UDP source port of a QP's packets: 0xC000 | slot << 4 | class.  The
 * slot names the process, so that a peer's connected receive socket for
 * this port gets the packets of this process's QPs only
 * (net/udp_sockets.c shares it among the QPs talking to them); the class,
 * 4 bits hashed from the QP index, is the flow entropy ECMP spreads QPs of
 * a process pair with.
 */
_Static_assert(24 - UROCE_QPN_SLOT_SHIFT + UROCE_SPORT_CLASS_BITS == 14,
	       "slot and class fill the 14 bits above 0xC000");

uint16_t uroce_qp_sport(uint32_t qpn)
{
	uint32_t slot = uroce_qpn_slot(qpn);
	uint32_t h = uroce_qpn_index(qpn) * 0x9E3779B1u;

	return UROCE_SPORT_BASE | slot << UROCE_SPORT_CLASS_BITS |
	       h >> (32 - UROCE_SPORT_CLASS_BITS);
}

static int qp_check_caps(const struct ibv_qp_init_attr_ex *a)
{
	const struct ibv_qp_cap *c = &a->cap;

	if (c->max_send_wr > UROCE_MAX_QP_WR || c->max_send_sge > UROCE_MAX_SGE ||
	    c->max_inline_data > UROCE_MAX_INLINE)
		return EINVAL;
	if (!a->srq && (c->max_recv_wr > UROCE_MAX_QP_WR ||
			c->max_recv_sge > UROCE_MAX_SGE))
		return EINVAL;
	return 0;
}

static bool cq_in(const struct ibv_cq *cq, const struct ibv_context *ctx)
{
	return cq && cq->context == ctx;
}

/* A QP keeps its PD, CQs, SRQ and XRC domain from being destroyed under it
 * (EBUSY).  XRC QPs lack some: a target QP has only its domain, an
 * initiator no receive CQ. */
static void qp_hold(struct uroce_qp *qp, int delta)
{
	struct ibv_qp *ibqp = &qp->ibqpx.qp_base;

	if (ibqp->pd)
		uroce_pd_hold(ibqp->pd, delta);
	if (ibqp->send_cq)
		atomic_fetch_add(&to_ucq(ibqp->send_cq)->use_cnt, delta);
	if (ibqp->recv_cq)
		atomic_fetch_add(&to_ucq(ibqp->recv_cq)->use_cnt, delta);
	if (ibqp->srq)
		atomic_fetch_add(&to_usrq(ibqp->srq)->use_cnt, delta);
	if (qp->xrcd)
		atomic_fetch_add(&qp->xrcd->use_cnt, delta);
}

static void qp_free(struct uroce_qp *qp)
{
	uroce_qp_ex_free(qp);
	free(qp->sq);
	free(qp->sq_sges);
	free(qp->sq_inline);
	free(qp->resp.res);
	uroce_rq_destroy(&qp->rq);	/* a no-op for a QP on an SRQ */
	pthread_mutex_destroy(&qp->sq_lock);
	pthread_mutex_destroy(&qp->attr_lock);
	free(qp);
}

static int qp_alloc_queues(struct uroce_qp *qp, struct ibv_qp_cap *cap)
{
	/* at least one SGE per slot so inline data has somewhere to point */
	uint32_t sges = cap->max_send_sge ? cap->max_send_sge : 1;

	qp->sq_size = cap->max_send_wr + 1;
	qp->sq = calloc(qp->sq_size, sizeof(*qp->sq));
	qp->sq_sges = calloc((size_t)qp->sq_size * sges, sizeof(*qp->sq_sges));
	if (cap->max_inline_data)
		qp->sq_inline = malloc((size_t)qp->sq_size * cap->max_inline_data);
	qp->resp.res = calloc(UROCE_MAX_RD_ATOMIC, sizeof(*qp->resp.res));
	if (!qp->sq || !qp->sq_sges || !qp->resp.res ||
	    (cap->max_inline_data && !qp->sq_inline))
		return ENOMEM;
	for (uint32_t i = 0; i < qp->sq_size; i++)
		qp->sq[i].sge = &qp->sq_sges[(size_t)i * sges];
	/* an XRC target QP receives into the SRQ each request names */
	if (!qp->srq && !qp->xrcd)
		return uroce_rq_init(&qp->rq, cap->max_recv_wr,
				     cap->max_recv_sge);
	return 0;
}

static int qp_publish(struct uroce_nic *nic, struct uroce_qp *qp)
{
	int err = ENOMEM;

	pthread_mutex_lock(&nic->lock);
	for (unsigned tries = 0; tries < UROCE_MAX_QP; tries++) {
		unsigned idx = nic->next_qp_index;

		nic->next_qp_index = idx % UROCE_MAX_QP + 1;
		if (atomic_load(&nic->qps[idx]) ||
		    uroce_qpn(nic->slot, idx) == UROCE_QPN_MULTICAST)
			continue;
		qp->index = idx;
		qp->ibqpx.qp_base.qp_num = uroce_qpn(nic->slot, idx);
		atomic_store(&nic->qps[idx], qp);
		int n = atomic_load(&nic->num_live_qps);
		atomic_store(&nic->live_qps[n], qp);
		atomic_store(&nic->num_live_qps, n + 1);
		err = 0;
		break;
	}
	pthread_mutex_unlock(&nic->lock);
	return err;
}

static void qp_unpublish(struct uroce_nic *nic, struct uroce_qp *qp)
{
	pthread_mutex_lock(&nic->lock);
	atomic_store(&nic->qps[qp->index], NULL);
	int n = atomic_load(&nic->num_live_qps);
	for (int i = 0; i < n; i++) {
		if (atomic_load(&nic->live_qps[i]) == qp) {
			atomic_store(&nic->live_qps[i],
				     atomic_load(&nic->live_qps[n - 1]));
			atomic_store(&nic->live_qps[n - 1], NULL);
			atomic_store(&nic->num_live_qps, n - 1);
			break;
		}
	}
	pthread_mutex_unlock(&nic->lock);
	uroce_engine_quiesce(nic);
	/* after the receivers, which list a QP an ACK reached */
	uroce_req_forget_held(qp);
}

struct ibv_qp *uroce_create_qp_ex(struct ibv_context *ibctx,
				  struct ibv_qp_init_attr_ex *attr)
{
	struct uroce_context *ctx = to_uctx(ibctx);
	struct uroce_qp *qp;
	int err;

	enum ibv_qp_type type = attr->qp_type;
	bool xrc_tgt = type == IBV_QPT_XRC_RECV;

	if ((attr->comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
				 IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
				 IBV_QP_INIT_ATTR_CREATE_FLAGS)) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     (attr->create_flags & ~IBV_QP_CREATE_BLOCK_SELF_MCAST_LB))) {
		/* create flags other than multicast loopback's, RSS, TSO:
		 * not supported */
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD &&
	    type != IBV_QPT_XRC_SEND && !xrc_tgt) {
		errno = EOPNOTSUPP;	/* raw packet, driver QPs */
		return NULL;
	}
	/* An XRC target QP belongs to a domain, every other QP to a PD.  It
	 * has no queues of its own; an XRC initiator has no receive queue. */
	if (xrc_tgt ? !(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd ||
		      attr->xrcd->context != ibctx
		    : !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd ||
		      attr->pd->context != ibctx) {
		errno = EINVAL;
		return NULL;
	}
	if (xrc_tgt) {
		attr->send_cq = attr->recv_cq = NULL;
		attr->srq = NULL;
		attr->pd = NULL;
		memset(&attr->cap, 0, sizeof(attr->cap));
	} else if (type == IBV_QPT_XRC_SEND) {
		attr->recv_cq = NULL;
		attr->srq = NULL;
		attr->cap.max_recv_wr = attr->cap.max_recv_sge = 0;
	}
	/* every kind but the XRC target sends; RC, UC and UD also receive */
	if ((!xrc_tgt && !cq_in(attr->send_cq, ibctx)) ||
	    (!xrc_tgt && type != IBV_QPT_XRC_SEND &&
	     !cq_in(attr->recv_cq, ibctx))) {
		errno = EINVAL;
		return NULL;
	}
	if (xrc_tgt && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
		errno = EINVAL;		/* it sends nothing but responses */
		return NULL;
	}
	err = qp_check_caps(attr);
	if (!err && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		err = uroce_qp_ex_check(attr);
	if (err) {
		errno = err;
		return NULL;
	}

	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&qp->sq_lock, NULL);
	pthread_mutex_init(&qp->attr_lock, NULL);
	qp->nic = ctx->nic;
	qp->ctx = ctx;
	qp->tx = -1;
	qp->tx6 = -1;
	qp->tx1 = -1;
	qp->block_self_mcast = (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
			       (attr->create_flags &
				IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
	qp->cc.ops = &uroce_cc_window;
	qp->loss.ops = &uroce_loss_gbn;
	qp->srq = attr->srq ? to_usrq(attr->srq) : NULL;
	qp->xrcd = xrc_tgt ? to_uxrcd(attr->xrcd) : NULL;
	if (qp->srq) {
		attr->cap.max_recv_wr = 0;
		attr->cap.max_recv_sge = 0;
	}
	/* Inline room as Soft-RoCE grants it: at least what the send SGEs
	 * could describe (16 bytes each).  rdma_xclient and others post
	 * small IBV_SEND_INLINE messages without asking for any. */
	if (attr->cap.max_inline_data < attr->cap.max_send_sge * 16u)
		attr->cap.max_inline_data = attr->cap.max_send_sge * 16u;
	err = qp_alloc_queues(qp, &attr->cap);
	if (!err && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		err = uroce_qp_ex_init(qp, attr);
	if (err)
		goto fail;

	struct ibv_qp *ibqp = &qp->ibqpx.qp_base;
	ibqp->context = ibctx;
	ibqp->qp_context = attr->qp_context;
	ibqp->pd = attr->pd;	/* NULL for an XRC target QP */
	ibqp->send_cq = attr->send_cq;
	ibqp->recv_cq = attr->recv_cq;
	ibqp->srq = attr->srq;
	ibqp->state = IBV_QPS_RESET;
	ibqp->qp_type = attr->qp_type;
	pthread_mutex_init(&ibqp->mutex, NULL);
	pthread_cond_init(&ibqp->cond, NULL);
	atomic_store(&qp->state, IBV_QPS_RESET);

	qp->init.qp_context = attr->qp_context;
	qp->init.send_cq = attr->send_cq;
	qp->init.recv_cq = attr->recv_cq;
	qp->init.srq = attr->srq;
	qp->init.cap = attr->cap;
	qp->init.qp_type = attr->qp_type;
	qp->init.sq_sig_all = attr->sq_sig_all;
	qp->attr.cap = attr->cap;
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.path_mtu = IBV_MTU_1024;
	qp->mtu = 1024;
	if (attr->qp_type == IBV_QPT_UD) {
		/* UD messages are single packets of up to the port's MTU */
		qp->attr.path_mtu = qp->nic->cfg->max_mtu;
		qp->mtu = 128u << qp->nic->cfg->max_mtu;
	}

	err = qp_publish(ctx->nic, qp);
	if (err)
		goto fail;
	ibqp->handle = qp->index;
	qp->sport = uroce_qp_sport(ibqp->qp_num);
	qp_hold(qp, 1);
	return ibqp;
fail:
	qp_free(qp);
	errno = err;
	return NULL;
}

#undef ibv_create_qp
UROCE_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
					  struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex ex;
	struct ibv_qp *qp;

	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, attr, sizeof(*attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	qp = uroce_create_qp_ex(pd->context, &ex);
	if (qp)
		attr->cap = ex.cap;
	return qp;
}

/* Reset every queue and transport state (transition to RESET). */
static void qp_reset(struct uroce_qp *qp)
{
	qp->sh_peer = NULL;
	qp->sq_head = qp->sq_next = qp->sq_tail = 0;
	uroce_req_set_active(qp, false);
	memset(&qp->req, 0, sizeof(qp->req));
	memset(&qp->comp, 0, sizeof(qp->comp));
	qp->cc = (struct uroce_cc){ .ops = qp->cc.ops };
	qp->loss = (struct uroce_loss){ .ops = qp->loss.ops };
	if (!qp->srq && !qp->xrcd) {
		pthread_mutex_lock(&qp->rq.lock);
		qp->rq.head = qp->rq.tail = 0;
		pthread_mutex_unlock(&qp->rq.lock);
	}
	struct uroce_resp_res *res = qp->resp.res;
	if (qp->resp.ack_waits_ns)
		atomic_fetch_sub(&qp->nic->acks_waiting, 1);
	memset(&qp->resp, 0, sizeof(qp->resp));
	atomic_store(&qp->ack.owed, 0);
	atomic_store(&qp->ack.answers, 0);
	atomic_store(&qp->ack.app_rx_ns, 0);
	memset(res, 0, UROCE_MAX_RD_ATOMIC * sizeof(*res));
	qp->resp.res = res;
	/* what the QP completed (its flushes, typically) goes with it, as a
	 * NIC's provider cleans the CQs (libmlx5 does): a QP brought back
	 * from error must not deliver the previous life's completions */
	struct ibv_qp *ibqp = &qp->ibqpx.qp_base;
	if (ibqp->send_cq)
		uroce_cq_clean(to_ucq(ibqp->send_cq), ibqp->qp_num);
	if (ibqp->recv_cq && ibqp->recv_cq != ibqp->send_cq)
		uroce_cq_clean(to_ucq(ibqp->recv_cq), ibqp->qp_num);
}

static int qp_check_attr(struct uroce_qp *qp, const struct ibv_qp_attr *a,
			 int mask)
{
	struct uroce_nic *nic = qp->nic;

	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= UROCE_PKEY_TBL_LEN)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MTU) &&
	    (a->path_mtu < IBV_MTU_256 || a->path_mtu > nic->cfg->max_mtu))
		return EINVAL;
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
	    a->max_rd_atomic > UROCE_MAX_INIT_RD_ATOMIC)
		return EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
	    a->max_dest_rd_atomic > UROCE_MAX_RD_ATOMIC)
		return EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > QPN_MASK)
		return EINVAL;
	if ((mask & IBV_QP_SQ_PSN) && a->sq_psn > PSN_MASK)
		return EINVAL;
	if ((mask & IBV_QP_RQ_PSN) && a->rq_psn > PSN_MASK)
		return EINVAL;
	/* Programs pass their MRs' flags here (DAPL always adds MW_BIND), and
	 * the kernel's providers take them: only the remote rights mean
	 * anything to a QP.  Bits no MR could have are refused. */
	if ((mask & IBV_QP_ACCESS_FLAGS) &&
	    ((unsigned int)a->qp_access_flags & ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE &
	     ~(unsigned int)UROCE_ACCESS_SUPPORTED))
		return EINVAL;
	if (mask & IBV_QP_AV) {
		/* RoCE has no LIDs: the peer is named by its GID alone */
		if (!a->ah_attr.is_global || a->ah_attr.port_num > 1 ||
		    a->ah_attr.grh.sgid_index >= nic->num_gids)
			return EINVAL;
		union uroce_sockaddr peer;
		uroce_gid_to_sockaddr(&a->ah_attr.grh.dgid, nic->cfg->udp_port,
				      &peer);
		union uroce_sockaddr self;
		uroce_gid_to_sockaddr(&nic->gids[a->ah_attr.grh.sgid_index].gid,
				      nic->cfg->udp_port, &self);
		if (peer.sa.sa_family != self.sa.sa_family)
			return EINVAL;
	}
	return 0;
}

static int qp_apply_av(struct uroce_qp *qp, const struct ibv_ah_attr *ah,
		       uint32_t dest_qpn)
{
	struct uroce_nic *nic = qp->nic;
	enum ibv_gid_type type = nic->gids[ah->grh.sgid_index].type;
	union uroce_sockaddr peer, self;
	int tx, old, err;

	qp->link_mtu = uroce_gid_path_mtu(nic, ah->grh.sgid_index);
	uroce_gid_to_sockaddr(&ah->grh.dgid, nic->cfg->udp_port, &peer);
	uroce_gid_to_sockaddr(&nic->gids[ah->grh.sgid_index].gid,
			      nic->cfg->udp_port, &self);
	err = uroce_link_resolve(nic, type, &self, &peer);
	if (err)
		return -err;
	tx = uroce_link_tx_open(nic, type, self.sa.sa_family, qp->sport);
	if (tx < 0)
		return -tx;
	/* a uroce peer sends from the port its QPN hashes to */
	uroce_link_steer(nic, tx, &self, &peer, uroce_qp_sport(dest_qpn));
	/* The QP is published: the engine checks arriving packets against
	 * the addresses (rx_lock) and sends with them (sq_lock). */
	pthread_mutex_lock(&nic->rx_lock);
	pthread_mutex_lock(&qp->sq_lock);
	qp->peer = peer;
	qp->self = self;
	old = qp->tx;
	qp->tx = tx;
	pthread_mutex_unlock(&qp->sq_lock);
	pthread_mutex_unlock(&nic->rx_lock);
	if (old >= 0)
		uroce_link_tx_close(nic, old);
	return 0;
}

/* A UD QP sends to any address its AHs name: one socket per family.  A
 * host without IPv6 still runs UD over IPv4. */
static int qp_open_ud(struct uroce_qp *qp)
{
	struct uroce_nic *nic = qp->nic;
	int tx = uroce_link_tx_open(nic, IBV_GID_TYPE_ROCE_V2, AF_INET,
				    qp->sport);

	if (tx < 0)
		return -tx;
	qp->tx = tx;
	tx = uroce_link_tx_open(nic, IBV_GID_TYPE_ROCE_V2, AF_INET6, qp->sport);
	qp->tx6 = tx >= 0 ? tx : -1;
	if (uroce_link_has(nic, IBV_GID_TYPE_ROCE_V1)) {
		tx = uroce_link_tx_open(nic, IBV_GID_TYPE_ROCE_V1, AF_INET,
					qp->sport);
		qp->tx1 = tx >= 0 ? tx : -1;
	}
	return 0;
}

/* The attributes of the side an XRC QP does not have are dropped, as the
 * kernel's uverbs does before a NIC sees them: programs (perftest) pass RC's
 * masks to both kinds. */
static int xrc_mask(enum ibv_qp_type type, int mask)
{
	if (type == IBV_QPT_XRC_SEND)
		return mask & ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (type == IBV_QPT_XRC_RECV)
		return mask & ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
				IBV_QP_RNR_RETRY);
	return mask;
}

UROCE_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
			       int mask)
{
	struct uroce_qp *qp;
	enum ibv_qp_state cur, next;
	int err;

	if (!ibqp || !attr)
		return EINVAL;
	qp = to_uqp(ibqp);
	mask = xrc_mask(ibqp->qp_type, mask);
	pthread_mutex_lock(&qp->attr_lock);
	cur = atomic_load(&qp->state);
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) {
		err = EINVAL;
		goto out;
	}
	next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
	if (!uroce_qp_transition_ok(ibqp->qp_type, cur, next,
				    mask | IBV_QP_STATE)) {
		err = EINVAL;
		goto out;
	}
	err = qp_check_attr(qp, attr, mask);
	if (err)
		goto out;
	if (ibqp->qp_type == IBV_QPT_UD && qp->tx < 0 && next != IBV_QPS_RESET &&
	    next != IBV_QPS_ERR) {
		err = qp_open_ud(qp);
		if (err)
			goto out;
	}
	if (mask & IBV_QP_AV) {
		err = qp_apply_av(qp, &attr->ah_attr,
				  (mask & IBV_QP_DEST_QPN) ? attr->dest_qp_num
							   : qp->attr.dest_qp_num);
		if (err)
			goto out;
		qp->attr.ah_attr = attr->ah_attr;
	}

	/* The responder runs under rx_lock and the requester under sq_lock:
	 * hold both while their state changes under them. */
	pthread_mutex_lock(&qp->nic->rx_lock);
	pthread_mutex_lock(&qp->sq_lock);

#define COPY(bit, field) if (mask & (bit)) qp->attr.field = attr->field
	COPY(IBV_QP_PKEY_INDEX, pkey_index);
	COPY(IBV_QP_PORT, port_num);
	COPY(IBV_QP_ACCESS_FLAGS, qp_access_flags);
	COPY(IBV_QP_QKEY, qkey);
	COPY(IBV_QP_PATH_MTU, path_mtu);
	COPY(IBV_QP_TIMEOUT, timeout);
	COPY(IBV_QP_RETRY_CNT, retry_cnt);
	COPY(IBV_QP_RNR_RETRY, rnr_retry);
	COPY(IBV_QP_RQ_PSN, rq_psn);
	COPY(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
	COPY(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
	COPY(IBV_QP_SQ_PSN, sq_psn);
	COPY(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
	COPY(IBV_QP_PATH_MIG_STATE, path_mig_state);
	COPY(IBV_QP_DEST_QPN, dest_qp_num);
	COPY(IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
#undef COPY
	if (mask & IBV_QP_PATH_MTU)
		qp->mtu = 128u << attr->path_mtu;
	/* Packets leave with DF set: a path MTU beyond what the link carries
	 * would lose every full-sized packet.  Both ends of a path clamp
	 * alike, and query_qp reports the MTU in use. */
	if (qp->link_mtu && qp->mtu > qp->link_mtu) {
		qp->mtu = qp->link_mtu;
		qp->attr.path_mtu = (enum ibv_mtu)(__builtin_ctz(qp->mtu) - 7);
	}
	if (mask & IBV_QP_RQ_PSN)
		qp->resp.psn = attr->rq_psn;
	if (mask & IBV_QP_SQ_PSN) {
		qp->req.psn = attr->sq_psn;
		qp->req.max_psn = attr->sq_psn;
		qp->comp.psn = attr->sq_psn;
	}
	if (mask & IBV_QP_RETRY_CNT)
		qp->comp.retry_left = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		qp->comp.rnr_retry_left = attr->rnr_retry;

	if (next == IBV_QPS_RESET && cur != IBV_QPS_RESET)
		qp_reset(qp);
	if (next == IBV_QPS_RTR && cur != IBV_QPS_RTR)
		uroce_sh_attach(qp);
	qp->attr.qp_state = next;
	qp->attr.cur_qp_state = next;
	atomic_store(&qp->state, next);
	ibqp->state = next;
	if (next == IBV_QPS_RTS)
		uroce_req_progress(qp);

	pthread_mutex_unlock(&qp->sq_lock);
	pthread_mutex_unlock(&qp->nic->rx_lock);

	if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR)
		uroce_qp_to_error(qp, false);
	else
		uroce_sh_qp_update(qp);
out:
	pthread_mutex_unlock(&qp->attr_lock);
	return err;
}

UROCE_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
			      int mask, struct ibv_qp_init_attr *init)
{
	struct uroce_qp *qp;

	(void)mask;	/* every attribute is cheap to report */
	if (!ibqp || !attr || !init)
		return EINVAL;
	qp = to_uqp(ibqp);
	pthread_mutex_lock(&qp->attr_lock);
	*attr = qp->attr;
	attr->qp_state = atomic_load(&qp->state);
	attr->cur_qp_state = attr->qp_state;
	attr->sq_draining = 0;
	*init = qp->init;
	pthread_mutex_unlock(&qp->attr_lock);
	return 0;
}

UROCE_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct uroce_qp *qp;
	struct uroce_nic *nic;

	if (!ibqp)
		return EINVAL;
	qp = to_uqp(ibqp);
	nic = qp->nic;
	/* as the kernel's uverbs: a QP leaves its groups as it goes */
	uroce_mcast_detach_all(qp);
	uroce_sh_qp_withdraw(qp);
	qp_unpublish(nic, qp);
	/* what it had in flight no longer counts against the others' */
	pthread_mutex_lock(&qp->sq_lock);
	uroce_req_set_active(qp, false);
	pthread_mutex_unlock(&qp->sq_lock);
	/* what the peer sent before the end is acknowledged: the ACK may
	 * still be waiting for the application's next poll */
	pthread_mutex_lock(&nic->rx_lock);
	uroce_flush_qp_ack(nic, qp);
	pthread_mutex_unlock(&nic->rx_lock);
	qp_hold(qp, -1);
	if (qp->tx >= 0)
		uroce_link_tx_close(nic, qp->tx);
	if (qp->tx6 >= 0)
		uroce_link_tx_close(nic, qp->tx6);
	if (qp->tx1 >= 0)
		uroce_link_tx_close(nic, qp->tx1);
	pthread_mutex_destroy(&ibqp->mutex);
	pthread_cond_destroy(&ibqp->cond);
	qp_free(qp);
	return 0;
}

UROCE_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	/* only QPs created with send_ops_flags have the ibv_wr_* API */
	if (!ibqp || !to_uqp(ibqp)->wr_stage) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return &to_uqp(ibqp)->ibqpx;
}

/* Move to ERR and flush both queues (IBTA 10.3.1: outstanding WRs complete
 * with IBV_WC_WR_FLUSH_ERR).  Caller holds sq_lock. */
void uroce_qp_to_error_locked(struct uroce_qp *qp, bool async_event)
{
	enum ibv_qp_state prev = atomic_exchange(&qp->state, IBV_QPS_ERR);

	qp->ibqpx.qp_base.state = IBV_QPS_ERR;
	uroce_sh_qp_update(qp);
	qp->comp.deadline = 0;
	qp->req.wait_until = 0;
	uroce_comp_flush(qp);
	uroce_resp_flush(qp);
	if (async_event && prev != IBV_QPS_ERR) {
		struct ibv_async_event ev = {
			.element.qp = &qp->ibqpx.qp_base,
			.event_type = IBV_EVENT_QP_FATAL,
		};
		uroce_async_event(qp->ctx, &ev);
	}
}

void uroce_qp_to_error(struct uroce_qp *qp, bool async_event)
{
	pthread_mutex_lock(&qp->sq_lock);
	uroce_qp_to_error_locked(qp, async_event);
	pthread_mutex_unlock(&qp->sq_lock);
}
