/*
 * The responder's READ, atomics, FLUSH and ATOMIC WRITE: requests answered
 * from the target's memory and remembered as responder resources, so that
 * a duplicate (its response was lost) is answered again, never executed
 * twice (IBTA 9.7.5.1.3, 9.7.7.1).  The rest of the responder, which
 * dispatches them, is responder.c.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/responder.h"
#include "transport/transport.h"

/* READ response packets handed to the network at once */
enum { RESP_TX_BATCH = 64 };

/* CPU atomics: atomic against every other atomic on this host, including
 * other uroce processes and the application itself.  Returns the original
 * value. */
static uint64_t resp_dma_atomic(uint64_t *target, bool cmp_swap,
				uint64_t compare, uint64_t swap_add)
{
	DMA_BEGIN();
	if (cmp_swap)
		__atomic_compare_exchange_n(target, &compare, swap_add, false,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	else
		compare = __atomic_fetch_add(target, swap_add,
					     __ATOMIC_SEQ_CST);
	DMA_END();
	return compare;
}

static void resp_dma_atomic_write(uint64_t *dst, uint64_t value)
{
	DMA_BEGIN();
	__atomic_store_n(dst, value, __ATOMIC_RELEASE);
	DMA_END();
}

/* READ responses: their sending reads the target memory they carry. */
static void resp_dma_xmit(struct uroce_qp *qp, struct uroce_txpkt *pkts,
			  unsigned n)
{
	DMA_BEGIN();
	uroce_xmit(qp, pkts, n);
	DMA_END();
}

static void send_atomic_ack(struct uroce_qp *qp, uint32_t psn, uint64_t orig)
{
	struct uroce_txpkt p;

	bth_init(p.hdr, resp_service(qp) | IB_OP_ATOMIC_ACK, 0, 0, UROCE_DEFAULT_PKEY,
		 qp->attr.dest_qp_num, 0, psn);
	aeth_set(p.hdr + BTH_LEN, AETH_ACK_UNLIMITED, qp->resp.msn);
	atmack_set(p.hdr + BTH_LEN + AETH_LEN, orig);
	uroce_pkt_finish(qp, &p, BTH_LEN + AETH_LEN + ATMACK_LEN, 0, 0);
	uroce_xmit(qp, &p, 1);
}

/* READ responses for packets [from, res->npkts) of a saved request. */
static void send_read_responses(struct uroce_qp *qp,
				const struct uroce_resp_res *res,
				const uint8_t *base, uint32_t from)
{
	struct uroce_txpkt pkts[RESP_TX_BATCH];
	unsigned n = 0;

	for (uint32_t i = from; i < res->npkts; i++) {
		struct uroce_txpkt *p = &pkts[n++];
		uint32_t off = i * qp->mtu;
		uint32_t len = res->length - off < qp->mtu ? res->length - off
							    : qp->mtu;
		bool first = i == 0, last = i == res->npkts - 1;
		uint8_t op = first && last ? IB_OP_READ_RESP_ONLY :
			     first ? IB_OP_READ_RESP_FIRST :
			     last ? IB_OP_READ_RESP_LAST : IB_OP_READ_RESP_MIDDLE;
		uint8_t opcode = resp_service(qp) | op;
		unsigned hl = BTH_LEN;

		bth_init(p->hdr, opcode, 0, 0, UROCE_DEFAULT_PKEY,
			 qp->attr.dest_qp_num, 0, psn_add(res->first_psn, i));
		if (ib_opcodes[opcode].mask & OPM_AETH) {
			aeth_set(p->hdr + hl, AETH_ACK_UNLIMITED, qp->resp.msn);
			hl += AETH_LEN;
		}
		if (len) {	/* base is NULL when nothing is read */
			p->iov[1].iov_base = (void *)(base + off);
			p->iov[1].iov_len = len;
		}
		uroce_pkt_finish(qp, p, hl, len ? 1 : 0, len);
		if (n == RESP_TX_BATCH) {
			resp_dma_xmit(qp, pkts, n);
			n = 0;
		}
	}
	if (n)
		resp_dma_xmit(qp, pkts, n);
}

/* A responder resource for a READ, atomic, FLUSH or ATOMIC WRITE; NULL
 * once the request is refused (the QP offers none: max_dest_rd_atomic 0). */
static struct uroce_resp_res *resp_new_res(struct uroce_qp *qp,
					   struct uroce_pkt *pkt)
{
	uint32_t n = qp->attr.max_dest_rd_atomic;
	struct uroce_resp_res *res;

	if (!n) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return NULL;
	}
	res = &qp->resp.res[qp->resp.res_next % n];
	qp->resp.res_next = (qp->resp.res_next + 1) % n;
	return res;
}

