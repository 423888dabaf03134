/*
 * uroce_demo: an RC server and client in two processes on one host, talking
 * RoCEv2 over loopback through whatever libibverbs.so.1 the loader finds
 * (uroce's, when run with LD_LIBRARY_PATH=<build>/lib; scripts/demo.sh does).
 *
 *   latency    SEND ping-pong of 8 bytes; prints the one-way latency
 *              (round trip / 2): median, 99th percentile and minimum
 *   bandwidth  RDMA WRITEs of 64 KiB, then of 1 MiB, 16 in flight, for a
 *              fixed time each; prints GB/s
 *
 * Every pong carries the ping's sequence number back, and after each
 * bandwidth run the server checks every byte of the written slots, so the
 * numbers are for data that arrived intact.
 *
 * The process forks before either side opens the device: the verbs library
 * may run a thread, and a child forked from a threaded process may not use it.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
	PORT = 1,
	GID_INDEX = 0,
	PING_LEN = 8,
	RECV_DEPTH = 16,	/* receives kept posted during the ping-pong */
	BW_DEPTH = 16,		/* WRITEs in flight */
	MAX_MSG = 1 << 20,
	WARMUP = 200,		/* round trips not measured */
	SPIN_BEFORE_YIELD = 1000,
	RD_ATOMIC = 16,
};

static const unsigned bw_sizes[] = { 64 * 1024, MAX_MSG };

struct opts {
	unsigned iters;
	double seconds;
	enum ibv_mtu mtu;
	unsigned mtu_bytes;
};

struct conn_info {
	uint32_t qpn, psn;
	union ibv_gid gid;
	uint64_t addr;
	uint32_t rkey;
};

struct side {
	const char *name;
	int sock;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;		/* ping area, then BW_DEPTH slots of MAX_MSG */
	size_t len;
	struct conn_info me, peer;
	bool inline_ping;
};

/* Each side runs under alarm() with this much time, so nothing can hang. */
static unsigned deadline_s;

