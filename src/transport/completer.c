/*
 * Completer: consumes ACK / NAK / READ response / ATOMIC ACK packets and
 * retires send WQEs in order (IBTA 9.7.5.1); runs the local ACK timeout and
 * RNR timers.  Everything here runs with qp->sq_lock held.
 */
#include <string.h>

#include "samehost/samehost.h"
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch ((int)op) {
	case IBV_WR_BIND_MW:
		return IBV_WC_BIND_MW;
	case IBV_WR_LOCAL_INV:
		return IBV_WC_LOCAL_INV;
	case IBV_WR_ATOMIC_WRITE:
		return IBV_WC_ATOMIC_WRITE;
	case UROCE_WR_FLUSH:
		return (enum ibv_wc_opcode)UROCE_WC_FLUSH;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	default:
		return IBV_WC_SEND;
	}
}

static void complete_one(struct uroce_qp *qp, enum ibv_wc_status status)
{
	struct uroce_send_wqe *wqe = &qp->sq[qp->sq_tail];
	uint32_t old_tail = qp->sq_tail;

	if (status != IBV_WC_SUCCESS || qp->init.sq_sig_all ||
	    (wqe->send_flags & IBV_SEND_SIGNALED)) {
		struct ibv_wc wc = {
			.wr_id = wqe->wr_id,
			.status = status,
			.opcode = wc_opcode(wqe->opcode),
			.byte_len = wqe->length,
			.qp_num = qp->ibqpx.qp_base.qp_num,
		};
		qp->nic->objects->cq_push(to_ucq(qp->ibqpx.qp_base.send_cq), &wc,
					  false);
	}
	if (uroce_wqe_is_read_or_atomic(wqe) && wqe->state != WQE_POSTED)
		qp->req.rd_atomic_out--;
	wqe->state = WQE_DONE;
	qp->sq_tail = (qp->sq_tail + 1) % qp->sq_size;
	if (qp->sq_next == old_tail) {
		qp->sq_next = qp->sq_tail;
		qp->req.offset = 0;
	}
}

void uroce_comp_retire_local(struct uroce_qp *qp)
{
	while (qp->sq_tail != qp->sq_head &&
	       atomic_load(&qp->state) != IBV_QPS_ERR) {
		struct uroce_send_wqe *wqe = &qp->sq[qp->sq_tail];
		enum ibv_wc_status status = wqe->status;

		if (!uroce_wqe_is_local(wqe) || wqe->state != WQE_SENT)
			return;
		if (status != IBV_WC_SUCCESS)	/* as in comp_fail */
			atomic_store(&qp->state, IBV_QPS_ERR);
		complete_one(qp, status);
		if (status != IBV_WC_SUCCESS)
			qp->nic->objects->qp_to_error_locked(qp, false);
	}
}

void uroce_comp_complete_tail(struct uroce_qp *qp, enum ibv_wc_status status)
{
	complete_one(qp, status);
	if (status == IBV_WC_SUCCESS)
		uroce_comp_retire_local(qp);
}

void uroce_comp_flush(struct uroce_qp *qp)
{
	while (qp->sq_tail != qp->sq_head)
		complete_one(qp, IBV_WC_WR_FLUSH_ERR);
	qp->sq_next = qp->sq_tail;
	qp->req.offset = 0;
	qp->req.rd_atomic_out = 0;
	qp->comp.deadline = 0;
	qp->comp.probe_at = 0;
	qp->req.wait_until = 0;
	uroce_req_set_active(qp, false);
}

/*
 * Spurious probes: a tail probe whose packet is acknowledged twice (C9-105:
 * the responder acknowledges a duplicate again) found the original had
 * arrived: the peer was slow, not the packet lost.  Each raises the QP's
 * probe floor to twice the last (from UROCE_PROBE_MIN_NS), which halves
 * back every UROCE_PROBE_FLOOR_DECAY_NS without another: on a loaded
 * machine probes wait out the stalls they saw, on a quiet one they come
 * back to a millisecond.
 */
static uint64_t spurious_floor(const struct uroce_qp *qp)
{
	uint64_t halvings;

	if (!qp->comp.probe_floor_ns)
		return 0;
	halvings = (uroce_now_ns() - qp->comp.probe_floor_at) /
		   UROCE_PROBE_FLOOR_DECAY_NS;
	return halvings >= 32 ? 0 : qp->comp.probe_floor_ns >> halvings;
}

