/*
 * uroce internals shared by the verbs objects, the transport engine and the
 * network backends.  The public API is rdma-core's <infiniband/verbs.h>; every
 * verbs object here embeds the rdma-core struct as its first member so that a
 * pointer handed to the application converts back with container_of.
 */
#ifndef UROCE_H
#define UROCE_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "params.h"
#include "verbs_newer.h"

#define UROCE_EXPORT __attribute__((visibility("default")))

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- configuration (config.c) -------------------------------------------- */

struct uroce_faults_cfg {
	double drop;		/* probability a received datagram is dropped */
	double dup;		/* ... is delivered twice */
	double reorder;		/* ... is held back behind the next one */
	double corrupt;		/* ... has one bit flipped, for the ICRC to catch */
	double delay;		/* ... is held back behind 1..64 later ones */
	double tx_drop;		/* probability a transmitted packet is lost */
	double tx_corrupt;	/* ... leaves with a bit of its headers or ICRC
				 * flipped */
	double tx_busy;		/* ... finds the link busy, which then takes
				 * nothing for UROCE_FAULT_BUSY_NS */
	uint64_t seed;
	bool rx, tx;		/* some receive / send side fault is set */
	bool enabled;		/* either: also keeps the same-host path off */
};

struct uroce_config {
	uint16_t udp_port;		/* UROCE_PORT, default 4791 */
	enum ibv_mtu max_mtu;		/* UROCE_MTU (256..4096), default 4096 */
	char addrs[512];		/* UROCE_ADDRS: comma list; empty = all */
	unsigned window;		/* UROCE_WINDOW: packets in flight per QP */
	unsigned rate_mbps;		/* UROCE_RATE: link rate, Mbit/s */
	struct uroce_faults_cfg faults;	/* UROCE_FAULTS=drop=0.02,dup=..,reorder=..,seed=7 */
	int debug;			/* UROCE_DEBUG=1: log drops to stderr */
	char pcap[256];			/* UROCE_PCAP: capture file; empty = off */
	bool spin;			/* UROCE_ENGINE=spin: never sleep */
	uint64_t wait_poll_ns;		/* UROCE_WAIT_POLL_US: longest poll
					 * before ibv_get_cq_event sleeps */
	bool shm;			/* UROCE_SHM=0: no same-host path */
	bool tx_hold;			/* UROCE_TX_HOLD=0: no request batching */
	char service[200];		/* UROCE_SERVICE: uroced's directory;
					 * empty = none (single-user mode) */
};

/* Loaded once from the environment (and the file named by UROCE_CONFIG). */
const struct uroce_config *uroce_config(void);
/* A fault injection setting as UROCE_FAULTS takes it: NULL, or why not. */
const char *uroce_faults_parse(const char *spec, struct uroce_faults_cfg *out);

/* ---- addresses ----------------------------------------------------------- */

union uroce_sockaddr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
	struct sockaddr_storage ss;
};

/* The IP address in sa: a struct in_addr or a struct in6_addr. */
static inline const void *uroce_sockaddr_ip(const union uroce_sockaddr *sa)
{
	return sa->sa.sa_family == AF_INET ? (const void *)&sa->in4.sin_addr
					   : (const void *)&sa->in6.sin6_addr;
}

/* ::ffff:a.b.c.d GIDs map to AF_INET, everything else to AF_INET6. */
void uroce_gid_to_sockaddr(const union ibv_gid *gid, uint16_t port,
			   union uroce_sockaddr *out);
void uroce_sockaddr_to_gid(const union uroce_sockaddr *sa, union ibv_gid *gid);
bool uroce_sockaddr_same_ip(const union uroce_sockaddr *a,
			    const union uroce_sockaddr *b);

struct uroce_gid_entry {
	union ibv_gid gid;
	unsigned ifindex;
};

/* ---- packets between transport and network backend ---------------------- */

/* One RoCEv2 datagram being sent: UDP payload = iov[0..niov). The transport
 * fills hdr (BTH + extension headers) and trailer (pad + ICRC) and points the
 * payload iovecs straight at registered memory (zero copy). */
enum { UROCE_TX_IOV = UROCE_MAX_SGE + 2 };