static _Noreturn void die(const struct side *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void die(const struct side *s, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "uroce_demo %s: ", s ? s->name : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Same bytes for the same seed in both processes (splitmix64). */
static void fill(uint8_t *b, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(b + i, &z, len - i < 8 ? len - i : 8);
	}
}

/* ---- control socket ----------------------------------------------------- */

static void ctl_send(struct side *s, const void *buf, size_t len)
{
	if (send(s->sock, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		die(s, "control socket: %s", strerror(errno));
}

static void ctl_recv(struct side *s, void *buf, size_t len)
{
	size_t got = 0;

	/* each pass reads at least one byte or ends the process */
	for (size_t i = 0; got < len && i <= len; i++) {
		ssize_t n = recv(s->sock, (uint8_t *)buf + got, len - got, 0);

		if (n <= 0)
			die(s, "peer closed the control socket");
		got += (size_t)n;
	}
}

/* ---- verbs setup ------------------------------------------------------------ */

static void open_side(struct side *s, const struct opts *o)
{
	struct ibv_device **list;
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };
	void *mem;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die(s, "no RDMA device (is LD_LIBRARY_PATH set to uroce's build/lib?)");
	s->ctx = ibv_open_device(list[0]);
	if (!s->ctx)
		die(s, "ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	if (ibv_query_gid(s->ctx, PORT, GID_INDEX, &s->me.gid))
		die(s, "ibv_query_gid failed");
	s->pd = ibv_alloc_pd(s->ctx);
	s->scq = ibv_create_cq(s->ctx, 2 * BW_DEPTH, NULL, NULL, 0);
	s->rcq = ibv_create_cq(s->ctx, 2 * RECV_DEPTH, NULL, NULL, 0);
	if (!s->pd || !s->scq || !s->rcq)
		die(s, "allocating PD/CQs: %s", strerror(errno));
	/* receive slots, the send slot, the bandwidth slots */
	s->len = (size_t)(RECV_DEPTH + 1) * PING_LEN + (size_t)BW_DEPTH * MAX_MSG;
	if (posix_memalign(&mem, 4096, s->len))
		die(s, "out of memory");
	s->buf = mem;
	memset(s->buf, 0, s->len);
	s->mr = ibv_reg_mr(s->pd, s->buf, s->len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->mr)
		die(s, "ibv_reg_mr: %s", strerror(errno));

	ia.send_cq = s->scq;
	ia.recv_cq = s->rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 2 * BW_DEPTH;
	ia.cap.max_recv_wr = RECV_DEPTH;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = PING_LEN;
	s->qp = ibv_create_qp(s->pd, &ia);
	if (!s->qp) {
		/* inline data is an optimisation, not a requirement */
		ia.cap.max_inline_data = 0;
		s->qp = ibv_create_qp(s->pd, &ia);
	}
	if (!s->qp)
		die(s, "ibv_create_qp: %s", strerror(errno));
	s->inline_ping = ia.cap.max_inline_data >= PING_LEN;

	a.qp_state = IBV_QPS_INIT;
	a.port_num = PORT;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die(s, "ibv_modify_qp(INIT) failed");

	s->me.qpn = s->qp->qp_num;
	s->me.psn = (uint32_t)(now_ns() ^ (uint64_t)getpid()) & 0xffffff;
	s->me.addr = (uintptr_t)s->buf;
	s->me.rkey = s->mr->rkey;
	ctl_send(s, &s->me, sizeof(s->me));
	ctl_recv(s, &s->peer, sizeof(s->peer));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = o->mtu;
	a.dest_qp_num = s->peer.qpn;
	a.rq_psn = s->peer.psn;
	a.max_dest_rd_atomic = RD_ATOMIC;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;	/* RoCE: the peer is its GID */
	a.ah_attr.grh.dgid = s->peer.gid;
	a.ah_attr.grh.sgid_index = GID_INDEX;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = PORT;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER))
		die(s, "ibv_modify_qp(RTR) failed");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = s->me.psn;
	a.max_rd_atomic = RD_ATOMIC;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die(s, "ibv_modify_qp(RTS) failed");
}

static void close_side(struct side *s)
{
	if (ibv_destroy_qp(s->qp) || ibv_destroy_cq(s->scq) ||
	    ibv_destroy_cq(s->rcq) || ibv_dereg_mr(s->mr) ||
	    ibv_dealloc_pd(s->pd) || ibv_close_device(s->ctx))
		die(s, "releasing verbs objects failed");
	free(s->buf);
}

/* ---- data path -------------------------------------------------------------- */

/* Busy-polls one completion, yielding now and then so that the library's own
 * threads get the CPU on small machines; the alarm bounds the time. */
static void wait_wc(struct side *s, struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (uint64_t i = 0; i < (uint64_t)deadline_s * 1000000000ull; i++) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			die(s, "ibv_poll_cq failed");
		if (n == 1) {
			if (wc->status != IBV_WC_SUCCESS)
				die(s, "completion wr_id %llu: %s",
				    (unsigned long long)wc->wr_id,
				    ibv_wc_status_str(wc->status));
			return;
		}
		if (i % SPIN_BEFORE_YIELD == SPIN_BEFORE_YIELD - 1)
			sched_yield();
	}
	die(s, "no completion");
}

static void post_recv(struct side *s, unsigned slot)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + slot * PING_LEN, PING_LEN,
			       s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 },
			   *bad;

	if (ibv_post_recv(s->qp, &wr, &bad))
		die(s, "ibv_post_recv failed");
}

static void send_value(struct side *s, uint64_t v)
{
	/* the send slot sits past the receive slots */
	uint8_t *src = s->buf + (size_t)RECV_DEPTH * PING_LEN;
	struct ibv_sge sge = { (uintptr_t)src, PING_LEN, s->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED |
						(s->inline_ping ? IBV_SEND_INLINE : 0) },
			   *bad;
	struct ibv_wc wc;

	memcpy(src, &v, PING_LEN);
	if (ibv_post_send(s->qp, &wr, &bad))
		die(s, "ibv_post_send failed");
	wait_wc(s, s->scq, &wc);
}

