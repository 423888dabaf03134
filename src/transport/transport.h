/*
 * The transport engine: requester (requester.c) turns send WQEs into request
 * packets; responder (responder.c, read_atomic.c) executes incoming requests
 * and answers; completer (completer.c) consumes ACKs and responses and
 * completes send WQEs; receive (receive.c) validates every datagram and
 * dispatches it; progress (progress.c) is the background thread that plays
 * the NIC.
 */
#ifndef UROCE_TRANSPORT_H
#define UROCE_TRANSPORT_H

#include "uroce.h"

/* A received packet after validation by receive.c. */
struct uroce_pkt {
	struct uroce_rxpkt *rx;
	const uint8_t *bth;
	uint8_t opcode;
	uint32_t mask;			/* ib_opcodes[opcode].mask */
	uint32_t psn;
	const uint8_t *payload;
	uint32_t paylen;		/* without pad and ICRC */
	struct uroce_qp *qp;
};

/* A request answered by a response rather than an ACK, which holds one of
 * the responder's READ/atomic resources (max_rd_atomic counts them). */
static inline bool uroce_wqe_is_read_or_atomic(const struct uroce_send_wqe *wqe)
{
	switch ((int)wqe->opcode) {
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_WRITE:
	case UROCE_WR_FLUSH:
		return true;
	default:
		return false;
	}
}

/* CMP_SWAP or FETCH_ADD: answered by an atomic ACK (with AtomicAckETH). */
static inline bool uroce_wqe_is_atomic(const struct uroce_send_wqe *wqe)
{
	return wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       wqe->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/* Memory operations on this host that send nothing: they complete in
 * order once the requester has executed them (IBTA 10.6.7, 10.8.x). */
static inline bool uroce_wqe_is_local(const struct uroce_send_wqe *wqe)
{
	return wqe->opcode == IBV_WR_BIND_MW || wqe->opcode == IBV_WR_LOCAL_INV;
}

/* Accesses to application memory on the peer's behalf, as a NIC's DMA: a
 * peer's WRITEs, atomics and READs, and the data placed in receive buffers
 * and READ responses.  The application orders its own accesses to that
 * memory with them through the peer (it fills memory and tells the peer,
 * which posts; the peer's completion, then a message back, says the data
 * has landed) or not at all (a buffer posted to several receives at once):
 * a chain through another process, or a datagram, that ThreadSanitizer
 * cannot follow.  It would report every word as a race, and the reports
 * alone, suppressed or not, would take minutes, so under TSan these
 * accesses go unchecked, as a device's would. */
#ifdef UROCE_TSAN
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define DMA_BEGIN() __tsan_ignore_thread_begin()
#define DMA_END() __tsan_ignore_thread_end()
#else
#define DMA_BEGIN() ((void)0)
#define DMA_END() ((void)0)
#endif

/* receive.c, under rx_lock: a received datagram's ICRC holds, and its
 * IPv4 identification is one its sender uses */
bool uroce_rx_icrc_ok(struct uroce_nic *nic, const struct uroce_rxpkt *rx);

/* requester.c, called with qp->sq_lock held */
void uroce_req_progress(struct uroce_qp *qp);
bool uroce_req_hold(struct uroce_qp *qp);
/* requester.c, with or without it (held_lock is a leaf): list a QP to be
 * progressed once rx_lock is dropped, as a receiver does */
void uroce_req_list(struct uroce_qp *qp);
/* requester.c, without it: list a QP that held requests back; send what
 * every listed QP holds (after rx_lock is dropped: every thread that
 * receives calls it then); take a QP off the list before it is freed */
void uroce_req_list_held(struct uroce_qp *qp);
void uroce_req_release_held(struct uroce_nic *nic);
/* The same, called by the application (a poll, a request for an event) at
 * time now (ns, uroce_now_ns()). */
void uroce_req_app_release_held(struct uroce_nic *nic, uint64_t now);
void uroce_req_forget_held(struct uroce_qp *qp);
/* sge.c: [offset, offset + len) of a scatter/gather list as iovecs (returns
 * how many), or filled from data (the caller checked that it fits). */
unsigned uroce_sge_gather(struct iovec *iov, const struct uroce_sge *sge,
			  uint32_t num_sge, uint32_t offset, uint32_t len);
void uroce_sge_scatter(const struct uroce_sge *sge, uint32_t num_sge,
		       uint32_t offset, const uint8_t *data, uint32_t len);

/* xmit.c: complete a packet whose headers are in p->hdr[0..hdr_len) and
 * payload in p->iov[1..1 + npay): the pad and ICRC trailer, lengths, and
 * the QP's addresses. */
void uroce_pkt_finish(struct uroce_qp *qp, struct uroce_txpkt *p,
		      unsigned hdr_len, unsigned npay, uint32_t paylen);

void uroce_req_seek(struct uroce_qp *qp, uint32_t psn);
/* The index of the sent WQE that holds psn, or else of the first one not
 * sent (sq_head if every WQE went). */
uint32_t uroce_req_wqe_at(const struct uroce_qp *qp, uint32_t psn);
/* The QP has packets unacknowledged (or no longer): it takes a share of
 * the process's in-flight budget.  sq_lock held. */
void uroce_req_set_active(struct uroce_qp *qp, bool active);
/* Counts what the QP has unacknowledged in nic->inflight; sq_lock held. */
void uroce_req_charge(struct uroce_qp *qp);
void uroce_req_rewind(struct uroce_qp *qp, uint32_t psn);

/* samehost_execute.c: the requester, sq_lock held, the WQE at sq_tail with
 * nothing outstanding: execute it, and the WRITEs posted after it, on the
 * same-host path and complete them; false when it must go on the wire
 * instead. */
bool uroce_sh_execute(struct uroce_qp *qp, struct uroce_send_wqe *wqe);

/* completer.c */
void uroce_comp_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);
void uroce_comp_timer(struct uroce_qp *qp, uint64_t now);
/* (Re)arms the loss probe from now, if there is a round-trip estimate. */
void uroce_comp_arm_probe(struct uroce_qp *qp, uint64_t now);
/* Complete (flush) every send WQE still queued; sq_lock held. */
void uroce_comp_flush(struct uroce_qp *qp);
/* Deliver a send completion for the WQE at sq_tail and advance, then for
 * executed local WQEs behind it; sq_lock held. */