static void tlp_acked(struct uroce_qp *qp, uint32_t psn)
{
	uint64_t floor;

	if (!qp->comp.tlp_on)
		return;
	/* an ACK of a later packet ends the question */
	if (psn != qp->comp.tlp_psn) {
		qp->comp.tlp_on = psn_diff(psn, qp->comp.tlp_psn) < 0;
		return;
	}
	if (++qp->comp.tlp_acks < 2)
		return;
	qp->comp.tlp_on = false;
	STAT_INC(qp->nic, spurious_probes);
	floor = spurious_floor(qp) * 2;
	if (floor < 2ull * UROCE_PROBE_MIN_NS)
		floor = 2ull * UROCE_PROBE_MIN_NS;
	if (floor > UROCE_PROBE_FLOOR_MAX_NS)
		floor = UROCE_PROBE_FLOOR_MAX_NS;
	qp->comp.probe_floor_ns = floor;
	qp->comp.probe_floor_at = uroce_now_ns();
}

/*
 * Loss probe.  A lost NAK, or the last packets of a burst lost, leave the
 * responder silent: only the application's ACK timeout (67 ms at the usual
 * 14) would resend them.  So the requester also goes back by itself once
 * nothing has been acknowledged for a few round trips (estimated as TCP
 * does, RFC 6298, from one timed packet at a time), doubling the wait
 * each time in a row it goes unanswered.  Probes do not count against
 * retry_cnt: the ACK timeout alone decides when a peer is gone.
 */
static uint64_t probe_wait_ns(const struct uroce_qp *qp)
{
	uint64_t var = 4ull * qp->comp.rttvar_ns, t, min, floor;
	uint64_t timeout = uroce_ack_timeout_ns(qp->attr.timeout);

	/* no estimate yet, or nothing to lose on the way: the ACK timeout
	 * only (a same-host peer resent to while descheduled only finds
	 * duplicates in its ring) */
	if (!qp->comp.srtt_ns || uroce_sh_ringed(qp))
		return 0;
	if (var < UROCE_PROBE_VAR_MIN_NS)
		var = UROCE_PROBE_VAR_MIN_NS;
	t = 2ull * qp->comp.srtt_ns + var;
	/* at least a floor that grows with the QPs sending at once: a
	 * process serving many takes longer to come back to each one's ACKs
	 * than any one QP's round trips have shown */
	min = UROCE_PROBE_MIN_NS + (uint64_t)UROCE_PROBE_PER_SENDER_NS *
				   atomic_load(&qp->nic->active_senders);
	if (t < min)
		t = min;
	floor = spurious_floor(qp);
	if (t < floor)
		t = floor;
	t <<= qp->comp.probe_backoff < 16 ? qp->comp.probe_backoff : 16;
	return timeout && t >= timeout ? 0 : t;
}

void uroce_comp_arm_probe(struct uroce_qp *qp, uint64_t now)
{
	uint64_t t = probe_wait_ns(qp);

	qp->comp.probe_at = t ? now + t : 0;
}

static void rtt_sample(struct uroce_qp *qp, uint64_t now)
{
	uint64_t r = now - qp->comp.rtt_sent_ns;
	uint32_t rtt = r < UINT32_MAX ? (uint32_t)r : UINT32_MAX;

	qp->comp.rtt_sent_ns = 0;
	if (!qp->comp.srtt_ns) {
		qp->comp.srtt_ns = rtt ? rtt : 1;
		qp->comp.rttvar_ns = rtt / 2;
		return;
	}
	uint32_t err = rtt > qp->comp.srtt_ns ? rtt - qp->comp.srtt_ns
					      : qp->comp.srtt_ns - rtt;
	qp->comp.rttvar_ns = qp->comp.rttvar_ns - qp->comp.rttvar_ns / 4 +
			     err / 4;
	qp->comp.srtt_ns = qp->comp.srtt_ns - qp->comp.srtt_ns / 8 + rtt / 8;
	if (!qp->comp.srtt_ns)
		qp->comp.srtt_ns = 1;
}

