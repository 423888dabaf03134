/*
 * The queue pair: its verbs state and what the requester, the completer,
 * the responder and the same-host path keep in it.
 */
#ifndef UROCE_VERBS_QP_H
#define UROCE_VERBS_QP_H

#include "transport/cc.h"
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
	struct {
		uint32_t psn;		/* PSN of the next packet we build */
		uint32_t max_psn;	/* next never-sent PSN (psn < it after a rewind) */
		uint32_t offset;	/* bytes of sq[sq_next] already packetized */
		uint32_t since_ackreq;	/* packets since we last asked for an ACK */
		uint32_t rd_atomic_out;	/* READ/atomic requests in flight */
		bool active;		/* counted in nic->active_senders */
		bool held_listed;	/* in nic->held, under held_lock */
		/* nic->release_gen when a WRITE last went the same-host way */
		unsigned sh_gen;
		uint64_t wait_until;	/* ns: RNR wait, UC/UD pacing or a busy
					 * link; 0 = none */
		uint64_t pace_ns;	/* UC/UD: when the link is free again */
		/* the link took only part of the last batch: what went asks
		 * for no ACK until the rest goes (transport/requester.c) */
		bool link_busy;
	} req;
	struct {
		uint32_t psn;		/* oldest unacknowledged PSN */
		uint32_t retry_left;
		uint32_t rnr_retry_left;
		uint64_t deadline;	/* ns of the local ACK timeout; 0 = idle */
		uint32_t rewound_psn;	/* last PSN we went back to (avoid storms) */
		bool rewound;
		/* loss probe (completer.c): when to go back unasked, and how
		 * often in a row it went unanswered */
		uint64_t probe_at;	/* ns; 0 = none */
		uint32_t probe_backoff;
		/* the last tail probe's PSN and the ACKs of exactly it since
		 * (two: the original arrived too, the probe was spurious),
		 * and the probe wait's floor such probes raised, when */
		uint32_t tlp_psn;
		uint8_t tlp_acks;
		bool tlp_on;
		uint64_t probe_floor_ns, probe_floor_at;
		/* round-trip estimate, ns (0 = no sample yet), and the packet
		 * being timed (rtt_sent_ns 0 = none) */
		uint32_t srtt_ns, rttvar_ns, rtt_psn;
		uint64_t rtt_sent_ns;
	} comp;
	struct uroce_cc cc;		/* congestion control (transport/cc.h) */

	/* The ACK the responder owes, lock-free: any thread may claim it
	 * whole, once (uroce_resp_take_ack), so that anything the requester
	 * sends carries it ahead without rx_lock.  owed: UROCE_ACK_OWED |
	 * PSN << 24 | MSN, or 0.  An ACK an application thread owes after
	 * receiving in ibv_poll_cq waits for its answer, to leave in the same
	 * system call, once the application has answered many times in a row
	 * (answers); app_rx_ns: the last such receipt not yet answered (see
	 * transport/receive.c). */
	struct {
		_Atomic uint64_t owed;
		/* a thread other than the requester has claimed the ACK and
		 * not sent it yet: the requester waits for it */
		atomic_bool sending;
		atomic_uint answers;
		atomic_uint_fast64_t app_rx_ns;
	} ack;

	/* receive side: responder state, guarded by rq_lock (or the SRQ's) */
	struct uroce_rq rq;
	/* the SRQ receives go to; for an XRC target QP, the one the current
	 * request's XRCETH names (under rx_lock) */
	struct uroce_srq *srq;
	struct uroce_xrcd *xrcd;	/* XRC target QP's domain */
	struct {
		uint32_t psn;		/* expected PSN */
		uint32_t msn;
		bool nak_sent;		/* one sequence NAK per gap */
		bool drop_msg;		/* UC: ignore packets until a FIRST/ONLY */
		bool cur_held;		/* cur is taken but its message was lost
					 * (UC): reuse it for the next one */
		bool ack_pending;	/* the request just handled asks one */
		bool ack_listed;	/* in nic->acks_owed */
		/* since when the owed ACK waits for the application's answer
		 * (0: it does not; see transport/receive.c) */
		uint64_t ack_waits_ns;
		/* multi-packet SEND in progress */
		bool in_send;
		struct uroce_recv_wqe cur;
		struct uroce_sge cur_sge[UROCE_MAX_SGE];
		uint32_t cur_offset;
		/* multi-packet WRITE in progress */
		bool in_write;
		uint8_t *write_ptr;
		uint32_t write_left;
		uint32_t write_total;
		struct uroce_resp_res *res;	/* max_dest_rd_atomic entries */
		uint32_t res_count, res_next;
	} resp;
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
