/*
 * Deterministic fault injection on the receive path (UROCE_FAULTS).  Every
 * received datagram, in arrival order, consumes exactly one draw from a
 * seeded PRNG that decides whether it is dropped, held back behind the next
 * delivered datagram, or delivered twice.  The same seed and the same
 * sequence of batches therefore always produce the same faults, so a failure
 * seen under faults can be replayed.
 */
#include <string.h>

#include "uroce.h"

enum fault { PASS, DROP, REORDER, DUP };

/* splitmix64: tiny state, good statistical quality, and any seed (even 0)
 * gives a full-period sequence. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void uroce_faults_init(struct uroce_faults *f, const struct uroce_faults_cfg *cfg)
{
	f->cfg = *cfg;
	f->rng = cfg->seed;
	f->held_valid = false;
	f->held_slot = 0;
}

/* One uniform draw in [0, 1) split into consecutive ranges, so each fault
 * occurs at its configured rate independently of the others' settings. */
static enum fault draw(struct uroce_faults *f)
{
	double u = (rng_next(&f->rng) >> 11) * 0x1p-53;

	if (u < f->cfg.drop)
		return DROP;
	u -= f->cfg.drop;
	if (u < f->cfg.reorder)
		return REORDER;
	u -= f->cfg.reorder;
	return u < f->cfg.dup ? DUP : PASS;
}

/*
 * Append x at output position *w.  Outputs are written behind the read
 * position *r; when they have caught up, the unread inputs [*r, *end) move
 * one place to the right to make room.  false when the batch is full.
 */
static bool emit_extra(struct uroce_rxpkt *pkts, int *w, int *r, int *end,
		       int max, const struct uroce_rxpkt *x)
{
	if (*w == *r) {
		if (*end >= max)
			return false;
		memmove(&pkts[*r + 1], &pkts[*r], (*end - *r) * sizeof(*pkts));
		(*r)++;
		(*end)++;
	}
	pkts[(*w)++] = *x;
	return true;
}

int uroce_faults_apply(struct uroce_faults *f, struct uroce_rxpkt *pkts,
		       int n, int max)
{
	struct uroce_nic *nic = container_of(f, struct uroce_nic, faults);
	int w = 0, r = 0, end = n;

	while (r < end) {
		struct uroce_rxpkt p = pkts[r++];
		enum fault fault = draw(f);

		if (fault == DROP) {
			STAT_INC(nic, fault_drops);
			continue;
		}
		/* One datagram is held at a time, and only one that fits the
		 * buffer it may have to be copied into. */
		if (fault == REORDER && !f->held_valid &&
		    p.len <= sizeof(f->held_buf[0])) {
			f->held = p;
			f->held_valid = true;
			STAT_INC(nic, fault_reorders);
			continue;
		}
		pkts[w++] = p;
		if (fault == DUP && emit_extra(pkts, &w, &r, &end, max, &p))
			STAT_INC(nic, fault_dups);
		/* p overtook the held datagram; it follows p unless the batch
		 * is full, in which case it waits for the next delivery. */
		if (f->held_valid &&
		    emit_extra(pkts, &w, &r, &end, max, &f->held))
			f->held_valid = false;
	}

	/* The backend reuses its buffers on the next receive: a datagram still
	 * held must own its bytes.  The other buffer may be referenced by the
	 * batch being returned, so the copy goes to the one not used last. */
	if (f->held_valid && f->held.data != f->held_buf[f->held_slot]) {
		f->held_slot ^= 1;
		memcpy(f->held_buf[f->held_slot], f->held.data, f->held.len);
		f->held.data = f->held_buf[f->held_slot];
	}
	return w;
}