/* Forward progress: restart the retry budget and the ACK timer. */
static void comp_progress(struct uroce_qp *qp, uint32_t new_psn)
{
	uint32_t acked = (uint32_t)psn_diff(new_psn, qp->comp.psn);
	uint64_t now = uroce_now_ns();

	qp->comp.psn = new_psn;
	uroce_req_charge(qp);
	qp->comp.retry_left = qp->attr.retry_cnt;
	qp->comp.rnr_retry_left = qp->attr.rnr_retry;
	qp->comp.probe_backoff = 0;
	if (qp->comp.rtt_sent_ns && psn_diff(new_psn, qp->comp.rtt_psn) > 0)
		rtt_sample(qp, now);
	qp->cc.ops->acked(qp, acked);
	/* acknowledged beyond where a rewind left the requester: skip ahead */
	if (psn_diff(new_psn, qp->req.psn) > 0)
		uroce_req_seek(qp, new_psn);
	if (qp->comp.psn == qp->req.max_psn) {
		qp->comp.deadline = 0;
		qp->comp.probe_at = 0;
		uroce_req_set_active(qp, false);
	} else {
		uint64_t t = uroce_ack_timeout_ns(qp->attr.timeout);

		qp->comp.deadline = t ? now + t : 0;
		uroce_comp_arm_probe(qp, now);
	}
}

/* Packets from comp.psn on were lost (again: see struct uroce_loss_ops).
 * What loss recovery resends cannot be timed (its ACK may answer the
 * first sending), and the congestion window hears of the loss. */
static void comp_lost(struct uroce_qp *qp, bool again)
{
	if (!qp->loss.ops->lost(qp, again))
		return;
	qp->comp.rtt_sent_ns = 0;
	qp->cc.ops->lost(qp);
}

/*
 * Everything before psn `upto` is acknowledged: retire the SEND/WRITE WQEs
 * it covers.  A READ or atomic it covers whose response has not arrived
 * means that response was lost (an implied NAK): go back and ask again.
 */
static void comp_ack_upto(struct uroce_qp *qp, uint32_t upto)
{
	while (qp->sq_tail != qp->sq_head) {
		struct uroce_send_wqe *wqe = &qp->sq[qp->sq_tail];
		uint32_t end;

		if (wqe->state == WQE_POSTED)
			break;
		if (psn_diff(upto, qp->comp.psn) <= 0)
			break;
		end = psn_add(wqe->first_psn, wqe->npkts);
		if (uroce_wqe_is_read_or_atomic(wqe)) {
			comp_lost(qp, false);
			break;
		}
		if (psn_diff(upto, end) >= 0) {
			comp_progress(qp, end);
			uroce_comp_complete_tail(qp, IBV_WC_SUCCESS);
			continue;
		}
		/* part of a long message */
		comp_progress(qp, upto);
		break;
	}
}

static void comp_fail(struct uroce_qp *qp, enum ibv_wc_status status)
{
	/* in error before the completion says so: its poller, another
	 * thread, may query the QP at once (the flush follows) */
	atomic_store(&qp->state, IBV_QPS_ERR);
	if (qp->sq_tail != qp->sq_head)
		uroce_comp_complete_tail(qp, status);
	qp->nic->objects->qp_to_error_locked(qp, false);
}

static void comp_read_resp(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	struct uroce_send_wqe *wqe;
	uint32_t idx, offset, expect;
	bool first, last;

	/* a response implies every earlier request was executed */
	comp_ack_upto(qp, pkt->psn);
	if (qp->sq_tail == qp->sq_head)
		return;
	wqe = &qp->sq[qp->sq_tail];
	if (!uroce_wqe_is_read_or_atomic(wqe) || uroce_wqe_is_atomic(wqe) ||
	    wqe->state == WQE_POSTED)
		return;
	if (pkt->psn != qp->comp.psn) {
		if (psn_diff(pkt->psn, qp->comp.psn) > 0)
			comp_lost(qp, false);	/* a response went missing */
		else
			STAT_INC(qp->nic, rx_duplicate);
		return;
	}
	idx = psn_diff(pkt->psn, wqe->first_psn);
	if (idx >= wqe->npkts)
		return;
	offset = idx * qp->mtu;
	first = pkt->mask & OPM_FIRST;
	last = pkt->mask & OPM_LAST;
	/* FLUSH and ATOMIC_WRITE are answered by one empty READ response */
	if (wqe->opcode != IBV_WR_RDMA_READ)
		expect = 0;
	else if (wqe->length - offset < qp->mtu)
		expect = wqe->length - offset;
	else
		expect = qp->mtu;
	if (first != (idx == 0) || last != (idx == wqe->npkts - 1) ||
	    pkt->paylen != expect) {
		STAT_INC(qp->nic, rx_malformed);
		return;
	}
	if (expect)
		uroce_sge_scatter(wqe->sge, wqe->num_sge, offset, pkt->payload,
				  pkt->paylen);
	comp_progress(qp, psn_add(pkt->psn, 1));
	if (last) {
		wqe->state = WQE_DONE;
		uroce_comp_complete_tail(qp, IBV_WC_SUCCESS);
	}
}

