/*
 * Receive: every datagram is checked before any state is touched — length,
 * opcode, header sizes, destination QP, transport type, and that it comes
 * from the peer the QP is connected to (the link checked its ICRC, where it
 * has one: net/link.c) — then handed to the responder (requests) or the
 * completer (responses).  Anything else is counted and dropped.
 */
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

/* The transport service an opcode belongs to must be the QP's. */
static bool service_matches(const struct uroce_qp *qp, uint8_t opcode)
{
	switch (qp->ibqpx.qp_base.qp_type) {
	case IBV_QPT_RC:
		return (opcode & 0xE0) == IB_OPC_RC;
	case IBV_QPT_UC:
		return (opcode & 0xE0) == IB_OPC_UC;
	case IBV_QPT_UD:
		return (opcode & 0xE0) == IB_OPC_UD;
	/* an XRC initiator only sends requests, a target only serves them */
	case IBV_QPT_XRC_SEND:
		return (opcode & 0xE0) == IB_OPC_XRC &&
		       (ib_opcodes[opcode].mask & OPM_RESP);
	case IBV_QPT_XRC_RECV:
		return (opcode & 0xE0) == IB_OPC_XRC &&
		       (ib_opcodes[opcode].mask & OPM_REQ);
	default:
		return false;
	}
}

static void parsed(struct uroce_pkt *pkt, struct uroce_rxpkt *rx,
		   const struct ib_opcode_info *info)
{
	pkt->rx = rx;
	pkt->bth = rx->data;
	pkt->opcode = bth_opcode(rx->data);
	pkt->mask = info->mask;
	pkt->psn = bth_psn(rx->data);
	pkt->payload = rx->data + info->hdr_len;
	pkt->paylen = rx->len - info->hdr_len - bth_pad(rx->data) - ICRC_LEN;
}

static struct uroce_qp *parse(struct uroce_nic *nic, struct uroce_rxpkt *rx,
			      struct uroce_pkt *pkt)
{
	const uint8_t *bth = rx->data;
	const struct ib_opcode_info *info;
	struct uroce_qp *qp;
	uint32_t qpn, fixed;

	if (rx->len < BTH_LEN + ICRC_LEN) {
		STAT_INC(nic, rx_malformed);
		return NULL;
	}
	info = &ib_opcodes[bth_opcode(bth)];
	/* P_Key: only the default partition exists (low 15 bits all ones) */
	/* QP1 carries management datagrams, not transport traffic */
	if (bth_qpn(bth) == QPN_GSI) {
		if (nic->qp1)
			nic->qp1->rx(nic, rx);
		else
			STAT_INC(nic, rx_unknown_qp);
		return NULL;
	}
	if (!info->mask || bth_tver(bth) != 0 ||
	    (bth_pkey(bth) & 0x7FFF) != 0x7FFF) {
		STAT_INC(nic, rx_malformed);
		return NULL;
	}
	fixed = info->hdr_len + bth_pad(bth) + ICRC_LEN;
	if (rx->len < fixed ||
	    (!(info->mask & OPM_PAYLOAD) && rx->len != fixed) ||
	    (rx->len - fixed == 0 && bth_pad(bth) != 0)) {
		STAT_INC(nic, rx_malformed);
		return NULL;
	}
	qpn = bth_qpn(bth);
	if (qpn == UROCE_QPN_MULTICAST) {
		/* only UD sends are multicast (IBTA 10.5.2.5) */
		if ((bth_opcode(bth) & 0xE0) != IB_OPC_UD) {
			STAT_INC(nic, rx_malformed);
			return NULL;
		}
		parsed(pkt, rx, info);
		uroce_mcast_rx(nic, pkt);
		return NULL;
	}
	if (uroce_qpn_slot(qpn) != nic->slot) {
		STAT_INC(nic, rx_unknown_qp);
		return NULL;
	}
	qp = atomic_load(&nic->qps[uroce_qpn_index(qpn)]);
	if (!qp || qp->ibqpx.qp_base.qp_num != qpn) {
		STAT_INC(nic, rx_unknown_qp);
		return NULL;
	}
	if (!service_matches(qp, bth_opcode(bth))) {
		STAT_INC(nic, rx_malformed);
		return NULL;
	}
	/* Connected QPs accept packets only from their peer's address and
	 * only on the address they were bound to (anti-spoofing). */
	if (qp->ibqpx.qp_base.qp_type != IBV_QPT_UD &&
	    (!uroce_sockaddr_same_ip(&rx->src, &qp->peer) ||
	     !uroce_sockaddr_same_ip(&rx->dst, &qp->self))) {
		STAT_INC(nic, rx_bad_source);
		return NULL;
	}

	parsed(pkt, rx, info);
	pkt->qp = qp;
	return qp;
}

/*
 * Acknowledging on receipt, as a NIC does.  A QP owing an ACK goes on a
 * list, and one ACK covers every request it received until the ACK leaves:
 * at the end of the engine's receive pass, or ahead of the next packet the
 * QP's requester sends, whichever comes first.  An application thread that
 * received in ibv_poll_cq sends them at once too (uroce_settle_app_acks),
 * with one exception on the UDP path: a QP whose application is in a
 * request-response loop (it answered UROCE_ACK_RIDE_AFTER requests in a
 * row, posting within UROCE_ACK_RIDE_NS of receiving) keeps its ACK for
 * the answer, which carries it ahead in the same system call: the loop
 * then costs one sendmmsg per message, not two (the second costs UDP
 * ib_send_lat 4 us of 7.5).  Where no answer comes, the thread's next poll
 * of an empty CQ, its request for a completion event or the engine (within
 * ENGINE_DEFER_NS) sends the ACK, and the streak starts anew.  The streak
 * is longer than a connection's handshake: a program that exchanges a few
 * messages and goes on to something else (perftest connecting its test
 * QPs while its peer waits for the ACK to go on, an iSER login) gets its
 * ACKs at once.  A same-host QP never waits: its ACK costs no system call.
 */