struct uroce_txpkt {
	const union uroce_sockaddr *dst;	/* peer IP, port 4791 */
	const union uroce_sockaddr *src;	/* our IP (the SGID), port ignored */
	uint32_t len;				/* UDP payload bytes */
	unsigned niov;
	struct iovec iov[UROCE_TX_IOV];
	uint8_t hdr[UROCE_MAX_HDR];
	uint8_t trailer[8];
};

/*
 * UDP GSO: consecutive packets of one QP with the same addresses, all of one
 * length except a shorter last one, leave as one datagram that the kernel
 * (or the NIC) cuts into segments.  Segment k of such a run carries IPv4
 * identification k (base 0 on an unconnected DF socket), which the ICRC
 * covers, so the transport and the backend must agree on the runs: both use
 * this function.
 */
enum {
	UROCE_GSO_MAX_SEGS = 64,
	UROCE_GSO_MAX_BYTES = 65535 - 40 - 8,	/* one IPv6 datagram */
	UROCE_GSO_MAX_IOV = 256,
};

static inline unsigned uroce_gso_run(const struct uroce_txpkt *pkts,
				     unsigned n)
{
	size_t bytes = pkts[0].len;
	unsigned iovs = pkts[0].niov, k = 1;

	while (k < n && k < UROCE_GSO_MAX_SEGS &&
	       pkts[k - 1].len == pkts[0].len && pkts[k].len <= pkts[0].len &&
	       bytes + pkts[k].len <= UROCE_GSO_MAX_BYTES &&
	       iovs + pkts[k].niov <= UROCE_GSO_MAX_IOV &&
	       pkts[k].dst == pkts[0].dst && pkts[k].src == pkts[0].src) {
		bytes += pkts[k].len;
		iovs += pkts[k].niov;
		k++;
	}
	return k;
}

/* One received datagram.  data/len cover the UDP payload (BTH .. ICRC).
 * Buffers belong to the backend and stay valid until its next recv call. */
struct uroce_rxpkt {
	uint8_t *data;
	uint32_t len;
	union uroce_sockaddr src;	/* peer IP and UDP source port */
	union uroce_sockaddr dst;	/* our IP it was sent to, UDP dest port */
	uint8_t tos;			/* IPv4 TOS / IPv6 traffic class (ECN) */
};

struct uroce_nic;

/* A network backend: how RoCEv2 datagrams leave and enter this process. */
struct uroce_net_ops {
	const char *name;
	/* Bind the shared RoCEv2 port; allocate nic->slot. */
	int (*open)(struct uroce_nic *nic);
	void (*close)(struct uroce_nic *nic);
	/* A transmit endpoint for one UDP source port and address family,
	 * or with sport 0 one of its own on a port the kernel picks (see
	 * tx_sport).  Returns a handle >= 0 or -errno. */
	int (*tx_open)(struct uroce_nic *nic, int family, uint16_t sport);
	/* The UDP source port a transmit endpoint sends from. */
	uint16_t (*tx_sport)(struct uroce_nic *nic, int tx);
	/* Capture every packet sent and received into a pcap file from now
	 * on (path NULL: stop); the file being written, or NULL. */
	int (*capture)(struct uroce_nic *nic, const char *path);
	const char *(*capture_path)(struct uroce_nic *nic);
	void (*tx_close)(struct uroce_nic *nic, int tx);
	/* Ask for the datagrams that peer sends from UDP port peer_sport to
	 * self to be delivered to this process directly, for as long as tx
	 * is open.  Optional and best effort; -errno when it cannot. */
	int (*steer)(struct uroce_nic *nic, int tx,
		     const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer, uint16_t peer_sport);
	/* Send n datagrams; returns how many left (>= 0) or -errno. */
	int (*xmit)(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n);
	/* File descriptors the engine polls for POLLIN before calling recv. */
	int (*rx_fds)(struct uroce_nic *nic, int *fds, int max);
	/* Receive up to max packets without blocking; 0 when none.  Sets
	 * *drained when another call would most likely find nothing. */
	int (*recv)(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		    unsigned max, bool *drained);
	/* Hand a received datagram to the process of another slot; -errno
	 * when no process has that slot. */
	int (*forward)(struct uroce_nic *nic, unsigned slot,
		       const struct uroce_rxpkt *rx);
	/* CM service IDs, held host-wide: claim one for this process
	 * (-EADDRINUSE if any process holds it), release it, and hand a
	 * received datagram to the process that holds one (-errno if none
	 * does). */
	int (*sid_claim)(struct uroce_nic *nic, uint64_t sid);
	void (*sid_release)(struct uroce_nic *nic, uint64_t sid);
	int (*sid_forward)(struct uroce_nic *nic, uint64_t sid,
			   const struct uroce_rxpkt *rx);
};

