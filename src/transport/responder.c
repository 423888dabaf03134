/*
 * Responder: executes inbound requests in PSN order (IBTA 9.7.x): places SEND
 * payloads into receive WQEs, RDMA WRITEs into registered memory, hands READs
 * and atomics to read_atomic.c, and acknowledges.  Runs in the engine under
 * rx_lock.
 */
#include <arpa/inet.h>
#include <sched.h>
#include <string.h>

#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/responder.h"
#include "transport/transport.h"

/* ---- target memory --------------------------------------------------------
 * A peer's WRITEs, atomics and READs reach the target's memory through these
 * functions alone, as a NIC's DMA would (DMA_BEGIN, transport.h). */

/* The last byte goes last: pollers such as ib_write_lat watch it to learn
 * that the whole message has landed. */
static void resp_dma_write(uint8_t *dst, const uint8_t *src, uint32_t n)
{
	DMA_BEGIN();
	memcpy(dst, src, n - 1);
	atomic_thread_fence(memory_order_release);
	((volatile uint8_t *)dst)[n - 1] = src[n - 1];
	DMA_END();
}

/* ---- sending acknowledgements and responses ------------------------------ */

/* Responses are in the requester's transport: RC's, or XRC's numbers. */
uint8_t resp_service(const struct uroce_qp *qp)
{
	return qp->ibqpx.qp_base.qp_type == IBV_QPT_XRC_RECV ? IB_OPC_XRC
							     : IB_OPC_RC;
}

static void build_aeth(struct uroce_qp *qp, struct uroce_txpkt *p,
		       uint8_t syndrome, uint32_t psn)
{
	bth_init(p->hdr, resp_service(qp) | IB_OP_ACK, 0, 0, UROCE_DEFAULT_PKEY,
		 qp->attr.dest_qp_num, 0, psn);
	aeth_set(p->hdr + BTH_LEN, syndrome, qp->resp.msn);
	uroce_pkt_finish(qp, p, BTH_LEN + AETH_LEN, 0, 0);
}

static void send_aeth(struct uroce_qp *qp, uint8_t syndrome, uint32_t psn)
{
	struct uroce_txpkt p;

	build_aeth(qp, &p, syndrome, psn);
	uroce_xmit(qp, &p, 1);
}

void uroce_resp_nak(struct uroce_qp *qp, uint8_t syndrome, uint32_t psn)
{
	send_aeth(qp, syndrome, psn);
}

/* C9-105 asks for an ACK with the latest PSN.  Sent at once, not merged
 * with the one owed for the copy that came first: a requester whose tail
 * probe crossed a late original sees that PSN acknowledged twice and
 * knows the probe was needless (completer.c). */
void resp_ack_duplicate(struct uroce_qp *qp)
{
	send_aeth(qp, AETH_ACK_UNLIMITED, psn_add(qp->resp.psn, PSN_MASK));
}

/* Under rx_lock, after a request: the ACK the QP now owes covers it. */
void uroce_resp_owe_ack(struct uroce_qp *qp)
{
	qp->resp.ack_pending = false;
	atomic_store_explicit(&qp->ack.owed,
			      UROCE_ACK_OWED |
			      (uint64_t)psn_add(qp->resp.psn, PSN_MASK) << 24 |
			      qp->resp.msn, memory_order_release);
}

bool uroce_resp_take_ack(struct uroce_qp *qp, struct uroce_txpkt *p)
{
	if (uroce_resp_claim_ack(qp, p))
		return true;
	/* another thread claimed it: it leaves first */
	while (atomic_load_explicit(&qp->ack.sending, memory_order_acquire))
		sched_yield();
	return false;
}

bool uroce_resp_claim_ack(struct uroce_qp *qp, struct uroce_txpkt *p)
{
	uint64_t owed;

	if (!atomic_load(&qp->ack.owed))
		return false;
	owed = atomic_exchange(&qp->ack.owed, 0);
	if (!owed)
		return false;
	bth_init(p->hdr, resp_service(qp) | IB_OP_ACK, 0, 0, UROCE_DEFAULT_PKEY,
		 qp->attr.dest_qp_num, 0, (owed >> 24) & PSN_MASK);
	aeth_set(p->hdr + BTH_LEN, AETH_ACK_UNLIMITED, owed & 0xFFFFFF);
	uroce_pkt_finish(qp, p, BTH_LEN + AETH_LEN, 0, 0);
	return true;
}