static void comp_atomic_ack(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const struct ib_opcode_info *info = &ib_opcodes[pkt->opcode];
	struct uroce_send_wqe *wqe;
	uint64_t orig;

	comp_ack_upto(qp, pkt->psn);
	if (qp->sq_tail == qp->sq_head)
		return;
	wqe = &qp->sq[qp->sq_tail];
	if (!uroce_wqe_is_atomic(wqe) || wqe->state == WQE_POSTED ||
	    pkt->psn != qp->comp.psn || pkt->psn != wqe->first_psn) {
		STAT_INC(qp->nic, rx_duplicate);
		return;
	}
	/* the original value lands in host byte order, as on rxe */
	orig = atmack_orig(pkt->bth + info->atmack);
	memcpy(wqe->sge[0].addr, &orig, sizeof(orig));
	comp_progress(qp, psn_add(pkt->psn, 1));
	uroce_comp_complete_tail(qp, IBV_WC_SUCCESS);
}

static void comp_ack(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const struct ib_opcode_info *info = &ib_opcodes[pkt->opcode];
	uint8_t syn = aeth_syndrome(pkt->bth + info->aeth);

	switch (syn & AETH_TYPE_MASK) {
	case AETH_ACK:
		tlp_acked(qp, pkt->psn);
		comp_ack_upto(qp, psn_add(pkt->psn, 1));
		break;
	case AETH_RNR_NAK:
		STAT_INC(qp->nic, rnr_naks_rcvd);
		comp_ack_upto(qp, pkt->psn);
		if (pkt->psn != qp->comp.psn)
			break;
		if (qp->comp.rnr_retry_left == 0) {
			comp_fail(qp, IBV_WC_RNR_RETRY_EXC_ERR);
			break;
		}
		if (qp->attr.rnr_retry != 7)	/* 7 means retry forever */
			qp->comp.rnr_retry_left--;
		uroce_req_rewind(qp, pkt->psn);
		qp->comp.deadline = 0;
		qp->comp.probe_at = 0;
		qp->comp.rtt_sent_ns = 0;
		qp->req.wait_until = uroce_now_ns() + uroce_rnr_timer_ns(syn & 0x1F);
		uroce_engine_kick(qp->nic, qp->req.wait_until);
		break;
	case AETH_NAK:
		comp_ack_upto(qp, pkt->psn);
		if (pkt->psn != qp->comp.psn)
			break;
		switch (syn & 0x1F) {
		case AETH_NAK_PSN_SEQ:
			STAT_INC(qp->nic, seq_naks_rcvd);
			if (qp->comp.retry_left == 0) {
				comp_fail(qp, IBV_WC_RETRY_EXC_ERR);
				break;
			}
			qp->comp.retry_left--;
			comp_lost(qp, true);
			break;
		case AETH_NAK_INVALID_REQ:
			comp_fail(qp, IBV_WC_REM_INV_REQ_ERR);
			break;
		case AETH_NAK_REM_ACCESS:
			comp_fail(qp, IBV_WC_REM_ACCESS_ERR);
			break;
		case AETH_NAK_INVALID_RD_REQ:
			comp_fail(qp, IBV_WC_REM_INV_RD_REQ_ERR);
			break;
		default:
			comp_fail(qp, IBV_WC_REM_OP_ERR);
			break;
		}
		break;
	default:
		STAT_INC(qp->nic, rx_malformed);	/* reserved type */
		break;
	}
}

