/*
 * The verbs objects but the QP (verbs/qp.h), and the helpers the transport
 * and the verbs share about them.  Each embeds the rdma-core struct as its
 * first member, so that a pointer handed to the application converts back
 * with container_of.
 */
#ifndef UROCE_VERBS_OBJECTS_H
#define UROCE_VERBS_OBJECTS_H

#include "nic.h"
#include "verbs_newer.h"

struct uroce_device {
	struct ibv_device ibdev;
};

struct uroce_context {
	struct verbs_context vctx;	/* ibv_context is its last member */
	struct uroce_nic *nic;
	int async_wfd;			/* write end; context.async_fd reads */
	pthread_mutex_t async_lock;
};

struct uroce_pd {
	struct ibv_pd ibpd;
	atomic_uint use_cnt;		/* MRs, QPs, AHs, SRQs: dealloc is EBUSY */
	/* A parent domain (ibv_alloc_parent_domain) protects with the PD it
	 * was made from: to_upd() answers that one.  NULL for a plain PD. */
	struct uroce_pd *protection;
	atomic_uint *td_users;		/* its thread domain's count, or NULL */
};

struct uroce_mr {
	struct ibv_mr ibmr;
	struct uroce_pd *pd;
	uint64_t iova;			/* address the keys are checked against */
	int access;
	uint32_t index;
	uint32_t gen;			/* changes at every re-registration */
	atomic_uint *dm_users;		/* its DM's count of MRs, or NULL */
	/* A memory window's slot in the key table (verbs/mw.c) is an MR
	 * with this set and no access of its own; NULL for a real MR. */
	struct uroce_mw *mw;
	_Atomic int mws_bound;		/* windows bound to this MR */
};

/* A memory window (IBTA 10.6.7).  Binding changes it while the engine may
 * be checking a request against it, so the binding is read under a
 * sequence count (odd while a bind or invalidation writes it). */
struct uroce_mw {
	struct ibv_mw ibmw;
	struct uroce_mr slot;		/* holds the window's key in the table */
	_Atomic uint32_t seq;
	/* the binding; valid while bound */
	bool bound;
	uint32_t rkey;			/* the key it is bound with */
	struct uroce_mr *mr;		/* the MR it is bound to */
	uint64_t iova;			/* first address, in the window's space */
	uint64_t length;
	uint8_t *addr;			/* where iova is in host memory */
	int access;			/* remote rights the bind granted */
	uint32_t qpn;			/* type 2: the QP it was bound through */
};

struct uroce_comp_channel {
	struct ibv_comp_channel ibch;
	int wfd;			/* write end of the pipe ibch.fd reads */
	/* CQs with an event not yet handed out, oldest first, linked through
	 * ev_next; the pipe holds a token while the list is non-empty. */
	pthread_mutex_t lock;
	struct uroce_cq *ev_head, *ev_tail;
	atomic_bool queued;		/* ev_head != NULL, read without lock */
	/* how long a thread polls before it sleeps on this channel, adapted
	 * to how soon its events came (uroce_engine_wait) */
	_Atomic uint64_t poll_ns;
};

/* The extended CQ's poll state (verbs/cq_ex.c): a batch taken out of the
 * ring, so that no lock is held between ibv_start_poll and ibv_end_poll (a
 * poster may complete into this CQ meanwhile). */
enum { UROCE_CQ_EX_BATCH = 16 };

/* When a completion was made: the free-running clock (ns of
 * CLOCK_MONOTONIC, the device clock ibv_query_rt_values_ex reads) and the
 * wall clock (ns since the epoch).  Kept only by CQs that ask. */
struct uroce_cq_ts {
	uint64_t raw, wall;
};

struct uroce_cq_ex_poll {
	struct ibv_wc wc[UROCE_CQ_EX_BATCH];
	struct uroce_cq_ts ts[UROCE_CQ_EX_BATCH];
	unsigned n, cur;
};

struct uroce_cq {
	union {				/* ibv_cq_ex begins as ibv_cq does */
		struct ibv_cq ibcq;
		struct ibv_cq_ex ibcqx;
	};
	struct uroce_cq_ex_poll *ex;	/* extended CQs only */
	struct uroce_cq_ts *ts;		/* one per ring slot, or NULL */
	struct ibv_pd *parent_domain;	/* held while the CQ is, or NULL */
	pthread_mutex_t lock;
	struct ibv_wc *ring;
	uint32_t size;			/* ring entries (>= cqe + 1) */
	uint32_t head, tail;		/* produce at head, consume at tail */
	/* 0, or 1 = next, 2 = solicited only; changed under lock, read
	 * without it by a poller that asks whether its thread will sleep */
	atomic_int armed;
	bool overflow;
	atomic_uint use_cnt;		/* QPs / SRQs using it: destroy is EBUSY */
	/* completion channel state, guarded by the channel's lock */
	struct uroce_cq *ev_next;
	bool ev_queued;
	uint32_t comp_events_reported;	/* handed out by ibv_get_cq_event */
};

