/*
 * rc.faults.<case>: a peer dies, or its QP does, in the middle of a stream
 * of 1 MiB SENDs, WRITEs and READs (several WQEs outstanding).
 *
 *   kill_responder  role 0 streams into role 1 and SIGKILLs it after the
 *                   first completion: the first unfinished WQE ends with
 *                   IBV_WC_RETRY_EXC_ERR within the retry time, the rest
 *                   are flushed, the QP is in ERR; role 0's QP to role 2
 *                   carries on.
 *   kill_requester  role 1 streams into role 0; role 0 stops it
 *                   (SIGSTOP) while a SEND is half placed, and SIGKILLs
 *                   it.  A responder has no timer (in the IB spec only a
 *                   requester times out and retries), so role 0 sees
 *                   nothing of it, as for WRITEs and READs: its QP
 *                   stays in RTS, the cut SEND never completes (moving the
 *                   QP to ERR flushes its receive), the SENDs before it
 *                   completed whole, and no byte outside the transfers'
 *                   targets changed.  Role 0's QP to role 2 carries on.
 *   destroy_target  role 1 streams into role 0, which destroys its QP
 *                   mid-stream and stays alive: role 1 gets
 *                   IBV_WC_RETRY_EXC_ERR; role 0's QP to role 2 carries on.
 *   destroy_busy    the same while role 0 streams into role 1 too (its QP
 *                   is destroyed with its own WQEs outstanding).
 *   exit            role 1 calls exit() mid-stream with its QP and MRs
 *                   registered; _exit: the same with _exit().  Role 0 gets
 *                   IBV_WC_RETRY_EXC_ERR; role 2, started afterwards,
 *                   finds the dead process's slot name free and its
 *                   /dev/shm segment gone, and works with role 0.
 *   restart         role 0 SIGKILLs role 1 mid-stream; role 2 starts on
 *                   the same host and port and, holding every other slot,
 *                   gets role 1's slot and QPN while role 0's first QP still
 *                   retransmits to it.  Role 0's second QP connects to it
 *                   (at a PSN far from the first's) and carries on; role
 *                   2 sees no stray completion nor byte, and over UDP its
 *                   counters show the stale packets refused, not executed
 *                   (on the same-host path they go into the dead process's
 *                   ring and never reach it); role 0's first QP ends with
 *                   IBV_WC_RETRY_EXC_ERR, after role 2 connected.
 *
 * The retry time is 4.096 us * 2^timeout * (1 + retry_cnt): 0.54 s (timeout
 * 14), 2.1 s for restart (timeout 16, so that the retries outlive the new
 * process's start).  The error must come within it plus SLACK_MS of the
 * death; there is no lower bound, since the WQE's timer may have run a
 * while when the death is known.
 *
 * Each also runs with UROCE_SHM=0 (the .udp tests): a same-host peer's
 * death is noticed differently (a refused cross-memory copy, a ring nobody
 * reads) from a remote one's (silence).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

enum {
	MSG = 1 << 20,		/* every streamed message */
	ROUNDS = 8,		/* of SEND, WRITE, READ */
	STREAM_WRS = 3 * ROUNDS,
	GUARD = 64 << 10,	/* untouched bytes around each target */
	CHECK_LEN = 256 << 10,	/* the carry-on exchange */
	PROBE = 64,		/* bytes looked at to see a SEND arrive */
	FIRST_CUT = 2,		/* the SEND kill_requester cuts, or a later one */
	/* A target that dies receives this many SENDs only: the next one
	 * waits (RNR), so WQEs are still outstanding however fast the stream
	 * went before the death. */
	STALL_AT = 2,
	/* The killed requester's window (packets): a 1 MiB SEND takes many
	 * round trips, and stopping it finds one half placed. */
	SLOW_WINDOW = 16,
	/* 4.096 us * 2^14 = 67 ms: shorter ones time out healthy QPs of a
	 * loaded 2-CPU machine (ASan, a dead peer's retries swamping it) */
	TIMEOUT = 14,
	RESTART_TIMEOUT = 16,	/* 268 ms */
	RETRY_CNT = 7,
	SLACK_MS = 8000,	/* on top of the retry time: a loaded VM */
	SETTLE_MS = 200,	/* packets in flight land meanwhile */
	QUIET_MS = 500,		/* no completion may come within */
	WAIT_MS = 10000,	/* for a process or a SEND to show up */
	NAP_US = 50,
	QPN_SLOT_SHIFT = 14,	/* QPN = slot << 14 | index (README) */
	MAX_SLOTS = 1 << (24 - QPN_SLOT_SHIFT),
	PSN_APART = 0x400000,	/* the new connection's PSNs */
	SRC_SEED = 11, TARGET_SEED = 12, CHECK_SEED = 13,
};