void uroce_comp_rx(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	enum ibv_qp_state state;

	pthread_mutex_lock(&qp->sq_lock);
	state = atomic_load(&qp->state);
	if (state != IBV_QPS_RTS && state != IBV_QPS_SQD) {
		STAT_INC(qp->nic, rx_bad_state);
		goto out;
	}
	/* only PSNs we have sent and not yet had acknowledged are news */
	if (psn_diff(pkt->psn, qp->req.max_psn) >= 0 ||
	    psn_diff(pkt->psn, qp->comp.psn) < -1) {
		STAT_INC(qp->nic, rx_out_of_window);
		goto out;
	}
	switch (pkt->opcode & 0x1F) {
	case IB_OP_ACK:
		comp_ack(qp, pkt);
		break;
	case IB_OP_ATOMIC_ACK:
		comp_atomic_ack(qp, pkt);
		break;
	default:
		comp_read_resp(qp, pkt);
		break;
	}
	/* what the ACK lets go is sent once rx_lock is dropped: a batch of
	 * ACKs would otherwise send megabytes while every other receiver of
	 * the process waits */
	if (atomic_load(&qp->state) != IBV_QPS_ERR)
		uroce_req_list(qp);
out:
	pthread_mutex_unlock(&qp->sq_lock);
}

/*
 * The first probe in a row resends only the last packet sent (TCP's tail
 * loss probe, RFC 8985): a peer that was only slow (descheduled on a
 * loaded machine) takes it as a duplicate and acknowledges everything,
 * for one packet and no window cut; one that lost earlier packets NAKs
 * the gap, and the requester goes back from there.  An unanswered probe
 * (the NAK was lost: the responder stays silent until the gap fills) is
 * followed by the whole go-back.  A READ or atomic at the tail goes back
 * whole: its responses, not its request, hold the PSNs.
 */
static bool probe_tail(struct uroce_qp *qp)
{
	uint32_t last = psn_add(qp->req.max_psn, PSN_MASK), i;

	if (qp->comp.probe_backoff || qp->req.psn != qp->req.max_psn)
		return false;
	i = uroce_req_wqe_at(qp, last);
	if (i == qp->sq_head || qp->sq[i].state == WQE_POSTED ||
	    uroce_wqe_is_read_or_atomic(&qp->sq[i]))
		return false;
	STAT_INC(qp->nic, tail_probes);
	qp->comp.tlp_psn = last;
	qp->comp.tlp_acks = 0;
	qp->comp.tlp_on = true;
	uroce_req_seek(qp, last);
	return true;
}

/* Runs under rx_lock (the engine's timers): what a timer lets go, or
 * sends again, is listed for after the lock (uroce_req_list). */
void uroce_comp_timer(struct uroce_qp *qp, uint64_t now)
{
	bool resumed = false;

	if (atomic_load(&qp->state) == IBV_QPS_ERR)
		return;
	if (qp->req.wait_until && now >= qp->req.wait_until) {
		qp->req.wait_until = 0;
		uroce_req_list(qp);
		resumed = true;
	}
	if (qp->comp.probe_at && now >= qp->comp.probe_at &&
	    (!qp->comp.deadline || now < qp->comp.deadline)) {
		/* a QP resuming from a wait is looked at again next pass,
		 * once it has sent or waits again */
		if (resumed)
			return;
		qp->comp.probe_at = 0;
		if (qp->comp.psn == qp->req.max_psn || qp->req.wait_until)
			return;
		STAT_INC(qp->nic, loss_probes);
		if (!probe_tail(qp)) {
			comp_lost(qp, true);
		}
		qp->comp.probe_backoff++;
		uroce_comp_arm_probe(qp, now);
		uroce_req_list(qp);
		return;
	}
	if (!qp->comp.deadline || now < qp->comp.deadline)
		return;
	qp->comp.deadline = 0;
	if (qp->comp.psn == qp->req.max_psn)
		return;
	/* Waiting for a busy link (a full socket or same-host ring), the QP
	 * has not asked for the ACK of what it sent last (the packet that
	 * asks did not go): it will when the link takes it.  A NIC's timer
	 * runs from the packet that asks. */
	if (qp->req.link_busy) {
		uint64_t t = uroce_ack_timeout_ns(qp->attr.timeout);

		qp->comp.deadline = t ? now + t : 0;
		return;
	}
	STAT_INC(qp->nic, timeouts);
	if (qp->comp.retry_left == 0) {
		comp_fail(qp, IBV_WC_RETRY_EXC_ERR);
		return;
	}
	qp->comp.retry_left--;
	comp_lost(qp, true);
	uroce_req_list(qp);
}