/* A request that completes a receive and asks for an ACK owes it before the
 * completion shows: an application that answers at once, on any thread,
 * then finds the ACK to send ahead of its answer (UC acknowledges nothing). */
static void resp_owe_ack_first(struct uroce_qp *qp, const struct uroce_pkt *pkt)
{
	if (bth_ackreq(pkt->bth) && (pkt->opcode & 0xE0) != IB_OPC_UC)
		atomic_store_explicit(&qp->ack.owed,
				      UROCE_ACK_OWED |
				      (uint64_t)pkt->psn << 24 | qp->resp.msn,
				      memory_order_release);
}

/* ---- receive WQEs -------------------------------------------------------- */

static struct uroce_rq *resp_rq(struct uroce_qp *qp)
{
	return qp->srq ? &qp->srq->rq : &qp->rq;
}

/* Where receives complete: an XRC SRQ has its own CQ. */
static struct uroce_cq *resp_cq(struct uroce_qp *qp)
{
	return to_ucq(qp->xrcd ? qp->srq->cq : qp->ibqpx.qp_base.recv_cq);
}

/* The PD remote keys must belong to: an XRC target QP has none of its own
 * and uses that of the SRQ the request named.  None (NULL) if that SRQ has
 * been destroyed since, as a duplicate READ may find. */
struct ibv_pd *resp_pd(struct uroce_qp *qp)
{
	if (qp->xrcd)
		return qp->srq ? qp->srq->ibsrq.pd : NULL;
	return qp->ibqpx.qp_base.pd;
}

/* An XRC request names its SRQ, which must be in the target QP's domain;
 * a message's packets all name the same one. */
static bool resp_xrc_srq(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	uint32_t srqn = get_be32(pkt->bth + BTH_LEN) & QPN_MASK;
	struct uroce_srq *srq = qp->nic->objects->srq_lookup(qp->nic, srqn);

	if (!srq || srq->xrcd != qp->xrcd ||
	    ((qp->resp.in_send || qp->resp.in_write) && srq != qp->srq))
		return false;
	qp->srq = srq;
	return true;
}

static bool resp_take_wqe(struct uroce_qp *qp)
{
	struct uroce_rq *rq = resp_rq(qp);
	bool ok;

	qp->resp.cur_offset = 0;
	if (qp->resp.cur_held) {
		qp->resp.cur_held = false;
		return true;
	}
	pthread_mutex_lock(&rq->lock);
	ok = qp->nic->objects->rq_pop(rq, &qp->resp.cur, qp->resp.cur_sge);
	pthread_mutex_unlock(&rq->lock);
	if (ok && qp->srq)
		qp->nic->objects->srq_check_limit(qp->srq);
	return ok;
}

/* The WQE just taken still names memory its lkeys grant (checked when
 * consumed, as a NIC does: the MR may have gone or changed since the post). */
static bool resp_wqe_valid(struct uroce_qp *qp)
{
	struct ibv_pd *pd = resp_pd(qp);

	return pd && qp->nic->objects->sges_recheck(qp->nic, to_upd(pd),
						    qp->resp.cur.sge,
						    qp->resp.cur.num_sge);
}

/* Completes the current receive WQE with wc, whose fields naming the WQE
 * and the QPs are filled in here. */
static void resp_push_recv(struct uroce_qp *qp, struct ibv_wc *wc,
			   bool solicited)
{
	wc->wr_id = qp->resp.cur.wr_id;
	wc->qp_num = qp->ibqpx.qp_base.qp_num;
	wc->src_qp = qp->attr.dest_qp_num;
	qp->nic->objects->cq_push(resp_cq(qp), wc, solicited);
}