static uint64_t recv_value(struct side *s)
{
	struct ibv_wc wc;
	uint64_t v;

	wait_wc(s, s->rcq, &wc);
	if (wc.byte_len != PING_LEN)
		die(s, "received %u bytes, want %d", wc.byte_len, PING_LEN);
	memcpy(&v, s->buf + wc.wr_id * PING_LEN, PING_LEN);
	post_recv(s, (unsigned)wc.wr_id);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void client_latency(struct side *s, const struct opts *o)
{
	uint64_t *rtt = malloc(o->iters * sizeof(*rtt));
	uint32_t n = WARMUP + o->iters;

	if (!rtt)
		die(s, "out of memory");
	ctl_send(s, &n, sizeof(n));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t t0 = now_ns(), v;

		send_value(s, i);
		v = recv_value(s);
		if (v != ~i)
			die(s, "pong %llu carried 0x%llx", (unsigned long long)i,
			    (unsigned long long)v);
		if (i >= WARMUP)
			rtt[i - WARMUP] = now_ns() - t0;
	}
	qsort(rtt, o->iters, sizeof(*rtt), cmp_u64);
	printf("latency   RC SEND ping-pong, %d B, %u round trips: one-way "
	       "median %.2f us, p99 %.2f us, min %.2f us\n",
	       PING_LEN, o->iters, rtt[o->iters / 2] / 2e3,
	       rtt[(size_t)(o->iters * 0.99)] / 2e3, rtt[0] / 2e3);
	free(rtt);
}

static void server_latency(struct side *s)
{
	uint32_t n;

	ctl_recv(s, &n, sizeof(n));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = recv_value(s);

		if (v != i)
			die(s, "ping %llu carried 0x%llx", (unsigned long long)i,
			    (unsigned long long)v);
		send_value(s, ~v);
	}
}

static uint8_t *slot(struct side *s, unsigned i)
{
	return s->buf + (size_t)(RECV_DEPTH + 1) * PING_LEN + (size_t)i * MAX_MSG;
}

static void client_bandwidth(struct side *s, const struct opts *o,
			     uint32_t size)
{
	uint64_t posted = 0, done = 0, t0, end, elapsed;
	uint64_t limit = (uint64_t)(o->seconds * 1e9);
	char verdict;

	for (unsigned i = 0; i < BW_DEPTH; i++)
		fill(slot(s, i), size, size + i);
	ctl_send(s, &size, sizeof(size));
	t0 = now_ns();
	end = t0 + limit;
	/* at most one WR per pass: the pass count bounds the loop */
	for (uint64_t pass = 0; pass < (uint64_t)deadline_s * 1000000000ull; pass++) {
		bool more = now_ns() < end;
		struct ibv_wc wc;

		if (more && posted - done < BW_DEPTH) {
			unsigned i = (unsigned)(posted % BW_DEPTH);
			struct ibv_sge sge = { (uintptr_t)slot(s, i), size,
					       s->mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = posted, .sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = { (uintptr_t)s->peer.addr +
						     (uintptr_t)(slot(s, i) - s->buf),
					     s->peer.rkey } }, *bad;

			if (ibv_post_send(s->qp, &wr, &bad))
				die(s, "ibv_post_send failed");
			posted++;
			continue;
		}
		if (posted == done)
			break;
		wait_wc(s, s->scq, &wc);
		if (wc.wr_id != done)
			die(s, "WRITE %llu completed out of order",
			    (unsigned long long)wc.wr_id);
		done++;
	}
	elapsed = now_ns() - t0;
	ctl_send(s, "E", 1);
	ctl_recv(s, &verdict, 1);
	if (verdict != 'V')
		die(s, "the server found corrupted data after the %u B run", size);
	printf("bandwidth RC WRITE %4u KiB, %d in flight, %.2f s: %.3f GB/s "
	       "(%.2f Gbit/s), %llu messages, data verified\n",
	       size / 1024, BW_DEPTH, elapsed / 1e9,
	       (double)done * size / elapsed,
	       (double)done * size * 8 / elapsed, (unsigned long long)done);
}

static void server_bandwidth(struct side *s)
{
	uint8_t *want = malloc(MAX_MSG);
	uint32_t size;
	char c, verdict = 'V';

	if (!want)
		die(s, "out of memory");
	ctl_recv(s, &size, sizeof(size));
	ctl_recv(s, &c, 1);	/* the client's WRITEs have all completed */
	for (unsigned i = 0; i < BW_DEPTH; i++) {
		fill(want, size, size + i);
		if (memcmp(slot(s, i), want, size))
			verdict = 'X';
	}
	ctl_send(s, &verdict, 1);
	free(want);
	if (verdict != 'V')
		die(s, "written data differs from the client's");
}

