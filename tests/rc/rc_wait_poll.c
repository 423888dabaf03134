/*
 * rc.wait.poll: a thread about to sleep in ibv_get_cq_event polls first,
 * for as long as its recent events took to come (UROCE_WAIT_POLL_US at
 * most), and sleeps at once once they come seldom.
 *
 * Both roles sleep on a completion channel (one for both CQs) in a
 * ping-pong of SENDs: role 0 asks, role 1 answers at once.  Then role 0
 * waits IDLE_MS for one more message: that wait must cost the process
 * little CPU (it polls for one budget at most, then sleeps).  The counters
 * say how the waits ended: waits_polled, by the poll; waits_slept, in a
 * sleep.  Argument "poll" (UROCE_WAIT_POLL_US=1000, room enough for a
 * sanitizer's slower answers): on the same-host path most waits of the
 * ping-pong end by the poll, the long one in a sleep; over UDP, where a
 * look is a system call, no wait polls.  Argument "sleep"
 * (UROCE_WAIT_POLL_US=0): no wait polls.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "harness.h"

enum { ROUNDS = 2000, MSG = 64, DEPTH = 4, IDLE_MS = 300 };
enum mode { POLL, SLEEP };

/* Takes one completion of cq if there is one; fails on an error. */
static bool take(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int n = ibv_poll_cq(cq, 1, wc);

	H_CHECK(n >= 0);
	if (n == 1 && wc->status != IBV_WC_SUCCESS)
		h_fail("completion %" PRIu64 ": status %s", wc->wr_id,
		       ibv_wc_status_str(wc->status));
	return n == 1;
}

/* Waits as an event-driven program does: poll, arm, poll again, sleep. */
static void wait_recv(struct ibv_comp_channel *ch, struct h_ep *ep,
		      struct ibv_wc *wc)
{
	struct ibv_cq *cq;
	void *ctx;

	for (unsigned i = 0; i < 2 * H_WC_TIMEOUT_MS; i++) {
		if (take(ep->rcq, wc))
			return;
		H_OK(ibv_req_notify_cq(ep->rcq, 0));
		if (take(ep->rcq, wc))
			return;
		H_OK(ibv_get_cq_event(ch, &cq, &ctx));
		H_CHECK(cq == ep->rcq);
		ibv_ack_cq_events(cq, 1);
	}
	h_fail("no receive completion after %u events", 2 * H_WC_TIMEOUT_MS);
}

static void send_msg(struct h_ep *ep, struct h_buf *b, uint64_t n)
{
	struct ibv_sge sge = { (uintptr_t)b->mem + MSG * DEPTH, MSG,
			       b->mr->lkey };
	struct ibv_wc wc;

	memcpy(b->mem + MSG * DEPTH, &n, sizeof(n));
	h_post_rdma(ep, n, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
	/* the send CQ is never armed: its completions are taken as they come */
	while (take(ep->scq, &wc))
		;
}

static void recv_msg(struct ibv_comp_channel *ch, struct h_ep *ep,
		     struct h_buf *b, uint64_t n)
{
	struct ibv_wc wc;

	wait_recv(ch, ep, &wc);
	h_recv_slot_done(ep, b, &wc, MSG, n);
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	H_CHECK(!getrusage(RUSAGE_SELF, &ru));
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
		       1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static void run(struct h_proc *p)
{
	static const char *const names[] = { "waits_polled", "waits_slept" };
	struct h_qp_cfg c = h_qp_defaults(p);
	struct ibv_comp_channel *ch;
	struct h_ep ep;
	struct h_buf b;
	uint64_t v[2], t0, cpu0, wall, cpu;
	char go = 'g';

	ch = ibv_create_comp_channel(p->ctx);
	H_CHECK(ch);
	c.channel = ch;
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, MSG * (DEPTH + 1), IBV_ACCESS_LOCAL_WRITE);
	h_post_recv_slots(&ep, &b, DEPTH, MSG);
	h_ep_connect(p, &ep, p->sock[0]);
	h_sync(p->sock[0]);
	/* role 0 asks, role 1 answers */
	for (uint64_t round = 0; round < ROUNDS; round++) {
		if (p->role == 1)
			recv_msg(ch, &ep, &b, round);
		send_msg(&ep, &b, round);
		if (p->role == 0)
			recv_msg(ch, &ep, &b, round);
	}
	/* the idle wait: role 1 sends its last message IDLE_MS after go */
	if (p->role == 0) {
		h_send(p->sock[0], &go, 1);
		t0 = h_now_ns();
		cpu0 = cpu_ns();
		recv_msg(ch, &ep, &b, ROUNDS);
		wall = h_now_ns() - t0;
		cpu = cpu_ns() - cpu0;
		printf("idle wait: %" PRIu64 " ms, CPU %" PRIu64 " us\n",
		       wall / 1000000, cpu / 1000);
		H_CHECK(wall >= IDLE_MS * 1000000ull);
		H_CHECK(cpu < wall / 4);
	} else {
		h_recv(p->sock[0], &go, 1);
		h_sleep_ms(IDLE_MS);
		send_msg(&ep, &b, ROUNDS);
	}
	h_sync(p->sock[0]);
	h_ep_destroy(&ep);
	h_buf_free(&b);
	H_OK(ibv_destroy_comp_channel(ch));
	h_close_counting(p, names, v, 2);
	printf("role %d: waits polled %" PRIu64 ", slept %" PRIu64 "\n",
	       p->role, v[0], v[1]);
	if (p->t->arg == SLEEP || h_over_udp()) {
		H_EQ(v[0], 0);
		H_CHECK(v[1] > 0);
		return;
	}
	/* Most waits end in the poll.  How many waits there are at all
	 * varies (a completion already there needs none): from a thousand
	 * to two in 2,000 rounds on the bench VM. */
	H_CHECK(v[0] + v[1] > ROUNDS / 4);
	H_CHECK(v[0] > (v[0] + v[1]) / 2);
	if (p->role == 0)
		H_CHECK(v[1] > 0);
}

int main(int argc, char **argv)
{
	struct h_test t = {
		.name = "rc.wait.poll",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 60,
		.arg = POLL,
	};

	if (argc > 1 && !strcmp(argv[1], "sleep")) {
		t.name = "rc.wait.sleep";
		t.arg = SLEEP;
	} else if (argc > 1 && strcmp(argv[1], "poll")) {
		fprintf(stderr, "usage: %s [poll|sleep]\n", argv[0]);
		return 2;
	}
	if (setenv("UROCE_DEBUG", "1", 1) ||
	    setenv("UROCE_WAIT_POLL_US", t.arg == SLEEP ? "0" : "1000", 1))
		return 1;
	return h_main(&t);
}