extern const struct uroce_net_ops uroce_net_udp;

/* ---- deterministic fault injection (net/faults.c) ------------------------ */

struct uroce_faults {
	struct uroce_faults_cfg cfg;
	uint64_t rng;
	/* The datagram held back for reorder.  When a batch ends with it still
	 * held it is copied out of the backend's buffer, alternating between
	 * two buffers so the copy never overwrites one released into the batch
	 * being returned.  Duplicates share the original's buffer: receivers
	 * only read it. */
	bool held_valid;
	unsigned held_slot;		/* held_buf used by the last copy */
	struct uroce_rxpkt held;
	uint8_t held_buf[2][UROCE_RX_BUF];
	/* Delayed datagrams, each with a copy of its bytes taken when it is
	 * delayed.  A slot released into a batch stays taken until the next
	 * call, while the batch still points at its buffer. */
	struct uroce_fault_delayed {
		enum { DELAY_FREE, DELAY_HELD, DELAY_RELEASED } state;
		unsigned left;		/* arrivals to wait for while held */
		struct uroce_rxpkt pkt;
		uint8_t buf[UROCE_RX_BUF];
	} delayed[UROCE_FAULT_DELAY_SLOTS];
	/* The send side's splitmix64 state: transmitting threads advance it
	 * with one atomic add each, so they need no lock. */
	atomic_uint_fast64_t tx_rng;
	atomic_uint_fast64_t tx_busy_until;	/* ns: tx_busy's spell */
};

void uroce_faults_init(struct uroce_faults *f, const struct uroce_faults_cfg *cfg);
/* Applies drop/dup/reorder/corrupt/delay to a received batch in place;
 * returns new count (<= max).  Deterministic for a given seed and sequence
 * of calls.  f must be the faults member of a struct uroce_nic: the faults
 * are counted in its stats. */
int uroce_faults_apply(struct uroce_faults *f, struct uroce_rxpkt *pkts,
		       int n, int max);

/* The send side's fault for the next packet to leave.  Any thread may ask;
 * the sequence of faults is the seed's, in the order the threads draw. */
/* BUSY: the link takes neither this packet nor those after it, as a full
 * socket send buffer or same-host ring would not: they are not sent. */
enum uroce_tx_fault { UROCE_TX_PASS, UROCE_TX_DROP, UROCE_TX_CORRUPT,
		      UROCE_TX_BUSY };
enum uroce_tx_fault uroce_faults_tx(struct uroce_faults *f);
/* Flips one bit of p's headers or ICRC (p's payload is the application's
 * memory), once its ICRC is in place. */
void uroce_faults_corrupt_tx(struct uroce_faults *f, struct uroce_txpkt *p);

/* ---- counters ------------------------------------------------------------ */

#define UROCE_STATS(X)                                                         \
	X(rx_packets) X(tx_packets) X(rx_bytes) X(tx_bytes)                    \
	X(rx_bad_icrc) X(rx_malformed)                                         \
	X(rx_unknown_qp) X(rx_bad_source) X(rx_bad_state) X(rx_out_of_window)  \
	X(rx_duplicate) X(rx_forwarded) X(rx_forward_failed) X(tx_errors)      \
	X(retransmits) X(timeouts) X(loss_probes) X(tail_probes)              \
	X(spurious_probes) X(rnr_naks_sent)                                    \
	X(rnr_naks_rcvd) X(seq_naks_sent) X(seq_naks_rcvd) X(fault_drops)     \
	X(fault_dups) X(fault_reorders) X(fault_corrupts) X(fault_delays)      \
	X(fault_tx_drops) X(fault_tx_busy) X(fault_tx_corrupts)               \
	X(access_errors) X(rx_errors) X(rx_bad_qkey)                          \
	X(rx_dropped_msgs) X(pcap_drops) X(mad_rx) X(mad_tx)                  \
	X(mad_malformed) X(mad_forwarded) X(mad_unknown_id) X(mad_bad_state)   \
	X(mad_duplicates) X(mad_rejected) X(mad_retransmits)                   \
	X(mad_backlog_drops) X(samehost_ops) X(samehost_to_wire)          \
	X(samehost_no_room) X(samehost_ring_tx) X(acks_sent)                  \
	X(acks_with_requests) X(acks_unanswered) X(waits_polled)               \
	X(waits_slept)

