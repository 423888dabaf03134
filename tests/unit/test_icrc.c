/* ICRC: public vectors, ID recovery, masking, corruption, iovec splits. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "net/icrc.h"
#include "transport/hdr.h"
#include "transport/transport.h"

/* Deterministic so that a failure reproduces. */
static uint64_t rng_state;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state >> 32;
}

static void rnd_fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = rnd();
}

static int reset_rng(void **state)
{
	(void)state;
	rng_state = 0x9E3779B97F4A7C15ull;
	return 0;
}

struct addrs {
	struct in_addr s4, d4;
	struct in6_addr s6, d6;
};

static struct uroce_icrc_ip ip4(struct addrs *a, const char *src,
				const char *dst, uint16_t sport, uint16_t id,
				bool df)
{
	assert_int_equal(inet_pton(AF_INET, src, &a->s4), 1);
	assert_int_equal(inet_pton(AF_INET, dst, &a->d4), 1);
	return (struct uroce_icrc_ip){ .family = AF_INET, .src = &a->s4,
				       .dst = &a->d4, .sport = sport,
				       .dport = 4791, .ip_id = id, .df = df };
}

static struct uroce_icrc_ip ip6(struct addrs *a, const char *src,
				const char *dst, uint16_t sport)
{
	assert_int_equal(inet_pton(AF_INET6, src, &a->s6), 1);
	assert_int_equal(inet_pton(AF_INET6, dst, &a->d6), 1);
	return (struct uroce_icrc_ip){ .family = AF_INET6, .src = &a->s6,
				       .dst = &a->d6, .sport = sport,
				       .dport = 4791 };
}

/* ICRC over pkt[0 .. len-4), stored in its last 4 bytes. */
static uint32_t seal(const struct uroce_icrc_ip *ip, uint8_t *pkt, size_t len)
{
	struct iovec iov = { pkt, len - ICRC_LEN };
	uint32_t crc = uroce_icrc_compute(ip, &iov, 1);

	uroce_icrc_put(pkt + len - ICRC_LEN, crc);
	return crc;
}

/* What the receiver knows: no ID, no DF. */
static bool check(const struct uroce_icrc_ip *ip, const uint8_t *pkt,
		  size_t len, uint16_t *id)
{
	struct uroce_icrc_ip rx = *ip;

	rx.ip_id = 0x5A5A;
	rx.df = false;
	return uroce_icrc_check(&rx, pkt, len, id);
}

/*
 * gh:secdev/scapy test/contrib/roce.uts: a CNP captured on a ConnectX-4 Lx.
 * IPv4 45c2 003c 718c 4000 4011 9161 0a00 1101 0a00 1201, UDP 0000 12b7
 * 0028 0000.  TOS 0xc2, TTL 0x40, checksums and BECN all differ from the
 * masked values, so a match also shows that they are masked.
 */
static void test_vector_cnp_cx4lx(void **state)
{
	static const uint8_t cnp[] = {
		0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18,
		0x00, 0x00, 0x00, 0x00,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x82, 0xfd, 0x00, 0x2a,
	};
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "10.0.17.1", "10.0.18.1", 0,
				      0x718c, true);
	struct iovec iov = { (void *)cnp, sizeof(cnp) - ICRC_LEN };
	uint8_t wire[4];
	uint16_t id = 0;

	(void)state;
	uroce_icrc_put(wire, uroce_icrc_compute(&ip, &iov, 1));
	assert_memory_equal(wire, cnp + sizeof(cnp) - ICRC_LEN, 4);
	assert_true(check(&ip, cnp, sizeof(cnp), &id));
	assert_int_equal(id, 0x718c);
}

/*
 * gh:secdev/scapy test/contrib/roce.uts: UC SEND_ONLY, IPv4 192.168.0.7 to
 * itself, TOS 1, ID 1144, DF, UDP 49152 -> 4791, P_Key 0xffff, DestQP 211,
 * PSN 13571856, MigReq 1, PadCnt 2, 20 payload bytes (the last 2 are pad).
 */
