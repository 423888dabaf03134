/* Go-back-N (transport/loss.h), as IBTA's reliable transports define it. */
#include "transport/loss.h"
#include "transport/hdr.h"
#include "transport/transport.h"

/* Back to comp.psn once per position: a burst of out-of-order responses
 * must not trigger a retransmission each. */
static bool gbn_lost(struct uroce_qp *qp, bool again)
{
	if (!again && qp->loss.gbn.rewound &&
	    qp->loss.gbn.rewound_psn == qp->comp.psn)
		return false;
	qp->loss.gbn.rewound = true;
	qp->loss.gbn.rewound_psn = qp->comp.psn;
	uroce_req_rewind(qp, qp->comp.psn);
	return true;
}

/* One NAK for a gap, then silence until it closes (IBTA 9.7.5.2.1). */
static void gbn_ahead(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	(void)pkt;
	if (qp->resp.nak_sent)
		return;
	qp->resp.nak_sent = true;
	STAT_INC(qp->nic, seq_naks_sent);
	uroce_resp_nak(qp, AETH_NAK | AETH_NAK_PSN_SEQ, qp->resp.psn);
}

const struct uroce_loss_ops uroce_loss_gbn = {
	.lost = gbn_lost,
	.ahead = gbn_ahead,
};