/* The stream's target, one MR: [guard W guard R guard recv0 guard ...]. */
#define OFF_WRITE ((size_t)GUARD)
#define OFF_READ (OFF_WRITE + MSG + GUARD)
#define OFF_RECV(k) (OFF_READ + MSG + GUARD + (size_t)(k) * (MSG + GUARD))
#define TARGET_LEN OFF_RECV(ROUNDS)

#define ALL_ACCESS                                                             \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                    \
	 IBV_ACCESS_REMOTE_READ)

enum scenario {
	KILL_RESPONDER, KILL_REQUESTER, DESTROY_TARGET, DESTROY_BUSY,
	EXIT, UNDERSCORE_EXIT, RESTART,
};
static enum scenario scenario;

static struct h_qp_cfg cfg(struct h_proc *p, uint8_t timeout)
{
	struct h_qp_cfg c = h_qp_defaults(p);

	c.timeout = timeout;
	c.retry_cnt = RETRY_CNT;
	return c;
}

static double retry_ms(uint8_t timeout)
{
	return 4.096e-3 * (1u << timeout) * (1 + RETRY_CNT);
}

static double ms_since(uint64_t t0)
{
	return (double)(h_now_ns() - t0) / 1e6;
}

/* ---- streaming -------------------------------------------------------- */

/* A stream's source: [data MSG | READ destination MSG]. */
static void source_alloc(struct h_proc *p, struct h_buf *b)
{
	h_buf_alloc(p, b, 2 * (size_t)MSG, ALL_ACCESS);
	h_fill(b->mem, MSG, SRC_SEED);
}

/* A stream's target, filled with its own pattern. */
static void target_alloc(struct h_proc *p, struct h_buf *b)
{
	h_buf_alloc(p, b, TARGET_LEN, ALL_ACCESS);
	h_fill(b->mem, TARGET_LEN, TARGET_SEED);
}

/* Receives for the stream's first n SENDs; wr_id counts from 0. */
static void post_receives(struct h_ep *ep, const struct h_buf *b, int n)
{
	for (int k = 0; k < n; k++) {
		struct ibv_sge sge = { (uintptr_t)b->mem + OFF_RECV(k), MSG,
				       b->mr->lkey };

		h_post_recv(ep, (uint64_t)k, &sge, 1);
	}
}

/* SEND, WRITE, READ per round, all signaled; wr_id counts from 0. */
static void post_stream(struct h_ep *ep, const struct h_buf *src,
			struct h_rbuf r)
{
	struct ibv_sge data = { (uintptr_t)src->mem, MSG, src->mr->lkey };
	struct ibv_sge back = { (uintptr_t)src->mem + MSG, MSG, src->mr->lkey };

	for (uint64_t k = 0; k < ROUNDS; k++) {
		h_post_rdma(ep, 3 * k, IBV_WR_SEND, &data, 1,
			    IBV_SEND_SIGNALED, 0, 0, 0);
		h_post_rdma(ep, 3 * k + 1, IBV_WR_RDMA_WRITE, &data, 1,
			    IBV_SEND_SIGNALED, r.addr + OFF_WRITE, r.rkey, 0);
		h_post_rdma(ep, 3 * k + 2, IBV_WR_RDMA_READ, &back, 1,
			    IBV_SEND_SIGNALED, r.addr + OFF_READ, r.rkey, 0);
	}
}

/*
 * The stream's completions from wr first on, once its peer is gone (known
 * at t0): those finished before in order, then IBV_WC_RETRY_EXC_ERR within the retry
 * time (plus slack), then the rest flushed, at least one: several WQEs
 * were outstanding.  Returns when the error came.
 */