static void test_vector_uc_send_only(void **state)
{
	static const uint8_t pkt[] = {
		0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3,
		0x00, 0xcf, 0x17, 0x10,
		0x46, 0x30, 0x81, 0x8b, 0xe2, 0x89, 0x35, 0xd9, 0x0e, 0x9a,
		0x95, 0x50, 0x54, 0x01, 0xbe, 0x88, 0x5e, 0x50, 0x00, 0x00,
		0x78, 0xf3, 0x53, 0xf3,
	};
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "192.168.0.7", "192.168.0.7", 49152,
				      1144, true);
	uint8_t wire[4];
	uint16_t id = 0;
	/* Headers and payload split as a sender would gather them. */
	struct iovec iov[2] = {
		{ (void *)pkt, BTH_LEN },
		{ (void *)(pkt + BTH_LEN), sizeof(pkt) - BTH_LEN - ICRC_LEN },
	};

	(void)state;
	assert_int_equal(pkt[1], 0x60);
	assert_int_equal(bth_migreq(pkt), 1);
	assert_int_equal(bth_pad(pkt), 2);
	uroce_icrc_put(wire, uroce_icrc_compute(&ip, iov, 2));
	assert_memory_equal(wire, pkt + sizeof(pkt) - ICRC_LEN, 4);
	assert_true(check(&ip, pkt, sizeof(pkt), &id));
	assert_int_equal(id, 1144);
}

/*
 * No public IPv6 capture is at hand: this answer was computed with Python's
 * zlib.crc32 over the masked layout (version 6, traffic class, flow label and
 * hop limit all ones), independently of the code under test.
 */
static void test_ipv6_known_answer(void **state)
{
	uint8_t pkt[] = {
		0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x12, 0x34,
		0x80, 0x00, 0x00, 0x07,
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
		0x6e, 0x8c, 0xb1, 0xbe,
	};
	struct addrs a;
	struct uroce_icrc_ip ip = ip6(&a, "2001:db8::1", "2001:db8::2", 0xC123);
	uint16_t id = 1;

	(void)state;
	assert_true(check(&ip, pkt, sizeof(pkt), &id));
	assert_int_equal(id, 0);
}

static void test_ipv6_round_trip(void **state)
{
	uint8_t pkt[1024 + BTH_LEN + ICRC_LEN];
	struct addrs a;
	struct uroce_icrc_ip ip = ip6(&a, "fd00::10", "fd00::20", 0xC001);
	uint32_t crc;

	(void)state;
	for (int i = 0; i < 100; i++) {
		size_t len = BTH_LEN + ICRC_LEN + rnd() % 1025;

		rnd_fill(pkt, len);
		crc = seal(&ip, pkt, len);
		assert_true(check(&ip, pkt, len, NULL));

		/* IPv6 has no ID or DF: they must not enter the CRC. */
		ip.ip_id = rnd();
		ip.df = !ip.df;
		assert_int_equal(seal(&ip, pkt, len), crc);

		/* Any bit but the masked BTH byte 4. */
		pkt[(4 + 1 + rnd() % (len - 1)) % len] ^= 1u << rnd() % 8;
		assert_false(check(&ip, pkt, len, NULL));
	}
}

static void test_ipv4_random_ids(void **state)
{
	uint8_t pkt[4096 + BTH_LEN + ICRC_LEN];
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "10.1.2.3", "10.4.5.6", 0xC0DE, 0,
				      true);

	(void)state;
	for (int i = 0; i < 1000; i++) {
		size_t len = BTH_LEN + ICRC_LEN + rnd() % 4097;
		uint16_t id;

		ip.ip_id = rnd();
		ip.df = rnd() & 1;
		id = ~ip.ip_id;
		rnd_fill(pkt, len);
		seal(&ip, pkt, len);
		assert_true(check(&ip, pkt, len, &id));
		assert_int_equal(id, ip.ip_id);
	}
}

