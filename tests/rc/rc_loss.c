/*
 * rc.loss.<mode>: RC stays reliable on a lossy network.
 *
 * Both processes run with UROCE_FAULTS set before they open the device:
 *   drop              drop=0.02,seed=7
 *   drop_dup_reorder  drop=0.02,dup=0.01,reorder=0.01,seed=7
 *   probe             drop=0.02,seed=7 with an ACK timeout of 17 s
 *   busy              the requester's link is busy now and then
 *                     (tx_busy=0.0005,seed=7: 60 ms in which it takes no
 *                     packet, as a full socket or same-host ring), with an
 *                     ACK timeout of 16.8 ms and retry_cnt 2: what a busy
 *                     link held back was not sent, and its QP waits for
 *                     the link, not for ACKs; nothing times out
 * Four rounds, each with 8 x 1 MiB RDMA WRITEs, 8 x 1 MiB SENDs and
 * 2 x 1 MiB RDMA READs in flight at once: 64 MiB written or sent and 8 MiB
 * read.  Every WR completes successfully and in order, every receive gets
 * exactly its message, and every byte is verified, within the deadline.
 * The first two run with a 16.8 ms ACK timeout.  With probe, the whole run
 * must take less than one ACK timeout: the requester's loss probe, not
 * the timeout, recovers the lost NAKs and lost tails of bursts (there are
 * several: with the probe turned off this run takes minutes), and the
 * first probe of a stall resends the last packet alone (tail_probes, as
 * uroce counts them when the requester closes its device).
 *
 * Role 0 is the requester, role 1 the responder.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	MSG = H_MIB,
	N = 8,			/* WRITEs and SENDs per round */
	NR = 2,			/* READs per round */
	ROUNDS = 4,
	/* slots, in MiB, of both buffers */
	WRITE_SLOT = 0, SEND_SLOT = N, READ_SLOT = 2 * N, SLOTS = 2 * N + NR,
	/* 16.8 ms instead of 67 ms: what the loss probe leaves to the ACK
	 * timeout should not slow these down either */
	ACK_TIMEOUT = 12,
	PROBE_ACK_TIMEOUT = 22,		/* 17.2 s */
};

static int ack_timeout = ACK_TIMEOUT;
static const char *requester_faults;	/* busy: the requester's alone */

static uint64_t seed(int round, int kind, int i)
{
	return (uint64_t)round << 16 | (uint64_t)kind << 8 | (uint64_t)i;
}

static uint8_t *slot(struct h_buf *b, int s)
{
	return b->mem + (size_t)s * MSG;
}

static void check_slot(struct h_buf *b, int s, uint8_t *scratch, uint64_t sd,
		       const char *what, int round, int i)
{
	char d[96];

	h_fill(scratch, MSG, sd);
	snprintf(d, sizeof(d), "round %d, %s %d", round, what, i);
	h_expect_mem(slot(b, s), scratch, MSG, d);
}

static void requester(struct h_ep *ep, struct h_buf *b, struct h_rbuf r,
		      int sock, uint8_t *scratch)
{
	uint64_t t0 = h_now_ns();
	double s;

	for (int round = 0; round < ROUNDS; round++) {
		struct ibv_sge sge;

		for (int i = 0; i < N; i++) {
			h_fill(slot(b, WRITE_SLOT + i), MSG, seed(round, 'W', i));
			h_fill(slot(b, SEND_SLOT + i), MSG, seed(round, 'S', i));
		}
		h_sync(sock);
		for (int i = 0; i < N; i++) {
			sge = (struct ibv_sge){ (uintptr_t)slot(b, WRITE_SLOT + i),
						MSG, b->mr->lkey };
			h_post_rdma(ep, (uint64_t)i, IBV_WR_RDMA_WRITE, &sge, 1,
				    IBV_SEND_SIGNALED,
				    r.addr + (uint64_t)(WRITE_SLOT + i) * MSG,
				    r.rkey, 0);
			sge.addr = (uintptr_t)slot(b, SEND_SLOT + i);
			h_post_rdma(ep, 100 + (uint64_t)i, IBV_WR_SEND, &sge, 1,
				    IBV_SEND_SIGNALED, 0, 0, 0);
		}
		for (int i = 0; i < NR; i++) {
			sge = (struct ibv_sge){ (uintptr_t)slot(b, READ_SLOT + i),
						MSG, b->mr->lkey };
			h_post_rdma(ep, 200 + (uint64_t)i, IBV_WR_RDMA_READ, &sge,
				    1, IBV_SEND_SIGNALED,
				    r.addr + (uint64_t)(READ_SLOT + i) * MSG,
				    r.rkey, 0);
		}
		for (int i = 0; i < N; i++) {
			H_EXPECT_SEND(ep, .wr_id = (uint64_t)i,
				      .opcode = IBV_WC_RDMA_WRITE);
			H_EXPECT_SEND(ep, .wr_id = 100 + (uint64_t)i,
				      .opcode = IBV_WC_SEND);
		}
		for (int i = 0; i < NR; i++)
			H_EXPECT_SEND(ep, .wr_id = 200 + (uint64_t)i,
				      .opcode = IBV_WC_RDMA_READ, .byte_len = MSG);
		for (int i = 0; i < NR; i++)
			check_slot(b, READ_SLOT + i, scratch, seed(round, 'R', i),
				   "READ", round, i);
		h_sync(sock);
	}
	s = (double)(h_now_ns() - t0) / 1e9;
	printf("%d MiB written/sent and %d MiB read in %.2f s\n",
	       ROUNDS * 2 * N, ROUNDS * NR, s);
	if (ack_timeout == PROBE_ACK_TIMEOUT &&
	    s * 1e9 >= (double)(4096ull << PROBE_ACK_TIMEOUT))
		h_fail("took %.2f s, longer than one ACK timeout: a loss waited "
		       "for it", s);
}

