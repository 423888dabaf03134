/*
 * The General Services Interface QP (QP1) as far as the CM needs it: MADs
 * leave as UD SEND_ONLY packets to QP1 with the GSI Q_Key, and every MAD
 * that arrives is checked and routed.
 *
 * Routing: every uroce process of a host receives on the shared RoCEv2
 * port, and the kernel hands each datagram to whichever it picks.  A REQ or
 * SIDR_REQ goes to the process that holds its service ID (claimed
 * host-wide, see net->sid_claim); the other CM messages name the receiver's
 * comm ID, whose top bits are the owner's slot, and go to that process.
 * What nobody owns is answered here as the kernel's CM would: a REJ or
 * SIDR_REP for a service nobody listens on, a DREP for an unknown DREQ.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "cm/cm.h"
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

enum { GSI_PKT_LEN = BTH_LEN + DETH_LEN + MAD_LEN + ICRC_LEN };

/* The transmit endpoint of QP1 for a family (RoCE v2) or for RoCE v1,
 * opened on first use, and its source port.  The port is one the kernel
 * gives this process alone: no QP's flow class port, so that MADs never
 * arrive on a socket connected to a peer's QPs, and nobody else's, so that
 * no other program sends from it. */
static int gsi_tx(struct uroce_nic *nic, bool roce1, int family)
{
	int *tx = roce1 ? &nic->gsi.tx1
		  : family == AF_INET ? &nic->gsi.tx4 : &nic->gsi.tx6;
	int h;

	pthread_mutex_lock(&nic->gsi.lock);
	if (*tx < 0) {
		h = uroce_link_tx_open(nic, roce1 ? IBV_GID_TYPE_ROCE_V1
						  : IBV_GID_TYPE_ROCE_V2,
				       family, 0);
		if (h >= 0)
			*tx = h;
	}
	h = *tx >= 0 ? *tx : -EAFNOSUPPORT;
	pthread_mutex_unlock(&nic->gsi.lock);
	return h;
}

int uroce_gsi_send(struct uroce_nic *nic, bool roce1,
		   const union uroce_sockaddr *self,
		   const union uroce_sockaddr *peer, const uint8_t *mad)
{
	struct uroce_txpkt pkt;
	union uroce_sockaddr dst = *peer, src = *self;
	int family = dst.sa.sa_family, tx, sent;
	uint32_t psn;

	if (family != src.sa.sa_family ||
	    (family != AF_INET && family != AF_INET6))
		return -EAFNOSUPPORT;
	/* always to the RoCEv2 port, whatever the peer sent from */
	if (family == AF_INET)
		dst.in4.sin_port = htons(nic->cfg->udp_port);
	else
		dst.in6.sin6_port = htons(nic->cfg->udp_port);
	tx = gsi_tx(nic, roce1, family);
	if (tx < 0)
		return tx;
	/* a wire with addresses of its own learns the peer's (v1: its MAC;
	 * at once when known, as it is after the first MAD) */
	if (roce1 && (sent = uroce_link_resolve(nic, IBV_GID_TYPE_ROCE_V1,
						 &src, &dst)))
		return sent;

	/* one PSN counter for every QP1 send, as Linux has per port */
	psn = atomic_fetch_add(&nic->gsi.psn, 1) & PSN_MASK;
	memset(pkt.hdr, 0, BTH_LEN + DETH_LEN);
	pkt.hdr[0] = IB_OPC_UD | IB_OP_SEND_ONLY;
	pkt.hdr[2] = 0xFF;		/* default P_Key */
	pkt.hdr[3] = 0xFF;
	put_be32(pkt.hdr + 4, GSI_QPN);
	put_be32(pkt.hdr + 8, 1u << 31 | psn);	/* AckReq, as Linux */
	put_be32(pkt.hdr + BTH_LEN, GSI_QKEY);
	put_be32(pkt.hdr + BTH_LEN + 4, GSI_QPN);
	pkt.iov[0] = (struct iovec){ pkt.hdr, BTH_LEN + DETH_LEN };
	pkt.iov[1] = (struct iovec){ (void *)mad, MAD_LEN };
	pkt.niov = 2;

	pkt.iov[2] = (struct iovec){ pkt.trailer, ICRC_LEN };
	pkt.niov = 3;
	pkt.len = GSI_PKT_LEN;
	pkt.dst = &dst;
	pkt.src = &src;
	/* MADs pass no fault injection: the CM's retries are not what the
	 * faults test */
	sent = uroce_link_xmit_unfaulted(nic, tx, &pkt, 1);
	if (sent != 1)
		return sent < 0 ? sent : -EIO;
	STAT_INC(nic, mad_tx);
	return 0;
}