void uroce_comp_complete_tail(struct uroce_qp *qp, enum ibv_wc_status status);
/* Complete the executed local WQEs at sq_tail (a failed one, in error,
 * takes the QP to error). */
void uroce_comp_retire_local(struct uroce_qp *qp);

/* mcast.c: UD multicast.  attach and detach return 0 or an errno (EINVAL:
 * not UD or not a multicast GID, or for detach not attached; ENOMEM: a
 * limit); rx hands a datagram for DestQP 0xFFFFFF to every QP attached to
 * its group, under rx_lock. */
bool uroce_gid_is_multicast(const union ibv_gid *gid);
int uroce_mcast_attach(struct uroce_qp *qp, const union ibv_gid *mgid);
int uroce_mcast_detach(struct uroce_qp *qp, const union ibv_gid *mgid);
void uroce_mcast_detach_all(struct uroce_qp *qp);
void uroce_mcast_rx(struct uroce_nic *nic, struct uroce_pkt *pkt);

/* responder.c */
void uroce_resp_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);
/* A NAK (AETH syndrome) for psn, sent at once. */
void uroce_resp_nak(struct uroce_qp *qp, uint8_t syndrome, uint32_t psn);
/* qp->ack.owed's flag: an ACK is owed */
#define UROCE_ACK_OWED (1ull << 63)
/* Under rx_lock: the QP owes an ACK for what it has received so far. */
void uroce_resp_owe_ack(struct uroce_qp *qp);
/* The ACK the responder owes, built into p for the requester to send
 * ahead of its own packets (false when none is owed; if another thread
 * has claimed it, once that one has sent it).  Any thread, no lock: the
 * ACK is claimed whole, once. */
bool uroce_resp_take_ack(struct uroce_qp *qp, struct uroce_txpkt *p);
/* The same for a thread that sends the ACK alone, with ack.sending set
 * around the claim and the send. */
bool uroce_resp_claim_ack(struct uroce_qp *qp, struct uroce_txpkt *p);
/* Flush every posted receive WQE (QP in error); rq lock not held. */
void uroce_resp_flush(struct uroce_qp *qp);

/* receive.c, under rx_lock: validate and handle received packets (their
 * ICRCs checked by the link); send the ACKs they call for (all, or one
 * QP's, which then leaves the list of those owing one). */
void uroce_recv_batch(struct uroce_nic *nic, struct uroce_rxpkt *pkts, int n);
void uroce_flush_acks(struct uroce_nic *nic);
void uroce_flush_qp_ack(struct uroce_nic *nic, struct uroce_qp *qp);
/* After an application thread received in ibv_poll_cq: the ACKs owed go
 * now, but those of QPs whose application answers at once, which wait for
 * the answer (see receive.c).  now: the poll's time. */
void uroce_settle_app_acks(struct uroce_nic *nic, uint64_t now);
/* The application posts on qp (any thread, no lock): an answer to what it
 * received lately? */
void uroce_acks_note_post(struct uroce_qp *qp);

/* xmit.c: fill ICRC and hand datagrams of qp to the backend. */
int uroce_xmit(struct uroce_qp *qp, struct uroce_txpkt *pkts, unsigned n);

/* progress.c */
int uroce_engine_start(struct uroce_nic *nic);
void uroce_engine_stop(struct uroce_nic *nic);
/* Receive inline from a thread that found its CQ empty: completions then
 * need no wake-up of the engine thread.  now: when its poll began (one
 * clock read serves the whole poll: a busy poller's polls are short).
 * Unless will_wait (it armed the CQ and is about to sleep), the thread
 * receives for the process from now on, and the engine stays off the
 * sockets for a while. */