static uint64_t expect_retry_exceeded(struct h_ep *ep, uint64_t first,
				      uint64_t t0, uint8_t timeout)
{
	uint64_t wr = first, t_err;
	struct ibv_wc wc;
	double ms, max_ms = retry_ms(timeout) + SLACK_MS;

	for (; wr < STREAM_WRS; wr++) {
		if (!h_poll(ep->scq, &wc, (unsigned)max_ms))
			h_fail("no completion for wr %llu within %.0f ms",
			       (unsigned long long)wr, max_ms);
		H_EQ(wc.wr_id, wr);
		if (wc.status != IBV_WC_SUCCESS)
			break;
	}
	t_err = h_now_ns();
	ms = ms_since(t0);
	H_CHECK(wr < STREAM_WRS);
	if (wc.status != IBV_WC_RETRY_EXC_ERR)
		h_fail("wr %llu: %s, want IBV_WC_RETRY_EXC_ERR",
		       (unsigned long long)wr, ibv_wc_status_str(wc.status));
	printf("wr %llu: IBV_WC_RETRY_EXC_ERR %.1f ms after the peer went "
	       "(retry time %.1f ms)\n", (unsigned long long)wr, ms,
	       retry_ms(timeout));
	if (ms > max_ms)
		h_fail("retries took %.1f ms, want at most %.1f", ms, max_ms);
	H_CHECK(wr + 1 < STREAM_WRS);
	for (wr++; wr < STREAM_WRS; wr++)
		H_EXPECT_STATUS(ep, wr, IBV_WC_WR_FLUSH_ERR, "flushed WR");
	H_EQ(h_qp_state(ep->qp), IBV_QPS_ERR);
	return t_err;
}

/* ---- the other QPs carry on -------------------------------------------- */

/* A WRITE, a READ of it and a SEND over ep, checked byte for byte. */
static void carry_on(struct h_proc *p, struct h_ep *ep, int sock, bool active)
{
	uint8_t *want = malloc(CHECK_LEN);
	struct ibv_sge sge;
	struct h_buf b;
	struct h_rbuf r;

	H_CHECK(want);
	h_fill(want, CHECK_LEN, CHECK_SEED);
	h_buf_alloc(p, &b, 2 * (size_t)CHECK_LEN, ALL_ACCESS);
	h_send_rbuf(sock, &b);
	r = h_recv_rbuf(sock);
	if (active) {
		memcpy(b.mem, want, CHECK_LEN);
		h_sync(sock);		/* the receive is posted */
		sge = (struct ibv_sge){ (uintptr_t)b.mem, CHECK_LEN,
					b.mr->lkey };
		h_post_rdma(ep, 100, IBV_WR_RDMA_WRITE, &sge, 1,
			    IBV_SEND_SIGNALED, r.addr, r.rkey, 0);
		H_EXPECT_SEND(ep, .wr_id = 100, .opcode = IBV_WC_RDMA_WRITE);
		sge.addr = (uintptr_t)b.mem + CHECK_LEN;
		h_post_rdma(ep, 101, IBV_WR_RDMA_READ, &sge, 1,
			    IBV_SEND_SIGNALED, r.addr, r.rkey, 0);
		H_EXPECT_SEND(ep, .wr_id = 101, .opcode = IBV_WC_RDMA_READ,
			      .byte_len = CHECK_LEN);
		h_expect_mem(b.mem + CHECK_LEN, want, CHECK_LEN, "READ back");
		sge.addr = (uintptr_t)b.mem;
		h_post_rdma(ep, 102, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED,
			    0, 0, 0);
		H_EXPECT_SEND(ep, .wr_id = 102, .opcode = IBV_WC_SEND);
	} else {
		sge = (struct ibv_sge){ (uintptr_t)b.mem + CHECK_LEN,
					CHECK_LEN, b.mr->lkey };
		h_post_recv(ep, 100, &sge, 1);
		h_sync(sock);
		H_EXPECT_RECV(ep, .wr_id = 100, .opcode = IBV_WC_RECV,
			      .byte_len = CHECK_LEN);
		h_expect_mem(b.mem, want, CHECK_LEN, "WRITE");
		h_expect_mem(b.mem + CHECK_LEN, want, CHECK_LEN, "SEND");
	}
	h_sync(sock);
	h_buf_free(&b);
	free(want);
}

/* ---- processes ---------------------------------------------------------- */

static void send_pid(int sock)
{
	int32_t pid = (int32_t)getpid();

	h_send(sock, &pid, sizeof(pid));
}