/* The largest IPv4 datagram uses the highest power of x in the solver. */
static void test_ipv4_max_len(void **state)
{
	size_t len = 65535 - 20 - 8;
	uint8_t *pkt = malloc(len + 1);
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "10.1.2.3", "10.4.5.6", 0xC0DE,
				      0xFFFF, false);
	uint16_t id = 0;

	(void)state;
	assert_non_null(pkt);
	rnd_fill(pkt, len + 1);
	seal(&ip, pkt, len);
	assert_true(check(&ip, pkt, len, &id));
	assert_int_equal(id, 0xFFFF);

	/* One byte more cannot be an IPv4 UDP datagram. */
	seal(&ip, pkt, len + 1);
	assert_false(check(&ip, pkt, len + 1, &id));
	free(pkt);
}

static void test_df_clear(void **state)
{
	static const uint16_t ids[] = { 0, 1, 0x8000, 0x1234, 0xFFFF };
	uint8_t pkt[64];
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "192.0.2.1", "192.0.2.2", 0xC000, 0,
				      false);

	(void)state;
	rnd_fill(pkt, sizeof(pkt));
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		uint16_t id = ~ids[i];

		struct uroce_icrc_ip with_df = ip;
		uint32_t crc;

		ip.ip_id = with_df.ip_id = ids[i];
		with_df.df = true;
		crc = seal(&with_df, pkt, sizeof(pkt));
		assert_int_not_equal(seal(&ip, pkt, sizeof(pkt)), crc);
		assert_true(check(&ip, pkt, sizeof(pkt), &id));
		assert_int_equal(id, ids[i]);
	}
}

/* Native IDs (DF, below 64) are told apart from the rest. */
static void test_verdict(void **state)
{
	static const struct { uint16_t id; bool df; int want; } cases[] = {
		{ 0, true, UROCE_ICRC_OK },
		{ 63, true, UROCE_ICRC_OK },
		{ 64, true, UROCE_ICRC_OK_ANY_ID },
		{ 0x718c, true, UROCE_ICRC_OK_ANY_ID },
		{ 5, false, UROCE_ICRC_OK_ANY_ID },
	};
	uint8_t pkt[80];
	struct addrs a;

	(void)state;
	rnd_fill(pkt, sizeof(pkt));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct uroce_icrc_ip ip = ip4(&a, "192.0.2.1", "192.0.2.2",
					      0xC000, cases[i].id,
					      cases[i].df);
		struct uroce_icrc_ip rx = ip;
		uint16_t id = 0;

		seal(&ip, pkt, sizeof(pkt));
		rx.ip_id = 0;
		assert_int_equal(uroce_icrc_check(&rx, pkt, sizeof(pkt), &id),
				 cases[i].want);
		assert_int_equal(id, cases[i].id);
	}
}

/* A received datagram from src, sealed with IPv4 ID id (DF). */
static bool habit_rx(struct uroce_nic *nic, const char *src, uint16_t id)
{
	static uint8_t pkt[64];
	struct uroce_rxpkt rx = { .data = pkt, .len = sizeof(pkt) };
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, src, "192.0.2.9", 0xC000, id, true);

	rnd_fill(pkt, sizeof(pkt));
	seal(&ip, pkt, sizeof(pkt));
	rx.src.in4 = (struct sockaddr_in){ .sin_family = AF_INET,
					   .sin_port = htons(0xC000),
					   .sin_addr = a.s4 };
	rx.dst.in4 = (struct sockaddr_in){ .sin_family = AF_INET,
					   .sin_port = htons(4791),
					   .sin_addr = a.d4 };
	return uroce_udp_icrc_ok(nic, &rx);
}

/* A sender seen with native IDs gets only those, until eight datagrams in
 * a row hold only with another; one first seen with another gets any. */