static void resp_complete_recv(struct uroce_qp *qp, enum ibv_wc_status status,
			       enum ibv_wc_opcode opcode, uint32_t byte_len,
			       const uint8_t *imm, bool solicited)
{
	struct ibv_wc wc = { .status = status, .opcode = opcode,
			     .byte_len = byte_len };

	if (imm) {
		memcpy(&wc.imm_data, imm, IMMDT_LEN);
		wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	resp_push_recv(qp, &wc, solicited);
}

/* The receive of a SEND with Invalidate that invalidated rkey. */
static void resp_complete_recv_inv(struct uroce_qp *qp, uint32_t byte_len,
				   uint32_t rkey, bool solicited)
{
	struct ibv_wc wc = { .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV,
			     .byte_len = byte_len,
			     .wc_flags = IBV_WC_WITH_INV,
			     .invalidated_rkey = rkey };

	resp_push_recv(qp, &wc, solicited);
}

void uroce_resp_flush(struct uroce_qp *qp)
{
	struct uroce_sge sges[UROCE_MAX_SGE];

	if (qp->resp.in_send || qp->resp.cur_held) {
		qp->resp.in_send = false;
		qp->resp.cur_held = false;
		resp_complete_recv(qp, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0,
				   NULL, false);
	}
	if (qp->srq || qp->xrcd)
		return;	/* SRQ WQEs belong to every QP sharing it */
	for (;;) {
		bool ok;

		pthread_mutex_lock(&qp->rq.lock);
		ok = qp->nic->objects->rq_pop(&qp->rq, &qp->resp.cur, sges);
		pthread_mutex_unlock(&qp->rq.lock);
		if (!ok)
			break;
		resp_complete_recv(qp, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0,
				   NULL, false);
	}
}

/* Copy payload into the current receive WQE; false if it does not fit. */
static bool resp_place(struct uroce_qp *qp, const uint8_t *data, uint32_t len)
{
	struct uroce_recv_wqe *w = &qp->resp.cur;
	uint32_t offset = qp->resp.cur_offset;

	if (len > w->length - offset)
		return false;
	qp->resp.cur_offset += len;
	uroce_sge_scatter(w->sge, w->num_sge, offset, data, len);
	return true;
}

/* ---- errors -------------------------------------------------------------- */

/* UC cannot tell the requester anything: the message is lost. */
static void resp_uc_drop(struct uroce_qp *qp)
{
	STAT_INC(qp->nic, rx_dropped_msgs);
	if (qp->resp.in_send)
		qp->resp.cur_held = true;
	qp->resp.in_send = false;
	qp->resp.in_write = false;
	qp->resp.drop_msg = true;
}

static void resp_rnr(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	if (!uroce_qp_reliable(qp)) {
		resp_uc_drop(qp);
		return;
	}
	STAT_INC(qp->nic, rnr_naks_sent);
	/* the rest of the message follows it: drop it silently, as after a
	 * sequence NAK, until the requester retries this PSN */
	qp->resp.nak_sent = true;
	send_aeth(qp, AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1F), pkt->psn);
}

/* Class B/C errors (IBTA 9.9.3): NAK the request, then the QP is in error. */
void resp_fatal(struct uroce_qp *qp, struct uroce_pkt *pkt,
		enum aeth_nak_code code)
{
	struct ibv_async_event ev = { .element.qp = &qp->ibqpx.qp_base };

	if (code == AETH_NAK_REM_ACCESS)
		STAT_INC(qp->nic, access_errors);
	if (!uroce_qp_reliable(qp)) {
		/* UC has no NAK: the message is silently dropped (C9-...
		 * 9.8.3.1); the QP carries on */
		resp_uc_drop(qp);
		return;
	}
	send_aeth(qp, AETH_NAK | code, pkt->psn);
	ev.event_type = code == AETH_NAK_REM_ACCESS ? IBV_EVENT_QP_ACCESS_ERR
						    : IBV_EVENT_QP_REQ_ERR;
	qp->nic->objects->async_event(qp->ctx, &ev);
	qp->nic->objects->qp_to_error(qp, false);
}

/* A receive WQE whose lkeys no longer grant its memory: it completes with
 * a local protection error and the QP goes to error; a reliable requester
 * is told with a remote operational error NAK (IBTA 9.9.3, class C). */
