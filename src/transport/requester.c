/*
 * Requester: turns send WQEs into request packets (IBTA 9.4, 9.7.x).  Packets
 * are never stored: a retransmission rebuilds them from the WQE, which stays
 * on the send queue until the completer retires it (go-back-N).
 */
#include <string.h>

#include "samehost/samehost.h"
#include "section.h"
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

/* Packets built before one hand-over to the network: with a 4 KiB MTU,
 * four 64 KiB GSO datagrams in one sendmmsg (40 KiB of stack). */
enum { REQ_TX_BATCH = 64 };
/* Requests that wait under Nagle's rule (uroce_req_hold) before they go. */
enum { REQ_HOLD_MAX = 16 };

static uint32_t pkts_for(uint32_t len, uint32_t mtu)
{
	return len ? (len + mtu - 1) / mtu : 1;
}

/* PSNs a WQE consumes: request packets, or READ response packets. */
static uint32_t wqe_npkts(const struct uroce_qp *qp,
			  const struct uroce_send_wqe *wqe)
{
	switch ((int)wqe->opcode) {
	case IBV_WR_BIND_MW:
	case IBV_WR_LOCAL_INV:
		return 0;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_WRITE:
	case UROCE_WR_FLUSH:
		return 1;
	default:
		return pkts_for(wqe->length, qp->mtu);
	}
}

static uint8_t send_opcode(const struct uroce_send_wqe *wqe, bool first,
			   bool last)
{
	bool imm = wqe->opcode == IBV_WR_SEND_WITH_IMM ||
		   wqe->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	bool inv = wqe->opcode == IBV_WR_SEND_WITH_INV;
	bool write = wqe->opcode == IBV_WR_RDMA_WRITE ||
		     wqe->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;

	if (first && last)
		return write ? (imm ? IB_OP_WRITE_ONLY_IMM : IB_OP_WRITE_ONLY)
			     : (imm ? IB_OP_SEND_ONLY_IMM :
				inv ? IB_OP_SEND_ONLY_INV : IB_OP_SEND_ONLY);
	if (first)
		return write ? IB_OP_WRITE_FIRST : IB_OP_SEND_FIRST;
	if (last)
		return write ? (imm ? IB_OP_WRITE_LAST_IMM : IB_OP_WRITE_LAST)
			     : (imm ? IB_OP_SEND_LAST_IMM :
				inv ? IB_OP_SEND_LAST_INV : IB_OP_SEND_LAST);
	return write ? IB_OP_WRITE_MIDDLE : IB_OP_SEND_MIDDLE;
}

void uroce_req_set_active(struct uroce_qp *qp, bool active)
{
	if (qp->req.active == active)
		return;
	qp->req.active = active;
	if (active) {
		atomic_fetch_add(&qp->nic->active_senders, 1);
	} else {
		atomic_fetch_sub(&qp->nic->active_senders, 1);
		atomic_fetch_sub(&qp->nic->inflight, qp->req.charged);
		qp->req.charged = 0;
	}
}

/* Packets sent for the first time and not yet acknowledged, on the wire:
 * a same-host QP's wait in its peer's ring, which holds only so many. */
static uint32_t req_outstanding(const struct uroce_qp *qp)
{
	int32_t out = psn_diff(qp->req.max_psn, qp->comp.psn);

	return qp->req.active && !qp->sh_peer && out > 0 ? (uint32_t)out : 0;
}

void uroce_req_charge(struct uroce_qp *qp)
{
	uint32_t out = req_outstanding(qp);

	if (out != qp->req.charged) {
		atomic_fetch_add(&qp->nic->inflight, out - qp->req.charged);
		qp->req.charged = out;
	}
}

/*
 * The process's reliable QPs together keep at most UROCE_INFLIGHT_BUDGET
 * packets unacknowledged, as a NIC's scheduler gives the link to a few QPs
 * at a time: past it, what they send only waits in the receiver's socket,
 * every QP's round trip grows with it, and from the ACK timeout on (67 ms
 * at the usual 14) they all resend what had arrived.  A QP that would go
 * over waits like one whose link is busy, sending nothing new.
 */
