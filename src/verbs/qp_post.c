/*
 * The post verbs: send and receive work requests checked and turned into
 * WQEs.  The requester runs inline in post_send (lowest latency: the
 * posting thread sends the packets itself); the engine takes over when the
 * window is full.
 */
#include <errno.h>
#include <string.h>

#include "transport/hdr.h"
#include "transport/transport.h"
#include "verbs/ops.h"

/* The operations each transport service offers (IBTA 9.4 table 35...),
 * and each source of work requests (see enum uroce_post_from). */
static bool opcode_ok(enum ibv_qp_type type, enum ibv_wr_opcode op,
		      enum uroce_post_from from)
{
	switch ((int)op) {
	case UROCE_WR_FLUSH:
	case IBV_WR_ATOMIC_WRITE:
		return from == UROCE_POST_WR_API && type == IBV_QPT_RC;
	case IBV_WR_BIND_MW:
		return type == IBV_QPT_RC || type == IBV_QPT_UC ||
		       type == IBV_QPT_XRC_SEND;
	case IBV_WR_LOCAL_INV:
		return type != IBV_QPT_XRC_RECV;
	case IBV_WR_SEND_WITH_INV:
		return type == IBV_QPT_RC;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return type != IBV_QPT_XRC_RECV;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return type != IBV_QPT_UD && type != IBV_QPT_XRC_RECV;
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
	default:
		return false;
	}
}

static int fill_inline(struct uroce_qp *qp, struct uroce_send_wqe *wqe,
		       uint32_t slot, const struct ibv_send_wr *wr)
{
	uint8_t *buf = qp->sq_inline + (size_t)slot * qp->init.cap.max_inline_data;
	uint32_t total = 0;

	for (int i = 0; i < wr->num_sge; i++) {
		uint32_t len = wr->sg_list[i].length;

		if (len > qp->init.cap.max_inline_data - total)
			return EINVAL;
		/* an empty element may name no memory at all (UCX's do) */
		if (!len)
			continue;
		memcpy(buf + total, (void *)(uintptr_t)wr->sg_list[i].addr, len);
		total += len;
	}
	wqe->num_sge = 1;
	wqe->sge[0].addr = buf;
	wqe->sge[0].length = total;
	wqe->length = total;
	return 0;
}

/* FLUSH and ATOMIC_WRITE as qp_ex.c stages them: the target in
 * wr.atomic's remote_addr and rkey; ATOMIC_WRITE's 8 bytes in compare_add;
 * FLUSH's length in compare_add, its type and level in swap's low bytes. */
static int build_mpe_wqe(struct uroce_send_wqe *wqe,
			 const struct ibv_send_wr *wr)
{
	wqe->remote_addr = wr->wr.atomic.remote_addr;
	wqe->rkey = wr->wr.atomic.rkey;
	wqe->num_sge = 0;
	if (wr->opcode == IBV_WR_ATOMIC_WRITE) {
		wqe->compare_add = wr->wr.atomic.compare_add;
		wqe->length = 8;
		return 0;
	}
	wqe->flush_type = (uint8_t)wr->wr.atomic.swap;
	wqe->flush_level = (uint8_t)(wr->wr.atomic.swap >> 8);
	if (!wqe->flush_type ||
	    (wqe->flush_type & ~(UROCE_FLUSH_GLOBAL | UROCE_FLUSH_PERSISTENT)) ||
	    wqe->flush_level > UROCE_FLUSH_MR ||
	    wr->wr.atomic.compare_add > UROCE_MAX_MSG_SZ)
		return EINVAL;
	wqe->length = (uint32_t)wr->wr.atomic.compare_add;
	return 0;
}

/* A window's bind: checked against the window and MR when it executes
 * (uroce_mw_bind), in send queue order. */
static int build_bind_wqe(struct uroce_send_wqe *wqe,
			  const struct ibv_send_wr *wr,
			  enum uroce_post_from from)
{
	struct ibv_mw *mw = wr->bind_mw.mw;

	if (!mw || (mw->type == IBV_MW_TYPE_1) != (from == UROCE_POST_BIND_MW))
		return EINVAL;
	wqe->mw = container_of(mw, struct uroce_mw, ibmw);
	wqe->bind_rkey = wr->bind_mw.rkey;
	wqe->bind = wr->bind_mw.bind_info;
	wqe->num_sge = 0;
	wqe->length = 0;
	return 0;
}

static int build_send_wqe(struct uroce_qp *qp, uint32_t slot,
			  const struct ibv_send_wr *wr,
			  enum uroce_post_from from)
{
	struct uroce_send_wqe *wqe = &qp->sq[slot];
	bool is_read = wr->opcode == IBV_WR_RDMA_READ;
	bool is_atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			 wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
	int err;

