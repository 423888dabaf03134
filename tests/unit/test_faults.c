/* Fault injector: determinism, rates, and that what it delivers is intact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "uroce.h"

enum { MAXB = 16, PKT_MAX = 80 };

/* Stands in for the backend: its buffers are overwritten by every batch,
 * as recvmmsg would. */
static uint8_t backend[MAXB][PKT_MAX];

static uint32_t pkt_len(uint32_t id)
{
	return 8 + id % (PKT_MAX - 8);
}

static void fill_batch(struct uroce_rxpkt *pkts, int n, uint32_t first_id)
{
	memset(backend, 0xEE, sizeof(backend));
	for (int i = 0; i < n; i++) {
		uint32_t id = first_id + i, len = pkt_len(id);

		memset(&pkts[i], 0, sizeof(pkts[i]));
		memcpy(backend[i], &id, sizeof(id));
		for (uint32_t k = sizeof(id); k < len; k++)
			backend[i][k] = (uint8_t)(id * 31 + k);
		pkts[i].data = backend[i];
		pkts[i].len = len;
	}
}

/* The id of a delivered datagram, after checking its bytes and length. */
static uint32_t check_pkt(const struct uroce_rxpkt *p)
{
	uint32_t id;

	memcpy(&id, p->data, sizeof(id));
	assert_int_equal(p->len, pkt_len(id));
	for (uint32_t k = sizeof(id); k < p->len; k++)
		assert_int_equal(p->data[k], (uint8_t)(id * 31 + k));
	return id;
}

struct run {
	uint32_t ids[4096];
	unsigned n;
};

/* Feeds total datagrams in batches of varying size and records the
 * delivered ids.  When tight, every third batch is full, so duplicates and
 * releases also meet a batch without room; otherwise there is always room. */
static void run_faults(struct uroce_nic *nic, const struct uroce_faults_cfg *cfg,
		       uint32_t total, bool tight, struct run *out)
{
	struct uroce_rxpkt pkts[MAXB];
	uint32_t id = 0;

	uroce_faults_init(&nic->faults, cfg);
	memset(&nic->stats, 0, sizeof(nic->stats));
	out->n = 0;
	for (unsigned b = 0; id < total; b++) {
		int n = tight ? 1 + b * 7 % MAXB : 1 + b % (MAXB / 2 - 1);
		int max = tight && b % 3 == 0 ? n : MAXB;
		int got;

		if ((uint32_t)n > total - id)
			n = total - id;
		fill_batch(pkts, n, id);
		id += n;
		got = uroce_faults_apply(&nic->faults, pkts, n, max);
		assert_true(got >= 0 && got <= max);
		for (int i = 0; i < got; i++) {
			uint32_t d = check_pkt(&pkts[i]);

			assert_true(d < total);
			if (out->n < ARRAY_SIZE(out->ids))
				out->ids[out->n] = d;
			out->n++;
		}
	}
}

static struct uroce_nic *new_nic(void)
{
	struct uroce_nic *nic = calloc(1, sizeof(*nic));

	assert_non_null(nic);
	return nic;
}

static void test_passthrough(void **state)
{
	struct uroce_faults_cfg cfg = { .seed = 7, .enabled = true };
	struct uroce_nic *nic = new_nic();
	static struct run r;

	(void)state;
	run_faults(nic, &cfg, 1000, true, &r);
	assert_int_equal(r.n, 1000);
	for (unsigned i = 0; i < r.n; i++)
		assert_int_equal(r.ids[i], i);
	assert_int_equal(nic->stats.fault_drops, 0);
	assert_int_equal(nic->stats.fault_dups, 0);
	assert_int_equal(nic->stats.fault_reorders, 0);
	free(nic);
}