static void test_id_habits(void **state)
{
	struct uroce_nic *nic = calloc(1, sizeof(*nic));

	(void)state;
	assert_non_null(nic);
	assert_true(habit_rx(nic, "192.0.2.1", 0));
	for (int i = 0; i < 7; i++)
		assert_false(habit_rx(nic, "192.0.2.1", 1000 + i));
	assert_true(habit_rx(nic, "192.0.2.1", 0));
	for (int i = 0; i < 7; i++)
		assert_false(habit_rx(nic, "192.0.2.1", 2000 + i));
	assert_true(habit_rx(nic, "192.0.2.1", 2007));
	assert_true(habit_rx(nic, "192.0.2.1", 3000));

	assert_true(habit_rx(nic, "192.0.2.2", 0x718c));
	assert_true(habit_rx(nic, "192.0.2.2", 0x718d));
	assert_true(habit_rx(nic, "192.0.2.2", 3));
	free(nic);
}

/* Every single-bit error outside the masked BTH byte 4 is caught. */
static void flip_every_bit(const struct uroce_icrc_ip *ip, uint8_t *pkt,
			   size_t len)
{
	seal(ip, pkt, len);
	for (size_t bit = 0; bit < 8 * len; bit++) {
		if (bit / 8 == 4)
			continue;
		pkt[bit / 8] ^= 1u << bit % 8;
		assert_false(check(ip, pkt, len, NULL));
		pkt[bit / 8] ^= 1u << bit % 8;
	}
	assert_true(check(ip, pkt, len, NULL));
}

static void test_flipped_bits_rejected(void **state)
{
	uint8_t pkt[96];
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "198.51.100.7", "203.0.113.9",
				      0xC555, 0, true);
	struct uroce_icrc_ip bad;

	(void)state;
	rnd_fill(pkt, sizeof(pkt));
	flip_every_bit(&ip, pkt, sizeof(pkt));
	ip.ip_id = 0xBEEF;
	flip_every_bit(&ip, pkt, sizeof(pkt));
	ip = ip6(&a, "fd00::1", "fd00::2", 0xC555);
	flip_every_bit(&ip, pkt, sizeof(pkt));

	/* Header fields the receiver supplies. */
	ip = ip4(&a, "198.51.100.7", "203.0.113.9", 0xC555, 0x4242, true);
	seal(&ip, pkt, sizeof(pkt));
	assert_true(check(&ip, pkt, sizeof(pkt), NULL));
	bad = ip;
	bad.sport ^= 0x0100;
	assert_false(check(&bad, pkt, sizeof(pkt), NULL));
	bad = ip;
	bad.dport ^= 1;
	assert_false(check(&bad, pkt, sizeof(pkt), NULL));
	a.s4.s_addr ^= htonl(0x00000080);
	assert_false(check(&ip, pkt, sizeof(pkt), NULL));
	a.s4.s_addr ^= htonl(0x00000080);
	a.d4.s_addr ^= htonl(0x01000000);
	assert_false(check(&ip, pkt, sizeof(pkt), NULL));
	a.d4.s_addr ^= htonl(0x01000000);
	assert_true(check(&ip, pkt, sizeof(pkt), NULL));
}

/*
 * TOS/TTL/IP checksum/UDP checksum are not inputs at all (the CNP vector
 * shows they are masked); FECN/BECN/resv6 in BTH byte 4 are in the data and
 * must not matter either, e.g. when a switch marks ECN-CE as FECN.
 */
