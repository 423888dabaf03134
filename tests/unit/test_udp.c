/*
 * UDP backend: two NICs (as two processes would be) share one port on
 * loopback; datagrams reach the NIC owning their DestQP directly or through
 * forwarding, with addresses and contents intact.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "uroce.h"

enum { BTH = 16, MAX_RECS = 512, WAIT_MS = 2000 };

static struct uroce_config cfg;
static struct uroce_nic *nic[2];
static bool have_v6;

struct rec {
	int nic;
	uint8_t data[BTH];
	uint32_t len;
	union uroce_sockaddr src, dst;
};

static struct rec recs[MAX_RECS];
static int nrecs;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ull + ts.tv_nsec / 1000000;
}

static unsigned long stat_sum(size_t off)
{
	unsigned long sum = 0;

	for (int i = 0; i < 2; i++)
		sum += atomic_load((atomic_ulong *)((char *)&nic[i]->stats + off));
	return sum;
}
#define STAT_SUM(f) stat_sum(offsetof(struct uroce_stats, f))

/* Receives on both NICs until `want` datagrams were returned or `cond`
 * (when given) holds, bounded by WAIT_MS. */
static void pump(int want, bool (*cond)(void))
{
	uint64_t end = now_ms() + WAIT_MS;
	struct uroce_rxpkt pkts[UROCE_RX_BATCH];

	nrecs = 0;
	while (now_ms() < end) {
		for (int i = 0; i < 2; i++) {
			bool drained;
			int n = nic[i]->net->recv(nic[i], pkts, UROCE_RX_BATCH,
						  &drained);

			assert_true(n >= 0);
			for (int k = 0; k < n; k++) {
				struct rec *r = &recs[nrecs++];

				assert_true(nrecs <= MAX_RECS);
				r->nic = i;
				r->len = pkts[k].len;
				memcpy(r->data, pkts[k].data,
				       pkts[k].len < BTH ? pkts[k].len : BTH);
				r->src = pkts[k].src;
				r->dst = pkts[k].dst;
			}
		}
		if (cond ? cond() : nrecs >= want)
			return;
		poll(NULL, 0, 1);
	}
}

static void fake_bth(uint8_t *b, uint32_t qpn, uint8_t tag)
{
	memset(b, 0, BTH);
	b[5] = qpn >> 16;
	b[6] = qpn >> 8;
	b[7] = qpn;
	b[12] = tag;
}

static void addr(union uroce_sockaddr *a, int family, const char *ip,
		 uint16_t port)
{
	memset(a, 0, sizeof(*a));
	a->sa.sa_family = family;
	if (family == AF_INET) {
		a->in4.sin_port = htons(port);
		assert_int_equal(inet_pton(AF_INET, ip, &a->in4.sin_addr), 1);
	} else {
		a->in6.sin6_port = htons(port);
		assert_int_equal(inet_pton(AF_INET6, ip, &a->in6.sin6_addr), 1);
	}
}

static int send_one(struct uroce_nic *from, int tx, const union uroce_sockaddr *dst,
		    const union uroce_sockaddr *src, uint32_t qpn, uint8_t tag)
{
	struct uroce_txpkt p = { .dst = dst, .src = src, .len = BTH, .niov = 1 };

	fake_bth(p.hdr, qpn, tag);
	p.iov[0] = (struct iovec){ .iov_base = p.hdr, .iov_len = BTH };
	return from->net->xmit(from, tx, &p, 1);
}

static struct rec *find_tag(uint8_t tag)
{
	for (int i = 0; i < nrecs; i++)
		if (recs[i].data[12] == tag)
			return &recs[i];
	return NULL;
}

static int setup(void **state)
{
	(void)state;
	cfg.udp_port = 47910 + getpid() % 1000;
	for (int i = 0; i < 2; i++) {
		nic[i] = calloc(1, sizeof(*nic[i]));
		if (!nic[i])
			return -1;
		nic[i]->cfg = &cfg;
		nic[i]->net = &uroce_net_udp;
		if (uroce_net_udp.open(nic[i]) < 0)
			return -1;
	}
	/* the host has IPv6 if ::1 can be bound */
	struct sockaddr_in6 lo6 = { .sin6_family = AF_INET6,
				    .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	int fd6 = socket(AF_INET6, SOCK_DGRAM, 0);
	have_v6 = fd6 >= 0 && !bind(fd6, (struct sockaddr *)&lo6, sizeof(lo6));
	if (fd6 >= 0)
		close(fd6);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		uroce_net_udp.close(nic[i]);
		assert_null(nic[i]->net_priv);
		free(nic[i]);
	}
	return 0;
}

