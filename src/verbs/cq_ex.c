/*
 * Extended completion queues (ibv_create_cq_ex): the same ring as a plain
 * CQ (and ibv_poll_cq works on it), read one completion at a time through
 * ibv_start_poll / ibv_next_poll / ibv_end_poll and the ibv_wc_read_*
 * accessors.
 *
 * start_poll takes a batch of completions out of the ring under the CQ's
 * lock and releases it at once: the application may post (and so complete
 * into this CQ, on its own thread) between start_poll and end_poll.  The
 * batch is the consumer's, as the completions ibv_poll_cq hands out are.
 *
 * Every field of struct ibv_wc can be read, and the completion's
 * timestamps (raw: the free-running clock of ibv_query_rt_values_ex; wall
 * clock), kept by CQs that ask for them; what uroce does not record (VLANs,
 * flow tags, tag matching) cannot be asked for at creation (EOPNOTSUPP).
 */
#include <errno.h>
#include <stdlib.h>

#include "transport/transport.h"
#include "verbs/ops.h"

/* The wc_flags a completion has a field for in struct ibv_wc, and its
 * timestamps (uroce_cq_ts). */
#define WC_FLAGS_TS                                                            \
	(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |                                 \
	 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
#define WC_FLAGS_SUPPORTED (IBV_WC_STANDARD_FLAGS | WC_FLAGS_TS)

static struct uroce_cq *to_ucqx(struct ibv_cq_ex *cqx)
{
	return to_ucq(ibv_cq_ex_to_cq(cqx));
}

static const struct ibv_wc *cur(struct ibv_cq_ex *cqx)
{
	const struct uroce_cq_ex_poll *p = to_ucqx(cqx)->ex;

	return &p->wc[p->cur];
}

static void expose(struct ibv_cq_ex *cqx)
{
	const struct ibv_wc *wc = cur(cqx);

	cqx->wr_id = wc->wr_id;
	cqx->status = wc->status;
}

/* A new batch; ENOENT if the CQ is empty. */
static int refill(struct uroce_cq *cq)
{
	struct uroce_cq_ex_poll *p = cq->ex;
	struct uroce_nic *nic = to_uctx(cq->ibcq.context)->nic;
	uint64_t now = uroce_now_ns();
	int got;

	uroce_req_app_release_held(nic, now);
	got = uroce_cq_take(cq, UROCE_CQ_EX_BATCH, p->wc, p->ts);

	if (got == 0) {
		/* as ibv_poll_cq: receive here rather than wait for the
		 * engine, the completion may be one datagram away */
		uroce_engine_poll(nic, now, uroce_cq_armed(cq));
		got = uroce_cq_take(cq, UROCE_CQ_EX_BATCH, p->wc, p->ts);
	}
	p->cur = 0;
	p->n = got > 0 ? (unsigned)got : 0;
	return p->n ? 0 : ENOENT;
}

static int start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	struct uroce_cq *cq = to_ucqx(cqx);
	int err;

	if (attr->comp_mask)
		return EINVAL;
	/* what a previous cycle left unread is read first */
	err = cq->ex->cur < cq->ex->n ? 0 : refill(cq);
	if (err)
		return err;
	expose(cqx);
	uroce_engine_app_left(to_uctx(cq->ibcq.context)->nic, false);
	return 0;
}

static int next_poll(struct ibv_cq_ex *cqx)
{
	struct uroce_cq *cq = to_ucqx(cqx);

	if (++cq->ex->cur >= cq->ex->n && refill(cq))
		return ENOENT;
	expose(cqx);
	return 0;
}

static void end_poll(struct ibv_cq_ex *cqx)
{
	struct uroce_cq_ex_poll *p = to_ucqx(cqx)->ex;

	/* the one read last is consumed; the rest of the batch waits for the
	 * next start_poll */
	if (p->cur < p->n)
		p->cur++;
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->opcode;
}

static uint32_t read_vendor_err(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->vendor_err;
}

static uint32_t read_byte_len(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->byte_len;
}