void resp_read(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const uint8_t *reth = pkt->bth + ib_opcodes[pkt->opcode].reth;
	uint32_t len = reth_len(reth);
	struct uroce_resp_res *res;
	uint8_t *src = NULL;

	if (len > UROCE_MAX_MSG_SZ) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	if (len) {
		src = resp_check_rkey(qp, reth_rkey(reth), reth_va(reth), len,
				      IBV_ACCESS_REMOTE_READ);
		if (!src) {
			resp_fatal(qp, pkt, AETH_NAK_REM_ACCESS);
			return;
		}
	}
	res = resp_new_res(qp, pkt);
	if (!res)
		return;
	*res = (struct uroce_resp_res){
		.opcode = pkt->opcode,
		.first_psn = pkt->psn,
		.npkts = len ? (len + qp->mtu - 1) / qp->mtu : 1,
		.va = reth_va(reth),
		.rkey = reth_rkey(reth),
		.length = len,
	};
	/* the MSN counts a READ when it executes (C9-148) */
	qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
	send_read_responses(qp, res, src, 0);
	qp->resp.psn = psn_add(qp->resp.psn, res->npkts);
}

/* The naturally aligned 8 bytes an atomic or ATOMIC WRITE targets, and a
 * responder resource to remember it by; NULL once the request is refused
 * (NAKed, the QP in error). */
static uint64_t *resp_atomic_target(struct uroce_qp *qp, struct uroce_pkt *pkt,
				    uint32_t rkey, uint64_t va, int access,
				    struct uroce_resp_res **res)
{
	uint8_t *p;

	if (va & 7) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return NULL;
	}
	p = resp_check_rkey(qp, rkey, va, 8, access);
	if (!p) {
		resp_fatal(qp, pkt, AETH_NAK_REM_ACCESS);
		return NULL;
	}
	/* a zero-based MR may put an aligned iova at an unaligned address */
	if ((uintptr_t)p & 7) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return NULL;
	}
	*res = resp_new_res(qp, pkt);
	return *res ? (uint64_t *)p : NULL;
}

void resp_atomic(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const uint8_t *ae = pkt->bth + ib_opcodes[pkt->opcode].atmeth;
	uint64_t va = atmeth_va(ae), orig;
	struct uroce_resp_res *res;
	uint64_t *target;

	target = resp_atomic_target(qp, pkt, atmeth_rkey(ae), va,
				    IBV_ACCESS_REMOTE_ATOMIC, &res);
	if (!target)
		return;
	orig = resp_dma_atomic(target, (pkt->opcode & 0x1F) == IB_OP_CMP_SWAP,
			       atmeth_compare(ae), atmeth_swap_add(ae));
	*res = (struct uroce_resp_res){
		.opcode = pkt->opcode,
		.first_psn = pkt->psn,
		.npkts = 1,
		.atomic_orig = orig,
	};
	qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
	send_atomic_ack(qp, pkt->psn, orig);
	qp->resp.psn = psn_add(qp->resp.psn, 1);
}

/* Remember an executed FLUSH or ATOMIC_WRITE (its duplicate is answered,
 * never executed again) and answer it with an empty READ response. */
static void resp_mpe_done(struct uroce_qp *qp, struct uroce_pkt *pkt,
			  struct uroce_resp_res *res)
{
	*res = (struct uroce_resp_res){
		.opcode = pkt->opcode,
		.first_psn = pkt->psn,
		.npkts = 1,
	};
	qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
	send_read_responses(qp, res, NULL, 0);
	qp->resp.psn = psn_add(qp->resp.psn, 1);
}

/* ATOMIC_WRITE: 8 bytes stored as one naturally aligned store, after
 * everything earlier on this QP (memory placement extensions, IBTA 1.5). */