static void test_slots(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++)
		assert_true(nic[i]->slot >= 1 && nic[i]->slot < UROCE_MAX_SLOTS);
	assert_int_not_equal(nic[0]->slot, nic[1]->slot);
}

/* Each source port is one flow, which the kernel hashes to one of the two
 * sockets; one datagram per flow goes to each NIC, so exactly one of the
 * two needs forwarding whichever socket the flow lands on. */
static void check_delivery(int family, const char *ip, const char *src_ip,
			   uint16_t sport_base)
{
	enum { FLOWS = 4, ROUNDS = 4 };
	union uroce_sockaddr dst, src;
	unsigned long fwd0 = STAT_SUM(rx_forwarded);

	addr(&dst, family, ip, cfg.udp_port);
	addr(&src, family, src_ip, 0);
	for (int round = 0; round < ROUNDS; round++) {
		int tx[FLOWS];
		uint16_t sport[FLOWS];

		/* a few flows at a time: the forwarding socket's queue is
		 * short (net.unix.max_dgram_qlen) */
		for (int f = 0; f < FLOWS; f++) {
			sport[f] = sport_base + round * FLOWS + f;
			tx[f] = nic[0]->net->tx_open(nic[0], family, sport[f]);
			assert_true(tx[f] >= 0);
			for (int to = 0; to < 2; to++) {
				uint32_t qpn = nic[to]->slot << UROCE_QPN_SLOT_SHIFT | 5;

				assert_int_equal(send_one(nic[0], tx[f], &dst, &src,
							  qpn, f * 2 + to), 1);
			}
		}
		pump(2 * FLOWS, NULL);
		assert_int_equal(nrecs, 2 * FLOWS);
		for (int f = 0; f < FLOWS; f++) {
			for (int to = 0; to < 2; to++) {
				struct rec *r = find_tag(f * 2 + to);
				uint32_t qpn = nic[to]->slot << UROCE_QPN_SLOT_SHIFT | 5;
				uint8_t want[BTH];

				assert_non_null(r);
				assert_int_equal(r->nic, to);
				assert_int_equal(r->len, BTH);
				fake_bth(want, qpn, f * 2 + to);
				assert_memory_equal(r->data, want, BTH);
				assert_int_equal(r->src.sa.sa_family, family);
				assert_int_equal(r->dst.sa.sa_family, family);
				if (family == AF_INET) {
					assert_int_equal(ntohs(r->src.in4.sin_port), sport[f]);
					assert_int_equal(r->src.in4.sin_addr.s_addr,
							 src.in4.sin_addr.s_addr);
					assert_int_equal(ntohs(r->dst.in4.sin_port), cfg.udp_port);
					assert_int_equal(r->dst.in4.sin_addr.s_addr,
							 dst.in4.sin_addr.s_addr);
				} else {
					assert_int_equal(ntohs(r->src.in6.sin6_port), sport[f]);
					assert_memory_equal(&r->src.in6.sin6_addr,
							    &src.in6.sin6_addr, 16);
					assert_int_equal(ntohs(r->dst.in6.sin6_port), cfg.udp_port);
					assert_memory_equal(&r->dst.in6.sin6_addr,
							    &dst.in6.sin6_addr, 16);
				}
			}
		}
		for (int f = 0; f < FLOWS; f++)
			nic[0]->net->tx_close(nic[0], tx[f]);
	}
	assert_int_equal(STAT_SUM(rx_forwarded) - fwd0, FLOWS * ROUNDS);
	assert_int_equal(STAT_SUM(rx_forward_failed), 0);
}

static void test_ipv4(void **state)
{
	(void)state;
	check_delivery(AF_INET, "127.0.0.1", "127.0.0.1", 0xC000 | 0x100);
	/* the source address follows the packet, not the routing table */
	check_delivery(AF_INET, "127.0.0.3", "127.0.0.2", 0xC000 | 0x200);
}

static void test_ipv6(void **state)
{
	(void)state;
	if (!have_v6)
		skip();
	check_delivery(AF_INET6, "::1", "::1", 0xC000 | 0x300);
}


/* rxe and RoCE hardware send IPv6 datagrams with a zero UDP checksum. */
static void test_ipv6_zero_checksum(void **state)
{
	union uroce_sockaddr dst;
	uint8_t bth[BTH];
	int one = 1, fd;

	(void)state;
	if (!have_v6)
		skip();
	fd = socket(AF_INET6, SOCK_DGRAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_TX, &one,
				    sizeof(one)), 0);
	addr(&dst, AF_INET6, "::1", cfg.udp_port);
	fake_bth(bth, 7, 42);	/* slot 0: served by whichever NIC gets it */
	assert_int_equal(sendto(fd, bth, sizeof(bth), 0, &dst.sa,
				sizeof(dst.in6)), sizeof(bth));
	close(fd);
	pump(1, NULL);
	assert_int_equal(nrecs, 1);
	assert_memory_equal(recs[0].data, bth, sizeof(bth));
}