static pid_t recv_pid(int sock)
{
	int32_t pid;

	h_recv(sock, &pid, sizeof(pid));
	return (pid_t)pid;
}

/* The state letter of /proc/<pid>/stat, '-' once the pid is reaped. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512], *paren;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return '-';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	paren = strrchr(buf, ')');
	return paren && paren[1] ? paren[2] : '?';
}

/* Until pid's state is one of states. */
static void wait_state(pid_t pid, const char *states)
{
	uint64_t end = h_now_ns() + (uint64_t)WAIT_MS * 1000000;

	for (int i = 0; i < WAIT_MS; i++) {
		if (strchr(states, proc_state(pid)))
			return;
		if (h_now_ns() > end)
			break;
		h_sleep_ms(1);
	}
	h_fail("pid %d in state %c, want one of %s", (int)pid,
	       proc_state(pid), states);
}

/* A role that is killed: it waits for nothing but its end (the peer's
 * socket closing first fails it). */
static _Noreturn void await_death(int sock)
{
	char c;

	h_recv(sock, &c, 1);
	h_fail("still alive");
}

/* "\0uroce2.<port>.<uid>.<slot>", a process's slot (README: Sharing port
 * 4791). */
static socklen_t slot_name(struct sockaddr_un *un, unsigned slot)
{
	const char *port = getenv("UROCE_PORT");
	int len;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	len = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		       "uroce2.%s.%u.%u", port && *port ? port : "4791",
		       (unsigned)getuid(), slot);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			   (size_t)len);
}

/* Binds slot's name, so that a device opened meanwhile takes another; -1
 * if a live process holds it. */
static int hold_slot(unsigned slot)
{
	struct sockaddr_un un;
	socklen_t len = slot_name(&un, slot);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		h_fail("socket: %s", strerror(errno));
	if (!bind(fd, (struct sockaddr *)&un, len))
		return fd;
	if (errno != EADDRINUSE)
		h_fail("bind slot %u: %s", slot, strerror(errno));
	close(fd);
	return -1;
}

/* The same-host segment's name of slot (README: Same-host path). */
static void segment_path(char *buf, size_t size, unsigned slot)
{
	const char *port = getenv("UROCE_PORT");
	struct stat ns;

	if (stat("/proc/self/ns/net", &ns))
		h_fail("stat /proc/self/ns/net: %s", strerror(errno));
	snprintf(buf, size, "/dev/shm/uroce.%llu.%s.%u.%u",
		 (unsigned long long)ns.st_ino, port && *port ? port : "4791",
		 (unsigned)getuid(), slot);
}

/* ---- kill_responder ------------------------------------------------------ */