static void resp_bad_wqe(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	STAT_INC(qp->nic, access_errors);
	resp_complete_recv(qp, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, NULL,
			   false);
	if (uroce_qp_reliable(qp))
		send_aeth(qp, AETH_NAK | AETH_NAK_REM_OP, pkt->psn);
	qp->nic->objects->qp_to_error(qp, false);
}

/* rkey check (C9-88 ff.): key, PD, access on both the MR and the QP, bounds. */
uint8_t *resp_check_rkey(struct uroce_qp *qp, uint32_t rkey,
			 uint64_t va, uint32_t len, int access)
{
	const struct uroce_objects_ops *obj = qp->nic->objects;
	struct uroce_mr *mr = obj->mr_lookup(qp->nic, rkey);
	uint8_t *p;

	if (!mr || !resp_pd(qp) || !(qp->attr.qp_access_flags & access))
		return NULL;
	if (mr->mw)
		return obj->mw_ptr(mr->mw, to_upd(resp_pd(qp)),
				   qp->ibqpx.qp_base.qp_num, rkey, va, len,
				   access);
	if (mr->pd != to_upd(resp_pd(qp)) || !(mr->access & access))
		return NULL;
	p = obj->mr_ptr(mr, va, len);
	/* an ODP page that cannot be faulted in is an access error */
	if (p && (mr->access & IBV_ACCESS_ON_DEMAND) &&
	    obj->odp_fault(p, len, access != IBV_ACCESS_REMOTE_READ))
		return NULL;
	return p;
}

/* ---- request handlers ---------------------------------------------------- */

static void resp_send(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const struct ib_opcode_info *info = &ib_opcodes[pkt->opcode];
	bool first = pkt->mask & OPM_FIRST, last = pkt->mask & OPM_LAST;

	if (first && !resp_take_wqe(qp)) {
		resp_rnr(qp, pkt);
		return;
	}
	if (first && !resp_wqe_valid(qp)) {
		resp_bad_wqe(qp, pkt);
		return;
	}
	if (!resp_place(qp, pkt->payload, pkt->paylen)) {
		qp->resp.in_send = false;
		resp_complete_recv(qp, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV,
				   qp->resp.cur_offset, NULL, false);
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	qp->resp.in_send = !last;
	if (last && info->ieth) {
		/* SEND with Invalidate (IBTA 9.4.1.1): the window it names
		 * must be one bound through this QP (o10-37.2.x) */
		uint32_t rkey = get_be32(pkt->bth + info->ieth);

		if (!resp_pd(qp) ||
		    !qp->nic->objects->mw_remote_inv(qp->nic,
						     to_upd(resp_pd(qp)),
						     qp->ibqpx.qp_base.qp_num,
						     rkey)) {
			resp_complete_recv(qp, IBV_WC_REM_INV_REQ_ERR,
					   IBV_WC_RECV, 0, NULL, false);
			resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
			return;
		}
		qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
		resp_owe_ack_first(qp, pkt);
		resp_complete_recv_inv(qp, qp->resp.cur_offset, rkey,
				       bth_se(pkt->bth));
	} else if (last) {
		qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
		resp_owe_ack_first(qp, pkt);
		resp_complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV,
				   qp->resp.cur_offset,
				   info->immdt ? pkt->bth + info->immdt : NULL,
				   bth_se(pkt->bth));
	}
	qp->resp.psn = psn_add(qp->resp.psn, 1);
	if (bth_ackreq(pkt->bth))
		qp->resp.ack_pending = true;
}

