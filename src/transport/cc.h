/*
 * Congestion control, behind a small ops table: how many packets a QP may
 * have unacknowledged, and how acknowledgements and losses change that.
 * The requester asks (window), the completer reports (acked, lost).
 * Today's: transport/cc_window.c, a loss-driven window suited to
 * go-back-N.  A rate-based one (DCQCN, reacting to CNPs) fits the same
 * table with a hook for the notification.
 */
#ifndef UROCE_TRANSPORT_CC_H
#define UROCE_TRANSPORT_CC_H

#include <stdbool.h>
#include <stdint.h>

struct uroce_qp;

struct uroce_cc_ops {
	/* packets the QP may have unacknowledged now */
	uint32_t (*window)(const struct uroce_qp *qp);
	/* npkts more acknowledged, in order */
	void (*acked)(struct uroce_qp *qp, uint32_t npkts);
	/* a loss: the requester goes back to the oldest unacknowledged
	 * packet (comp.psn) from the newest sent (req.max_psn) */
	void (*lost)(struct uroce_qp *qp);
};

/* A QP's congestion state: ops set when the QP is made, the rest zero. */
struct uroce_cc {
	const struct uroce_cc_ops *ops;
	union {
		struct {
			/* packets (0 = the configured window, in full) */
			uint32_t cwnd, acked;
			/* the window was cut for the losses up to this PSN */
			uint32_t recover_psn;
			bool cut;
		} window;
	};
};

extern const struct uroce_cc_ops uroce_cc_window;

#endif