static void test_deterministic(void **state)
{
	struct uroce_faults_cfg cfg = {
		.drop = 0.1, .dup = 0.1, .reorder = 0.1, .seed = 7,
		.enabled = true,
	};
	struct uroce_nic *nic = new_nic();
	static struct run a, b, c;

	(void)state;
	run_faults(nic, &cfg, 2000, true, &a);
	run_faults(nic, &cfg, 2000, true, &b);
	assert_int_equal(a.n, b.n);
	assert_memory_equal(a.ids, b.ids, a.n * sizeof(a.ids[0]));

	cfg.seed = 8;
	run_faults(nic, &cfg, 2000, true, &c);
	assert_true(a.n != c.n ||
		    memcmp(a.ids, c.ids, a.n * sizeof(a.ids[0])) != 0);
	free(nic);
}

static void assert_near(unsigned long got, double want)
{
	assert_true(got > want * 0.8 && got < want * 1.2);
}

static void test_rates(void **state)
{
	struct uroce_faults_cfg cfg = {
		.drop = 0.05, .dup = 0.04, .reorder = 0.03, .seed = 1,
		.enabled = true,
	};
	struct uroce_nic *nic = new_nic();
	const uint32_t total = 40000;
	static struct run r;

	(void)state;
	run_faults(nic, &cfg, total, false, &r);
	assert_near(nic->stats.fault_drops, total * cfg.drop);
	assert_near(nic->stats.fault_dups, total * cfg.dup);
	/* refused while another datagram is held: rarely */
	assert_near(nic->stats.fault_reorders, total * cfg.reorder);
	free(nic);
}

/* Everything not dropped arrives, duplicates twice, with its bytes intact
 * (check_pkt) even though the backend reuses its buffers every batch; a
 * held datagram arrives after the one that overtook it. */
static void test_accounting(void **state)
{
	struct uroce_faults_cfg cfg = {
		.drop = 0.2, .dup = 0.25, .reorder = 0.3, .seed = 99,
		.enabled = true,
	};
	struct uroce_nic *nic = new_nic();
	const uint32_t total = 3000;
	static struct run r;
	static unsigned seen[3000];
	unsigned delivered = 0, twice = 0, inversions = 0;

	(void)state;
	run_faults(nic, &cfg, total, true, &r);
	assert_true(r.n <= ARRAY_SIZE(r.ids));
	for (unsigned i = 0; i < r.n; i++) {
		seen[r.ids[i]]++;
		if (i && r.ids[i] < r.ids[i - 1])
			inversions++;
	}
	for (uint32_t id = 0; id < total; id++) {
		assert_true(seen[id] <= 2);
		delivered += seen[id] > 0;
		twice += seen[id] == 2;
	}
	assert_int_equal(twice, nic->stats.fault_dups);
	assert_int_equal(delivered + nic->stats.fault_drops +
				 nic->faults.held_valid,
			 total);
	assert_int_equal(r.n, delivered + twice);
	assert_true(nic->stats.fault_reorders > 0);
	assert_true(inversions > 0 && inversions <= nic->stats.fault_reorders);
	free(nic);
}

/* Every corrupted datagram arrives with exactly one bit flipped, never in
 * byte 4 (the BTH's reserved byte, which the ICRC masks); the others arrive
 * intact. */
static void test_corrupt(void **state)
{
	struct uroce_faults_cfg cfg = { .corrupt = 0.2, .seed = 5, .rx = true };
	struct uroce_nic *nic = new_nic();
	struct uroce_rxpkt pkts[MAXB];
	uint8_t want[MAXB][PKT_MAX];
	unsigned flipped = 0;

	(void)state;
	uroce_faults_init(&nic->faults, &cfg);
	for (uint32_t id = 0; id < 2000; id += MAXB) {
		int got;

		fill_batch(pkts, MAXB, id);
		memcpy(want, backend, sizeof(want));
		got = uroce_faults_apply(&nic->faults, pkts, MAXB, MAXB);
		assert_int_equal(got, MAXB);
		for (int i = 0; i < MAXB; i++) {
			unsigned bits = 0;

			assert_ptr_equal(pkts[i].data, backend[i]);
			for (uint32_t k = 0; k < pkts[i].len; k++) {
				uint8_t d = pkts[i].data[k] ^ want[i][k];

				assert_true(k != 4 || d == 0);
				bits += (unsigned)__builtin_popcount(d);
			}
			assert_true(bits <= 1);
			flipped += bits;
		}
	}
	assert_int_equal(flipped, nic->stats.fault_corrupts);
	assert_near(flipped, 2000 * cfg.corrupt);
	free(nic);
}

