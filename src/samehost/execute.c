/*
 * Same-host requester: an RDMA WRITE or READ of an RC QP whose peer is a
 * uroce process on this host, executed by the posting thread itself.
 *
 * The checks are the responder's (C9-88 ff.), made against the target's
 * segment: its QP accepts requests from this QP with the right, the key
 * names a live MR of the same PD that grants it, and the range lies inside
 * the MR.  Anything the segment does not prove valid (a window's key, an
 * error, an entry changing under us, a copy the kernel refuses) goes on the
 * wire, where the target's responder decides exactly as it would for a
 * peer on another host.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "samehost/segment.h"
#include "transport/transport.h"

/* The target's host address for the request, or 0 when the segment does
 * not prove the request valid. */
static uint64_t target_addr(const struct uroce_qp *qp,
			    const struct uroce_send_wqe *wqe,
			    struct sh_seg *seg, int access)
{
	uint32_t idx = wqe->rkey >> UROCE_KEY_SHIFT;
	struct sh_qp tq;
	struct sh_mr tm, *e;

	if (!sh_read(&tq, &seg->qps[qp->sh_dest], sizeof(tq)) ||
	    !tq.accepting || tq.qpn != qp->attr.dest_qp_num ||
	    tq.dest_qpn != qp->ibqpx.qp_base.qp_num ||
	    !(tq.access & (uint32_t)access))
		return 0;
	if (!idx || idx > UROCE_MAX_MR || !(e = sh_mr_entry(seg, idx)) ||
	    !sh_read(&tm, e, sizeof(tm)) || !tm.key ||
	    tm.key != wqe->rkey || tm.pd != tq.pd ||
	    !(tm.access & (uint32_t)access) ||
	    !uroce_range_inside(tm.iova, tm.length, wqe->remote_addr,
				wqe->length))
		return 0;
	return tm.addr + (wqe->remote_addr - tm.iova);
}

bool uroce_sh_execute(struct uroce_qp *qp, struct uroce_send_wqe *wqe)
{
	struct uroce_sh_peer *peer = qp->sh_peer;
	bool write = wqe->opcode == IBV_WR_RDMA_WRITE;
	struct iovec local[UROCE_MAX_SGE], remote;
	struct sh_user *me;
	unsigned nlocal;
	uint64_t addr;
	ssize_t n;

	/* atomics stay with the target's CPU atomics (atomic against the
	 * application's own), and a message with a side effect beyond its
	 * bytes (immediate data, a receive WQE) with the responder */
	if ((!write && wqe->opcode != IBV_WR_RDMA_READ) || !wqe->length ||
	    atomic_load_explicit(&peer->dead, memory_order_relaxed) ||
	    uroce_sh_peer_wire_only(qp))
		return false;
	me = &peer->seg->users[qp->nic->slot];
	atomic_fetch_add(&me->busy, 1);
	addr = target_addr(qp, wqe, peer->seg,
			   write ? IBV_ACCESS_REMOTE_WRITE
				 : IBV_ACCESS_REMOTE_READ);
	if (!addr)
		goto wire;
	remote.iov_base = (void *)(uintptr_t)addr;
	remote.iov_len = wqe->length;
	nlocal = uroce_sge_gather(local, wqe->sge, wqe->num_sge, 0,
				  wqe->length);
	n = write ? process_vm_writev(peer->pid, local, nlocal, &remote, 1, 0)
		  : process_vm_readv(peer->pid, local, nlocal, &remote, 1, 0);
	if (n != (ssize_t)wqe->length) {
		/* gone, or no longer ours to reach: the wire says how the
		 * request ends (a retry timeout for a dead peer, as between
		 * hosts); EFAULT (an ODP page that cannot be faulted in, a
		 * message longer than one call moves): the responder
		 * decides */
		if (n < 0 && (errno == ESRCH || errno == EPERM))
			atomic_store(&peer->dead, true);
		goto wire;
	}
	atomic_fetch_sub(&me->busy, 1);
	STAT_INC(qp->nic, samehost_ops);
	uroce_comp_complete_tail(qp, IBV_WC_SUCCESS);
	return true;
wire:
	atomic_fetch_sub(&me->busy, 1);
	STAT_INC(qp->nic, samehost_to_wire);
	return false;
}
