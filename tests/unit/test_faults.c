/* Fault injector: determinism, rates, and that what it delivers is intact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_passthrough),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_rates),
		cmocka_unit_test(test_accounting),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