static bool req_over_budget(const struct uroce_qp *qp)
{
	if (qp->sh_peer)
		return false;
	return atomic_load_explicit(&qp->nic->inflight, memory_order_relaxed) +
		       req_outstanding(qp) - qp->req.charged >
	       UROCE_INFLIGHT_BUDGET;
}

/* Packets this QP may have unacknowledged: its window, or its share of
 * the process's budget when many QPs send at once. */
static uint32_t req_window(const struct uroce_qp *qp)
{
	uint32_t senders = atomic_load(&qp->nic->active_senders);
	uint32_t w = qp->cc.ops->window(qp), share;

	if (qp->sh_peer && w > UROCE_SH_WINDOW)
		w = UROCE_SH_WINDOW;
	if (senders <= 1)
		return w;
	share = UROCE_INFLIGHT_BUDGET / senders;
	if (share < UROCE_MIN_WINDOW)
		share = UROCE_MIN_WINDOW;
	return share < w ? share : w;
}

/* Build the packet at the requester's current position. */
static void build_request(struct uroce_qp *qp, struct uroce_send_wqe *wqe,
			  struct uroce_txpkt *p, bool *last_out)
{
	enum ibv_qp_type type = qp->ibqpx.qp_base.qp_type;
	uint8_t service = type == IBV_QPT_UD ? IB_OPC_UD :
			  type == IBV_QPT_UC ? IB_OPC_UC :
			  type == IBV_QPT_XRC_SEND ? IB_OPC_XRC : IB_OPC_RC;
	uint32_t off = qp->req.offset;
	uint32_t psn = qp->req.psn;
	uint32_t dqpn = type == IBV_QPT_UD ? wqe->remote_qpn
					   : qp->attr.dest_qp_num;
	uint16_t pkey = UROCE_DEFAULT_PKEY;
	uint8_t *h = p->hdr;
	unsigned hl = BTH_LEN, npay = 0;
	uint32_t paylen = 0;
	bool last, ackreq;

