/*
 * rc.ack_order: a NIC acknowledges on receipt, so a peer that answers a
 * message at once can never have its answer seen before the ACK of what it
 * answers.  An iSER target depends on it: it takes the next request's
 * receive completion ahead of its own response's send completion for a
 * protocol error.
 *
 * Role 0, the target, sends a response and sleeps on its completion
 * channel (one channel for both CQs; argument "poll": it busy-polls
 * instead); role 1, the initiator, busy-polls for each response and
 * answers it with a SEND on the same QP, every other one at once, the
 * others after some work of its own.  Whenever the target
 * takes an answer's receive completion, the send completion of the
 * response it answers must already be in the send CQ: ROUNDS times.
 *
 * Argument "late": the target polls until its response completed, then
 * polls a CQ it never arms and works up to LATE_US before each sleep, so
 * that answers land while it seems to be polling (same-host peers ring no
 * doorbell then) and it sleeps after: a receiver that sleeps without
 * looking once more loses the wake-up, which only the initiator's
 * retransmission timer then ends: on the same-host path, where nothing is
 * lost, neither side may count a timeout or a retransmission.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { ROUNDS = 10000, MSG = 64, DEPTH = 16, THINK_US = 400, LATE_US = 30 };
enum mode { SLEEP, POLL, LATE };

/* Takes one completion of cq if there is one. */
static bool take(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int n = ibv_poll_cq(cq, 1, wc);

	H_CHECK(n >= 0);
	if (n == 1 && wc->status != IBV_WC_SUCCESS)
		h_fail("completion %llu: status %s",
		       (unsigned long long)wc->wr_id,
		       ibv_wc_status_str(wc->status));
	return n == 1;
}

/* Sleeps until either CQ has an event, and arms both again. */
static void wait_event(struct ibv_comp_channel *ch, struct h_ep *ep)
{
	struct ibv_cq *cq;
	void *ctx;

	H_OK(ibv_get_cq_event(ch, &cq, &ctx));
	H_CHECK(cq == ep->scq || cq == ep->rcq);
	ibv_ack_cq_events(cq, 1);
	H_OK(ibv_req_notify_cq(ep->scq, 0));
	H_OK(ibv_req_notify_cq(ep->rcq, 0));
}

/* Polls a CQ that is never armed (the process polls, say its same-host
 * peers), then works a while calling no verb, as a thread does before it
 * sleeps.  Only after its response completed: with nothing outstanding
 * no retransmission timer rescues a wake-up lost meanwhile. */
static void poll_late(struct ibv_cq *unarmed, uint64_t *seed)
{
	uint64_t until = h_now_ns() + h_rand64(seed) % (LATE_US * 1000);
	struct ibv_wc wc;

	H_CHECK(!take(unarmed, &wc));
	while (h_now_ns() < until)
		;
}

static void target(struct h_proc *p, struct ibv_comp_channel *ch,
		   struct h_ep *ep, struct h_buf *b, struct ibv_cq *unarmed)
{
	uint64_t sent_done = 0, answered = 0, seed = 91;
	uint64_t deadline = h_now_ns() + 60ull * 1000000000ull;

	h_post_recv_slots(ep, b, DEPTH, MSG);
	if (ch) {
		H_OK(ibv_req_notify_cq(ep->scq, 0));
		H_OK(ibv_req_notify_cq(ep->rcq, 0));
	}
	h_sync(p->sock[0]);
	for (uint64_t round = 0; round < ROUNDS; round++) {
		struct ibv_sge sge = { (uintptr_t)b->mem + MSG * DEPTH, MSG,
				       b->mr->lkey };
		struct ibv_wc wc, rwc;

		memcpy(b->mem + MSG * DEPTH, &round, sizeof(round));
		h_post_rdma(ep, round, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED,
			    0, 0, 0);
		while (answered == round) {
			if (h_now_ns() > deadline)
				h_fail("round %llu: no answer",
				       (unsigned long long)round);
			while (take(ep->scq, &wc)) {
				H_EQ(wc.wr_id, sent_done);
				sent_done++;
			}
			if (!take(ep->rcq, &rwc)) {
				if (unarmed && sent_done <= round)
					continue;
				if (unarmed)
					poll_late(unarmed, &seed);
				if (ch)
					wait_event(ch, ep);
				continue;
			}
			/* the answer to response `round`: that response's
			 * ACK came first, so its completion is there */
			while (sent_done <= round && take(ep->scq, &wc)) {
				H_EQ(wc.wr_id, sent_done);
				sent_done++;
			}
			if (sent_done <= round)
				h_fail("round %llu: the answer's receive "
				       "completion came before the send "
				       "completion of the response it answers",
				       (unsigned long long)round);
			answered++;
			uint8_t *msg = b->mem + MSG * rwc.wr_id;
			struct ibv_sge rs = { (uintptr_t)msg, MSG, b->mr->lkey };
			uint64_t got;

			memcpy(&got, msg, sizeof(got));
			H_EQ(got, round);
			h_post_recv(ep, rwc.wr_id, &rs, 1);
		}
	}
	/* every event taken was acknowledged: the CQs can go */
}