static __be32 read_imm_data(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->imm_data;
}

static uint32_t read_qp_num(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->qp_num;
}

static uint32_t read_src_qp(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->src_qp;
}

static unsigned int read_wc_flags(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->wc_flags;
}

static uint32_t read_slid(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->slid;
}

static uint8_t read_sl(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->sl;
}

static uint8_t read_dlid_path_bits(struct ibv_cq_ex *cqx)
{
	return cur(cqx)->dlid_path_bits;
}

static const struct uroce_cq_ts *cur_ts(struct ibv_cq_ex *cqx)
{
	const struct uroce_cq_ex_poll *p = to_ucqx(cqx)->ex;

	return &p->ts[p->cur];
}

static uint64_t read_completion_ts(struct ibv_cq_ex *cqx)
{
	return cur_ts(cqx)->raw;
}

static uint64_t read_completion_wallclock_ns(struct ibv_cq_ex *cqx)
{
	return cur_ts(cqx)->wall;
}

/* The device clock completions are stamped with: CLOCK_MONOTONIC in ns,
 * whole in tv_nsec as mlx5 reports its cycle counter (hca_core_clock, in
 * kHz, says 1 GHz). */
int uroce_query_rt_values(struct ibv_context *ctx,
			  struct ibv_values_ex *values)
{
	(void)ctx;
	if (values->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
		return EINVAL;
	if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		values->raw_clock.tv_sec = 0;
		values->raw_clock.tv_nsec = (long)uroce_now_ns();
	}
	return 0;
}

struct ibv_cq_ex *uroce_create_cq_ex(struct ibv_context *ctx,
				     struct ibv_cq_init_attr_ex *attr)
{
	struct uroce_cq *cq;
	struct ibv_cq_ex *cqx;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS |
					  IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EINVAL;
		return NULL;
	}
	/* a CQ may belong to a parent domain (and its thread domain) */
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
	    (!attr->parent_domain || attr->parent_domain->context != ctx ||
	     !uroce_pd_is_parent(attr->parent_domain))) {
		errno = EINVAL;
		return NULL;
	}
	/* single-threaded use is a hint; ignoring overruns is not offered;
	 * nor what a completion has no field for */
	if (((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) ||
	    (attr->wc_flags & ~(uint64_t)WC_FLAGS_SUPPORTED)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->cqe > INT32_MAX) {
		errno = EINVAL;
		return NULL;
	}
	cq = uroce_cq_create(ctx, (int)attr->cqe, attr->cq_context,
			     attr->channel, (int)attr->comp_vector);
	if (!cq)
		return NULL;
	cq->ex = calloc(1, sizeof(*cq->ex));
	if (!cq->ex) {
		ibv_destroy_cq(&cq->ibcq);
		errno = ENOMEM;
		return NULL;
	}
	if ((attr->wc_flags & WC_FLAGS_TS) && uroce_cq_keep_ts(cq)) {
		ibv_destroy_cq(&cq->ibcq);
		errno = ENOMEM;
		return NULL;
	}
	if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
		cq->parent_domain = attr->parent_domain;
		uroce_pd_hold(cq->parent_domain, 1);
	}
	cqx = &cq->ibcqx;
	cqx->start_poll = start_poll;
	cqx->next_poll = next_poll;
	cqx->end_poll = end_poll;
	cqx->read_opcode = read_opcode;
	cqx->read_vendor_err = read_vendor_err;
	cqx->read_byte_len = read_byte_len;
	cqx->read_imm_data = read_imm_data;
	cqx->read_qp_num = read_qp_num;
	cqx->read_src_qp = read_src_qp;
	cqx->read_wc_flags = read_wc_flags;
	cqx->read_slid = read_slid;
	cqx->read_sl = read_sl;
	cqx->read_dlid_path_bits = read_dlid_path_bits;
	cqx->read_completion_ts = read_completion_ts;
	cqx->read_completion_wallclock_ns = read_completion_wallclock_ns;
	return cqx;
}