static void kill_responder_0(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct h_ep ep, other;
	struct h_buf src;
	struct h_rbuf r;
	pid_t victim;
	uint64_t t0;

	h_ep_create(p, &ep, &c);
	h_ep_create(p, &other, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	h_ep_connect(p, &other, p->sock[1]);
	source_alloc(p, &src);
	r = h_recv_rbuf(p->sock[0]);
	victim = recv_pid(p->sock[0]);
	post_stream(&ep, &src, r);
	H_EXPECT_SEND(&ep, .wr_id = 0, .opcode = IBV_WC_SEND);
	H_CHECK(!kill(victim, SIGKILL));
	t0 = h_now_ns();
	expect_retry_exceeded(&ep, 1, t0, TIMEOUT);
	carry_on(p, &other, p->sock[1], true);
	h_ep_destroy(&ep);
	h_ep_destroy(&other);
	h_buf_free(&src);
}

/* The stream's target, until it is killed. */
static void victim_target(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct h_ep ep;
	struct h_buf tgt;

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	target_alloc(p, &tgt);
	post_receives(&ep, &tgt, STALL_AT);
	h_send_rbuf(p->sock[0], &tgt);
	send_pid(p->sock[0]);
	await_death(p->sock[0]);
}

/* Role 2's side of carry_on with role 0. */
static void third(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct h_ep ep;

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	carry_on(p, &ep, p->sock[0], false);
	h_ep_destroy(&ep);
}

/* ---- kill_requester -------------------------------------------------------- */

static bool arrived(const uint8_t *recv, const uint8_t *src, size_t off)
{
	return !memcmp(recv + off, src + off, PROBE);
}

/*
 * Stops the requester while SEND k's first bytes are placed and, once what
 * was in flight landed, its last are not; SIGKILLs it then.  A SEND that
 * completed meanwhile lets the stream go on to the next.  Returns k, at
 * least FIRST_CUT: the rounds before it complete whole.
 */
static int cut_a_send(const struct h_buf *tgt, const uint8_t *src, pid_t pid)
{
	for (int k = FIRST_CUT; k < ROUNDS; k++) {
		const uint8_t *recv = tgt->mem + OFF_RECV(k);
		uint64_t end = h_now_ns() + (uint64_t)WAIT_MS * 1000000;
		uint64_t spins = (uint64_t)WAIT_MS * 1000 / NAP_US;
		struct timespec nap = { .tv_nsec = NAP_US * 1000 };

		for (uint64_t i = 0; i < spins && !arrived(recv, src, 0) &&
				     h_now_ns() < end; i++)
			nanosleep(&nap, NULL);
		if (!arrived(recv, src, 0))
			h_fail("SEND %d did not arrive within %d ms", k,
			       WAIT_MS);
		H_CHECK(!kill(pid, SIGSTOP));
		wait_state(pid, "T");
		h_sleep_ms(SETTLE_MS);
		if (!arrived(recv, src, MSG - PROBE)) {
			H_CHECK(!kill(pid, SIGKILL));
			printf("SEND %d cut: the requester was killed with it "
			       "half placed\n", k);
			return k;
		}
		H_CHECK(!kill(pid, SIGCONT));
	}
	h_fail("every SEND completed before its sender was stopped");
}

/* Each byte of got is want's or init's. */
static void expect_either(const uint8_t *got, const uint8_t *want,
			  const uint8_t *init, size_t len, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i] && got[i] != init[i])
			h_fail("%s: byte %zu is 0x%02x, neither written 0x%02x "
			       "nor untouched 0x%02x", what, i, got[i], want[i],
			       init[i]);
}