static void initiator(struct h_proc *p, struct h_ep *ep, struct h_buf *b)
{
	uint64_t sent_done = 0, seed = 77;

	h_post_recv_slots(ep, b, DEPTH, MSG);
	h_sync(p->sock[0]);
	for (uint64_t round = 0; round < ROUNDS; round++) {
		struct ibv_sge sge = { (uintptr_t)b->mem + MSG * DEPTH, MSG,
				       b->mr->lkey };
		struct ibv_wc wc;

		if (!h_poll(ep->rcq, &wc, H_WC_TIMEOUT_MS))
			h_fail("round %llu: no response",
			       (unsigned long long)round);
		H_CHECK(wc.status == IBV_WC_SUCCESS);
		/* every other response is answered at once, the rest after up
		 * to THINK_US of work that calls no verb (the ACK must not
		 * wait for it), the response's buffer echoed */
		if (round & 1) {
			uint64_t until = h_now_ns() +
					 h_rand64(&seed) % (THINK_US * 1000);

			while (h_now_ns() < until)
				;
		}
		uint8_t *msg = b->mem + MSG * wc.wr_id;
		struct ibv_sge rs = { (uintptr_t)msg, MSG, b->mr->lkey };

		memcpy(b->mem + MSG * DEPTH, msg, MSG);
		h_post_rdma(ep, round, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED,
			    0, 0, 0);
		h_post_recv(ep, wc.wr_id, &rs, 1);
		while (take(ep->scq, &wc))
			sent_done++;
	}
	while (sent_done < ROUNDS) {
		struct ibv_wc wc;

		if (!h_poll(ep->scq, &wc, H_WC_TIMEOUT_MS))
			h_fail("answer %llu: no send completion",
			       (unsigned long long)sent_done);
		H_CHECK(wc.status == IBV_WC_SUCCESS);
		sent_done++;
	}
}

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct ibv_comp_channel *ch = NULL;
	struct ibv_cq *unarmed = NULL;
	struct h_ep ep;
	struct h_buf b;

	if (p->role == 0 && p->t->arg != POLL) {
		ch = ibv_create_comp_channel(p->ctx);
		H_CHECK(ch);
		c.channel = ch;
	}
	if (p->role == 0 && p->t->arg == LATE) {
		unarmed = ibv_create_cq(p->ctx, 1, NULL, NULL, 0);
		H_CHECK(unarmed);
	}
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, MSG * (DEPTH + 1), IBV_ACCESS_LOCAL_WRITE);
	h_ep_connect(p, &ep, p->sock[0]);
	if (p->role == 0)
		target(p, ch, &ep, &b, unarmed);
	else
		initiator(p, &ep, &b);
	h_sync(p->sock[0]);
	h_ep_destroy(&ep);
	h_buf_free(&b);
	if (ch)
		H_OK(ibv_destroy_comp_channel(ch));
	if (unarmed)
		H_OK(ibv_destroy_cq(unarmed));
	if (p->t->arg == LATE && !h_over_udp()) {
		static const char *const names[] = { "timeouts", "retransmits" };
		uint64_t v[2];

		h_close_counting(p, names, v, 2);
		if (v[0] || v[1])
			h_fail("same-host: %" PRIu64 " timeouts, %" PRIu64
			       " retransmits (a wake-up lost)", v[0], v[1]);
	}
}

int main(int argc, char **argv)
{
	static const char *const names[] = {
		[SLEEP] = "rc.ack_order",
		[POLL] = "rc.ack_order.poll",
		[LATE] = "rc.ack_order.late",
	};
	enum mode m = SLEEP;

	if (argc > 1 && !strcmp(argv[1], "poll"))
		m = POLL;
	else if (argc > 1 && !strcmp(argv[1], "late"))
		m = LATE;
	if (m == LATE && setenv("UROCE_DEBUG", "1", 1))
		return 1;
	if (argc > 1 && m == SLEEP) {
		fprintf(stderr, "usage: rc_ack_order [poll|late]\n");
		return 2;
	}
	const struct h_test t = {
		.name = names[m],
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 80,
		.arg = m,
	};

	return h_main(&t);
}
