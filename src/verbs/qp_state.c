/*
 * Which ibv_modify_qp() calls are legal: the QP state machine of IBTA vol 1
 * §10.3 together with the per-transition attribute rules of §11.2.5 (Modify
 * QP), for the transports uroce implements: RC, UC, UD and XRC, whose
 * initiator (XRC_SEND) and target (XRC_RECV) QPs each have their own rules.
 *
 * The rules are kept as data, one row per transition, so that each row can
 * be read side by side with the spec's table of required and optional
 * attributes.  IBV_QP_STATE is required by every transition and is therefore
 * not repeated in the rows.  IBV_QP_CUR_STATE is optional only on the rows
 * that lead to RTS: those start from states the QP can leave or reach on its
 * own (a send error into SQE, a drain finishing in SQD), so the spec lets the
 * caller say which state it believes the QP is in.
 */
#include "verbs/ops.h"

/* A set of QP states, so one row can cover "from any state". */
#define ST_BIT(state)	(1u << (state))
#define ST(s)		ST_BIT(IBV_QPS_##s)
#define ANY_STATE	(ST(RESET) | ST(INIT) | ST(RTR) | ST(RTS) | ST(SQD) | \
			 ST(SQE) | ST(ERR))

struct attr_rule {
	bool allowed;	/* the transition exists for this QP type */
	int req;	/* attributes that must be supplied */
	int opt;	/* attributes that may be supplied as well */
};

#define ALLOW(r, o)	{ .allowed = true, .req = (r), .opt = (o) }
#define NONE		0
/* Not a transition for this QP type (the state is never entered by it). */
#define DENY		{ .allowed = false }

struct transition {
	unsigned from;		/* set of ST() bits */
	enum ibv_qp_state to;
	struct attr_rule rc, uc, ud;
	struct attr_rule xi, xt;	/* XRC initiator, XRC target */
};

/* Short local names keep each row on a few lines; they are the plain
 * IBV_QP_* attribute bits. */
#define PKEY		IBV_QP_PKEY_INDEX
#define PORT		IBV_QP_PORT
#define ACCESS		IBV_QP_ACCESS_FLAGS
#define QKEY		IBV_QP_QKEY
#define AV		IBV_QP_AV
#define ALT_PATH	IBV_QP_ALT_PATH
#define MIG_STATE	IBV_QP_PATH_MIG_STATE
#define PATH_MTU	IBV_QP_PATH_MTU
#define DEST_QPN	IBV_QP_DEST_QPN
#define RQ_PSN		IBV_QP_RQ_PSN
#define SQ_PSN		IBV_QP_SQ_PSN
#define TIMEOUT		IBV_QP_TIMEOUT
#define RETRY_CNT	IBV_QP_RETRY_CNT
#define RNR_RETRY	IBV_QP_RNR_RETRY
#define MIN_RNR		IBV_QP_MIN_RNR_TIMER
#define RD_ATOMIC	IBV_QP_MAX_QP_RD_ATOMIC		/* as initiator */
#define DEST_RD_ATOMIC	IBV_QP_MAX_DEST_RD_ATOMIC	/* as responder */
#define CUR_STATE	IBV_QP_CUR_STATE
#define SQD_NOTIFY	IBV_QP_EN_SQD_ASYNC_NOTIFY

