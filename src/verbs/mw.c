/*
 * Memory windows (IBTA 10.6.7): remote access to part of an MR, granted and
 * revoked through the send queue without re-registering.
 *
 * A window owns a slot in the MR key table (its `slot`, an MR with mw set
 * and no rights of its own), so an rkey names an MR or a window alike and
 * the responder finds either with one lookup.  The key's index bits are
 * fixed at allocation; a bind changes the low 8 bits only (ibv_inc_rkey),
 * so the slot stays the same.
 *
 * Type 1 windows are bound by ibv_bind_mw and are the PD's: any QP of it may
 * use them.  Type 2 (2B) windows are bound by an IBV_WR_BIND_MW work request
 * with a key the application picks, serve only requests arriving on the QP
 * that bound them, and are invalidated by LOCAL_INV or a peer's SEND with
 * Invalidate.  Both bind, invalidate and check happen in the engine or under
 * the QP's send lock; the binding is read by the responder lock-free under a
 * sequence count (struct uroce_mw).
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs/ops.h"

/* Rights a window can grant: remote ones, and zero-based addressing. */
#define MW_ACCESS                                                              \
	(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                    \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED |                    \
	 IBV_ACCESS_LOCAL_WRITE)

static struct uroce_mw *to_umw(struct ibv_mw *mw)
{
	return container_of(mw, struct uroce_mw, ibmw);
}

struct ibv_mw *uroce_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct uroce_mw *mw;
	int err;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	mw->slot.mw = mw;
	mw->slot.pd = to_upd(pd);
	mw->slot.ibmr.context = pd->context;
	mw->slot.ibmr.pd = pd;
	err = uroce_key_publish(to_uctx(pd->context)->nic, &mw->slot);
	if (err) {
		free(mw);
		errno = err;
		return NULL;
	}
	mw->ibmw.context = pd->context;
	mw->ibmw.pd = pd;
	mw->ibmw.rkey = mw->slot.ibmr.rkey;
	mw->ibmw.handle = mw->slot.index;
	mw->ibmw.type = type;
	uroce_pd_hold(pd, 1);
	return &mw->ibmw;
}

/* Writers: a bind, an invalidation, the deallocation.  Callers serialise
 * writes to one window by the QP send lock or the engine; two QPs binding
 * the same window at once is the application's race, as on hardware. */
static void mw_write_begin(struct uroce_mw *mw)
{
	atomic_fetch_add_explicit(&mw->seq, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void mw_write_end(struct uroce_mw *mw)
{
	atomic_fetch_add_explicit(&mw->seq, 1, memory_order_release);
}

/* Leave the window unbound; caller is inside mw_write_begin/end. */
static void mw_unbind_locked(struct uroce_mw *mw)
{
	if (mw->bound)
		atomic_fetch_sub(&mw->mr->mws_bound, 1);
	mw->bound = false;
	mw->mr = NULL;
}

int uroce_dealloc_mw(struct ibv_mw *ibmw)
{
	struct uroce_mw *mw;

	if (!ibmw)
		return EINVAL;
	mw = to_umw(ibmw);
	/* out of the table first: after the quiesce no request uses it */
	uroce_key_unpublish(to_uctx(ibmw->context)->nic, &mw->slot);
	mw_write_begin(mw);
	mw_unbind_locked(mw);
	mw_write_end(mw);
	uroce_pd_hold(ibmw->pd, -1);
	free(mw);
	return 0;
}

uint8_t *uroce_mw_ptr(struct uroce_mw *mw, const struct uroce_pd *pd,
		      uint32_t qpn, uint32_t key, uint64_t va, uint64_t len,
		      int access)
{
	for (int tries = 0; tries < 100; tries++) {
		uint32_t seq = atomic_load_explicit(&mw->seq,
						    memory_order_acquire);
		uint8_t *p = NULL;

		if (seq & 1)
			continue;	/* a bind is writing it */
		if (mw->bound && mw->rkey == key && mw->slot.pd == pd &&
		    (mw->access & access) == access &&
		    (mw->ibmw.type == IBV_MW_TYPE_1 || mw->qpn == qpn) &&
		    uroce_range_inside(mw->iova, mw->length, va, len))
			p = mw->addr + (va - mw->iova);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&mw->seq, memory_order_relaxed) == seq)
			return p;
	}
	return NULL;	/* rebound continuously: refuse rather than wait */
}