void uroce_gsi_close(struct uroce_nic *nic)
{
	if (nic->gsi.tx4 >= 0)
		uroce_link_tx_close(nic, nic->gsi.tx4);
	if (nic->gsi.tx6 >= 0)
		uroce_link_tx_close(nic, nic->gsi.tx6);
	if (nic->gsi.tx1 >= 0)
		uroce_link_tx_close(nic, nic->gsi.tx1);
	nic->gsi.tx4 = nic->gsi.tx6 = nic->gsi.tx1 = -1;
}

/* The framing of a MAD datagram: UD SEND_ONLY with a DETH naming the GSI
 * Q_Key, and exactly one MAD. */
static bool gsi_framing_ok(struct uroce_nic *nic, struct uroce_rxpkt *rx)
{
	const uint8_t *bth = rx->data;

	if (rx->len != GSI_PKT_LEN ||
	    bth_opcode(bth) != (IB_OPC_UD | IB_OP_SEND_ONLY) ||
	    bth_pad(bth) != 0 || bth_tver(bth) != 0 ||
	    (bth_pkey(bth) & 0x7FFF) != 0x7FFF) {
		STAT_INC(nic, mad_malformed);
		return false;
	}
	if (deth_qkey(bth + BTH_LEN) != GSI_QKEY) {
		STAT_INC(nic, rx_bad_qkey);
		return false;
	}
	return true;
}

/* The comm ID a message names as the receiver's, which routes it. */
static uint32_t receiver_comm_id(uint16_t attr, const uint8_t *pl)
{
	if (attr == CM_ATTR_SIDR_REP)
		return mad_be32(pl, SIDR_REP_REQUEST_ID);
	return mad_be32(pl, MSG_REMOTE_COMM_ID);
}

void uroce_gsi_rx(struct uroce_nic *nic, struct uroce_rxpkt *rx)
{
	const uint8_t *mad = rx->data + BTH_LEN + DETH_LEN;
	const uint8_t *pl = mad + MAD_HDR_LEN;
	struct cm_mad_rx m = { .mad = mad, .rx = rx };
	uint16_t attr;
	uint32_t comm_id;
	unsigned slot;

	if (!gsi_framing_ok(nic, rx))
		return;
	STAT_INC(nic, mad_rx);
	attr = mad_be16(mad, MADH_ATTR_ID);
	if (mad[MADH_BASE_VERSION] != MAD_BASE_VERSION ||
	    mad[MADH_CLASS] != MAD_CLASS_CM ||
	    mad[MADH_CLASS_VERSION] != MAD_CLASS_VERSION_CM) {
		STAT_INC(nic, mad_malformed);
		return;
	}
	if (mad[MADH_METHOD] == MAD_METHOD_GET &&
	    attr == CM_ATTR_CLASS_PORT_INFO) {
		/* the CM has no ClassPortInfo: the kernel's MAD layer says so */
		uroce_cm_reply_unsupported(nic, &m);
		return;
	}
	if (mad[MADH_METHOD] != MAD_METHOD_SEND) {
		STAT_INC(nic, mad_malformed);
		return;
	}

	switch (attr) {
	case CM_ATTR_REQ:
	case CM_ATTR_SIDR_REQ: {
		uint64_t sid = mad_be64(pl, attr == CM_ATTR_REQ ?
					    REQ_SERVICE_ID : SIDR_REQ_SERVICE_ID);

		int err;

		if (uroce_cm_sid_local(nic, sid)) {
			uroce_cm_rx(nic, &m);
		} else if (!(err = nic->net->sid_forward(nic, sid, rx))) {
			STAT_INC(nic, mad_forwarded);
		} else if (uroce_log("CM: service ID 0x%016llx: no process "
				     "holds it (%s)", (unsigned long long)sid,
				     strerror(-err)),
			   attr == CM_ATTR_REQ) {
			uroce_cm_reply_rej(nic, &m,
					   UROCE_CM_REJ_INVALID_SERVICE_ID);
		} else {
			uroce_cm_reply_sidr(nic, &m, 1);	/* no service */
		}
		return;
	}
	case CM_ATTR_REP:
	case CM_ATTR_RTU:
	case CM_ATTR_REJ:
	case CM_ATTR_MRA:
	case CM_ATTR_DREQ:
	case CM_ATTR_DREP:
	case CM_ATTR_SIDR_REP:
		comm_id = receiver_comm_id(attr, pl);
		slot = comm_id >> CM_ID_SLOT_SHIFT;
		/* a REJ of a REQ we received (the sender timed out) names no
		 * comm ID of ours: only its own, which we may know */
		if (comm_id == 0 || slot == nic->slot) {
			uroce_cm_rx(nic, &m);
		} else if (slot && nic->net->forward(nic, slot, rx) == 0) {
			STAT_INC(nic, mad_forwarded);
		} else if (attr == CM_ATTR_DREQ) {
			uroce_cm_reply_drep(nic, &m);
		} else {
			STAT_INC(nic, mad_unknown_id);
		}
		return;
	default:
		/* LAP/APR (no alternate paths on RoCE) and anything else */
		STAT_INC(nic, mad_malformed);
		return;
	}
}