/* No two rows share a (from, to) pair, so the first match is the answer. */
static const struct transition transitions[] = {
	/* Reset may be requested from every state (including Reset itself)
	 * and takes no attributes: it discards the whole context. */
	{ ANY_STATE, IBV_QPS_RESET,
	  .rc = ALLOW(NONE, NONE), .uc = ALLOW(NONE, NONE), .ud = ALLOW(NONE, NONE),
	  .xi = ALLOW(NONE, NONE), .xt = ALLOW(NONE, NONE) },

	/* Error may be requested from every state except Reset: a QP in
	 * Reset has no port or queues to flush yet. */
	{ ANY_STATE & ~ST(RESET), IBV_QPS_ERR,
	  .rc = ALLOW(NONE, NONE), .uc = ALLOW(NONE, NONE), .ud = ALLOW(NONE, NONE),
	  .xi = ALLOW(NONE, NONE), .xt = ALLOW(NONE, NONE) },

	/* Reset -> Init binds the QP to a port and partition; connected QPs
	 * also fix which remote operations they accept, UD its Q_Key. */
	{ ST(RESET), IBV_QPS_INIT,
	  .rc = ALLOW(PKEY | PORT | ACCESS, NONE),
	  .uc = ALLOW(PKEY | PORT | ACCESS, NONE),
	  .ud = ALLOW(PKEY | PORT | QKEY, NONE),
	  .xi = ALLOW(PKEY | PORT | ACCESS, NONE),
	  .xt = ALLOW(PKEY | PORT | ACCESS, NONE) },

	/* Init -> Init: the same attributes, every one of them optional. */
	{ ST(INIT), IBV_QPS_INIT,
	  .rc = ALLOW(NONE, PKEY | PORT | ACCESS),
	  .uc = ALLOW(NONE, PKEY | PORT | ACCESS),
	  .ud = ALLOW(NONE, PKEY | PORT | QKEY),
	  .xi = ALLOW(NONE, PKEY | PORT | ACCESS),
	  .xt = ALLOW(NONE, PKEY | PORT | ACCESS) },

	/* Init -> RTR connects the receive side.  AV is required for RC and
	 * UC on every link layer: on RoCE it carries the destination GID and
	 * source GID index the packets are addressed with.  UD names its
	 * peer per work request, so it needs nothing here. */
	{ ST(INIT), IBV_QPS_RTR,
	  .rc = ALLOW(AV | PATH_MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC | MIN_RNR,
		      ALT_PATH | ACCESS | PKEY),
	  .uc = ALLOW(AV | PATH_MTU | DEST_QPN | RQ_PSN,
		      ALT_PATH | ACCESS | PKEY),
	  .ud = ALLOW(NONE, PKEY | QKEY),
	  /* an XRC initiator has no receive side, a target no send side:
	   * each needs only its own half of RC's attributes */
	  .xi = ALLOW(AV | PATH_MTU | DEST_QPN | RQ_PSN,
		      ALT_PATH | ACCESS | PKEY),
	  .xt = ALLOW(AV | PATH_MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC | MIN_RNR,
		      ALT_PATH | ACCESS | PKEY) },

	/* RTR -> RTS starts the send side: every transport needs its first
	 * PSN; RC also needs its retransmission and RDMA-read credit limits. */
	{ ST(RTR), IBV_QPS_RTS,
	  .rc = ALLOW(SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | RD_ATOMIC,
		      CUR_STATE | ALT_PATH | ACCESS | MIN_RNR | MIG_STATE),
	  .uc = ALLOW(SQ_PSN, CUR_STATE | ALT_PATH | ACCESS | MIG_STATE),
	  .ud = ALLOW(SQ_PSN, CUR_STATE | QKEY),
	  .xi = ALLOW(SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | RD_ATOMIC,
		      CUR_STATE | ALT_PATH | ACCESS | MIN_RNR | MIG_STATE),
	  .xt = ALLOW(SQ_PSN | TIMEOUT,
		      CUR_STATE | ALT_PATH | ACCESS | MIN_RNR | MIG_STATE) },

	/* RTS -> RTS adjusts a running QP; only attributes that are safe to
	 * change while traffic flows are allowed. */
	{ ST(RTS), IBV_QPS_RTS,
	  .rc = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIN_RNR | MIG_STATE),
	  .uc = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIG_STATE),
	  .ud = ALLOW(NONE, CUR_STATE | QKEY),
	  .xi = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIG_STATE),
	  .xt = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIN_RNR | MIG_STATE) },

	/* RTS -> SQD drains the send queue; the caller may ask for the
	 * "SQ drained" asynchronous event. */
	{ ST(RTS), IBV_QPS_SQD,
	  .rc = ALLOW(NONE, SQD_NOTIFY),
	  .uc = ALLOW(NONE, SQD_NOTIFY),
	  .ud = ALLOW(NONE, SQD_NOTIFY),
	  .xi = ALLOW(NONE, SQD_NOTIFY),
	  .xt = ALLOW(NONE, SQD_NOTIFY) },

	/* SQD -> SQD: with the send queue quiesced even the path and the
	 * RC timers and credits may be changed. */
	{ ST(SQD), IBV_QPS_SQD,
	  .rc = ALLOW(NONE, PORT | AV | TIMEOUT | RETRY_CNT | RNR_RETRY |
			    RD_ATOMIC | DEST_RD_ATOMIC | ALT_PATH | ACCESS |
			    PKEY | MIN_RNR | MIG_STATE),
	  .uc = ALLOW(NONE, AV | ALT_PATH | ACCESS | PKEY | MIG_STATE),
	  .ud = ALLOW(NONE, PKEY | QKEY),
	  .xi = ALLOW(NONE, PORT | AV | TIMEOUT | RETRY_CNT | RNR_RETRY |
			    RD_ATOMIC | ALT_PATH | ACCESS | PKEY | MIG_STATE),
	  .xt = ALLOW(NONE, PORT | AV | TIMEOUT | DEST_RD_ATOMIC | ALT_PATH |
			    ACCESS | PKEY | MIN_RNR | MIG_STATE) },

	/* SQD -> RTS resumes sending with the RTS -> RTS attribute set. */
	{ ST(SQD), IBV_QPS_RTS,
	  .rc = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIN_RNR | MIG_STATE),
	  .uc = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIG_STATE),
	  .ud = ALLOW(NONE, CUR_STATE | QKEY),
	  .xi = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIG_STATE),
	  .xt = ALLOW(NONE, CUR_STATE | ALT_PATH | ACCESS | MIN_RNR | MIG_STATE) },

	/* SQE -> RTS recovers from a send queue error.  RC and XRC QPs never
	 * enter SQE (their send errors move the whole QP to Error), so the
	 * transition does not exist for them. */
	{ ST(SQE), IBV_QPS_RTS,
	  .rc = DENY,
	  .uc = ALLOW(NONE, CUR_STATE | ACCESS),
	  .ud = ALLOW(NONE, CUR_STATE | QKEY),
	  .xi = DENY, .xt = DENY },
};

