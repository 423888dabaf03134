/*
 * The completer's state in a QP (completer.c): what is acknowledged, the
 * ACK timer and retry budgets, loss probes and the round-trip estimate.
 * Guarded by the QP's sq_lock.
 */
#ifndef UROCE_TRANSPORT_COMP_STATE_H
#define UROCE_TRANSPORT_COMP_STATE_H

#include <stdbool.h>
#include <stdint.h>

struct uroce_comp_state {
	uint32_t psn;		/* oldest unacknowledged PSN */
	uint32_t retry_left;
	uint32_t rnr_retry_left;
	uint64_t deadline;	/* ns of the local ACK timeout; 0 = idle */
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
};

#endif