static unsigned long malformed_want;
static bool malformed_reached(void)
{
	return STAT_SUM(rx_malformed) >= malformed_want;
}

static void test_short_datagram(void **state)
{
	union uroce_sockaddr dst;
	unsigned long before = STAT_SUM(rx_malformed);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	(void)state;
	assert_true(fd >= 0);
	addr(&dst, AF_INET, "127.0.0.1", cfg.udp_port);
	assert_int_equal(sendto(fd, "0123456789a", 11, 0, &dst.sa,
				sizeof(dst.in4)), 11);
	close(fd);
	malformed_want = before + 1;
	pump(0, malformed_reached);
	assert_int_equal(nrecs, 0);
	assert_int_equal(STAT_SUM(rx_malformed), malformed_want);
}

static unsigned long failed_want;
static bool forward_failed_reached(void)
{
	return STAT_SUM(rx_forward_failed) >= failed_want;
}

/* A datagram for a slot no process owns is dropped and counted. */
static void test_no_owner(void **state)
{
	union uroce_sockaddr dst, src;
	unsigned slot = 1;
	int tx;

	(void)state;
	while (slot == nic[0]->slot || slot == nic[1]->slot)
		slot++;
	failed_want = STAT_SUM(rx_forward_failed) + 1;
	addr(&dst, AF_INET, "127.0.0.1", cfg.udp_port);
	addr(&src, AF_INET, "127.0.0.1", 0);
	tx = nic[0]->net->tx_open(nic[0], AF_INET, 0xC000 | 0x400);
	assert_true(tx >= 0);
	assert_int_equal(send_one(nic[0], tx, &dst, &src,
				  slot << UROCE_QPN_SLOT_SHIFT | 1, 0), 1);
	pump(0, forward_failed_reached);
	assert_int_equal(nrecs, 0);
	assert_int_equal(STAT_SUM(rx_forward_failed), failed_want);
	nic[0]->net->tx_close(nic[0], tx);
}

static socklen_t owner_name(struct sockaddr_un *un, unsigned slot)
{
	int len;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	len = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		       "uroce2.%u.%u.%u", cfg.udp_port, (unsigned)getuid(), slot);
	return offsetof(struct sockaddr_un, sun_path) + 1 + len;
}


/* Whatever a local process sends over a forwarding connection, it is checked
 * before use: short, truncated-header and garbage datagrams are dropped.
 * (An empty one would read as the end of the connection.) */
static void test_forward_garbage(void **state)
{
	static uint8_t junk[UROCE_RX_BUF + 256];
	const size_t sizes[] = { 1, 11, 40, 63, 64, 75, 76, 200,
				 sizeof(junk) - 100, sizeof(junk) };
	struct sockaddr_un un;
	socklen_t len = owner_name(&un, nic[1]->slot);
	unsigned long before = STAT_SUM(rx_malformed);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&un, len), 0);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 7 + 3);
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++)
		assert_int_equal(send(fd, junk, sizes[i], 0),
				 (ssize_t)sizes[i]);
	close(fd);
	malformed_want = before + ARRAY_SIZE(sizes);
	pump(0, malformed_reached);
	assert_int_equal(nrecs, 0);
	assert_int_equal(STAT_SUM(rx_malformed), malformed_want);
}

static unsigned long bad_source_want;
static bool bad_source_reached(void)
{
	return STAT_SUM(rx_bad_source) >= bad_source_want;
}

