/*
 * Deterministic fault injection (UROCE_FAULTS).  On the receive path every
 * received datagram, in arrival order, consumes one draw from a seeded PRNG
 * that decides whether it is dropped, held back behind the next delivered
 * datagram, delivered twice, corrupted (one more draw picks the bit) or
 * delayed (one more draw picks how many arrivals it waits for).  The same
 * seed and the same sequence of batches therefore always produce the same
 * faults, so a failure seen under faults can be replayed.  The send side
 * draws from a stream of its own per transmitted packet: lost, or sent with
 * a bit of its headers flipped.
 */
#include <string.h>

#include "uroce.h"

enum fault { PASS, DROP, REORDER, DUP, CORRUPT, DELAY };

/* splitmix64: tiny state, good statistical quality, and any seed (even 0)
 * gives a full-period sequence. */
#define RNG_STEP 0x9E3779B97F4A7C15ull

static uint64_t rng_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t rng_next(uint64_t *state)
{
	return rng_mix(*state += RNG_STEP);
}

/* A uniform draw in [0, 1). */
static double rng_unit(uint64_t r)
{
	return (r >> 11) * 0x1p-53;
}

void uroce_faults_init(struct uroce_faults *f, const struct uroce_faults_cfg *cfg)
{
	f->cfg = *cfg;
	f->rng = cfg->seed;
	f->held_valid = false;
	f->held_slot = 0;
	for (unsigned i = 0; i < UROCE_FAULT_DELAY_SLOTS; i++)
		f->delayed[i].state = DELAY_FREE;
	/* another stream than the receive side's, from the same seed */
	atomic_init(&f->tx_rng, rng_mix(cfg->seed ^ 0x7458));
}

/* One uniform draw in [0, 1) split into consecutive ranges, so each fault
 * occurs at its configured rate independently of the others' settings. */
static enum fault draw(struct uroce_faults *f)
{
	const double p[] = { [DROP] = f->cfg.drop, [REORDER] = f->cfg.reorder,
			     [DUP] = f->cfg.dup, [CORRUPT] = f->cfg.corrupt,
			     [DELAY] = f->cfg.delay };
	double u = rng_unit(rng_next(&f->rng));

	for (enum fault k = DROP; k <= DELAY; k++) {
		if (u < p[k])
			return k;
		u -= p[k];
	}
	return PASS;
}

/* Flips bit r (mod their number) of len bytes, leaving out byte 4, the
 * BTH's reserved byte, which the ICRC masks: any other bit is one the ICRC
 * covers. */
