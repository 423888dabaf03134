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

/* WRITEs one system call moves at most, and the pieces of memory they
 * may gather from: a burst that uroce_req_hold() collected goes at once. */
enum { SH_RUN_WQES = 16, SH_RUN_IOVS = 4 * UROCE_MAX_SGE };

/* The WQEs from sq_next on that one call can execute: the first and the
 * WRITEs after it that the segment proves valid, with their memory. */
static unsigned collect_run(struct uroce_qp *qp, bool write,
			    struct iovec *local, unsigned *nlocal,
			    struct iovec *remote)
{
	int access = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
	struct sh_seg *seg = qp->sh_peer->seg;
	unsigned n = 0;

	*nlocal = 0;
	for (uint32_t i = qp->sq_next; i != qp->sq_head && n < SH_RUN_WQES;
	     i = (i + 1) % qp->sq_size) {
		struct uroce_send_wqe *wqe = &qp->sq[i];
		uint64_t addr;

		if (n && (!write || wqe->opcode != IBV_WR_RDMA_WRITE ||
			  !wqe->length || wqe->state != WQE_POSTED ||
			  *nlocal + wqe->num_sge > SH_RUN_IOVS ||
			  atomic_load(&qp->state) != IBV_QPS_RTS))
			break;
		addr = target_addr(qp, wqe, seg, access);
		if (!addr)
			break;
		remote[n].iov_base = (void *)(uintptr_t)addr;
		remote[n].iov_len = wqe->length;
		*nlocal += uroce_sge_gather(local + *nlocal, wqe->sge,
					    wqe->num_sge, 0, wqe->length);
		n++;
	}
	return n;
}

bool uroce_sh_execute(struct uroce_qp *qp, struct uroce_send_wqe *wqe)
{
	struct uroce_sh_peer *peer = qp->sh_peer;
	bool write = wqe->opcode == IBV_WR_RDMA_WRITE;
	struct iovec local[SH_RUN_IOVS], remote[SH_RUN_WQES];
	unsigned nlocal, nwqe, done = 0;
	struct sh_user *me;
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
	nwqe = collect_run(qp, write, local, &nlocal, remote);
	if (nwqe) {
		n = write ? process_vm_writev(peer->pid, local, nlocal,
					      remote, nwqe, 0)
			  : process_vm_readv(peer->pid, local, nlocal,
					     remote, nwqe, 0);
		/* gone, or no longer ours to reach: the wire says how the
		 * request ends (a retry timeout for a dead peer, as between
		 * hosts); EFAULT (an ODP page that cannot be faulted in, a
		 * message longer than one call moves): the responder
		 * decides.  A short count moved the WQEs it covers whole. */
		if (n < 0 && (errno == ESRCH || errno == EPERM))
			atomic_store(&peer->dead, true);
		for (; done < nwqe && n >= (ssize_t)remote[done].iov_len;
		     done++)
			n -= (ssize_t)remote[done].iov_len;
	}
	atomic_fetch_sub(&me->busy, 1);
	if (!done) {
		STAT_INC(qp->nic, samehost_to_wire);
		return false;
	}
	for (unsigned i = 0; i < done; i++) {
		STAT_INC(qp->nic, samehost_ops);
		uroce_comp_complete_tail(qp, IBV_WC_SUCCESS);
	}
	qp->req.sh_gen = atomic_load_explicit(&qp->nic->release_gen,
					      memory_order_relaxed);
	return true;
}