/* Forwarded datagrams are accepted only from our own user. */
static void test_forward_other_user(void **state)
{
	struct sockaddr_un un;
	socklen_t len = owner_name(&un, nic[1]->slot);
	uint8_t buf[128] = { 0 };
	int status;
	pid_t pid;

	(void)state;
	if (getuid() != 0)
		skip();	/* needs to become another user */
	bad_source_want = STAT_SUM(rx_bad_source) + 1;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd;

		if (setuid(65534))
			_exit(2);
		/* the connection is refused by credentials once accepted */
		fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		_exit(fd >= 0 && !connect(fd, (struct sockaddr *)&un, len) &&
		      send(fd, buf, sizeof(buf), 0) > 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	pump(0, bad_source_reached);
	assert_int_equal(nrecs, 0);
	assert_int_equal(STAT_SUM(rx_bad_source), bad_source_want);
}

static void test_bad_handle(void **state)
{
	union uroce_sockaddr dst, src;
	unsigned long errs = STAT_SUM(tx_errors);
	int tx;

	(void)state;
	addr(&dst, AF_INET, "127.0.0.1", cfg.udp_port);
	addr(&src, AF_INET, "127.0.0.1", 0);
	assert_int_equal(send_one(nic[0], -1, &dst, &src, 1, 0), -EBADF);
	assert_int_equal(send_one(nic[0], 1 << 20, &dst, &src, 1, 0), -EBADF);
	tx = nic[0]->net->tx_open(nic[0], AF_INET, 0xC000 | 0x500);
	assert_true(tx >= 0);
	nic[0]->net->tx_close(nic[0], tx);
	assert_int_equal(send_one(nic[0], tx, &dst, &src, 1, 0), -EBADF);
	assert_int_equal(nic[0]->net->tx_open(nic[0], AF_UNIX, 0xC000),
			 -EAFNOSUPPORT);
	assert_int_equal(STAT_SUM(tx_errors) - errs, 4);
}

/* More datagrams in one xmit than one sendmmsg takes, received in order.
 * Slot 0 is served by whichever NIC gets it, so nothing is forwarded. */
static void test_batch(void **state)
{
	enum { N = UROCE_TX_BATCH + 36 };
	static struct uroce_txpkt p[N];
	union uroce_sockaddr dst, src;
	int tx;

	(void)state;
	addr(&dst, AF_INET, "127.0.0.1", cfg.udp_port);
	addr(&src, AF_INET, "127.0.0.1", 0);
	tx = nic[1]->net->tx_open(nic[1], AF_INET, 0xC000 | 0x600);
	assert_true(tx >= 0);
	for (int i = 0; i < N; i++) {
		p[i] = (struct uroce_txpkt){ .dst = &dst, .src = &src, .niov = 2,
					     .len = BTH };
		fake_bth(p[i].hdr, 9, i);
		/* header and trailer in separate iovecs, as the transport does */
		p[i].iov[0] = (struct iovec){ p[i].hdr, 12 };
		p[i].iov[1] = (struct iovec){ p[i].hdr + 12, BTH - 12 };
	}
	assert_int_equal(nic[1]->net->xmit(nic[1], tx, p, N), N);
	pump(N, NULL);
	assert_int_equal(nrecs, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(recs[i].nic, recs[0].nic);
		assert_int_equal(recs[i].len, BTH);
		assert_int_equal(recs[i].data[12], i);
	}
	nic[1]->net->tx_close(nic[1], tx);
}

struct tx_thread {
	pthread_t tid;
	int index;
	int failures;
	int last_error;		/* what the last failure returned */
	const union uroce_sockaddr *dst, *src;
};

/* Endpoints opened, used and closed from several threads at once, enough of
 * them to grow the handle table while others send. */
static void *tx_worker(void *arg)
{
	enum { PER_THREAD = 100 };
	struct tx_thread *t = arg;
	int tx[PER_THREAD];

	for (int i = 0; i < PER_THREAD; i++) {
		tx[i] = nic[0]->net->tx_open(nic[0], AF_INET,
					     0xC000 | (0x800 + t->index * PER_THREAD + i));
		if (tx[i] < 0) {
			t->failures++;
			t->last_error = tx[i];
		} else if (send_one(nic[0], tx[i], t->dst, t->src, 1, i) != 1) {
			t->failures++;
			t->last_error = -errno;
		}
	}
	for (int i = 0; i < PER_THREAD; i++)
		if (tx[i] >= 0)
			nic[0]->net->tx_close(nic[0], tx[i]);
	return NULL;
}

static void test_tx_threads(void **state)
{
	enum { THREADS = 4 };
	struct tx_thread t[THREADS];
	union uroce_sockaddr dst, src;

	(void)state;
	addr(&dst, AF_INET, "127.0.0.1", cfg.udp_port);
	addr(&src, AF_INET, "127.0.0.1", 0);
	for (int i = 0; i < THREADS; i++) {
		t[i] = (struct tx_thread){ .index = i, .dst = &dst, .src = &src };
		assert_int_equal(pthread_create(&t[i].tid, NULL, tx_worker, &t[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		assert_int_equal(pthread_join(t[i].tid, NULL), 0);
		if (t[i].failures)
			print_message("thread %d: %d failures, the last %s\n", i,
				      t[i].failures, strerror(-t[i].last_error));
		assert_int_equal(t[i].failures, 0);
	}
	/* slot 0: every datagram is returned by the NIC that got it */
	pump(THREADS * 100, NULL);
	assert_int_equal(nrecs, THREADS * 100);
}

/* A flow class's port held by another program (one of the kernel's
 * ephemeral ports, say) costs the class its port, not its QPs: they send
 * from one the kernel picks, and are still received. */
static void test_port_taken(void **state)
{
	union uroce_sockaddr dst, src, held;
	uint16_t sport = 0;
	int squatter, tx;

	(void)state;
	squatter = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(squatter >= 0);
	/* the first of a few ports that nobody else holds */
	for (uint16_t p = 0xC000 | 0xA00; p < (0xC000 | 0xA40) && !sport; p++) {
		addr(&held, AF_INET, "0.0.0.0", p);
		if (!bind(squatter, &held.sa, sizeof(held.in4)))
			sport = p;
	}
	assert_int_not_equal(sport, 0);
	addr(&dst, AF_INET, "127.0.0.1", cfg.udp_port);
	addr(&src, AF_INET, "127.0.0.1", 0);
	tx = nic[0]->net->tx_open(nic[0], AF_INET, sport);
	assert_true(tx >= 0);
	assert_int_not_equal(nic[0]->net->tx_sport(nic[0], tx), sport);
	assert_int_not_equal(nic[0]->net->tx_sport(nic[0], tx), 0);
	assert_int_equal(send_one(nic[0], tx, &dst, &src, 1, 0x5A), 1);
	pump(1, NULL);
	assert_int_equal(nrecs, 1);
	assert_int_equal(recs[0].data[12], 0x5A);
	assert_int_equal(ntohs(recs[0].src.in4.sin_port),
			 nic[0]->net->tx_sport(nic[0], tx));
	nic[0]->net->tx_close(nic[0], tx);
	close(squatter);
}

/* With DF set, Linux sends datagrams of an unconnected socket with IPv4 ID
 * 0, which the transport's ICRC relies on. */
static void test_wire_ipv4_header(void **state)
{
	union uroce_sockaddr dst, src;
	struct sockaddr_ll ll = {
		.sll_family = AF_PACKET,
		.sll_protocol = htons(ETH_P_IP),
		.sll_ifindex = if_nametoindex("lo"),
	};
	const uint16_t sport = 0xC000 | 0x700;
	uint64_t end;
	int fd, tx, seen = 0;

	(void)state;
	fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK, htons(ETH_P_IP));
	if (fd < 0)
		skip();	/* needs CAP_NET_RAW */
	assert_int_equal(bind(fd, (struct sockaddr *)&ll, sizeof(ll)), 0);
	addr(&dst, AF_INET, "127.0.0.1", cfg.udp_port);
	addr(&src, AF_INET, "127.0.0.1", 0);
	tx = nic[0]->net->tx_open(nic[0], AF_INET, sport);
	assert_true(tx >= 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(send_one(nic[0], tx, &dst, &src,
					  nic[0]->slot << UROCE_QPN_SLOT_SHIFT, i), 1);
	end = now_ms() + WAIT_MS;
	while (seen < 3 && now_ms() < end) {
		uint8_t pkt[256];
		struct iphdr ip;
		struct udphdr udp;
		ssize_t n = recv(fd, pkt, sizeof(pkt), 0);

		if (n < 0) {
			poll(NULL, 0, 1);
			continue;
		}
		if ((size_t)n < sizeof(ip) + sizeof(udp))
			continue;
		memcpy(&ip, pkt, sizeof(ip));
		memcpy(&udp, pkt + ip.ihl * 4, sizeof(udp));
		if (ip.protocol != IPPROTO_UDP || ntohs(udp.source) != sport)
			continue;
		assert_int_equal(ntohs(ip.id), 0);
		assert_true(ntohs(ip.frag_off) & IP_DF);
		seen++;
	}
	close(fd);
	assert_int_equal(seen, 3);
	nic[0]->net->tx_close(nic[0], tx);
	pump(3, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots),
		cmocka_unit_test(test_ipv4),
		cmocka_unit_test(test_ipv6),
		cmocka_unit_test(test_ipv6_zero_checksum),
		cmocka_unit_test(test_short_datagram),
		cmocka_unit_test(test_no_owner),
		cmocka_unit_test(test_forward_garbage),
		cmocka_unit_test(test_forward_other_user),
		cmocka_unit_test(test_bad_handle),
		cmocka_unit_test(test_batch),
		cmocka_unit_test(test_tx_threads),
		cmocka_unit_test(test_port_taken),
		cmocka_unit_test(test_wire_ipv4_header),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