static void resp_write(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const struct ib_opcode_info *info = &ib_opcodes[pkt->opcode];
	bool first = pkt->mask & OPM_FIRST, last = pkt->mask & OPM_LAST;
	const uint8_t *imm = info->immdt ? pkt->bth + info->immdt : NULL;

	if (first) {
		const uint8_t *reth = pkt->bth + info->reth;
		uint32_t len = reth_len(reth);
		uint8_t *dst = NULL;

		if (len > UROCE_MAX_MSG_SZ) {		/* C9-94 */
			resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
			return;
		}
		/* a zero-length WRITE needs no valid R_Key (C9-88) */
		if (len) {
			dst = resp_check_rkey(qp, reth_rkey(reth), reth_va(reth),
					      len, IBV_ACCESS_REMOTE_WRITE);
			if (!dst) {
				resp_fatal(qp, pkt, AETH_NAK_REM_ACCESS);
				return;
			}
		}
		qp->resp.write_ptr = dst;
		qp->resp.write_left = len;
		qp->resp.write_total = len;
	}
	/* FIRST/MIDDLE carry exactly one MTU; the message ends exactly at LAST */
	if (pkt->paylen > qp->resp.write_left ||
	    (!last && pkt->paylen != qp->mtu) ||
	    (last && pkt->paylen != qp->resp.write_left)) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	/* the WQE only completes: no data goes to its scatter list, whose
	 * lkeys are therefore not checked */
	if (imm && !resp_take_wqe(qp)) {
		resp_rnr(qp, pkt);
		return;
	}
	if (pkt->paylen) {
		resp_dma_write(qp->resp.write_ptr, pkt->payload, pkt->paylen);
		qp->resp.write_ptr += pkt->paylen;
		qp->resp.write_left -= pkt->paylen;
	}
	qp->resp.in_write = !last;
	if (last) {
		qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
		if (imm) {
			resp_owe_ack_first(qp, pkt);
			resp_complete_recv(qp, IBV_WC_SUCCESS,
					   IBV_WC_RECV_RDMA_WITH_IMM,
					   qp->resp.write_total, imm,
					   bth_se(pkt->bth));
		}
	}
	qp->resp.psn = psn_add(qp->resp.psn, 1);
	if (bth_ackreq(pkt->bth))
		qp->resp.ack_pending = true;
}

/* Opcode sequence check: a message started with
 * FIRST continues with MIDDLE/LAST of the same kind; nothing else may be
 * interleaved. */
static bool resp_sequence_ok(struct uroce_qp *qp, uint32_t mask)
{
	if (qp->resp.in_send)
		return (mask & OPM_SEND) && !(mask & OPM_FIRST);
	if (qp->resp.in_write)
		return (mask & OPM_WRITE) && !(mask & OPM_FIRST);
	return (mask & OPM_FIRST) || (mask & (OPM_READ | OPM_ATOMIC));
}

/*
 * UC (IBTA 9.8.3): in-order packets as on RC, but no ACK, NAK or
 * retransmission.  After a PSN gap the message in progress is lost and the
 * responder resynchronises on the next FIRST or ONLY packet, whatever its
 * PSN; a receive WQE the lost message had started is reused.
 */
static void resp_uc(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	bool starts = pkt->mask & OPM_FIRST;

	if (pkt->psn != qp->resp.psn) {
		STAT_INC(qp->nic, rx_out_of_window);
		if (qp->resp.in_send || qp->resp.in_write)
			resp_uc_drop(qp);
		if (!starts)
			return;
		qp->resp.psn = pkt->psn;
	} else if (qp->resp.drop_msg ||
		   ((qp->resp.in_send || qp->resp.in_write) && starts)) {
		/* a message begun after a lost end replaces the old one */
		if (!starts) {
			qp->resp.psn = psn_add(qp->resp.psn, 1);
			return;
		}
		if (qp->resp.in_send || qp->resp.in_write)
			resp_uc_drop(qp);
	}
	qp->resp.drop_msg = false;
	if (!resp_sequence_ok(qp, pkt->mask) ||
	    ((pkt->mask & (OPM_FIRST | OPM_MIDDLE)) && !(pkt->mask & OPM_LAST) &&
	     pkt->paylen != qp->mtu) || pkt->paylen > qp->mtu) {
		STAT_INC(qp->nic, rx_malformed);
		resp_uc_drop(qp);
		qp->resp.psn = psn_add(qp->resp.psn, 1);
		return;
	}
	if (pkt->mask & OPM_SEND)
		resp_send(qp, pkt);
	else
		resp_write(qp, pkt);
	if (qp->resp.drop_msg)	/* dropped: its PSN is still used up */
		qp->resp.psn = psn_add(pkt->psn, 1);
	qp->resp.ack_pending = false;
}