static void flush_listed(struct uroce_qp *qp)
{
	struct uroce_txpkt p;
	uint64_t waits = qp->resp.ack_waits_ns;

	qp->resp.ack_listed = false;
	qp->resp.ack_waits_ns = 0;
	if (waits)
		atomic_fetch_sub_explicit(&qp->nic->acks_waiting, 1,
					  memory_order_relaxed);
	/* While we claim and send it, the requester, which would have sent
	 * it ahead of an answer posted meanwhile, waits for it to leave
	 * (uroce_resp_take_ack): the answer cannot overtake it on the wire. */
	atomic_store(&qp->ack.sending, true);
	if (uroce_resp_claim_ack(qp, &p)) {
		/* kept for an answer that did not come in time: the streak
		 * starts anew (one sent sooner merely goes alone) */
		if (waits && uroce_now_ns() - waits >= UROCE_ACK_RIDE_NS) {
			STAT_INC(qp->nic, acks_unanswered);
			atomic_store_explicit(&qp->ack.answers, 0,
					      memory_order_relaxed);
		}
		STAT_INC(qp->nic, acks_sent);
		uroce_xmit(qp, &p, 1);
	}
	atomic_store_explicit(&qp->ack.sending, false, memory_order_release);
}

void uroce_flush_acks(struct uroce_nic *nic)
{
	for (unsigned i = 0; i < nic->n_acks_owed; i++)
		flush_listed(nic->acks_owed[i]);
	nic->n_acks_owed = 0;
}

static void unlist_ack(struct uroce_nic *nic, struct uroce_qp *qp)
{
	for (unsigned i = 0; i < nic->n_acks_owed; i++) {
		if (nic->acks_owed[i] == qp) {
			nic->acks_owed[i] = nic->acks_owed[--nic->n_acks_owed];
			break;
		}
	}
	qp->resp.ack_listed = false;
}

void uroce_flush_qp_ack(struct uroce_nic *nic, struct uroce_qp *qp)
{
	unlist_ack(nic, qp);
	flush_listed(qp);
}

void uroce_settle_app_acks(struct uroce_nic *nic, uint64_t now)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < nic->n_acks_owed; i++) {
		struct uroce_qp *qp = nic->acks_owed[i];

		/* the previous receipt had no answer at once: no streak */
		if (atomic_exchange_explicit(&qp->ack.app_rx_ns, now,
					     memory_order_relaxed))
			atomic_store_explicit(&qp->ack.answers, 0,
					      memory_order_relaxed);
		if (!qp->sh_peer &&
		    atomic_load_explicit(&qp->ack.answers,
					 memory_order_relaxed) >=
			    UROCE_ACK_RIDE_AFTER &&
		    atomic_load_explicit(&qp->ack.owed,
					 memory_order_relaxed)) {
			qp->resp.ack_waits_ns = now;
			atomic_fetch_add_explicit(&nic->acks_waiting, 1,
						  memory_order_relaxed);
			nic->acks_owed[kept++] = qp;
		} else {
			flush_listed(qp);
		}
	}
	nic->n_acks_owed = kept;
}

void uroce_acks_note_post(struct uroce_qp *qp)
{
	uint64_t rx;

	if (!atomic_load_explicit(&qp->ack.app_rx_ns, memory_order_relaxed))
		return;
	rx = atomic_exchange_explicit(&qp->ack.app_rx_ns, 0,
				      memory_order_relaxed);
	if (!rx)
		return;
	if (uroce_now_ns() - rx < UROCE_ACK_RIDE_NS)
		atomic_fetch_add_explicit(&qp->ack.answers, 1,
					  memory_order_relaxed);
	else
		atomic_store_explicit(&qp->ack.answers, 0,
				      memory_order_relaxed);
}

void uroce_recv_batch(struct uroce_nic *nic, struct uroce_rxpkt *pkts, int n)
{
	bool one_sided = false;

	for (int i = 0; i < n; i++) {
		struct uroce_pkt pkt;
		struct uroce_qp *qp = parse(nic, &pkts[i], &pkt);

		if (!qp)
			continue;
		if (!(pkt.mask & OPM_REQ)) {
			uroce_comp_rx(qp, &pkt);
			continue;
		}
		one_sided |= !!(pkt.mask & (OPM_WRITE | OPM_READ | OPM_ATOMIC |
					    OPM_FLUSH | OPM_ATOMIC_WRITE));
		uroce_resp_rx(qp, &pkt);
		if (!qp->resp.ack_pending)
			continue;
		uroce_resp_owe_ack(qp);
		if (qp->resp.ack_waits_ns) {
			qp->resp.ack_waits_ns = 0;
			atomic_fetch_sub_explicit(&nic->acks_waiting, 1,
						  memory_order_relaxed);
		}
		if (!qp->resp.ack_listed) {
			if (nic->n_acks_owed == ARRAY_SIZE(nic->acks_owed))
				uroce_flush_acks(nic);
			qp->resp.ack_listed = true;
			nic->acks_owed[nic->n_acks_owed++] = qp;
		}
	}
	if (one_sided)
		atomic_store_explicit(&nic->one_sided_rx_ns, uroce_now_ns(),
				      memory_order_relaxed);
}