struct uroce_stats {
#define UROCE_STAT_FIELD(n) atomic_ulong n;
	UROCE_STATS(UROCE_STAT_FIELD)
#undef UROCE_STAT_FIELD
};

#define STAT_INC(nic, field) \
	atomic_fetch_add_explicit(&(nic)->stats.field, 1, memory_order_relaxed)

/* ---- the NIC: one per process, shared by every open context -------------- */

struct uroce_qp;
struct uroce_mr;
struct uroce_mw;
struct uroce_cm;
struct uroce_sh;
struct uroce_sh_peer;

struct uroce_nic {
	pthread_mutex_t lock;		/* object tables; never on the datapath */
	int refcnt;
	const struct uroce_config *cfg;

	const struct uroce_net_ops *net;
	void *net_priv;			/* backend state */
	bool gso;			/* the backend sends uroce_gso_run()s */
	unsigned slot;			/* this process's QPN slot (1..) */
	bool served;			/* by the per-host service, uroced */
	bool service;			/* this process is uroced */
	/* capturing or injecting faults since `uroce` said so: the
	 * same-host path stands aside, so every packet is on the wire */
	atomic_bool wire_only;
	/* `uroce`'s view into the process (control.c) */
	int ctl_fd, ctl_wake;
	pthread_t ctl_thread;
	bool ctl_running;
	char faults_spec[128];		/* set at run time; under lock */

	struct uroce_gid_entry gids[UROCE_GID_TBL_LEN];
	int num_gids;

	/* QPN index -> QP; readers in the engine load without a lock and rely
	 * on uroce_nic_quiesce() before an object is freed. */
	_Atomic(struct uroce_qp *) qps[UROCE_MAX_QP + 1];
	_Atomic(struct uroce_qp *) live_qps[UROCE_MAX_QP + 1];
	atomic_int num_live_qps;
	unsigned next_qp_index;

	/* XRC SRQ number -> SRQ, for the XRCETH of arriving requests; the
	 * engine reads it under rx_lock, which destroy_srq takes */
	_Atomic(struct uroce_srq *) srqs[UROCE_MAX_SRQ + 1];
	unsigned next_srq_index;

	/* key index -> MR; app threads take mr_lock for reading, the engine
	 * reads without it under the same quiesce rule. */
	pthread_rwlock_t mr_lock;
	_Atomic(struct uroce_mr *) *mrs;	/* UROCE_MAX_MR + 1 entries */
	unsigned next_mr_index;

