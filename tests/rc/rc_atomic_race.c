/*
 * rc.atomic_race: atomics from two processes on one word are atomic.
 *
 * Role 0 owns an 8-byte counter; roles 1 and 2, each its own process with
 * its own QP to role 0, run N FETCH_AND_ADDs on it at the same time, 16 in
 * flight each.  Role 1 adds 1 (the low half), role 2 adds 2^32 (the high
 * half), so the final value must be exactly initial + N + N * 2^32, and
 * because each half has a single writer whose QP executes in order, the
 * k-th result a client gets back must show its own half at initial + k.
 * A lost or torn update breaks one or the other.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	N = 4000,
	DEPTH = 16,		/* = max_rd_atomic */
	BUF = 4096,
	CTR_OFF = 512,
	LO0 = 1000,		/* initial halves: no carry out of the low */
	HI0 = 7,
};

static void owner(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep[2];
	struct h_buf b;
	uint8_t want[BUF];
	uint64_t v = (uint64_t)HI0 << 32 | LO0;

	h_buf_alloc(p, &b, BUF,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	h_fill(b.mem, BUF, 130);
	memcpy(b.mem + CTR_OFF, &v, 8);
	for (int i = 0; i < 2; i++) {
		h_ep_create(p, &ep[i], &c);
		h_ep_connect(p, &ep[i], p->sock[i]);
		h_send_rbuf(p->sock[i], &b);
	}
	/* start both together, then wait for both */
	for (int i = 0; i < 2; i++)
		h_sync(p->sock[i]);
	for (int i = 0; i < 2; i++)
		h_sync(p->sock[i]);

	h_fill(want, BUF, 130);
	v = ((uint64_t)HI0 + N) << 32 | (LO0 + N);
	memcpy(want + CTR_OFF, &v, 8);
	h_expect_mem(b.mem, want, BUF, "counter and its neighbours");
	for (int i = 0; i < 2; i++)
		h_ep_destroy(&ep[i]);
	h_buf_free(&b);
}

static void client(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	bool low = p->role == 1;
	uint64_t add = low ? 1 : 1ull << 32;
	int sock = p->sock[0];
	struct h_ep ep;
	struct h_buf b;
	struct h_rbuf r;
	uint64_t *res;

	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, N * 8, IBV_ACCESS_LOCAL_WRITE);
	res = (uint64_t *)b.mem;
	h_ep_connect(p, &ep, sock);
	r = h_recv_rbuf(sock);
	h_sync(sock);

	for (uint64_t i = 0; i < N + DEPTH; i++) {
		if (i >= DEPTH)
			H_EXPECT_SEND(&ep, .wr_id = i - DEPTH,
				      .opcode = IBV_WC_FETCH_ADD, .byte_len = 8);
		if (i < N) {
			struct ibv_sge sge = { (uintptr_t)&res[i], 8, b.mr->lkey };

			h_post_atomic(&ep, i, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge,
				      IBV_SEND_SIGNALED, r.addr + CTR_OFF,
				      r.rkey, add, 0);
		}
	}
	for (uint64_t k = 0; k < N; k++) {
		uint64_t mine = low ? res[k] & 0xffffffff : res[k] >> 32;
		uint64_t want = (low ? LO0 : HI0) + k;

		if (mine != want)
			h_fail("FETCH_ADD #%llu returned 0x%016llx: own half %llu, "
			       "want %llu", (unsigned long long)k,
			       (unsigned long long)res[k],
			       (unsigned long long)mine, (unsigned long long)want);
	}
	h_sync(sock);
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.atomic_race",
		.nroles = 3,
		.role = { owner, client, client },
		.deadline_s = 50,
	};

	return h_main(&t);
}