	/* every XRC request names the SRQ it is for; the XRCETH goes right
	 * after the BTH, which bth_init writes below */
	if (service == IB_OPC_XRC) {
		put_be32(h + hl, wqe->remote_srqn & QPN_MASK);
		hl += XRCETH_LEN;
	}
	switch ((int)wqe->opcode) {
	case UROCE_WR_FLUSH:
		bth_init(h, service | IB_OP_FLUSH, 0, 0, pkey, dqpn, 1, psn);
		feth_set(h + hl, wqe->flush_type, wqe->flush_level);
		hl += FETH_LEN;
		reth_set(h + hl, wqe->remote_addr, wqe->rkey, wqe->length);
		hl += RETH_LEN;
		last = true;
		break;
	case IBV_WR_ATOMIC_WRITE:
		bth_init(h, service | IB_OP_ATOMIC_WRITE, 0, 0, pkey, dqpn, 1, psn);
		reth_set(h + hl, wqe->remote_addr, wqe->rkey, 8);
		hl += RETH_LEN;
		/* the 8 bytes go as the application gave them */
		p->iov[1].iov_base = &wqe->compare_add;
		p->iov[1].iov_len = 8;
		npay = 1;
		paylen = 8;
		last = true;
		break;
	case IBV_WR_RDMA_READ: {
		/* One request for the rest of the message: a retransmission
		 * from the middle asks only for what is missing. */
		bth_init(h, service | IB_OP_READ_REQ, 0, 0, pkey, dqpn, 1, psn);
		reth_set(h + hl, wqe->remote_addr + off, wqe->rkey,
			 wqe->length - off);
		hl += RETH_LEN;
		last = true;
		break;
	}
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD: {
		uint8_t op = wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ?
			     IB_OP_CMP_SWAP : IB_OP_FETCH_ADD;
		bth_init(h, service | op, 0, 0, pkey, dqpn, 1, psn);
		atmeth_set(h + hl, wqe->remote_addr, wqe->rkey,
			   op == IB_OP_CMP_SWAP ? wqe->swap : wqe->compare_add,
			   op == IB_OP_CMP_SWAP ? wqe->compare_add : 0);
		hl += ATMETH_LEN;
		last = true;
		break;
	}
	default: {
		bool first = off == 0;
		uint32_t left = wqe->length - off;
		bool write = wqe->opcode == IBV_WR_RDMA_WRITE ||
			     wqe->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
		uint8_t op;

		paylen = left > qp->mtu ? qp->mtu : left;
		last = paylen == left;
		op = send_opcode(wqe, first, last);
		/* only RC and XRC acknowledge; the last packet of each
		 * batch asks too (flush_batch), which covers the one that
		 * fills the window */
		ackreq = uroce_qp_reliable(qp) &&
			 (last || qp->req.since_ackreq + 1 >= UROCE_ACKREQ_EVERY);
		bth_init(h, service | op, last && (wqe->send_flags & IBV_SEND_SOLICITED),
			 0, pkey, dqpn, ackreq, psn);
		if (service == IB_OPC_UD) {
			/* a Q_Key with the high bit set means "use the QP's"
			 * (IBTA 10.2.5) */
			uint32_t qkey = wqe->remote_qkey & 0x80000000u ?
					qp->attr.qkey : wqe->remote_qkey;

			deth_set(h + hl, qkey, qp->ibqpx.qp_base.qp_num);
			hl += DETH_LEN;
		}
		if (first && write) {
			reth_set(h + hl, wqe->remote_addr, wqe->rkey, wqe->length);
			hl += RETH_LEN;
		}
		if (last && (wqe->opcode == IBV_WR_SEND_WITH_IMM ||
			     wqe->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
			memcpy(h + hl, &wqe->imm, IMMDT_LEN);
			hl += IMMDT_LEN;
		}
		if (last && wqe->opcode == IBV_WR_SEND_WITH_INV) {
			put_be32(h + hl, wqe->inv_rkey);
			hl += IETH_LEN;
		}
		npay = uroce_sge_gather(&p->iov[1], wqe->sge, wqe->num_sge, off,
					paylen);
		break;
	}
	}
	uroce_pkt_finish(qp, p, hl, npay, paylen);
	if (service == IB_OPC_UD) {
		p->dst = &wqe->ah->dst;
		p->src = &wqe->ah->src;
		p->ud_roce1 = wqe->ah->gid_type == IBV_GID_TYPE_ROCE_V1;
	}
	if (bth_ackreq(h))
		qp->req.since_ackreq = 0;
	else
		qp->req.since_ackreq++;
	*last_out = last;
}

/* A bind or local invalidation, in send queue order: it takes effect now
 * (later requests see it) and completes once everything before it has. */
static void execute_local(struct uroce_qp *qp, struct uroce_send_wqe *wqe)
{
	wqe->status = wqe->opcode == IBV_WR_BIND_MW
			      ? qp->nic->objects->mw_bind(qp, wqe)
			      : qp->nic->objects->mw_local_inv(qp,
							       wqe->inv_rkey);
	wqe->first_psn = qp->req.psn;
	wqe->npkts = 0;
	wqe->state = WQE_SENT;
	qp->sq_next = (qp->sq_next + 1) % qp->sq_size;
}

static void arm_timer(struct uroce_qp *qp)
{
	uint64_t t = uroce_ack_timeout_ns(qp->attr.timeout), now;

	if (!t || qp->comp.deadline)
		return;
	now = uroce_now_ns();
	qp->comp.deadline = now + t;
	/* no kick for the probe: the engine, ticking while timers are
	 * armed, serves it within a tick, and a kick per request would
	 * cost a wake-up per round trip */
	if (!qp->comp.probe_at)
		uroce_comp_arm_probe(qp, now);
	uroce_engine_kick(qp->nic, qp->comp.deadline);
}

/* How long a QP waits when the socket's send queue is full. */
enum { TX_BACKOFF_NS = 100000 };

/* Returns false if the network took only part of the batch: like a NIC
 * whose link is busy, the QP then waits and resends from the first packet
 * that did not go, rather than lose it and wait for the ACK timeout (with
 * many QPs sharing a socket that loss would feed on itself).  What did not
 * go was not sent: the ACK timer and the highest PSN sent (max_psn, which
 * building advanced, from *max0 before this batch) do not count it, so a
 * QP held back by a busy link (1,000 QPs filling one same-host ring) never
 * times out for it. */
static bool flush_batch(struct uroce_qp *qp, struct uroce_txpkt *pkts,
			unsigned *n, unsigned *acks, uint32_t *max0)
{
	unsigned want = *n, skip = *acks;
	uint32_t first_unsent;
	int sent;

	*n = 0;
	*acks = 0;
	/* nothing to send (the window is full, or the queue empty): the QP
	 * waits for ACKs, not for the link, and its timer runs (the packet
	 * that asked may be one a busy link did not take; the probe or the
	 * timeout then asks again) */
	if (!want) {
		qp->req.link_busy = false;
		return true;
	}
	/* Every batch ends asking for an ACK: the requester stops building
	 * where the window is full, so this is the packet that fills it, and
	 * the packets in flight always include one that asks however the
	 * window shrinks later (more QPs sending, a loss); otherwise the
	 * responder, rightly, would answer none, and the QP would stall until
	 * a probe or the ACK timeout.  One more AckReq in 64 packets where a
	 * window is large (one in 32 asks anyway). */
	if (want > skip) {
		bth_set_ackreq(pkts[want - 1].hdr);
		qp->req.since_ackreq = 0;
	}
	sent = uroce_xmit(qp, pkts, want);
	if (sent > (int)skip)
		arm_timer(qp);
	/* an ACK the network did not take is lost as any ACK may be: the
	 * next one covers it */
	if (sent >= (int)want || want == skip) {
		*max0 = qp->req.max_psn;
		qp->req.link_busy = false;
		uroce_req_charge(qp);
		return true;
	}
	qp->req.link_busy = true;
	first_unsent = bth_psn(pkts[sent > (int)skip ? (unsigned)sent : skip].hdr);
	if (psn_diff(qp->req.max_psn, first_unsent) > 0) {
		qp->req.max_psn = psn_diff(first_unsent, *max0) > 0 ? first_unsent
								   : *max0;
		/* the packet being timed may be one that did not go */
		if (qp->comp.rtt_sent_ns &&
		    psn_diff(qp->comp.rtt_psn, qp->req.max_psn) >= 0)
			qp->comp.rtt_sent_ns = 0;
	}
	*max0 = qp->req.max_psn;
	uroce_req_charge(qp);
	uroce_req_seek(qp, first_unsent);
	qp->req.wait_until = uroce_now_ns() + TX_BACKOFF_NS;
	uroce_engine_kick(qp->nic, qp->req.wait_until);
	return false;
}

/* Bytes a UC/UD QP may send at once before pacing holds it back. */
enum { PACE_BURST = 256 << 10 };

/*
 * UC and UD are paced to the port's link rate, as a NIC's serializer would
 * pace them: nothing else slows them down (RC waits for ACKs), and a
 * receiver that cannot keep up loses whole messages.  Returns false, with
 * the engine asked to come back, if the link is busy.
 */
static bool pace(struct uroce_qp *qp, uint32_t bytes)
{
	uint64_t now = uroce_now_ns();
	uint64_t burst_ns = (uint64_t)PACE_BURST * 8000 /
			    qp->nic->cfg->rate_mbps;

	if (qp->req.pace_ns < now - burst_ns)
		qp->req.pace_ns = now - burst_ns;
	if (qp->req.pace_ns > now) {
		qp->req.wait_until = qp->req.pace_ns;
		uroce_engine_kick(qp->nic, qp->req.wait_until);
		return false;
	}
	/* bytes * 8 bits / (Mbit/s) = microseconds: * 1000 for ns */
	qp->req.pace_ns += (uint64_t)bytes * 8000 / qp->nic->cfg->rate_mbps;
	return true;
}

/*
 * UC and UD: nothing is acknowledged, so a WQE completes as soon as its last
 * packet is handed to the network (IBTA 9.8.3, 9.8.4).
 */
static void req_progress_unacked(struct uroce_qp *qp, enum ibv_qp_state state)
{
	struct uroce_txpkt pkts[REQ_TX_BATCH];
	unsigned n = 0;

	while (qp->sq_next != qp->sq_head) {
		struct uroce_send_wqe *wqe = &qp->sq[qp->sq_next];
		bool last;

		uint32_t left = wqe->length - qp->req.offset;

		if (uroce_wqe_is_local(wqe)) {
			if (state == IBV_QPS_SQD)
				break;
			execute_local(qp, wqe);
			continue;
		}

		/* payload and, roughly, headers of the next packet */
		if (!pace(qp, (left < qp->mtu ? left : qp->mtu) + 64))
			break;

		if (wqe->state == WQE_POSTED) {
			if (state == IBV_QPS_SQD)
				break;
			wqe->first_psn = qp->req.psn;
			wqe->npkts = wqe_npkts(qp, wqe);
			wqe->state = WQE_SENDING;
		}
		/* one batch goes out of one socket: UD may alternate families
		 * and RoCE versions */
		if (n && (pkts[0].dst->sa.sa_family !=
				  (wqe->ah ? wqe->ah->dst.sa.sa_family
					   : qp->peer.sa.sa_family) ||
			  pkts[0].ud_roce1 !=
				  (wqe->ah && wqe->ah->gid_type ==
						      IBV_GID_TYPE_ROCE_V1))) {
			uroce_xmit(qp, pkts, n);
			n = 0;
		}
		build_request(qp, wqe, &pkts[n++], &last);
		qp->req.psn = psn_add(qp->req.psn, 1);
		qp->req.offset += qp->mtu;
		if (last) {
			wqe->state = WQE_SENT;
			qp->req.offset = 0;
			qp->sq_next = (qp->sq_next + 1) % qp->sq_size;
		}
		if (n == REQ_TX_BATCH) {
			uroce_xmit(qp, pkts, n);
			n = 0;
		}
	}
	if (n)
		uroce_xmit(qp, pkts, n);
	qp->req.max_psn = qp->req.psn;
	qp->comp.psn = qp->req.psn;
	/* everything handed to the network (or executed here) is done */
	while (qp->sq_tail != qp->sq_head &&
	       qp->sq[qp->sq_tail].state == WQE_SENT &&
	       atomic_load(&qp->state) != IBV_QPS_ERR) {
		if (uroce_wqe_is_local(&qp->sq[qp->sq_tail]))
			uroce_comp_retire_local(qp);
		else
			uroce_comp_complete_tail(qp, IBV_WC_SUCCESS);
	}
}

void uroce_req_progress(struct uroce_qp *qp)
{
	struct uroce_txpkt pkts[REQ_TX_BATCH];
	enum ibv_qp_state state = atomic_load(&qp->state);
	unsigned n = 0, acks = 0;
	uint32_t window, max0 = qp->req.max_psn;

	if ((state != IBV_QPS_RTS && state != IBV_QPS_SQD) || qp->req.wait_until)
		return;
	if (!uroce_qp_reliable(qp)) {
		req_progress_unacked(qp, state);
		return;
	}
	window = req_window(qp);
	/* The ACK this QP owes its peer as a responder goes ahead of the
	 * requests about to leave, in the same sendmmsg: the peer learns of
	 * what we received before it sees anything we sent since (as a NIC
	 * acknowledges on receipt), and two-sided traffic costs one system
	 * call per message instead of two.  It is claimed without rx_lock,
	 * so whoever runs the requester, whatever it holds, sends it first. */
	if (qp->sq_next != qp->sq_head &&
	    (n = acks = uroce_resp_take_ack(qp, &pkts[0])))
		STAT_INC(qp->nic, acks_with_requests);

	while (qp->sq_next != qp->sq_head) {
		struct uroce_send_wqe *wqe = &qp->sq[qp->sq_next];
		bool last;

		if ((uint32_t)psn_diff(qp->req.psn, qp->comp.psn) >= window)
			break;
		if (psn_diff(qp->req.psn, qp->req.max_psn) >= 0 &&
		    req_over_budget(qp)) {
			STAT_INC(qp->nic, budget_waits);
			qp->req.wait_until = uroce_now_ns() + TX_BACKOFF_NS;
			uroce_engine_kick(qp->nic, qp->req.wait_until);
			break;
		}
		if (uroce_wqe_is_local(wqe)) {
			if (wqe->state == WQE_POSTED) {
				if (state == IBV_QPS_SQD ||
				    ((wqe->send_flags & IBV_SEND_FENCE) &&
				     qp->req.rd_atomic_out))
					break;
				execute_local(qp, wqe);
			} else {
				/* executed before a rewind: never twice */
				qp->sq_next = (qp->sq_next + 1) % qp->sq_size;
			}
			if (&qp->sq[qp->sq_tail] == wqe)
				uroce_comp_retire_local(qp);
			continue;
		}
		if (wqe->state == WQE_POSTED) {
			if (state == IBV_QPS_SQD)
				break;	/* SQD: drain what was started only */
			/* with nothing outstanding, ordering allows it to be
			 * done before the next WQE starts; the ACK we owe
			 * reaches the peer before what we do in its memory */
			if (qp->sh_peer && qp->sq_next == qp->sq_tail &&
			    qp->req.psn == qp->comp.psn) {
				if (acks &&
				    !flush_batch(qp, pkts, &n, &acks, &max0))
					return;
				if (uroce_sh_execute(qp, wqe))
					continue;
			}
			/* IBV_SEND_FENCE: wait for earlier READ/atomics */
			if ((wqe->send_flags & IBV_SEND_FENCE) &&
			    qp->req.rd_atomic_out)
				break;
			if (uroce_wqe_is_read_or_atomic(wqe)) {
				uint32_t out = (uint32_t)psn_diff(qp->req.psn,
								  qp->comp.psn);

				if (qp->req.rd_atomic_out >= qp->attr.max_rd_atomic)
					break;
				/* its responses count against the window
				 * too: start it only where they fit, or
				 * with nothing else outstanding */
				if (out && out + wqe_npkts(qp, wqe) > window)
					break;
				qp->req.rd_atomic_out++;
			}
			wqe->first_psn = qp->req.psn;
			wqe->npkts = wqe_npkts(qp, wqe);
			wqe->state = WQE_SENDING;
		} else if (wqe->state == WQE_SENT) {
			wqe->state = WQE_SENDING;	/* resent after a rewind */
		}

		build_request(qp, wqe, &pkts[n++], &last);
		uroce_req_set_active(qp, true);
		if (uroce_wqe_is_read_or_atomic(wqe)) {
			/* the request consumes the PSNs of all its responses */
			qp->req.psn = psn_add(wqe->first_psn, wqe->npkts);
		} else {
			qp->req.psn = psn_add(qp->req.psn, 1);
			qp->req.offset += qp->mtu;
		}
		if (psn_diff(qp->req.psn, qp->req.max_psn) > 0) {
			/* a first sending: time it, if nothing is timed */
			if (!qp->comp.rtt_sent_ns) {
				qp->comp.rtt_psn = qp->req.max_psn;
				qp->comp.rtt_sent_ns = uroce_now_ns();
			}
			qp->req.max_psn = qp->req.psn;
		}
		if (last) {
			wqe->state = WQE_SENT;
			qp->req.offset = 0;
			qp->sq_next = (qp->sq_next + 1) % qp->sq_size;
		}
		if (n == REQ_TX_BATCH &&
		    !flush_batch(qp, pkts, &n, &acks, &max0))
			return;
	}
	flush_batch(qp, pkts, &n, &acks, &max0);
}

/*
 * Nagle's rule for requests.  A request posted while earlier ones of its QP
 * are unacknowledged waits, as long as fewer than REQ_HOLD_MAX wait with it,
 * for whatever comes first: the next ACK (the completer sends on), the next
 * poll of a CQ or request for a CQ event in this process, or the engine.
 * Then they leave together, one system call for a batch instead of one per
 * request, which is what a message rate is made of.  A request with
 * nothing ahead of it, what latency is made of, goes at once.  The same-host
 * path has no system call to save.
 */
bool uroce_req_hold(struct uroce_qp *qp)
{
	struct uroce_nic *nic = qp->nic;
	uint32_t waiting = (qp->sq_head + qp->sq_size - qp->sq_next) %
			   qp->sq_size;
	uint32_t newest = (qp->sq_head + qp->sq_size - 1) % qp->sq_size;

	/* READs and atomics are few in flight (max_rd_atomic) and wait for
	 * their responses anyway: holding them only delays them */
	if (!nic->cfg->tx_hold || !uroce_qp_reliable(qp) ||
	    qp->req.wait_until || !waiting || waiting >= REQ_HOLD_MAX ||
	    uroce_wqe_is_read_or_atomic(&qp->sq[newest]))
		return false;
	if (!qp->sh_peer)
		return qp->req.psn != qp->comp.psn;
	/* Same host: a WRITE posted after another one of its QP went since
	 * the application last polled is part of a burst, which goes as one
	 * system call.  Held only in an application that polls (within
	 * UROCE_SH_HOLD_NS), whose next poll sends the burst; should none
	 * come, the engine does (uroce_req_list_held). */
	return qp->sq[newest].opcode == IBV_WR_RDMA_WRITE &&
	       qp->req.sh_gen == atomic_load_explicit(&nic->release_gen,
						      memory_order_relaxed) &&
	       uroce_now_ns() - atomic_load(&nic->app_release_ns) <
		       UROCE_SH_HOLD_NS;
}

/*
 * A same-host hold has no ACK or timer to end it: the engine must come back
 * within UROCE_SH_HOLD_NS.  Announced after the QP is listed; the engine
 * looks at sh_hold_ns again after it announced its own sleep, so either it
 * sees ours, or we see its sleep and wake it if that is too long (once per
 * start of bursts: a kick for every burst would cost the system call the
 * burst saves).
 */
static void sh_engine_due(struct uroce_nic *nic)
{
	uint64_t now = uroce_now_ns();

	atomic_store(&nic->sh_hold_ns, now);
	if (!atomic_load(&nic->engine_awake))
		uroce_engine_kick(nic, now + UROCE_SH_HOLD_NS);
}

void uroce_req_list(struct uroce_qp *qp)
{
	struct uroce_nic *nic = qp->nic;

	pthread_mutex_lock(&nic->held_lock);
	if (!qp->req.held_listed) {
		qp->req.held_listed = true;
		nic->held[atomic_load(&nic->n_held)] = qp;
		atomic_fetch_add(&nic->n_held, 1);
	}
	pthread_mutex_unlock(&nic->held_lock);
}

void uroce_req_list_held(struct uroce_qp *qp)
{
	uroce_req_list(qp);
	if (qp->sh_peer)
		sh_engine_due(qp->nic);
}

/* Takes the listed QPs as the drainer's batch, inside the drain section
 * before held_lock is dropped: uroce_req_forget_held either finds its QP
 * listed or waits for the batch. */
static unsigned held_swap(struct uroce_nic *nic)
{
	struct uroce_qp **batch;
	unsigned n;

	pthread_mutex_lock(&nic->held_lock);
	n = atomic_load(&nic->n_held);
	batch = nic->held;
	nic->held = nic->draining;
	nic->draining = batch;
	atomic_store(&nic->n_held, 0);
	for (unsigned i = 0; i < n; i++)
		batch[i]->req.held_listed = false;
	atomic_fetch_add(&nic->drain_seq, 1);
	pthread_mutex_unlock(&nic->held_lock);
	return n;
}

/* Rounds one drainer sends before it leaves what is listed since to the
 * engine: a thread that polls must not be kept sending for others. */
#define HELD_DRAIN_ROUNDS 8

/*
 * Sends for the listed QPs, rx_lock not held.  A caller that finds another
 * thread draining leaves it the list: the drainer looks again after it lets
 * go, so a QP listed meanwhile is not stranded.
 */
void uroce_req_release_held(struct uroce_nic *nic)
{
	unsigned rounds = 0;

	atomic_fetch_add_explicit(&nic->release_gen, 1, memory_order_relaxed);
	while (atomic_load(&nic->n_held)) {
		if (pthread_mutex_trylock(&nic->drain_lock))
			return;
		for (; rounds < HELD_DRAIN_ROUNDS && atomic_load(&nic->n_held);
		     rounds++) {
			struct uroce_qp **batch;
			unsigned n = held_swap(nic);

			batch = nic->draining;
			for (unsigned i = 0; i < n; i++) {
				pthread_mutex_lock(&batch[i]->sq_lock);
				uroce_req_progress(batch[i]);
				pthread_mutex_unlock(&batch[i]->sq_lock);
			}
			atomic_fetch_add(&nic->drain_seq, 1);
		}
		pthread_mutex_unlock(&nic->drain_lock);
		if (rounds == HELD_DRAIN_ROUNDS) {
			if (atomic_load(&nic->n_held))
				uroce_engine_kick(nic, uroce_now_ns());
			return;
		}
	}
}

void uroce_req_app_release_held(struct uroce_nic *nic, uint64_t now)
{
	atomic_store_explicit(&nic->app_release_ns, now, memory_order_relaxed);
	uroce_req_release_held(nic);
}

void uroce_req_forget_held(struct uroce_qp *qp)
{
	struct uroce_nic *nic = qp->nic;

	pthread_mutex_lock(&nic->held_lock);
	if (qp->req.held_listed) {
		unsigned n = atomic_load(&nic->n_held);

		for (unsigned i = 0; i < n; i++) {
			if (nic->held[i] == qp) {
				nic->held[i] = nic->held[n - 1];
				atomic_store(&nic->n_held, n - 1);
				break;
			}
		}
		qp->req.held_listed = false;
	}
	pthread_mutex_unlock(&nic->held_lock);
	/* a drainer may be sending for it from its batch */
	uroce_section_wait(&nic->drain_seq);
}

/*
 * Resume building packets at psn.  WQEs keep the PSNs they were first given,
 * so a resend rebuilds exactly the packets sent before; a psn past everything
 * sent leaves the requester at the first WQE not yet started.
 */
uint32_t uroce_req_wqe_at(const struct uroce_qp *qp, uint32_t psn)
{
	uint32_t i;

	for (i = qp->sq_tail; i != qp->sq_head; i = (i + 1) % qp->sq_size) {
		const struct uroce_send_wqe *wqe = &qp->sq[i];
		int32_t into = psn_diff(psn, wqe->first_psn);

		if (wqe->state == WQE_POSTED ||
		    (into >= 0 && (uint32_t)into < wqe->npkts))
			break;
	}
	return i;
}

void uroce_req_seek(struct uroce_qp *qp, uint32_t psn)
{
	uint32_t i = uroce_req_wqe_at(qp, psn);

	qp->req.psn = psn;
	qp->req.offset = 0;
	qp->req.since_ackreq = 0;
	if (i != qp->sq_head && qp->sq[i].state != WQE_POSTED) {
		qp->sq[i].state = WQE_SENDING;
		/* READ responses are asked for from where they are missing */
		qp->req.offset = (uint32_t)psn_diff(psn, qp->sq[i].first_psn) *
				 qp->mtu;
	}
	qp->sq_next = i;
}

void uroce_req_rewind(struct uroce_qp *qp, uint32_t psn)
{
	STAT_INC(qp->nic, retransmits);
	uroce_req_seek(qp, psn);
}