struct uroce_ah {
	struct ibv_ah ibah;
	struct ibv_ah_attr attr;
	union uroce_sockaddr dst;
	union uroce_sockaddr src;	/* the SGID's address */
	enum ibv_gid_type gid_type;	/* the SGID's: which link sends */
	uint32_t mtu;			/* largest message its link carries */
};

/* A local scatter/gather element resolved to host memory at post time.  A
 * receive element also keeps what it was resolved from: the responder checks
 * it again when the WQE is consumed, as a NIC checks an lkey then (the MR
 * may have been deregistered or re-registered since); addr is NULL for one
 * that was invalid already when posted. */
struct uroce_sge {
	uint8_t *addr;
	uint32_t length;
	uint32_t lkey;
	uint64_t va;
	const struct uroce_mr *mr;
	uint32_t gen;			/* mr->gen when resolved */
};

struct uroce_recv_wqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t length;		/* sum of sge lengths */
	struct uroce_sge *sge;		/* num_sge entries, owned by the queue */
};

/* A receive ring shared by a QP's RQ and by SRQs. */
struct uroce_rq {
	pthread_mutex_t lock;
	struct uroce_recv_wqe *wqe;
	struct uroce_sge *sges;
	uint32_t max_wr, max_sge;
	uint32_t size;			/* ring slots = max_wr + 1 */
	uint32_t head, tail;
};

/* An XRC domain: the SRQs and target QPs that XRC requests may reach. */
struct uroce_xrcd {
	struct ibv_xrcd ibxrcd;
	atomic_uint use_cnt;		/* SRQs and QPs in it: close is EBUSY */
	unsigned opens;			/* ibv_open_xrcd calls on one inode */
	dev_t dev;			/* the inode it was opened with, if any */
	ino_t ino;
	struct uroce_xrcd *next;	/* in xrcd.c's list of those */
};

struct uroce_srq {
	struct ibv_srq ibsrq;
	struct uroce_rq rq;
	/* XRC: its domain, the CQ its receives complete on and its number */
	struct uroce_xrcd *xrcd;
	struct ibv_cq *cq;
	uint32_t srq_num;
	uint32_t limit;			/* armed limit for IBV_EVENT_SRQ_LIMIT_REACHED
					 * (0 = disarmed); guarded by rq.lock */
	atomic_uint use_cnt;		/* QPs using it: destroy is EBUSY */
};

/* Requester progress of one send WQE. */
enum uroce_wqe_state {
	WQE_POSTED,	/* not a single packet sent */
	WQE_SENDING,	/* some request packets sent */
	WQE_SENT,	/* all request packets sent, awaiting ACK / response */
	WQE_DONE,	/* acknowledged (and response placed) */
};

struct uroce_send_wqe {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	unsigned send_flags;
	__be32 imm;
	uint32_t length;		/* total message bytes */
	uint64_t remote_addr;
	uint32_t rkey;
	uint64_t compare_add, swap;	/* ATOMIC_WRITE: the value, as given */
	uint8_t flush_type, flush_level;
	uint32_t inv_rkey;		/* SEND_WITH_INV, LOCAL_INV */
	/* BIND_MW: the window, its new key and what to bind it to */
	struct uroce_mw *mw;
	uint32_t bind_rkey;
	struct ibv_mw_bind_info bind;
	/* UD */
	struct uroce_ah *ah;
	uint32_t remote_qpn, remote_qkey;
	uint32_t remote_srqn;		/* XRC */

	uint32_t num_sge;
	struct uroce_sge *sge;		/* owned by the queue */

	enum uroce_wqe_state state;
	uint32_t first_psn;		/* valid once state != WQE_POSTED */
	uint32_t npkts;			/* PSNs the message consumes */
	enum ibv_wc_status status;
};

/* Responder resource remembered for duplicate READ / atomic requests. */
struct uroce_resp_res {
	uint8_t opcode;			/* 0 = free */
	uint32_t first_psn, npkts;
	uint64_t va;
	uint32_t rkey, length;
	uint64_t atomic_orig;
};

/* The objects' side of the transport (transport.h), which the device
 * takes when it opens (verbs/objects_ops.c). */
struct uroce_objects_ops;
extern const struct uroce_objects_ops uroce_verbs_objects;

/* ---- object helpers used across files ------------------------------------ */

/* Whether [addr, addr + len) lies inside [base, base + size); written so
 * that nothing can wrap around (a peer chooses addr and len). */
static inline bool uroce_range_inside(uint64_t base, uint64_t size,
				      uint64_t addr, uint64_t len)
{
	return addr >= base && addr - base <= size && len <= size - (addr - base);
}

/* MR lookup by key.  Returns the MR only if the key's random bits match. */
struct uroce_mr *uroce_mr_lookup(struct uroce_nic *nic, uint32_t key);
/* Translate [addr, addr+len) inside mr; NULL if out of bounds.  addr is in
 * the MR's iova space. */
uint8_t *uroce_mr_ptr(const struct uroce_mr *mr, uint64_t addr, uint64_t len);

