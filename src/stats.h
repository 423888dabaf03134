/*
 * Every module's counters, one table: `uroce stat` prints them.
 */
#ifndef UROCE_STATS_H
#define UROCE_STATS_H

#include <stdatomic.h>
#include <stdint.h>

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
	X(waits_slept) X(mcast_rx) X(roce1_rx) X(roce1_tx)                     \
	X(roce1_no_neigh) X(budget_waits)

struct uroce_stats {
#define UROCE_STAT_FIELD(n) atomic_ulong n;
	UROCE_STATS(UROCE_STAT_FIELD)
#undef UROCE_STAT_FIELD
};

#define STAT_INC(nic, field) \
	atomic_fetch_add_explicit(&(nic)->stats.field, 1, memory_order_relaxed)

#endif