static void flip_bit(uint8_t *b, uint32_t len, uint64_t r)
{
	uint64_t bit = len > 4 ? r % ((uint64_t)(len - 1) * 8) : r % (len * 8);
	uint64_t byte = bit / 8;

	if (len > 4 && byte >= 4)
		byte++;
	b[byte] ^= (uint8_t)(1u << (bit % 8));
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

/* A delay slot free to hold a datagram, or -1 when every one is taken. */
static int delay_free_slot(const struct uroce_faults *f)
{
	for (int i = 0; i < UROCE_FAULT_DELAY_SLOTS; i++)
		if (f->delayed[i].state == DELAY_FREE)
			return i;
	return -1;
}

/* Holds p back in slot i with a copy of its bytes. */
static void delay_hold(struct uroce_faults *f, int i, const struct uroce_rxpkt *p)
{
	struct uroce_fault_delayed *d = &f->delayed[i];

	d->pkt = *p;
	memcpy(d->buf, p->data, p->len);
	d->pkt.data = d->buf;
	d->left = 1 + rng_next(&f->rng) % UROCE_FAULT_DELAY_MAX;
	d->state = DELAY_HELD;
}

/* One more datagram arrived: the delayed ones it was the last wait for
 * follow it, or the next one where the batch is full. */
static void delay_tick(struct uroce_faults *f, struct uroce_rxpkt *pkts,
		       int *w, int *r, int *end, int max)
{
	for (unsigned i = 0; i < UROCE_FAULT_DELAY_SLOTS; i++) {
		struct uroce_fault_delayed *d = &f->delayed[i];

		if (d->state != DELAY_HELD || --d->left > 0)
			continue;
		if (emit_extra(pkts, w, r, end, max, &d->pkt))
			d->state = DELAY_RELEASED;
		else
			d->left = 1;
	}
}

int uroce_faults_apply(struct uroce_faults *f, struct uroce_rxpkt *pkts,
		       int n, int max)
{
	struct uroce_nic *nic = container_of(f, struct uroce_nic, faults);
	int w = 0, r = 0, end = n;

	/* the batch that pointed at them has been handled */
	for (unsigned i = 0; i < UROCE_FAULT_DELAY_SLOTS; i++)
		if (f->delayed[i].state == DELAY_RELEASED)
			f->delayed[i].state = DELAY_FREE;

	while (r < end) {
		struct uroce_rxpkt p = pkts[r++];
		enum fault fault = draw(f);
		int slot;

		if (fault == DROP) {
			STAT_INC(nic, fault_drops);
			delay_tick(f, pkts, &w, &r, &end, max);
			continue;
		}
		/* with every slot taken, a datagram drawn for delay passes */
		if (fault == DELAY && p.len <= sizeof(f->delayed[0].buf) &&
		    (slot = delay_free_slot(f)) >= 0) {
			/* it waits for later arrivals, not this one */
			delay_tick(f, pkts, &w, &r, &end, max);
			delay_hold(f, slot, &p);
			STAT_INC(nic, fault_delays);
			continue;
		}
		if (fault == CORRUPT && p.len) {
			flip_bit(p.data, p.len, rng_next(&f->rng));
			STAT_INC(nic, fault_corrupts);
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
		delay_tick(f, pkts, &w, &r, &end, max);
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

enum uroce_tx_fault uroce_faults_tx(struct uroce_faults *f)
{
	struct uroce_nic *nic = container_of(f, struct uroce_nic, faults);
	double u = rng_unit(rng_mix(atomic_fetch_add(&f->tx_rng, RNG_STEP) +
				    RNG_STEP));

	if (u < f->cfg.tx_drop) {
		STAT_INC(nic, fault_tx_drops);
		return UROCE_TX_DROP;
	}
	if (u - f->cfg.tx_drop < f->cfg.tx_corrupt) {
		STAT_INC(nic, fault_tx_corrupts);
		return UROCE_TX_CORRUPT;
	}
	if (f->cfg.tx_busy > 0) {
		uint64_t now = uroce_now_ns();

		if (now < atomic_load(&f->tx_busy_until))
			return UROCE_TX_BUSY;
		if (u - f->cfg.tx_drop - f->cfg.tx_corrupt < f->cfg.tx_busy) {
			STAT_INC(nic, fault_tx_busy);
			atomic_store(&f->tx_busy_until, now + UROCE_FAULT_BUSY_NS);
			return UROCE_TX_BUSY;
		}
	}
	return UROCE_TX_PASS;
}

void uroce_faults_corrupt_tx(struct uroce_faults *f, struct uroce_txpkt *p)
{
	uint64_t r = rng_mix(atomic_fetch_add(&f->tx_rng, RNG_STEP) + RNG_STEP);
	struct iovec *icrc = &p->iov[p->niov - 1];
	uint32_t hdr_len = (uint32_t)p->iov[0].iov_len;
	/* the header bits less the BTH's masked byte, then the ICRC's 32 */
	uint64_t hdr_bits = (uint64_t)(hdr_len - 1) * 8;
	uint64_t bit = r % (hdr_bits + 32);

	if (bit < hdr_bits)
		flip_bit(p->hdr, hdr_len, bit);
	else
		((uint8_t *)icrc->iov_base)[icrc->iov_len - 4 + (bit - hdr_bits) / 8] ^=
			(uint8_t)(1u << (bit % 8));
}