void resp_atomic_write(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const uint8_t *reth = pkt->bth + ib_opcodes[pkt->opcode].reth;
	struct uroce_resp_res *res;
	uint64_t value, *dst;

	if (reth_len(reth) != 8 || pkt->paylen != 8) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	dst = resp_atomic_target(qp, pkt, reth_rkey(reth), reth_va(reth),
				 IBV_ACCESS_REMOTE_WRITE, &res);
	if (!dst)
		return;
	memcpy(&value, pkt->payload, 8);
	resp_dma_atomic_write(dst, value);
	resp_mpe_done(qp, pkt, res);
}

/*
 * FLUSH: what was placed before it is made globally visible (a full fence:
 * every earlier request of this QP was executed by this thread already) or
 * persistent (msync: a file-backed region reaches its file; anonymous
 * memory has no further place to go).  The MR must have been registered
 * flushable for each placement type asked for (oA19-13).
 */
void resp_flush(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const uint8_t *feth = pkt->bth + ib_opcodes[pkt->opcode].feth;
	const uint8_t *reth = pkt->bth + ib_opcodes[pkt->opcode].reth;
	uint8_t plt = feth_plt(feth), sel = feth_sel(feth);
	struct uroce_mr *mr = qp->nic->objects->mr_lookup(qp->nic,
							   reth_rkey(reth));
	struct uroce_resp_res *res;
	uint8_t *start;
	uint64_t len;

	if (!plt || (plt & ~(FETH_PLT_GLOBAL | FETH_PLT_PERSISTENT)) ||
	    sel > FETH_SEL_MR) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	if (!mr || !resp_pd(qp) || mr->pd != to_upd(resp_pd(qp)) ||
	    ((plt & FETH_PLT_GLOBAL) &&
	     !(mr->access & UROCE_ACCESS_FLUSH_GLOBAL)) ||
	    ((plt & FETH_PLT_PERSISTENT) &&
	     !(mr->access & UROCE_ACCESS_FLUSH_PERSISTENT))) {
		resp_fatal(qp, pkt, AETH_NAK_REM_ACCESS);
		return;
	}
	if (sel == FETH_SEL_RANGE) {
		len = reth_len(reth);
		start = qp->nic->objects->mr_ptr(mr, reth_va(reth), len);
	} else {
		len = mr->ibmr.length;
		start = mr->ibmr.addr;
	}
	if (!start) {
		resp_fatal(qp, pkt, AETH_NAK_REM_ACCESS);
		return;
	}
	res = resp_new_res(qp, pkt);
	if (!res)
		return;
	atomic_thread_fence(memory_order_seq_cst);
	if ((plt & FETH_PLT_PERSISTENT) && len) {
		uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
		uintptr_t from = (uintptr_t)start & ~(page - 1);

		if (msync((void *)from, (uintptr_t)start + len - from, MS_SYNC)) {
			resp_fatal(qp, pkt, AETH_NAK_REM_OP);
			return;
		}
	}
	resp_mpe_done(qp, pkt, res);
}

/* A request we already executed (its response or ACK was lost). */
void resp_duplicate(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	STAT_INC(qp->nic, rx_duplicate);
	if (pkt->mask & (OPM_SEND | OPM_WRITE)) {
		/* C9-105: acknowledge again, with the latest PSN */
		if (bth_ackreq(pkt->bth))
			resp_ack_duplicate(qp);
		return;
	}
	for (uint32_t i = 0; i < qp->attr.max_dest_rd_atomic; i++) {
		struct uroce_resp_res *res = &qp->resp.res[i];
		int32_t into = psn_diff(pkt->psn, res->first_psn);

		if (res->opcode != pkt->opcode || into < 0 ||
		    (uint32_t)into >= res->npkts)
			continue;
		if (pkt->mask & OPM_ATOMIC) {
			/* never executed twice: answer from the saved value */
			send_atomic_ack(qp, pkt->psn, res->atomic_orig);
			return;
		}
		const uint8_t *src = NULL;
		if (res->length) {
			src = resp_check_rkey(qp, res->rkey, res->va, res->length,
					      IBV_ACCESS_REMOTE_READ);
			if (!src)
				return;	/* deregistered since: stay silent */
		}
		send_read_responses(qp, res, src, into);
		return;
	}
}