	/* progress engine (transport/progress.c) */
	pthread_t engine;
	int wake_fd;			/* eventfd: timers re-armed earlier */
	int leave_fd;			/* eventfd: the poller left, receive */
	int doorbell_fd;		/* eventfd: same-host peers sent */
	/* An application thread asleep in ibv_get_cq_event that receives
	 * for the process meanwhile (one at a time), and when the last one
	 * woke: the engine stays off the sockets (uroce_engine_wait). */
	atomic_bool sleeper;
	atomic_uint_fast64_t sleeper_left_ns;
	atomic_bool engine_sleeper_wait;	/* asleep with no deadline */
	atomic_bool stop;
	atomic_uint_fast64_t engine_sleep_until;	/* ns, CLOCK_MONOTONIC */
	/* ns of the last time an application thread polled an empty CQ and
	 * received for itself: the engine leaves receiving to it meanwhile.
	 * 0 once the thread stopped receiving where only the engine can make
	 * progress (see uroce_engine_app_left). */
	atomic_uint_fast64_t app_poll_ns;
	atomic_bool engine_deferring;	/* asleep, leaving the sockets to it */
	/* between waking and deciding how long to sleep next: it reads
	 * sh_hold_ns after this turns false (transport/requester.c,
	 * sh_engine_due) */
	atomic_bool engine_awake;
	/* ns of the last WRITE, READ or atomic request received: this
	 * process is a target that the engine must serve promptly */
	atomic_uint_fast64_t one_sided_rx_ns;
	struct uroce_rxpkt rx_pkts[UROCE_RX_BATCH];	/* under rx_lock */
	/* QPs owing an ACK (resp.ack_listed), under rx_lock: see
	 * uroce_flush_acks() */
	struct uroce_qp *acks_owed[UROCE_RX_BATCH];
	unsigned n_acks_owed;
	/* of those, kept for an application's answer (resp.ack_waits_ns);
	 * read without rx_lock */
	atomic_uint acks_waiting;
	pthread_mutex_t rx_lock;	/* one receiver at a time keeps order */
	/* RC QPs holding requests back for company (uroce_req_hold) */
	pthread_mutex_t held_lock;
	struct uroce_qp **held;		/* UROCE_MAX_QP entries */
	atomic_uint n_held;
	atomic_uint release_gen;	/* uroce_req_release_held() calls */
	/* ns of the application's last call of it (a poll, an event
	 * request), and of the last same-host hold, after which the engine
	 * comes back within UROCE_SH_HOLD_NS */
	atomic_uint_fast64_t app_release_ns, sh_hold_ns;
	/* IPv4 senders' identification habits (receive.c), under rx_lock */
	struct uroce_id_habit {
		uint32_t addr;		/* network order; 0: none yet */
		bool any_id;
		uint8_t strikes;
	} id_habits[1 << UROCE_ID_HABITS_LOG2];
	/* uroce_engine_call()s waiting for rx_lock: the engine and pollers,
	 * which retake it the moment they drop it (a mutex is not fair),
	 * stand aside for them */
	atomic_uint rx_callers;
	atomic_uint engine_seq;		/* odd while touching QPs/MRs */

	/* reliable QPs with packets unacknowledged: they share the
	 * in-flight budget (transport/requester.c) */
	atomic_uint active_senders;

	/* objects counted against the limits ibv_query_device advertises
	 * (QPs, MRs and windows are bounded by their tables) */
	struct {
		atomic_uint pd, cq, ah, srq;
	} used;

	struct uroce_faults faults;	/* guarded by rx_lock */
	struct uroce_stats stats;

	/* QP1 and the connection manager (src/cm/) */
	struct {
		pthread_mutex_t lock;	/* opening the endpoints */
		int tx4, tx6;		/* transmit endpoints, -1 until used */
		uint16_t sport4, sport6;	/* and their source ports */
		atomic_uint psn;
	} gsi;
	struct uroce_cm *cm;
	struct uroce_sh *sh;		/* same-host path (src/samehost/), or NULL */
};

/* Take / release the process NIC (created on first open_device). */
struct uroce_nic *uroce_nic_get(void);
/* Counts one more object against limit; false (the caller fails with
 * ENOMEM, as a NIC out of resources) when that many exist already. */
static inline bool uroce_nic_take(atomic_uint *used, unsigned limit)
{
	unsigned n = atomic_load(used);

	do {
		if (n >= limit)
			return false;
	} while (!atomic_compare_exchange_weak(used, &n, n + 1));
	return true;
}
void uroce_nic_put(struct uroce_nic *nic);
/* Wait until the engine no longer uses any QP/MR pointer it may have loaded
 * before the caller unpublished one. */
void uroce_nic_quiesce(struct uroce_nic *nic);
/* Make the engine re-evaluate its timers now (cheap when not needed). */
void uroce_nic_kick(struct uroce_nic *nic, uint64_t deadline_ns);

uint64_t uroce_now_ns(void);

/* ---- verbs objects ------------------------------------------------------- */

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
		/* congestion window, packets (0 = the whole window): halved
		 * at a loss, grown back as ACKs come (completer.c) */
		uint32_t cwnd, cwnd_acked;
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
		/* the window was cut for the losses up to this PSN */
		uint32_t recover_psn;
		bool cut;
	} comp;

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

/* The node GUID every uroce process of a host reports (device.c). */
__be64 uroce_node_guid(void);
/* The UDP source port a QP sends from (qp.c). */
uint16_t uroce_qp_sport(uint32_t qpn);

/* Logging for UROCE_DEBUG. */
void uroce_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
