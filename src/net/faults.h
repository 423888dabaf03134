/*
 * Deterministic fault injection on a link's receive and send sides
 * (net/faults.c).
 */
#ifndef UROCE_NET_FAULTS_H
#define UROCE_NET_FAULTS_H

#include <stdatomic.h>

#include "config.h"
#include "net/link.h"

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

#endif