/* A delayed datagram arrives intact after 1..UROCE_FAULT_DELAY_MAX later
 * ones (while the backend reuses its buffers), at most
 * UROCE_FAULT_DELAY_SLOTS are held at once, and none is lost. */
static void test_delay(void **state)
{
	struct uroce_faults_cfg cfg = {
		.delay = 0.1, .drop = 0.05, .seed = 3, .rx = true,
	};
	struct uroce_nic *nic = new_nic();
	const uint32_t total = 3000;
	static struct run r;
	static unsigned seen[3000];
	unsigned late = 0, held = 0;

	(void)state;
	run_faults(nic, &cfg, total, true, &r);
	assert_true(r.n <= ARRAY_SIZE(r.ids));
	for (unsigned i = 0; i < r.n; i++) {
		uint32_t id = r.ids[i];
		unsigned later = 0;

		seen[id]++;
		/* arrivals after id before it came out: ids above it seen
		 * earlier, plus the dropped ones, so a bound from above */
		for (unsigned k = 0; k < i; k++)
			later += r.ids[k] > id;
		if (later > 0)
			late++;
		assert_true(later <= UROCE_FAULT_DELAY_MAX + UROCE_FAULT_DELAY_SLOTS);
	}
	for (unsigned i = 0; i < UROCE_FAULT_DELAY_SLOTS; i++)
		held += nic->faults.delayed[i].state == DELAY_HELD;
	for (uint32_t id = 0; id < total; id++)
		assert_true(seen[id] <= 1);
	assert_int_equal(r.n + nic->stats.fault_drops + held, total);
	assert_true(late > 0 && late <= nic->stats.fault_delays);
	assert_true(nic->stats.fault_delays > total * cfg.delay / 4);
	free(nic);
}

/* The send side: rates, and a corrupted packet differs from what it was
 * in one bit of its headers or ICRC, never in the payload. */
static void test_tx(void **state)
{
	struct uroce_faults_cfg cfg = {
		.tx_drop = 0.05, .tx_corrupt = 0.03, .seed = 11, .tx = true,
	};
	struct uroce_nic *nic = new_nic();
	uint8_t payload[100], payload_was[100];
	const unsigned total = 40000;
	unsigned drops = 0, corrupts = 0;

	(void)state;
	uroce_faults_init(&nic->faults, &cfg);
	for (unsigned i = 0; i < total; i++) {
		enum uroce_tx_fault f = uroce_faults_tx(&nic->faults);

		drops += f == UROCE_TX_DROP;
		corrupts += f == UROCE_TX_CORRUPT;
	}
	assert_int_equal(drops, nic->stats.fault_tx_drops);
	assert_int_equal(corrupts, nic->stats.fault_tx_corrupts);
	assert_near(drops, total * cfg.tx_drop);
	assert_near(corrupts, total * cfg.tx_corrupt);

	for (unsigned i = 0; i < 500; i++) {
		struct uroce_txpkt p, was;
		unsigned bits = 0;

		memset(&p, 0, sizeof(p));
		for (unsigned k = 0; k < sizeof(p.hdr); k++)
			p.hdr[k] = (uint8_t)(k * 7 + i);
		for (unsigned k = 0; k < sizeof(payload); k++)
			payload[k] = (uint8_t)(k + i);
		memcpy(payload_was, payload, sizeof(payload));
		memset(p.trailer, 0x5a, sizeof(p.trailer));
		p.iov[0] = (struct iovec){ p.hdr, 12 + i % 40 };
		p.iov[1] = (struct iovec){ payload, sizeof(payload) - i % 4 };
		p.iov[2] = (struct iovec){ p.trailer, i % 4 + 4 };
		p.niov = 3;
		was = p;
		uroce_faults_corrupt_tx(&nic->faults, &p);
		assert_memory_equal(payload, payload_was, sizeof(payload));
		assert_int_equal(p.hdr[4], was.hdr[4]);
		for (unsigned k = 0; k < sizeof(p.hdr); k++)
			bits += (unsigned)__builtin_popcount(p.hdr[k] ^ was.hdr[k]);
		for (unsigned k = 0; k < sizeof(p.trailer); k++)
			bits += (unsigned)__builtin_popcount(p.trailer[k] ^
							     was.trailer[k]);
		assert_int_equal(bits, 1);
		/* nothing flips in the pad ahead of the ICRC, or past the
		 * header */
		for (unsigned k = 0; k < i % 4; k++)
			assert_int_equal(p.trailer[k], 0x5a);
		for (unsigned k = (unsigned)p.iov[0].iov_len; k < sizeof(p.hdr); k++)
			assert_int_equal(p.hdr[k], was.hdr[k]);
	}
	free(nic);
}