static void kill_requester_0(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	uint8_t *init = malloc(TARGET_LEN), *src = malloc(MSG);
	struct h_ep ep, other;
	struct h_buf tgt;
	pid_t requester;
	int cut;
	char what[64];

	H_CHECK(init && src);
	h_fill(init, TARGET_LEN, TARGET_SEED);
	h_fill(src, MSG, SRC_SEED);
	h_ep_create(p, &ep, &c);
	h_ep_create(p, &other, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	h_ep_connect(p, &other, p->sock[1]);
	target_alloc(p, &tgt);
	post_receives(&ep, &tgt, ROUNDS);
	h_send_rbuf(p->sock[0], &tgt);
	requester = recv_pid(p->sock[0]);
	cut = cut_a_send(&tgt, src, requester);
	h_sleep_ms(SETTLE_MS);

	/* the SENDs before the cut one completed whole, it never does */
	for (int k = 0; k < cut; k++)
		H_EXPECT_RECV(&ep, .wr_id = (uint64_t)k, .opcode = IBV_WC_RECV,
			      .byte_len = MSG);
	h_expect_no_wc(ep.rcq, QUIET_MS);
	h_expect_no_wc(ep.scq, 0);
	/* a responder has no timer: it cannot tell a dead requester */
	H_EQ(h_qp_state(ep.qp), IBV_QPS_RTS);

	h_expect_mem(tgt.mem, init, OFF_WRITE, "guard before the WRITEs");
	expect_either(tgt.mem + OFF_WRITE, src, init + OFF_WRITE, MSG,
		      "WRITE target");
	h_expect_mem(tgt.mem + OFF_WRITE + MSG, init + OFF_WRITE + MSG,
		     OFF_RECV(0) - OFF_WRITE - MSG, "READ source and guards");
	for (int k = 0; k < ROUNDS; k++) {
		const uint8_t *at = tgt.mem + OFF_RECV(k);

		snprintf(what, sizeof(what), "receive %d", k);
		if (k < cut)
			h_expect_mem(at, src, MSG, what);
		else if (k == cut)
			expect_either(at, src, init + OFF_RECV(k), MSG, what);
		else
			h_expect_mem(at, init + OFF_RECV(k), MSG, what);
		snprintf(what, sizeof(what), "guard after receive %d", k);
		h_expect_mem(at + MSG, init + OFF_RECV(k) + MSG, GUARD, what);
	}

	/* the half-placed SEND's receive ends only as a flushed one */
	H_OK(ibv_modify_qp(ep.qp, &err, IBV_QP_STATE));
	for (int k = cut; k < ROUNDS; k++)
		H_EXPECT_RECV(&ep, .wr_id = (uint64_t)k,
			      .status = IBV_WC_WR_FLUSH_ERR);
	carry_on(p, &other, p->sock[1], true);
	h_ep_destroy(&ep);
	h_ep_destroy(&other);
	h_buf_free(&tgt);
	free(init);
	free(src);
}

/* The stream's source, until it is killed. */
static void victim_source(struct h_proc *p)
{
	struct h_qp_cfg c;
	struct h_ep ep;
	struct h_buf src;
	char window[16];

	snprintf(window, sizeof(window), "%d", SLOW_WINDOW);
	H_CHECK(!setenv("UROCE_WINDOW", window, 1));
	h_open(p);
	c = cfg(p, TIMEOUT);
	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	source_alloc(p, &src);
	post_stream(&ep, &src, h_recv_rbuf(p->sock[0]));
	send_pid(p->sock[0]);
	await_death(p->sock[0]);
}

/* ---- destroy_target, destroy_busy ------------------------------------------ */

/* Role 0 destroys its QP once role 1's first SEND is in, and stays. */
static void destroyer_0(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct h_ep ep, other;
	struct h_buf tgt, src;
	struct h_rbuf r;
	char done = 'D';

	h_ep_create(p, &ep, &c);
	h_ep_create(p, &other, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	h_ep_connect(p, &other, p->sock[1]);
	target_alloc(p, &tgt);
	post_receives(&ep, &tgt, ROUNDS);
	source_alloc(p, &src);
	h_send_rbuf(p->sock[0], &tgt);
	r = h_recv_rbuf(p->sock[0]);
	if (scenario == DESTROY_BUSY)
		post_stream(&ep, &src, r);
	H_EXPECT_RECV(&ep, .wr_id = 0, .opcode = IBV_WC_RECV, .byte_len = MSG);
	h_ep_destroy(&ep);
	/* the peer may still be writing into them */
	h_buf_free(&tgt);
	h_buf_free(&src);
	h_send(p->sock[0], &done, 1);
	carry_on(p, &other, p->sock[1], true);
	h_sync(p->sock[0]);	/* the peer saw its retries run out */
	h_ep_destroy(&other);
}

static void destroyed_peer(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct h_ep ep;
	struct h_buf tgt, src;
	uint64_t t0;
	char done;

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	target_alloc(p, &tgt);
	post_receives(&ep, &tgt, ROUNDS);
	source_alloc(p, &src);
	h_send_rbuf(p->sock[0], &tgt);
	post_stream(&ep, &src, h_recv_rbuf(p->sock[0]));
	h_recv(p->sock[0], &done, 1);
	t0 = h_now_ns();
	expect_retry_exceeded(&ep, 0, t0, TIMEOUT);
	h_sync(p->sock[0]);
	h_ep_destroy(&ep);
	h_buf_free(&tgt);
	h_buf_free(&src);
}

/* ---- exit, _exit -------------------------------------------------------- */

static void exit_survivor_0(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct h_ep ep, other;
	struct h_buf src;
	struct h_rbuf r;
	uint64_t t0;

	h_ep_create(p, &ep, &c);
	h_ep_create(p, &other, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	source_alloc(p, &src);
	r = h_recv_rbuf(p->sock[0]);
	post_stream(&ep, &src, r);
	if (!h_peer_closed(p->sock[0], WAIT_MS))
		h_fail("role 1 did not exit");
	t0 = h_now_ns();
	expect_retry_exceeded(&ep, 0, t0, TIMEOUT);
	/* what the next process must not trip over */
	h_send(p->sock[1], &ep.peer_qpn, sizeof(ep.peer_qpn));
	h_ep_connect(p, &other, p->sock[1]);
	carry_on(p, &other, p->sock[1], true);
	h_ep_destroy(&ep);
	h_ep_destroy(&other);
	h_buf_free(&src);
}

/* Leaves mid-stream, once the first SEND is in, with everything held. */
static void exiting(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, TIMEOUT);
	struct h_ep ep;
	struct h_buf tgt;

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, p->sock[0]);
	target_alloc(p, &tgt);
	post_receives(&ep, &tgt, STALL_AT);
	h_send_rbuf(p->sock[0], &tgt);
	H_EXPECT_RECV(&ep, .wr_id = 0, .opcode = IBV_WC_RECV, .byte_len = MSG);
	if (scenario == EXIT)
		exit(0);
	_exit(0);
}

/* Starts after role 1 is gone: its slot's name is free (binding it keeps
 * the device from taking it) and its segment swept once we open. */
static void next_process(struct h_proc *p)
{
	struct h_qp_cfg c;
	struct h_ep ep;
	uint32_t dead_qpn;
	unsigned slot;
	char seg[128];
	int held;

	h_recv(p->sock[0], &dead_qpn, sizeof(dead_qpn));
	slot = dead_qpn >> QPN_SLOT_SHIFT;
	held = hold_slot(slot);
	if (held < 0)
		h_fail("slot %u's name outlived its process", slot);
	h_open(p);
	H_CHECK(!close(held));
	segment_path(seg, sizeof(seg), slot);
	if (!access(seg, F_OK))
		h_fail("%s outlived its process", seg);
	c = cfg(p, TIMEOUT);
	h_ep_create(p, &ep, &c);
	H_CHECK(ep.qp->qp_num >> QPN_SLOT_SHIFT != slot);
	h_ep_connect(p, &ep, p->sock[0]);
	carry_on(p, &ep, p->sock[0], false);
	h_ep_destroy(&ep);
}

/* ---- restart ---------------------------------------------------------------- */

static void restart_survivor_0(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p, RESTART_TIMEOUT);
	struct h_ep old, fresh;
	struct h_buf src;
	struct h_rbuf r;
	pid_t victim;
	uint64_t t_kill, t_connected, t_err;

	h_ep_create(p, &old, &c);
	c.psn = (c.psn + PSN_APART) & 0xffffff;
	h_ep_create(p, &fresh, &c);
	h_ep_connect(p, &old, p->sock[0]);
	source_alloc(p, &src);
	r = h_recv_rbuf(p->sock[0]);
	victim = recv_pid(p->sock[0]);
	post_stream(&old, &src, r);
	H_EXPECT_SEND(&old, .wr_id = 0, .opcode = IBV_WC_SEND);
	H_CHECK(!kill(victim, SIGKILL));
	t_kill = h_now_ns();
	/* its sockets are closed once it is a zombie */
	wait_state(victim, "Z-");
	h_send(p->sock[1], &old.peer_qpn, sizeof(old.peer_qpn));
	h_ep_connect(p, &fresh, p->sock[1]);
	t_connected = h_now_ns();
	printf("new process connected %.1f ms after the kill\n",
	       ms_since(t_kill));
	carry_on(p, &fresh, p->sock[1], true);
	t_err = expect_retry_exceeded(&old, 1, t_kill, RESTART_TIMEOUT);
	/* else the new process never faced the old QP's retries */
	H_CHECK(t_err > t_connected);
	h_sync(p->sock[1]);	/* the old QP is done */
	h_ep_destroy(&old);
	h_ep_destroy(&fresh);
	h_buf_free(&src);
}

