/*
 * rc.passive_target: one-sided operations progress without the target.
 *
 * After connecting, registering memory and posting one receive, the target
 * (role 1) spins on the CPU calling no verb at all, as a compute-bound
 * application would.  The initiator (role 0) meanwhile does a 64 KiB WRITE,
 * a READ of it back, a READ of memory the target filled, a CMP_AND_SWP, a
 * FETCH_AND_ADD and a SEND; all must complete with the right values, which
 * only happens if the library answers on its own.  Then the target stops
 * spinning and checks its memory and the SEND's receive completion.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	KIB = 1024,
	BUF = 256 * KIB,
	W_OFF = 0, W_LEN = 64 * KIB,		/* WRITE target */
	RB_OFF = 64 * KIB,			/* initiator: READ-back sink */
	R_OFF = 128 * KIB, R_LEN = 32 * KIB,	/* target-filled READ source */
	ATOM_OFF = 192 * KIB,
	RES_OFF = 192 * KIB + 64,		/* initiator: atomic results */
	RECV_OFF = 200 * KIB, S_LEN = 4000,	/* SEND */
	SPIN_S = 20,
};

static void initiator(struct h_ep *ep, struct h_buf *b, struct h_rbuf r,
		      const uint8_t *target_bg, uint8_t *want)
{
	uint32_t lk = b->mr->lkey;
	struct ibv_sge sge;
	uint64_t old, v;

	sge = (struct ibv_sge){ (uintptr_t)b->mem + W_OFF, W_LEN, lk };
	h_post_rdma(ep, 1, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr + W_OFF, r.rkey, 0);
	H_EXPECT_SEND(ep, .wr_id = 1, .opcode = IBV_WC_RDMA_WRITE);

	sge = (struct ibv_sge){ (uintptr_t)b->mem + RB_OFF, W_LEN, lk };
	h_post_rdma(ep, 2, IBV_WR_RDMA_READ, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr + W_OFF, r.rkey, 0);
	H_EXPECT_SEND(ep, .wr_id = 2, .opcode = IBV_WC_RDMA_READ, .byte_len = W_LEN);
	memcpy(want + RB_OFF, b->mem + W_OFF, W_LEN);

	sge = (struct ibv_sge){ (uintptr_t)b->mem + R_OFF, R_LEN, lk };
	h_post_rdma(ep, 3, IBV_WR_RDMA_READ, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr + R_OFF, r.rkey, 0);
	H_EXPECT_SEND(ep, .wr_id = 3, .opcode = IBV_WC_RDMA_READ, .byte_len = R_LEN);
	memcpy(want + R_OFF, target_bg + R_OFF, R_LEN);

	memcpy(&old, target_bg + ATOM_OFF, 8);
	sge = (struct ibv_sge){ (uintptr_t)b->mem + RES_OFF, 8, lk };
	h_post_atomic(ep, 4, IBV_WR_ATOMIC_CMP_AND_SWP, &sge, IBV_SEND_SIGNALED,
		      r.addr + ATOM_OFF, r.rkey, old, 12345);
	H_EXPECT_SEND(ep, .wr_id = 4, .opcode = IBV_WC_COMP_SWAP, .byte_len = 8);
	memcpy(want + RES_OFF, &old, 8);

	sge.addr += 8;
	h_post_atomic(ep, 5, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, IBV_SEND_SIGNALED,
		      r.addr + ATOM_OFF, r.rkey, 7, 0);
	H_EXPECT_SEND(ep, .wr_id = 5, .opcode = IBV_WC_FETCH_ADD, .byte_len = 8);
	v = 12345;
	memcpy(want + RES_OFF + 8, &v, 8);

	sge = (struct ibv_sge){ (uintptr_t)b->mem + RECV_OFF, S_LEN, lk };
	h_post_rdma(ep, 6, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
	H_EXPECT_SEND(ep, .wr_id = 6, .opcode = IBV_WC_SEND);
}

/* Busy until the initiator says it is done: no verbs, no sleeping. */
static void spin(int sock)
{
	volatile uint64_t work = 0;
	uint64_t end = h_now_ns() + (uint64_t)SPIN_S * 1000000000ull;

	for (uint64_t i = 0; i < (uint64_t)SPIN_S * 1000000000ull; i++) {
		struct pollfd pfd = { .fd = sock, .events = POLLIN };

		work = work * 6364136223846793005ull + i;
		if (i % 4096)
			continue;
		if (poll(&pfd, 1, 0) == 1)
			return;
		if (h_now_ns() >= end)
			break;
	}
	h_fail("the initiator did not finish within %d s", SPIN_S);
}

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	uint8_t *bg[2] = { malloc(BUF), malloc(BUF) }, *want = malloc(BUF);
	struct h_ep ep;
	struct h_buf b;
	struct h_rbuf r;
	int sock = p->sock[0];

	H_CHECK(bg[0] && bg[1] && want);
	h_fill(bg[0], BUF, 110);
	h_fill(bg[1], BUF, 111);
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	memcpy(b.mem, bg[p->role], BUF);
	memcpy(want, bg[p->role], BUF);
	h_ep_connect(p, &ep, sock);
	h_send_rbuf(sock, &b);
	r = h_recv_rbuf(sock);

	if (p->role == 0) {
		h_sync(sock);
		initiator(&ep, &b, r, bg[1], want);
		h_sync(sock);
	} else {
		struct ibv_sge sge = { (uintptr_t)b.mem + RECV_OFF, S_LEN + 96,
				       b.mr->lkey };
		uint64_t v;

		h_post_recv(&ep, 9, &sge, 1);
		h_sync(sock);
		spin(sock);
		h_sync(sock);
		H_EXPECT_RECV(&ep, .wr_id = 9, .opcode = IBV_WC_RECV,
			      .byte_len = S_LEN);
		memcpy(want + W_OFF, bg[0] + W_OFF, W_LEN);
		memcpy(want + RECV_OFF, bg[0] + RECV_OFF, S_LEN);
		v = 12345 + 7;
		memcpy(want + ATOM_OFF, &v, 8);
	}
	h_expect_mem(b.mem, want, BUF, p->role ? "target memory" :
						 "initiator memory");
	h_ep_destroy(&ep);
	h_buf_free(&b);
	free(bg[0]);
	free(bg[1]);
	free(want);
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.passive_target",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 25,
	};

	return h_main(&t);
}
