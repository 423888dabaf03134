/*
 * The requester's state in a QP (requester.c): where packetizing the send
 * queue stands, and what holds it back.  Guarded by the QP's sq_lock.
 */
#ifndef UROCE_TRANSPORT_REQ_STATE_H
#define UROCE_TRANSPORT_REQ_STATE_H

#include <stdbool.h>
#include <stdint.h>

struct uroce_req_state {
	uint32_t psn;		/* PSN of the next packet we build */
	uint32_t max_psn;	/* next never-sent PSN (psn < it after a rewind) */
	uint32_t offset;	/* bytes of sq[sq_next] already packetized */
	uint32_t since_ackreq;	/* packets since we last asked for an ACK */
	uint32_t rd_atomic_out;	/* READ/atomic requests in flight */
	bool active;		/* counted in nic->active_senders */
	uint32_t charged;	/* packets counted in nic->inflight */
	bool held_listed;	/* in nic->held, under held_lock */
	/* nic->release_gen when a WRITE last went the same-host way */
	unsigned sh_gen;
	uint64_t wait_until;	/* ns: RNR wait, UC/UD pacing or a busy
				 * link; 0 = none */
	uint64_t pace_ns;	/* UC/UD: when the link is free again */
	/* the link took only part of the last batch: what went asks
	 * for no ACK until the rest goes (transport/requester.c) */
	bool link_busy;
};

#endif