/* Closes the device: the stale packets it counted refusing. */
static uint64_t close_counting_stale(struct h_proc *p)
{
	static const char *const names[] = {
		"rx_unknown_qp", "rx_bad_state", "rx_out_of_window",
		"rx_duplicate",
	};
	uint64_t v[4], sum = 0;

	h_close_counting(p, names, v, 4);
	for (int i = 0; i < 4; i++)
		sum += v[i];
	return sum;
}

/* Raises the soft limit on descriptors to n, if the hard one allows. */
static void allow_fds(rlim_t n)
{
	struct rlimit rl;

	H_CHECK(!getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_cur >= n)
		return;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n)
		h_fail("%llu descriptors allowed, %llu needed to hold every slot",
		       (unsigned long long)rl.rlim_max, (unsigned long long)n);
	rl.rlim_cur = n;
	H_CHECK(!setrlimit(RLIMIT_NOFILE, &rl));
}

/* Takes role 1's slot (holding every other free one while it opens), so
 * that its first QP gets role 1's QPN, and its MR most likely role 1's
 * key and address, while role 0's old QP still sends to them. */
static void restarted(struct h_proc *p)
{
	static int held[MAX_SLOTS];
	struct h_qp_cfg c;
	struct h_ep ep;
	struct h_buf tgt;
	uint32_t dead_qpn;
	unsigned slot;
	uint8_t *init = malloc(TARGET_LEN);
	uint64_t refused;

	H_CHECK(init);
	h_fill(init, TARGET_LEN, TARGET_SEED);
	h_recv(p->sock[0], &dead_qpn, sizeof(dead_qpn));
	slot = dead_qpn >> QPN_SLOT_SHIFT;
	allow_fds(MAX_SLOTS + 256);
	for (unsigned s = 1; s < MAX_SLOTS; s++)
		held[s] = s == slot ? -1 : hold_slot(s);
	H_CHECK(!setenv("UROCE_DEBUG", "1", 1));
	h_open(p);
	for (unsigned s = 1; s < MAX_SLOTS; s++)
		if (held[s] >= 0)
			close(held[s]);
	c = cfg(p, TIMEOUT);
	h_ep_create(p, &ep, &c);
	H_EQ(ep.qp->qp_num, dead_qpn);
	/* role 1's target, at role 1's place in the sequence */
	target_alloc(p, &tgt);
	h_ep_connect(p, &ep, p->sock[0]);
	/* a stray SEND would take this receive */
	carry_on(p, &ep, p->sock[0], false);
	post_receives(&ep, &tgt, ROUNDS);
	h_sync(p->sock[0]);	/* role 0's old QP is done */
	h_expect_no_wc(ep.rcq, QUIET_MS);
	h_expect_no_wc(ep.scq, 0);
	h_expect_mem(tgt.mem, init, TARGET_LEN, "the old peer's target");
	h_ep_destroy(&ep);
	h_buf_free(&tgt);
	free(init);

	refused = close_counting_stale(p);
	printf("stale packets refused: %" PRIu64 "\n", refused);
	/* over UDP the old QP's retries reach us; on the same-host path they
	 * go into the dead process's ring, which nobody reads */
	if (h_over_udp())
		H_CHECK(refused > 0);
}