/* On-demand paging (verbs/odp.c): fault [addr, addr + length) in, for
 * writing or reading, as a NIC's page fault would; 0 or EFAULT.  And
 * whether a range is mapped at all (0 or EFAULT), without touching it. */
int uroce_odp_fault(const void *addr, size_t length, bool write);
int uroce_range_mapped(const void *addr, size_t length);

/* Memory windows (verbs/mw.c).  The window behind key for a request that
 * arrived on QP qpn of protection domain pd: its host memory for
 * [va, va + len) if the binding grants access there, else NULL.  Engine
 * context, lock-free. */
uint8_t *uroce_mw_ptr(struct uroce_mw *mw, const struct uroce_pd *pd,
		      uint32_t qpn, uint32_t key, uint64_t va, uint64_t len,
		      int access);
/* Send-queue memory operations, executed in order by the requester: bind
 * (type 1 through ibv_bind_mw, type 2 through IBV_WR_BIND_MW) and local
 * invalidation.  Return the completion status. */
enum ibv_wc_status uroce_mw_bind(struct uroce_qp *qp,
				 const struct uroce_send_wqe *wqe);
enum ibv_wc_status uroce_mw_local_inv(struct uroce_qp *qp, uint32_t rkey);
/* SEND with Invalidate at the responder: true if key named a type 2 window
 * of pd bound through QP qpn, which is now invalid. */
bool uroce_mw_remote_inv(struct uroce_nic *nic, const struct uroce_pd *pd,
			 uint32_t qpn, uint32_t key);

/* Push one completion; raises the channel event if armed.  Returns false on
 * overflow (the CQ is then in error and an async event is raised). */
bool uroce_cq_push(struct uroce_cq *cq, const struct ibv_wc *wc, bool solicited);
/* A thread receiving packets holds back the wake-ups of the completion
 * channels it raises events on until the ACKs for those packets have
 * left (uroce_cq_release_wakes), as a NIC's ACK leaves on receipt: a
 * sleeper that answers at once never finds the ACK still unsent. */
void uroce_cq_hold_wakes(void);
void uroce_cq_release_wakes(void);
/* Drop a QP's completions still in the CQ, keeping the others in order. */
void uroce_cq_clean(struct uroce_cq *cq, uint32_t qp_num);

/* verbs/qp.c: move a QP to the error state and flush its queues; the _locked
 * variant is for callers already holding sq_lock. */
void uroce_qp_to_error(struct uroce_qp *qp, bool async_event);
void uroce_qp_to_error_locked(struct uroce_qp *qp, bool async_event);

/* Post an asynchronous event on the context's async fd. */
void uroce_async_event(struct uroce_context *ctx, const struct ibv_async_event *ev);

/* Validate and resolve local SGEs against lkeys: every element must name an
 * MR of pd containing it, with LOCAL_WRITE when need_write.  With
 * defer_errors (receive WQEs) an invalid element is kept, unresolved, for
 * uroce_sges_recheck to fail when the WQE is consumed. */
int uroce_resolve_sges(struct uroce_nic *nic, struct uroce_pd *pd,
		       const struct ibv_sge *in, int n, bool need_write,
		       bool defer_errors, struct uroce_sge *out,
		       uint32_t *total);
/* Consumption-time check of a receive WQE's elements against the MRs as
 * they are now (re-resolving one whose MR was re-registered); false if any
 * no longer names writable memory of pd.  Engine context: MRs are read
 * lock-free, as for rkeys. */
bool uroce_sges_recheck(struct uroce_nic *nic, const struct uroce_pd *pd,
			struct uroce_sge *sge, uint32_t n);

/* Receive ring helpers (verbs/srq.c). */
int uroce_rq_init(struct uroce_rq *rq, uint32_t max_wr, uint32_t max_sge);
/* The XRC SRQ an XRCETH names, or NULL (caller holds rx_lock). */
struct uroce_srq *uroce_srq_lookup(struct uroce_nic *nic, uint32_t srq_num);
void uroce_rq_destroy(struct uroce_rq *rq);
int uroce_rq_post(struct uroce_nic *nic, struct uroce_pd *pd, struct uroce_rq *rq,
		  struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
/* Pop the oldest receive WQE into out (sge copied into sge_store); caller
 * holds rq->lock.  false when empty. */
bool uroce_rq_pop(struct uroce_rq *rq, struct uroce_recv_wqe *out,
		  struct uroce_sge *sge_store);
/* After popping from an SRQ (rq.lock not held): raises
 * IBV_EVENT_SRQ_LIMIT_REACHED once, and disarms, when fewer WQEs than the
 * armed limit remain. */
void uroce_srq_check_limit(struct uroce_srq *srq);

/* Reported in query_device and enforced by create_*. */
void uroce_fill_device_attr(const struct uroce_nic *nic, struct ibv_device_attr *attr);

/* The UDP source port a QP sends from (qp.c). */
uint16_t uroce_qp_sport(uint32_t qpn);

/* Logging for UROCE_DEBUG. */
void uroce_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
