/*
 * Loss recovery, behind a small ops table: what the requester does when
 * the completer finds packets lost, and what the responder does with a
 * request past the next one it expects.  Today's is go-back-N
 * (transport/loss_gbn.c): the requester goes back to the oldest packet not
 * acknowledged and sends everything from there again; the responder NAKs
 * the first request past a gap and drops the rest until the gap closes.
 * Selective repeat (the responder keeps what comes past a gap and reports
 * what is missing, the requester resends only that) fits the same table.
 * Congestion control hears of each loss separately (transport/cc.h).
 */
#ifndef UROCE_TRANSPORT_LOSS_H
#define UROCE_TRANSPORT_LOSS_H

#include <stdbool.h>
#include <stdint.h>

struct uroce_qp;
struct uroce_pkt;

struct uroce_loss_ops {
	/* Completer, sq_lock held: packets from comp.psn on were lost.
	 * again: a NAK or a timeout, which ask for a resend even of what was
	 * just resent, rather than one of a burst of out-of-order responses,
	 * which must not each cause one.  Returns whether it resent. */
	bool (*lost)(struct uroce_qp *qp, bool again);
	/* Responder, rx_lock held: a request past resp.psn arrived. */
	void (*ahead)(struct uroce_qp *qp, struct uroce_pkt *pkt);
};

/* A QP's loss recovery: ops set when the QP is made, the rest zero. */
struct uroce_loss {
	const struct uroce_loss_ops *ops;
	union {
		struct {
			/* the last position it went back to */
			uint32_t rewound_psn;
			bool rewound;
		} gbn;
	};
};

extern const struct uroce_loss_ops uroce_loss_gbn;

#endif
