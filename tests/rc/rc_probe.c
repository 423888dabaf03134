/*
 * rc.probe.spurious: a loss probe that finds its packet had arrived is
 * known as spurious.  A ping-pong of SENDs over UDP (role 0 asks, role 1
 * answers each at once) with UROCE_FAULTS=reorder: a reordered packet is
 * held until the next one arrives, and in a ping-pong the next one is the
 * sender's tail probe, so the responder takes the probe first and the
 * original after it as a duplicate, and acknowledges both (C9-105).  The
 * requester must count those probes as spurious (which raises its probe
 * floor), and every message arrive once and intact.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { ROUNDS = 2000, MSG = 64, DEPTH = 4 };

static void send_round(struct h_ep *ep, struct h_buf *b, uint64_t round)
{
	struct ibv_sge sge = { (uintptr_t)b->mem + MSG * DEPTH, MSG,
			       b->mr->lkey };
	struct ibv_wc wc;

	memcpy(b->mem + MSG * DEPTH, &round, sizeof(round));
	h_post_rdma(ep, round, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0,
		    0);
	if (!h_poll(ep->scq, &wc, H_WC_TIMEOUT_MS))
		h_fail("round %" PRIu64 ": no send completion", round);
	H_CHECK(wc.status == IBV_WC_SUCCESS);
	H_EQ(wc.wr_id, round);
}

static void recv_round(struct h_ep *ep, struct h_buf *b, uint64_t round)
{
	struct ibv_wc wc;

	if (!h_poll(ep->rcq, &wc, H_WC_TIMEOUT_MS))
		h_fail("round %" PRIu64 ": nothing received", round);
	H_CHECK(wc.status == IBV_WC_SUCCESS);
	h_recv_slot_done(ep, b, &wc, MSG, round);
}

static void run(struct h_proc *p)
{
	static const char *const names[] = {
		"tail_probes", "spurious_probes", "rx_duplicate",
	};
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	uint64_t v[3];

	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, MSG * (DEPTH + 1), IBV_ACCESS_LOCAL_WRITE);
	h_ep_connect(p, &ep, p->sock[0]);
	h_post_recv_slots(&ep, &b, DEPTH, MSG);
	h_sync(p->sock[0]);
	for (uint64_t round = 0; round < ROUNDS; round++) {
		if (p->role == 0) {
			send_round(&ep, &b, round);
			recv_round(&ep, &b, round);
		} else {
			recv_round(&ep, &b, round);
			send_round(&ep, &b, round);
		}
	}
	h_sync(p->sock[0]);
	h_ep_destroy(&ep);
	h_buf_free(&b);
	h_close_counting(p, names, v, 3);
	printf("role %d: tail probes %" PRIu64 ", spurious %" PRIu64
	       ", duplicates received %" PRIu64 "\n",
	       p->role, v[0], v[1], v[2]);
	/* role 1's reordered requests are role 0's probes */
	if (p->role == 0)
		H_CHECK(v[1] > 0);
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.probe.spurious",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 60,
		.faults = "reorder=0.02,seed=11",
	};

	if (setenv("UROCE_DEBUG", "1", 1))
		return 1;
	return h_main(&t);
}
