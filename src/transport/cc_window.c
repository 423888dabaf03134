/*
 * The congestion window (transport/cc.h).  Go-back-N resends everything
 * after a loss, so a window that a lossy path (or a receiver's socket
 * buffer) cannot carry costs far more than it gains: the window halves at
 * a loss, once per window's worth of packets, and grows back by one packet
 * in GROWTH_DIV acknowledged (about an eighth a round trip).  Until its
 * first loss a QP has the configured window (UROCE_WINDOW) in full.
 */
#include "transport/hdr.h"
#include "transport/transport.h"

#define GROWTH_DIV 8

static uint32_t window(const struct uroce_qp *qp)
{
	uint32_t max = qp->nic->cfg->window, cwnd = qp->cc.window.cwnd;

	return cwnd && cwnd < max ? cwnd : max;
}

static void acked(struct uroce_qp *qp, uint32_t npkts)
{
	typeof(qp->cc.window) *w = &qp->cc.window;

	if (!w->cwnd)
		return;
	w->acked += npkts;
	w->cwnd += w->acked / GROWTH_DIV;
	w->acked %= GROWTH_DIV;
	if (w->cwnd >= qp->nic->cfg->window)
		w->cwnd = 0;
}

static void lost(struct uroce_qp *qp)
{
	typeof(qp->cc.window) *w = &qp->cc.window;
	uint32_t half = window(qp) / 2;

	if (w->cut && psn_diff(qp->comp.psn, w->recover_psn) < 0)
		return;		/* the same window's losses */
	w->cut = true;
	w->recover_psn = qp->req.max_psn;
	w->cwnd = half > UROCE_MIN_WINDOW ? half : UROCE_MIN_WINDOW;
	w->acked = 0;
}

const struct uroce_cc_ops uroce_cc_window = {
	.window = window,
	.acked = acked,
	.lost = lost,
};
