/*
 * The NIC: one per process, shared by every open context (nic.c).
 */
#ifndef UROCE_NIC_H
#define UROCE_NIC_H

#include <pthread.h>
#include <stdatomic.h>

#include "config.h"
#include "macros.h"
#include "net/faults.h"
#include "net/link.h"
#include "stats.h"

struct uroce_qp;
struct uroce_mr;
struct uroce_mw;
struct uroce_cm;
struct uroce_mcast_group;
struct uroce_mux;
struct uroce_qp1_ops;
struct uroce_objects_ops;
struct uroce_sh;
struct uroce_sh_peer;

struct uroce_nic {
	pthread_mutex_t lock;		/* object tables; never on the datapath */
	int refcnt;
	const struct uroce_config *cfg;

	const struct uroce_net_ops *net;
	void *net_priv;			/* backend state */
	struct uroce_mux *mux;		/* the host mux, in the UDP link's state */
	/* the RoCE v1 link (net/roce1.c) and its state, or NULL; why not,
	 * when asked for (UROCE_ROCE_V1) and absent */
	const struct uroce_net_ops *roce1;
	void *roce1_priv;
	char roce1_absent[160];
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
	 * on uroce_engine_quiesce() before an object is freed. */
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
	/* RC QPs with requests to send once rx_lock is dropped: held back
	 * for company (uroce_req_hold), or a window an ACK opened */
	pthread_mutex_t held_lock;	/* leaf: held, n_held, held_listed */
	struct uroce_qp **held;		/* UROCE_MAX_QP entries */
	atomic_uint n_held;
	/* one thread at a time sends for them (trylock), from the list it
	 * swapped out; drain_seq is odd meanwhile (section.h) */
	pthread_mutex_t drain_lock;
	struct uroce_qp **draining;	/* UROCE_MAX_QP entries */
	atomic_uint drain_seq;
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

	/* reliable QPs with packets unacknowledged, and those packets:
	 * they share the in-flight budget (transport/requester.c) */
	atomic_uint active_senders;
	atomic_uint inflight;

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
		int tx4, tx6, tx1;	/* transmit endpoints (IPv4, IPv6, RoCE
					 * v1), -1 until used */
		atomic_uint psn;
	} gsi;
	/* multicast groups and their QPs (transport/mcast.c): changed under
	 * mcast.lock and rx_lock, read under either */
	struct {
		pthread_mutex_t lock;
		struct uroce_mcast_group *groups;
		unsigned n, cap, attached;
	} mcast;

	struct uroce_cm *cm;
	const struct uroce_qp1_ops *qp1;	/* the CM's (transport.h) */
	/* the verbs objects' side of the transport (transport.h) */
	const struct uroce_objects_ops *objects;
	struct uroce_sh *sh;		/* same-host path (src/samehost/), or NULL */
};

/* Take / release the process NIC, created on the first open_device with
 * the objects' side of the transport (transport.h). */
struct uroce_nic *uroce_nic_get(const struct uroce_objects_ops *objects);
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

uint64_t uroce_now_ns(void);

#endif