static void test_masked_bth_byte4(void **state)
{
	static const uint8_t vals[] = { 0x00, 0x80, 0x40, 0x3F, 0xFF };
	uint8_t pkt[48];
	struct addrs a;
	struct uroce_icrc_ip ip4v = ip4(&a, "10.0.0.1", "10.0.0.2", 0xC001,
					0x77, true);
	struct uroce_icrc_ip ip6v = ip6(&a, "fd00::1", "fd00::2", 0xC001);
	uint32_t c4, c6;
	struct iovec iov = { pkt, sizeof(pkt) - ICRC_LEN };

	(void)state;
	rnd_fill(pkt, sizeof(pkt));
	c4 = seal(&ip4v, pkt, sizeof(pkt));
	c6 = uroce_icrc_compute(&ip6v, &iov, 1);
	for (size_t i = 0; i < sizeof(vals); i++) {
		pkt[4] = vals[i];
		assert_int_equal(uroce_icrc_compute(&ip4v, &iov, 1), c4);
		assert_int_equal(uroce_icrc_compute(&ip6v, &iov, 1), c6);
		assert_true(check(&ip4v, pkt, sizeof(pkt), NULL));
	}
}

static void test_multi_iovec(void **state)
{
	uint8_t pkt[300];
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "10.9.8.7", "10.6.5.4", 0xC321,
				      0x1357, true);
	struct iovec one = { pkt, sizeof(pkt) }, iov[5];
	uint32_t want;

	(void)state;
	rnd_fill(pkt, sizeof(pkt));
	want = uroce_icrc_compute(&ip, &one, 1);

	/* Every two-way split, including inside the BTH and empty halves. */
	for (size_t cut = 0; cut <= sizeof(pkt); cut++) {
		iov[0] = (struct iovec){ pkt, cut };
		iov[1] = (struct iovec){ pkt + cut, sizeof(pkt) - cut };
		assert_int_equal(uroce_icrc_compute(&ip, iov, 2), want);
	}
	/* Random splits into five pieces, some empty. */
	for (int i = 0; i < 200; i++) {
		size_t cuts[4], off = 0;

		for (int j = 0; j < 4; j++)
			cuts[j] = rnd() % (sizeof(pkt) + 1);
		for (int j = 0; j < 4; j++)	/* sort the 4 cut points */
			for (int k = j + 1; k < 4; k++)
				if (cuts[k] < cuts[j]) {
					size_t t = cuts[j];

					cuts[j] = cuts[k];
					cuts[k] = t;
				}
		for (int j = 0; j < 5; j++) {
			size_t end = j < 4 ? cuts[j] : sizeof(pkt);

			iov[j] = (struct iovec){ pkt + off, end - off };
			off = end;
		}
		assert_int_equal(uroce_icrc_compute(&ip, iov, 5), want);
	}
}

static void test_malformed(void **state)
{
	uint8_t pkt[BTH_LEN + ICRC_LEN];
	struct addrs a;
	struct uroce_icrc_ip ip = ip4(&a, "10.0.0.1", "10.0.0.2", 0xC001, 0,
				      true);

	(void)state;
	rnd_fill(pkt, sizeof(pkt));
	seal(&ip, pkt, sizeof(pkt));
	assert_true(check(&ip, pkt, sizeof(pkt), NULL));
	for (size_t len = 0; len < sizeof(pkt); len++)
		assert_false(check(&ip, pkt, len, NULL));
	ip.family = AF_UNIX;
	assert_false(check(&ip, pkt, sizeof(pkt), NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_vector_cnp_cx4lx, reset_rng),
		cmocka_unit_test_setup(test_vector_uc_send_only, reset_rng),
		cmocka_unit_test_setup(test_ipv6_known_answer, reset_rng),
		cmocka_unit_test_setup(test_ipv6_round_trip, reset_rng),
		cmocka_unit_test_setup(test_ipv4_random_ids, reset_rng),
		cmocka_unit_test_setup(test_ipv4_max_len, reset_rng),
		cmocka_unit_test_setup(test_df_clear, reset_rng),
		cmocka_unit_test_setup(test_verdict, reset_rng),
		cmocka_unit_test_setup(test_id_habits, reset_rng),
		cmocka_unit_test_setup(test_flipped_bits_rejected, reset_rng),
		cmocka_unit_test_setup(test_masked_bth_byte4, reset_rng),
		cmocka_unit_test_setup(test_multi_iovec, reset_rng),
		cmocka_unit_test_setup(test_malformed, reset_rng),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