int main(int argc, char **argv)
{
	static const char *const names[] = {
		[KILL_RESPONDER] = "kill_responder",
		[KILL_REQUESTER] = "kill_requester",
		[DESTROY_TARGET] = "destroy_target",
		[DESTROY_BUSY] = "destroy_busy",
		[EXIT] = "exit", [UNDERSCORE_EXIT] = "_exit",
		[RESTART] = "restart",
	};
	static char name[64];
	struct h_test t = { .nroles = 3, .deadline_s = 25 };

	for (size_t i = 0; argc > 1 && i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(argv[1], names[i]))
			continue;
		scenario = (enum scenario)i;
		snprintf(name, sizeof(name), "rc.faults.%s%s", names[i],
			 h_over_udp() ? ".udp" : "");
		t.name = name;
		switch (scenario) {
		case KILL_RESPONDER:
			t.role[0] = kill_responder_0;
			t.role[1] = victim_target;
			t.role[2] = third;
			t.sigkilled[1] = true;
			break;
		case KILL_REQUESTER:
			t.role[0] = kill_requester_0;
			t.role[1] = victim_source;
			t.role[2] = third;
			t.sigkilled[1] = true;
			t.opens_late[1] = true;
			break;
		case DESTROY_TARGET:
		case DESTROY_BUSY:
			t.role[0] = destroyer_0;
			t.role[1] = destroyed_peer;
			t.role[2] = third;
			break;
		case EXIT:
		case UNDERSCORE_EXIT:
			t.role[0] = exit_survivor_0;
			t.role[1] = exiting;
			t.role[2] = next_process;
			t.opens_late[2] = true;
			break;
		case RESTART:
			t.role[0] = restart_survivor_0;
			t.role[1] = victim_target;
			t.role[2] = restarted;
			t.sigkilled[1] = true;
			t.opens_late[2] = true;
			break;
		}
		return h_main(&t);
	}
	fprintf(stderr, "usage: %s kill_responder|kill_requester|"
		"destroy_target|destroy_busy|exit|_exit|restart\n", argv[0]);
	return 2;
}