void uroce_engine_poll(struct uroce_nic *nic, uint64_t now, bool will_wait);
/*
 * What the transport needs of the verbs objects above it, the driver's side
 * of a NIC: memory keys checked and translated, receive WQEs taken,
 * completions written (their channel events held while a receive pass
 * runs), QPs moved to the error state and async events raised.  The
 * objects provide it (verbs/objects_ops.c) when they open the device
 * (uroce_nic_get), before the engine starts: nic->objects.
 */
struct uroce_objects_ops {
	/* memory */
	struct uroce_mr *(*mr_lookup)(struct uroce_nic *nic, uint32_t key);
	uint8_t *(*mr_ptr)(const struct uroce_mr *mr, uint64_t addr,
			   uint64_t len);
	bool (*sges_recheck)(struct uroce_nic *nic, const struct uroce_pd *pd,
			     struct uroce_sge *sge, uint32_t n);
	uint8_t *(*mw_ptr)(struct uroce_mw *mw, const struct uroce_pd *pd,
			   uint32_t qpn, uint32_t key, uint64_t va,
			   uint64_t len, int access);
	enum ibv_wc_status (*mw_bind)(struct uroce_qp *qp,
				      const struct uroce_send_wqe *wqe);
	enum ibv_wc_status (*mw_local_inv)(struct uroce_qp *qp, uint32_t rkey);
	bool (*mw_remote_inv)(struct uroce_nic *nic, const struct uroce_pd *pd,
			      uint32_t qpn, uint32_t key);
	int (*odp_fault)(const void *addr, size_t length, bool write);
	/* receive queues */
	bool (*rq_pop)(struct uroce_rq *rq, struct uroce_recv_wqe *out,
		       struct uroce_sge *sge_store);
	struct uroce_srq *(*srq_lookup)(struct uroce_nic *nic, uint32_t srq_num);
	void (*srq_check_limit)(struct uroce_srq *srq);
	/* completions */
	bool (*cq_push)(struct uroce_cq *cq, const struct ibv_wc *wc,
			bool solicited);
	void (*hold_wakes)(void);
	void (*release_wakes)(void);
	/* QP state and async events (_locked: the caller holds sq_lock) */
	void (*qp_to_error)(struct uroce_qp *qp, bool async_event);
	void (*qp_to_error_locked)(struct uroce_qp *qp, bool async_event);
	void (*async_event)(struct uroce_context *ctx,
			    const struct ibv_async_event *ev);
};

/* The service on QP1 (the CM), above the transport: the datagrams for
 * QP1 go to rx (rx_lock held), and the engine runs its timers with its own
 * (timers returns the next deadline, UINT64_MAX for none).  Set in
 * nic->qp1 while the service runs; without one, QP1's datagrams are
 * dropped as for an unknown QP. */
struct uroce_qp1_ops {
	void (*rx)(struct uroce_nic *nic, struct uroce_rxpkt *rx);
	uint64_t (*timers)(struct uroce_nic *nic, uint64_t now);
};

/* Wait until the engine no longer uses any QP/MR pointer it may have loaded
 * before the caller unpublished one. */
void uroce_engine_quiesce(struct uroce_nic *nic);
/* Make the engine re-evaluate its timers by deadline_ns (cheap when it
 * would anyway). */
void uroce_engine_kick(struct uroce_nic *nic, uint64_t deadline_ns);
/* Runs fn under rx_lock inside an engine section: the QPs it finds in
 * nic->live_qps stay allocated until it returns (uroce_engine_quiesce). */
void uroce_engine_call(struct uroce_nic *nic,
		       void (*fn)(struct uroce_nic *nic, void *arg), void *arg);
/* What a thread waits for in uroce_engine_wait: a completion channel's
 * next event. */
struct uroce_wait {
	int fd;			/* the channel's pipe, which other threads'
				 * events make readable */
	const bool *raised;	/* set by this thread's own receive passes */
	const atomic_bool *queued;	/* an event is queued, by any thread */
	_Atomic uint64_t *poll_ns;	/* how long to poll first; adapted */
};
/* Sleeps until the event, receiving for the process meanwhile, after
 * polling for up to *w->poll_ns, which it adapts to how soon the wait
 * ended; -1 with errno EINTR on a signal. */
int uroce_engine_wait(struct uroce_nic *nic, const struct uroce_wait *w);
/* An application thread stops receiving for now: its poll returned
 * completions, or (will_wait) it armed a CQ to wait for an event. */
void uroce_engine_app_left(struct uroce_nic *nic, bool will_wait);
/* The ACKs an application thread kept for its answers go now: it is about
 * to wait for an event instead. */
void uroce_engine_flush_acks(struct uroce_nic *nic);
/* The process exits: receive (and so forward) what the sockets still hold
 * or the kernel is still delivering, for a few milliseconds at most. */
void uroce_engine_drain(struct uroce_nic *nic);
/* Local ACK timeout of a QP in ns (4.096 us * 2^timeout), 0 = infinite. */
uint64_t uroce_ack_timeout_ns(uint8_t timeout);
/* RNR NAK timer code to ns (IBTA table 45). */
uint64_t uroce_rnr_timer_ns(uint8_t code);

#endif