enum ibv_wc_status uroce_mw_bind(struct uroce_qp *qp,
				 const struct uroce_send_wqe *wqe)
{
	struct uroce_mw *mw = wqe->mw;
	const struct ibv_mw_bind_info *b = &wqe->bind;
	struct uroce_pd *pd = to_upd(qp->ibqpx.qp_base.pd);
	struct uroce_mr *mr = b->mr ? to_umr(b->mr) : NULL;
	bool type2 = mw->ibmw.type == IBV_MW_TYPE_2;
	uint8_t *addr = NULL;

	/* C10-72..: same PD for window, QP and MR; the MR allows binding;
	 * the range is inside it; remote writes need a locally writable MR;
	 * a type 2 window is bound only when free, with a key of its own
	 * index */
	if (mw->slot.pd != pd ||
	    (wqe->bind_rkey & ~0xFFu) != (mw->ibmw.rkey & ~0xFFu) ||
	    (b->mw_access_flags & ~MW_ACCESS) || (type2 && mw->bound))
		return IBV_WC_MW_BIND_ERR;
	if (b->length) {
		/* windows on ODP memory would need its page faults in
		 * uroce_mw_ptr: not offered */
		if (!mr || mr->pd != pd || mr->mw ||
		    !(mr->access & IBV_ACCESS_MW_BIND) ||
		    (mr->access & IBV_ACCESS_ON_DEMAND) ||
		    ((b->mw_access_flags & (IBV_ACCESS_REMOTE_WRITE |
					    IBV_ACCESS_REMOTE_ATOMIC)) &&
		     !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
			return IBV_WC_MW_BIND_ERR;
		addr = uroce_mr_ptr(mr, b->addr, b->length);
		if (!addr)
			return IBV_WC_MW_BIND_ERR;
	} else if (type2) {
		return IBV_WC_MW_BIND_ERR;	/* type 2 is unbound by invalidation */
	}

	mw_write_begin(mw);
	mw_unbind_locked(mw);
	if (b->length) {
		mw->bound = true;
		mw->mr = mr;
		atomic_fetch_add(&mr->mws_bound, 1);
		mw->rkey = wqe->bind_rkey;
		mw->iova = (b->mw_access_flags & IBV_ACCESS_ZERO_BASED) ? 0
									: b->addr;
		mw->length = b->length;
		mw->addr = addr;
		mw->access = b->mw_access_flags;
		mw->qpn = qp->ibqpx.qp_base.qp_num;
		/* atomic: uroce_mr_lookup reads it without a lock */
		__atomic_store_n(&mw->slot.ibmr.lkey, wqe->bind_rkey,
				 __ATOMIC_RELAXED);
		mw->slot.ibmr.rkey = wqe->bind_rkey;
	}
	mw_write_end(mw);
	return IBV_WC_SUCCESS;
}

/* The window a key names, if it is one of nic's type 2 windows. */
static struct uroce_mw *type2_window(struct uroce_nic *nic, uint32_t key)
{
	struct uroce_mr *slot = uroce_mr_lookup(nic, key);

	if (!slot || !slot->mw || slot->mw->ibmw.type != IBV_MW_TYPE_2)
		return NULL;
	return slot->mw;
}

static bool invalidate(struct uroce_mw *mw, const struct uroce_pd *pd,
		       uint32_t key)
{
	if (!mw || mw->slot.pd != pd || !mw->bound || mw->rkey != key)
		return false;
	mw_write_begin(mw);
	mw_unbind_locked(mw);
	mw_write_end(mw);
	return true;
}

enum ibv_wc_status uroce_mw_local_inv(struct uroce_qp *qp, uint32_t rkey)
{
	return invalidate(type2_window(qp->nic, rkey),
			  to_upd(qp->ibqpx.qp_base.pd), rkey)
		       ? IBV_WC_SUCCESS
		       : IBV_WC_MW_BIND_ERR;
}

bool uroce_mw_remote_inv(struct uroce_nic *nic, const struct uroce_pd *pd,
			 uint32_t qpn, uint32_t key)
{
	struct uroce_mw *mw = type2_window(nic, key);

	/* a peer may invalidate only what was bound through its QP */
	return mw && mw->qpn == qpn && invalidate(mw, pd, key);
}

/* ibv_bind_mw (type 1): the new key is the window's at once, as on
 * rdma-core's providers; the bind itself runs in send queue order. */
int uroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *ibmw,
		  struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr = {
		.wr_id = mw_bind->wr_id,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = mw_bind->send_flags,
		.bind_mw = { .mw = ibmw, .rkey = ibv_inc_rkey(ibmw->rkey),
			     .bind_info = mw_bind->bind_info },
	}, *bad;
	int err;

	err = uroce_post_send_wrs(qp, &wr, &bad, UROCE_POST_BIND_MW);
	if (!err)
		ibmw->rkey = wr.bind_mw.rkey;
	return err;
}