/* What UROCE_FAULTS parses to; the configuration is read once per
 * process, so each case runs in a child. */
struct faults_case {
	const char *value;
	bool accepted;
	struct uroce_faults_cfg want;
};

static void test_config(void **state)
{
	static const struct faults_case cases[] = {
		{ "drop=0.01,dup=0.02,reorder=0.03,corrupt=0.04,delay=0.05,"
		  "tx_drop=0.06,tx_corrupt=0.07,seed=9", true,
		  { .drop = 0.01, .dup = 0.02, .reorder = 0.03, .corrupt = 0.04,
		    .delay = 0.05, .tx_drop = 0.06, .tx_corrupt = 0.07,
		    .seed = 9, .rx = true, .tx = true, .enabled = true } },
		{ "tx_drop=0.5", true,
		  { .tx_drop = 0.5, .seed = 1, .tx = true, .enabled = true } },
		{ " corrupt = 1 ", true,
		  { .corrupt = 1, .seed = 1, .rx = true, .enabled = true } },
		{ "delay=0", true, { .seed = 1 } },
		{ "corrupt=1.5", false, { .seed = 1 } },
		{ "drop=0.6,delay=0.6", false, { .seed = 1 } },
		{ "tx_drop=0.6,tx_corrupt=0.6", false, { .seed = 1 } },
		{ "tx_delay=0.1", false, { .seed = 1 } },
	};

	(void)state;
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct faults_case *c = &cases[i];
		pid_t pid = fork();
		int status;

		assert_true(pid >= 0);
		if (pid == 0) {
			const struct uroce_faults_cfg *f;

			unsetenv("UROCE_CONFIG");
			setenv("UROCE_FAULTS", c->value, 1);
			f = &uroce_config()->faults;
			_exit(!(f->drop == c->want.drop && f->dup == c->want.dup &&
				f->reorder == c->want.reorder &&
				f->corrupt == c->want.corrupt &&
				f->delay == c->want.delay &&
				f->tx_drop == c->want.tx_drop &&
				f->tx_corrupt == c->want.tx_corrupt &&
				f->seed == c->want.seed && f->rx == c->want.rx &&
				f->tx == c->want.tx &&
				f->enabled == c->want.enabled));
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			fail_msg("UROCE_FAULTS=\"%s\": not parsed as expected "
				 "(%s)", c->value,
				 c->accepted ? "accepted" : "refused");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_passthrough),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_rates),
		cmocka_unit_test(test_accounting),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_delay),
		cmocka_unit_test(test_tx),
		cmocka_unit_test(test_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