static const struct attr_rule *rule_for(const struct transition *t,
					enum ibv_qp_type type)
{
	switch (type) {
	case IBV_QPT_RC:
		return &t->rc;
	case IBV_QPT_UC:
		return &t->uc;
	case IBV_QPT_UD:
		return &t->ud;
	case IBV_QPT_XRC_SEND:
		return &t->xi;
	case IBV_QPT_XRC_RECV:
		return &t->xt;
	default:
		return NULL;
	}
}

bool uroce_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur,
			    enum ibv_qp_state next, int mask)
{
	/* Range-check before shifting: IBV_QPS_UNKNOWN and garbage from the
	 * application are not states a QP can be in or be moved to. */
	if ((unsigned)cur > IBV_QPS_ERR || (unsigned)next > IBV_QPS_ERR)
		return false;
	if (!(mask & IBV_QP_STATE))
		return false;
	mask &= ~IBV_QP_STATE;

	for (size_t i = 0; i < ARRAY_SIZE(transitions); i++) {
		const struct transition *t = &transitions[i];
		const struct attr_rule *r;

		if (!(t->from & ST_BIT(cur)) || t->to != next)
			continue;
		r = rule_for(t, type);
		if (!r || !r->allowed)
			return false;
		return (mask & r->req) == r->req &&
		       !(mask & ~(r->req | r->opt));
	}
	return false;
}
