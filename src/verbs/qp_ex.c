/*
 * The extended send API (ibv_wr_start ... ibv_wr_complete) of QPs created
 * with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
 *
 * The builders stage classic ibv_send_wr entries, inline data copied at
 * once as the API requires, and ibv_wr_complete posts the whole chain
 * through the same path as ibv_post_send, so both APIs share every check.
 * Between wr_start and wr_complete/wr_abort the staging area is the
 * caller's alone (the API's rule); a lock keeps two threads honest.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs/ops.h"

struct uroce_wr_stage {
	pthread_mutex_t lock;
	uint32_t max_wr, max_sge, max_inline;
	uint32_t n;		/* WRs staged */
	int err;		/* first builder error, reported by complete */
	struct ibv_send_wr *wr;
	struct ibv_sge *sge;	/* max_sge per WR */
	uint8_t *inl;		/* max_inline bytes per WR */
};

static struct uroce_wr_stage *stage_of(struct ibv_qp_ex *qpx)
{
	return container_of(qpx, struct uroce_qp, ibqpx)->wr_stage;
}

/* The WR the next setter applies to, or NULL after an error. */
static struct ibv_send_wr *cur_wr(struct uroce_wr_stage *s)
{
	if (s->err || !s->n) {
		if (!s->err)
			s->err = EINVAL;	/* a setter before any op */
		return NULL;
	}
	return &s->wr[s->n - 1];
}

static struct ibv_send_wr *new_wr(struct ibv_qp_ex *qpx,
				  enum ibv_wr_opcode op)
{
	struct uroce_wr_stage *s = stage_of(qpx);
	struct ibv_send_wr *wr;

	if (s->err)
		return NULL;
	if (s->n == s->max_wr) {
		s->err = ENOMEM;	/* as a full send queue */
		return NULL;
	}
	wr = &s->wr[s->n];
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = qpx->wr_id;
	wr->send_flags = qpx->wr_flags;
	wr->opcode = op;
	wr->sg_list = &s->sge[(size_t)s->n * s->max_sge];
	if (s->n)
		s->wr[s->n - 1].next = wr;
	s->n++;
	return wr;
}

static void wr_rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op,
		    uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *wr = new_wr(qpx, op);

	if (!wr)
		return;
	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
	wr->imm_data = imm;
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey,
			      uint64_t addr, __be32 imm)
{
	wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, addr, 0);
}

static void wr_send(struct ibv_qp_ex *qpx)
{
	new_wr(qpx, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct ibv_send_wr *wr = new_wr(qpx, IBV_WR_SEND_WITH_IMM);

	if (wr)
		wr->imm_data = imm;
}

static void wr_atomic(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op,
		      uint32_t rkey, uint64_t addr, uint64_t compare_add,
		      uint64_t swap)
{
	struct ibv_send_wr *wr = new_wr(qpx, op);

	if (!wr)
		return;
	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	wr->wr.atomic.compare_add = compare_add;
	wr->wr.atomic.swap = swap;
}

static void wr_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
		       uint64_t compare, uint64_t swap)
{
	wr_atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}

static void wr_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
			 uint64_t add)
{
	wr_atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey,
			    uint64_t addr, const void *value)
{
	uint64_t v;

	memcpy(&v, value, sizeof(v));	/* 8 bytes, placed as given */
	wr_atomic(qpx, IBV_WR_ATOMIC_WRITE, rkey, addr, v, 0);
}

static void wr_flush(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
		     size_t len, uint8_t type, uint8_t level)
{
	struct uroce_wr_stage *s = stage_of(qpx);

	if (len > UINT32_MAX) {
		if (!s->err)
			s->err = EINVAL;
		return;
	}
	/* the encoding post_send's build_mpe_wqe reads */
	wr_atomic(qpx, (enum ibv_wr_opcode)UROCE_WR_FLUSH, rkey, addr, len,
		  (uint64_t)level << 8 | type);
}