	if (!opcode_ok(qp->ibqpx.qp_base.qp_type, wr->opcode, from))
		return EINVAL;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->init.cap.max_send_sge)
		return EINVAL;
	if (wr->send_flags & ~(IBV_SEND_FENCE | IBV_SEND_SIGNALED |
			       IBV_SEND_SOLICITED | IBV_SEND_INLINE))
		return EINVAL;

	wqe->wr_id = wr->wr_id;
	wqe->opcode = wr->opcode;
	wqe->send_flags = wr->send_flags;
	wqe->imm = wr->imm_data;
	wqe->state = WQE_POSTED;
	wqe->status = IBV_WC_SUCCESS;
	wqe->ah = NULL;
	if (qp->ibqpx.qp_base.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah ||
		    to_upd(wr->wr.ud.ah->pd) != to_upd(qp->ibqpx.qp_base.pd))
			return EINVAL;
		wqe->ah = to_uah(wr->wr.ud.ah);
		wqe->remote_qpn = wr->wr.ud.remote_qpn & QPN_MASK;
		wqe->remote_qkey = wr->wr.ud.remote_qkey;
		if ((wqe->ah->dst.sa.sa_family == AF_INET6 && qp->tx6 < 0) ||
		    (wqe->ah->gid_type == IBV_GID_TYPE_ROCE_V1 && qp->tx1 < 0))
			return EINVAL;
	}
	if (qp->ibqpx.qp_base.qp_type == IBV_QPT_XRC_SEND)
		wqe->remote_srqn = wr->qp_type.xrc.remote_srqn;
	if ((int)wr->opcode == UROCE_WR_FLUSH ||
	    wr->opcode == IBV_WR_ATOMIC_WRITE)
		return build_mpe_wqe(wqe, wr);
	if (wr->opcode == IBV_WR_BIND_MW)
		return build_bind_wqe(wqe, wr, from);
	wqe->inv_rkey = wr->invalidate_rkey;
	if (wr->opcode == IBV_WR_LOCAL_INV) {
		wqe->num_sge = 0;
		wqe->length = 0;
		return 0;
	}
	if (is_atomic) {
		wqe->remote_addr = wr->wr.atomic.remote_addr;
		wqe->rkey = wr->wr.atomic.rkey;
		wqe->compare_add = wr->wr.atomic.compare_add;
		wqe->swap = wr->wr.atomic.swap;
	} else {
		wqe->remote_addr = wr->wr.rdma.remote_addr;
		wqe->rkey = wr->wr.rdma.rkey;
	}

	if ((wr->send_flags & IBV_SEND_INLINE) && !is_read && !is_atomic)
		err = fill_inline(qp, wqe, slot, wr);
	else {
		err = uroce_resolve_sges(qp->nic, to_upd(qp->ibqpx.qp_base.pd),
					 wr->sg_list, wr->num_sge,
					 is_read || is_atomic, false, wqe->sge,
					 &wqe->length);
		wqe->num_sge = wr->num_sge;
	}
	if (err)
		return err;
	if (wqe->length > UROCE_MAX_MSG_SZ)
		return EINVAL;
	/* a UD message is one packet of at most the port's MTU, and of what
	 * the link towards the AH's destination carries */
	if (wqe->ah && (wqe->length > qp->mtu || wqe->length > wqe->ah->mtu))
		return EINVAL;
	if (is_atomic && (wqe->num_sge != 1 || wqe->length < 8))
		return EINVAL;
	if (is_atomic)
		wqe->length = 8;
	return 0;
}

int uroce_post_send_wrs(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
			struct ibv_send_wr **bad_wr, enum uroce_post_from from)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	enum ibv_qp_state state = atomic_load(&qp->state);
	bool held = false;
	int err = 0;

	if (state == IBV_QPS_RESET || state == IBV_QPS_INIT ||
	    state == IBV_QPS_RTR) {
		*bad_wr = wr;
		return EINVAL;
	}
	uroce_acks_note_post(qp);
	pthread_mutex_lock(&qp->sq_lock);
	for (; wr; wr = wr->next) {
		uint32_t next = (qp->sq_head + 1) % qp->sq_size;

		if (next == qp->sq_tail) {
			err = ENOMEM;
			break;
		}
		err = build_send_wqe(qp, qp->sq_head, wr, from);
		if (err)
			break;
		qp->sq_head = next;
	}
	if (err)
		*bad_wr = wr;
	if (atomic_load(&qp->state) == IBV_QPS_ERR)
		uroce_comp_flush(qp);
	else if (!(held = uroce_req_hold(qp)))
		uroce_req_progress(qp);
	pthread_mutex_unlock(&qp->sq_lock);
	if (held)
		uroce_req_list_held(qp);
	return err;
}

int uroce_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		    struct ibv_send_wr **bad_wr)
{
	return uroce_post_send_wrs(ibqp, wr, bad_wr, UROCE_POST_VERB);
}

int uroce_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		    struct ibv_recv_wr **bad_wr)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	int err;

	/* XRC QPs have no receive queue: receives go to the target's SRQs */
	if (qp->srq || ibqp->qp_type == IBV_QPT_XRC_SEND ||
	    ibqp->qp_type == IBV_QPT_XRC_RECV ||
	    atomic_load(&qp->state) == IBV_QPS_RESET) {
		*bad_wr = wr;
		return EINVAL;
	}
	err = uroce_rq_post(qp->nic, to_upd(ibqp->pd), &qp->rq, wr, bad_wr);
	if (atomic_load(&qp->state) == IBV_QPS_ERR)
		uroce_resp_flush(qp);
	return err;
}