static void describe_run(const struct side *s, const struct opts *o,
			 char **argv, pid_t server)
{
	static const char *const vars[] = { "LD_LIBRARY_PATH", "UROCE_CONFIG",
					    "UROCE_PORT", "UROCE_MTU",
					    "UROCE_ADDRS", "UROCE_WINDOW",
					    "UROCE_FAULTS", "UROCE_DEBUG" };
	char gid[INET6_ADDRSTRLEN] = "?";
	Dl_info dl;

	inet_ntop(AF_INET6, s->me.gid.raw, gid, sizeof(gid));
	printf("uroce_demo: ran as");
	for (char **a = argv; *a; a++)
		printf(" %s", *a);
	printf("\nuroce_demo: libibverbs.so.1 from %s\n",
	       dladdr((void *)ibv_get_device_list, &dl) && dl.dli_fname ?
		       dl.dli_fname : "?");
	printf("uroce_demo: device %s port %d, GID[%d] %s, path MTU %u, "
	       "server pid %d, client pid %d, loopback\n",
	       ibv_get_device_name(s->ctx->device), PORT, GID_INDEX, gid,
	       o->mtu_bytes, (int)server, (int)getpid());
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]))
			printf("uroce_demo: %s=%s\n", vars[i], getenv(vars[i]));
}

static void run_server(int sock, const struct opts *o)
{
	struct side s = { .name = "server", .sock = sock };

	alarm(deadline_s);
	open_side(&s, o);
	for (unsigned i = 0; i < RECV_DEPTH; i++)
		post_recv(&s, i);
	ctl_send(&s, "R", 1);
	server_latency(&s);
	for (size_t i = 0; i < sizeof(bw_sizes) / sizeof(bw_sizes[0]); i++)
		server_bandwidth(&s);
	close_side(&s);
}

static void run_client(int sock, pid_t server, const struct opts *o,
		       char **argv)
{
	struct side s = { .name = "client", .sock = sock };
	char c;

	alarm(deadline_s);
	open_side(&s, o);
	for (unsigned i = 0; i < RECV_DEPTH; i++)
		post_recv(&s, i);
	ctl_recv(&s, &c, 1);	/* the server's receives are posted */
	describe_run(&s, o, argv, server);
	client_latency(&s, o);
	for (size_t i = 0; i < sizeof(bw_sizes) / sizeof(bw_sizes[0]); i++)
		client_bandwidth(&s, o, bw_sizes[i]);
	close_side(&s);
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [-n round_trips] [-t seconds_per_bandwidth_run] "
		"[-m path_mtu]\n"
		"  defaults: -n 10000 -t 1.5 -m 4096\n", argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	struct opts o = { .iters = 10000, .seconds = 1.5, .mtu_bytes = 4096 };
	int sv[2], opt, status;
	pid_t server;

	while ((opt = getopt(argc, argv, "n:t:m:h")) != -1) {
		switch (opt) {
		case 'n': o.iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 't': o.seconds = strtod(optarg, NULL); break;
		case 'm': o.mtu_bytes = (unsigned)strtoul(optarg, NULL, 0); break;
		default: usage(argv[0]);
		}
	}
	switch (o.mtu_bytes) {
	case 256: o.mtu = IBV_MTU_256; break;
	case 512: o.mtu = IBV_MTU_512; break;
	case 1024: o.mtu = IBV_MTU_1024; break;
	case 2048: o.mtu = IBV_MTU_2048; break;
	case 4096: o.mtu = IBV_MTU_4096; break;
	default: usage(argv[0]);
	}
	if (o.iters < 1 || o.iters > 10000000 || !(o.seconds > 0 && o.seconds <= 60))
		usage(argv[0]);
	/* ~100 us per round trip is slow; everything else takes seconds */
	deadline_s = 30 + o.iters / 10000 + 4 * (unsigned)o.seconds;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		perror("socketpair");
		return 1;
	}
	fflush(stdout);
	server = fork();
	if (server < 0) {
		perror("fork");
		return 1;
	}
	if (server == 0) {
		close(sv[0]);
		run_server(sv[1], &o);
		return 0;
	}
	close(sv[1]);
	run_client(sv[0], server, &o, argv);
	if (waitpid(server, &status, 0) != server || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "uroce_demo: the server failed\n");
		return 1;
	}
	printf("uroce_demo: done\n");
	return 0;
}