static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw,
		       uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *wr = new_wr(qpx, IBV_WR_BIND_MW);

	if (!wr)
		return;
	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *info;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct ibv_send_wr *wr = new_wr(qpx, IBV_WR_LOCAL_INV);

	if (wr)
		wr->invalidate_rkey = rkey;
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct ibv_send_wr *wr = new_wr(qpx, IBV_WR_SEND_WITH_INV);

	if (wr)
		wr->invalidate_rkey = rkey;
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah,
			   uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct ibv_send_wr *wr = cur_wr(stage_of(qpx));

	if (!wr)
		return;
	wr->wr.ud.ah = ah;
	wr->wr.ud.remote_qpn = remote_qpn;
	wr->wr.ud.remote_qkey = remote_qkey;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
	struct ibv_send_wr *wr = cur_wr(stage_of(qpx));

	if (!wr)
		return;
	wr->qp_type.xrc.remote_srqn = remote_srqn;
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge,
			    const struct ibv_sge *sg_list)
{
	struct uroce_wr_stage *s = stage_of(qpx);
	struct ibv_send_wr *wr = cur_wr(s);

	if (!wr)
		return;
	if (num_sge > s->max_sge) {
		s->err = EINVAL;
		return;
	}
	memcpy(wr->sg_list, sg_list, num_sge * sizeof(*sg_list));
	wr->num_sge = (int)num_sge;
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr,
		       uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

	wr_set_sge_list(qpx, 1, &sge);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
				    const struct ibv_data_buf *bufs)
{
	struct uroce_wr_stage *s = stage_of(qpx);
	struct ibv_send_wr *wr = cur_wr(s);
	uint8_t *dst;
	size_t total = 0;

	if (!wr)
		return;
	dst = s->inl + (size_t)(wr - s->wr) * s->max_inline;
	for (size_t i = 0; i < num_buf; i++) {
		if (bufs[i].length > s->max_inline - total) {
			s->err = EINVAL;
			return;
		}
		memcpy(dst + total, bufs[i].addr, bufs[i].length);
		total += bufs[i].length;
	}
	/* the copy is ours: post it as an inline gather of one element */
	wr->sg_list[0] = (struct ibv_sge){ .addr = (uintptr_t)dst,
					   .length = (uint32_t)total };
	wr->num_sge = total ? 1 : 0;
	wr->send_flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
			       size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	wr_set_inline_data_list(qpx, 1, &buf);
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct uroce_wr_stage *s = stage_of(qpx);

	pthread_mutex_lock(&s->lock);
	s->n = 0;
	s->err = 0;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct uroce_wr_stage *s = stage_of(qpx);
	struct ibv_send_wr *bad;
	int err = s->err;

	if (!err && s->n)
		err = uroce_post_send_wrs(&qpx->qp_base, s->wr, &bad,
					  UROCE_POST_WR_API);
	s->n = 0;
	pthread_mutex_unlock(&s->lock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct uroce_wr_stage *s = stage_of(qpx);

	s->n = 0;
	pthread_mutex_unlock(&s->lock);
}

/* The operations each QP type can be asked for at creation. */
static uint64_t supported_ops(enum ibv_qp_type type)
{
	uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

	if (type != IBV_QPT_UD)
		ops |= IBV_QP_EX_WITH_RDMA_WRITE |
		       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	if (type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND)
		ops |= IBV_QP_EX_WITH_RDMA_READ |
		       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	if (type != IBV_QPT_XRC_RECV)
		ops |= IBV_QP_EX_WITH_LOCAL_INV;
	if (type == IBV_QPT_RC || type == IBV_QPT_UC ||
	    type == IBV_QPT_XRC_SEND)
		ops |= IBV_QP_EX_WITH_BIND_MW;
	/* RC only, as on Soft-RoCE */
	if (type == IBV_QPT_RC)
		ops |= IBV_QP_EX_WITH_ATOMIC_WRITE | UROCE_QP_EX_WITH_FLUSH |
		       IBV_QP_EX_WITH_SEND_WITH_INV;
	return ops;
}

int uroce_qp_ex_check(const struct ibv_qp_init_attr_ex *attr)
{
	if (attr->send_ops_flags & ~supported_ops(attr->qp_type))
		return EOPNOTSUPP;
	return 0;
}

int uroce_qp_ex_init(struct uroce_qp *qp, const struct ibv_qp_init_attr_ex *attr)
{
	struct uroce_wr_stage *s = calloc(1, sizeof(*s));
	struct ibv_qp_ex *x = &qp->ibqpx;

	if (!s)
		return ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->max_wr = attr->cap.max_send_wr;
	s->max_sge = attr->cap.max_send_sge ? attr->cap.max_send_sge : 1;
	s->max_inline = attr->cap.max_inline_data;
	s->wr = calloc(s->max_wr ? s->max_wr : 1, sizeof(*s->wr));
	s->sge = calloc((size_t)(s->max_wr ? s->max_wr : 1) * s->max_sge,
			sizeof(*s->sge));
	s->inl = s->max_inline ? malloc((size_t)s->max_wr * s->max_inline)
			       : NULL;
	qp->wr_stage = s;
	if (!s->wr || !s->sge || (s->max_inline && s->max_wr && !s->inl))
		return ENOMEM;

	x->comp_mask = 0;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_atomic_cmp_swp = wr_cmp_swp;
	x->wr_atomic_fetch_add = wr_fetch_add;
	x->wr_atomic_write = wr_atomic_write;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_send_inv = wr_send_inv;
	qp->wr_flush = wr_flush;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	return 0;
}

void uroce_qp_ex_free(struct uroce_qp *qp)
{
	struct uroce_wr_stage *s = qp->wr_stage;

	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	free(s->wr);
	free(s->sge);
	free(s->inl);
	free(s);
	qp->wr_stage = NULL;
}
