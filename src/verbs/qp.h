/*
 * The queue pair: its verbs state and what the requester, the completer,
 * the responder and the same-host path keep in it.
 */
#ifndef UROCE_VERBS_QP_H
#define UROCE_VERBS_QP_H

#include "transport/cc.h"
#include "transport/comp_state.h"
#include "transport/loss.h"
#include "transport/req_state.h"
#include "transport/resp_state.h"
#include "verbs/objects.h"

struct uroce_qp {
	struct ibv_qp_ex ibqpx;		/* ibqpx.qp_base is the ibv_qp */
	/* where a newer rdma-core's struct ibv_qp_ex has it: see verbs_newer.h */
	uroce_wr_flush_fn wr_flush;
	struct uroce_nic *nic;
	struct uroce_context *ctx;
	uint32_t index;			/* into nic->qps */

	/* attributes (modify_qp) */
	pthread_mutex_t attr_lock;	/* modify/query vs each other */
	struct ibv_qp_attr attr;	/* the last values set, for query_qp */
	struct ibv_qp_init_attr init;
	/* what query_qp reports, not attr.qp_state: the engine moves a QP to
	 * ERR without attr_lock */
	_Atomic enum ibv_qp_state state;
	uint32_t mtu;			/* path MTU in bytes */
	uint32_t link_mtu;		/* what the SGID's link carries, bytes */
	union uroce_sockaddr peer;	/* dgid, port 4791 */
	union uroce_sockaddr self;	/* our sgid address */
	int tx;				/* net backend tx handle, -1 none */
	int tx6;			/* UD: the IPv6 one (tx is IPv4) */
	int tx1;			/* UD: the RoCE v1 one, or -1 */
	struct uroce_wr_stage *wr_stage;	/* ibv_wr_* API, or NULL */
	uint16_t sport;
	/* UD: IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, and the multicast groups
	 * it is attached to (under nic->mcast.lock) */
	bool block_self_mcast;
	unsigned mcast_groups;
	/* RC: the peer's segment when it is a uroce process on this host
	 * (samehost.h), and its QP's index there */
	struct uroce_sh_peer *sh_peer;
	uint32_t sh_dest;

	/* send queue: requester + completer state, guarded by sq_lock */
	pthread_mutex_t sq_lock;
	struct uroce_send_wqe *sq;
	struct uroce_sge *sq_sges;
	uint8_t *sq_inline;		/* max_inline bytes per slot */
	uint32_t sq_size;		/* slots = max_send_wr + 1 */
	uint32_t sq_head;		/* next slot to post */
	uint32_t sq_next;		/* next WQE to transmit from */
	uint32_t sq_tail;		/* oldest not yet completed */
	struct uroce_req_state req;	/* transport/req_state.h */
	struct uroce_comp_state comp;	/* transport/comp_state.h */
	struct uroce_cc cc;		/* congestion control (transport/cc.h) */
	struct uroce_loss loss;		/* loss recovery (transport/loss.h) */

	/* the ACK the responder owes (transport/resp_state.h) */
	struct uroce_ack_state ack;

	/* receive side: responder state, guarded by rq_lock (or the SRQ's) */
	struct uroce_rq rq;
	/* the SRQ receives go to; for an XRC target QP, the one the current
	 * request's XRCETH names (under rx_lock) */
	struct uroce_srq *srq;
	struct uroce_xrcd *xrcd;	/* XRC target QP's domain */
	struct uroce_resp_state resp;	/* transport/resp_state.h */
};
_Static_assert(offsetof(struct uroce_qp, wr_flush) == sizeof(struct ibv_qp_ex),
	       "wr_flush must directly follow struct ibv_qp_ex");

static inline struct uroce_qp *to_uqp(struct ibv_qp *qp)
{
	return container_of(qp, struct uroce_qp, ibqpx.qp_base);
}
static inline struct uroce_context *to_uctx(struct ibv_context *c)
{
	return container_of(c, struct uroce_context, vctx.context);
}
static inline struct uroce_cq *to_ucq(struct ibv_cq *cq)
{
	return container_of(cq, struct uroce_cq, ibcq);
}
static inline struct uroce_mr *to_umr(struct ibv_mr *mr)
{
	return container_of(mr, struct uroce_mr, ibmr);
}
/* The PD that keys and addresses are checked against: a parent domain's
 * own PD. */
static inline struct uroce_pd *to_upd(struct ibv_pd *pd)
{
	struct uroce_pd *p = container_of(pd, struct uroce_pd, ibpd);

	return p->protection ? p->protection : p;
}
static inline struct uroce_srq *to_usrq(struct ibv_srq *srq)
{
	return container_of(srq, struct uroce_srq, ibsrq);
}
static inline struct uroce_ah *to_uah(struct ibv_ah *ah)
{
	return container_of(ah, struct uroce_ah, ibah);
}
static inline struct uroce_xrcd *to_uxrcd(struct ibv_xrcd *xrcd)
{
	return container_of(xrcd, struct uroce_xrcd, ibxrcd);
}

/* RC and XRC acknowledge and retransmit; UC and UD do neither. */
static inline bool uroce_qp_reliable(const struct uroce_qp *qp)
{
	enum ibv_qp_type t = qp->ibqpx.qp_base.qp_type;

	return t == IBV_QPT_RC || t == IBV_QPT_XRC_SEND ||
	       t == IBV_QPT_XRC_RECV;
}

#endif