/* UD (IBTA 9.8.4): single-packet SENDs checked against the Q_Key; with no
 * receive WQE posted the datagram is silently dropped. */
static void resp_ud(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const struct ib_opcode_info *info = &ib_opcodes[pkt->opcode];
	const uint8_t *deth = pkt->bth + info->deth;
	uint8_t grh[UROCE_GRH_LEN];
	struct ibv_wc wc = {
		.status = IBV_WC_SUCCESS,
		.opcode = IBV_WC_RECV,
		.qp_num = qp->ibqpx.qp_base.qp_num,
		.src_qp = deth_sqpn(deth),
		.wc_flags = IBV_WC_GRH,
	};

	if (deth_qkey(deth) != qp->attr.qkey) {
		STAT_INC(qp->nic, rx_bad_qkey);
		return;
	}
	if (pkt->paylen > 128u << qp->nic->cfg->max_mtu) {
		STAT_INC(qp->nic, rx_malformed);
		return;
	}
	if (!resp_take_wqe(qp)) {
		STAT_INC(qp->nic, rx_dropped_msgs);
		return;
	}
	if (!resp_wqe_valid(qp)) {
		resp_bad_wqe(qp, pkt);
		return;
	}
	/* the link rebuilds the headers below the BTH */
	wc.sl = uroce_link_rx_grh(qp->nic, pkt->rx, grh);
	wc.wr_id = qp->resp.cur.wr_id;
	if (!resp_place(qp, grh, sizeof(grh)) ||
	    !resp_place(qp, pkt->payload, pkt->paylen)) {
		wc.status = IBV_WC_LOC_LEN_ERR;
		wc.byte_len = 0;
	} else {
		wc.byte_len = qp->resp.cur_offset;
	}
	if (info->immdt) {
		memcpy(&wc.imm_data, pkt->bth + info->immdt, IMMDT_LEN);
		wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	qp->nic->objects->cq_push(to_ucq(qp->ibqpx.qp_base.recv_cq), &wc,
				  bth_se(pkt->bth));
}

void uroce_resp_rx(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	enum ibv_qp_state state = atomic_load(&qp->state);
	int32_t d;

	if (state != IBV_QPS_RTR && state != IBV_QPS_RTS &&
	    state != IBV_QPS_SQD) {
		STAT_INC(qp->nic, rx_bad_state);
		return;
	}
	if (qp->ibqpx.qp_base.qp_type == IBV_QPT_UD) {
		resp_ud(qp, pkt);
		return;
	}
	if (qp->ibqpx.qp_base.qp_type == IBV_QPT_UC) {
		resp_uc(qp, pkt);
		return;
	}
	d = psn_diff(pkt->psn, qp->resp.psn);
	if (d > 0) {
		/* a gap: loss recovery's to answer (transport/loss.h) */
		STAT_INC(qp->nic, rx_out_of_window);
		qp->loss.ops->ahead(qp, pkt);
		return;
	}
	if (d < 0) {
		resp_duplicate(qp, pkt);
		return;
	}
	qp->resp.nak_sent = false;
	if (!resp_sequence_ok(qp, pkt->mask)) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	if ((pkt->mask & (OPM_FIRST | OPM_MIDDLE)) && !(pkt->mask & OPM_LAST) &&
	    (pkt->mask & OPM_PAYLOAD) && pkt->paylen != qp->mtu) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	if (pkt->paylen > qp->mtu) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	if (qp->xrcd && !resp_xrc_srq(qp, pkt)) {
		resp_fatal(qp, pkt, AETH_NAK_INVALID_REQ);
		return;
	}
	if (pkt->mask & OPM_SEND)
		resp_send(qp, pkt);
	else if (pkt->mask & OPM_WRITE)
		resp_write(qp, pkt);
	else if (pkt->mask & OPM_READ)
		resp_read(qp, pkt);
	else if (pkt->mask & OPM_FLUSH)
		resp_flush(qp, pkt);
	else if (pkt->mask & OPM_ATOMIC_WRITE)
		resp_atomic_write(qp, pkt);
	else
		resp_atomic(qp, pkt);
}