static void responder(struct h_ep *ep, struct h_buf *b, int sock,
		      uint8_t *scratch)
{
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < NR; i++)
			h_fill(slot(b, READ_SLOT + i), MSG, seed(round, 'R', i));
		for (int i = 0; i < N; i++) {
			struct ibv_sge sge = { (uintptr_t)slot(b, SEND_SLOT + i),
					       MSG, b->mr->lkey };

			h_post_recv(ep, 300 + (uint64_t)i, &sge, 1);
		}
		h_sync(sock);
		for (int i = 0; i < N; i++)
			H_EXPECT_RECV(ep, .wr_id = 300 + (uint64_t)i,
				      .opcode = IBV_WC_RECV, .byte_len = MSG);
		h_sync(sock);
		for (int i = 0; i < N; i++) {
			check_slot(b, WRITE_SLOT + i, scratch, seed(round, 'W', i),
				   "WRITE", round, i);
			check_slot(b, SEND_SLOT + i, scratch, seed(round, 'S', i),
				   "SEND", round, i);
		}
	}
}

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	uint8_t *scratch = malloc(MSG);
	struct h_ep ep;
	struct h_buf b;
	struct h_rbuf r;
	int sock = p->sock[0];

	H_CHECK(scratch);
	if (requester_faults) {
		if (p->role == 0 && setenv("UROCE_FAULTS", requester_faults, 1))
			h_fail("setenv UROCE_FAULTS");
		h_open(p);
		c.retry_cnt = 2;
	}
	c.timeout = ack_timeout;
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, (size_t)SLOTS * MSG,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ);
	h_ep_connect(p, &ep, sock);
	h_send_rbuf(sock, &b);
	r = h_recv_rbuf(sock);
	if (p->role == 0)
		requester(&ep, &b, r, sock, scratch);
	else
		responder(&ep, &b, sock, scratch);
	h_expect_no_wc(ep.scq, 0);
	h_expect_no_wc(ep.rcq, 0);
	h_ep_destroy(&ep);
	h_buf_free(&b);
	free(scratch);
	if (p->role == 0 && ack_timeout == PROBE_ACK_TIMEOUT) {
		static const char *const names[] = {
			"loss_probes", "tail_probes", "retransmits",
		};
		uint64_t v[3];

		h_close_counting(p, names, v, 3);
		printf("loss probes %" PRIu64 ", tail probes %" PRIu64
		       ", go-backs %" PRIu64 "\n", v[0], v[1], v[2]);
		H_CHECK(v[1] > 0);
	}
}

int main(int argc, char **argv)
{
	struct h_test t = { .nroles = 2, .role = { run, run }, .deadline_s = 90 };

	if (argc > 1 && !strcmp(argv[1], "drop")) {
		t.name = "rc.loss.drop";
		t.faults = "drop=0.02,seed=7";
	} else if (argc > 1 && !strcmp(argv[1], "drop_dup_reorder")) {
		t.name = "rc.loss.drop_dup_reorder";
		t.faults = "drop=0.02,dup=0.01,reorder=0.01,seed=7";
	} else if (argc > 1 && !strcmp(argv[1], "probe")) {
		t.name = "rc.loss.probe";
		t.faults = "drop=0.02,seed=7";
		ack_timeout = PROBE_ACK_TIMEOUT;
		if (setenv("UROCE_DEBUG", "1", 1))
			return 1;
	} else if (argc > 1 && !strcmp(argv[1], "busy")) {
		t.name = "rc.loss.busy";
		requester_faults = "tx_busy=0.0005,seed=7";
		t.opens_late[0] = t.opens_late[1] = true;
	} else {
		fprintf(stderr, "usage: %s drop|drop_dup_reorder|probe|busy\n",
			argv[0]);
		return 2;
	}
	return h_main(&t);
}
