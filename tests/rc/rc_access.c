/*
 * rc.access.<case>: remote access violations (argv[1] names the case).
 *
 * Each attempt runs on a freshly connected QP pair, because the error moves
 * the requester's QP to ERR.  The responder registers the middle page of a
 * three-page area, so out-of-bounds accesses would hit real memory, and
 * fills the whole area with a pattern.  Every attempt must complete with
 * IBV_WC_REM_ACCESS_ERR, leave the whole area (and the requester's READ/atomic
 * sink) unchanged, put the requester's QP in ERR, and flush the two WRs
 * posted after it with IBV_WC_WR_FLUSH_ERR, in order.  Path MTU 1024 makes
 * the page-sized accesses multi-packet messages.
 *
 * Role 0 is the requester, role 1 the responder.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	PAGE = 4096,
	AREA = 3 * PAGE,	/* the MR is [PAGE, 2 * PAGE) */
	ALL = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
	      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
};

struct attempt {
	enum ibv_wr_opcode op;
	int64_t off;		/* from the start of the MR */
	uint32_t len;
	bool bad_rkey;
};

struct access_case {
	const char *name;
	int mr_access;
	bool other_pd;		/* MR in a PD other than the QP's */
	struct attempt at[6];	/* terminated by len 0 */
};

static const struct access_case cases[] = {
	{ "bad_rkey", ALL, false, {
		{ IBV_WR_RDMA_WRITE, 0, 64, true },
		{ IBV_WR_RDMA_READ, 0, 64, true },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, true },
	} },
	{ "out_of_bounds", ALL, false, {
		{ IBV_WR_RDMA_WRITE, PAGE - 63, 64, false },	/* last byte outside */
		{ IBV_WR_RDMA_WRITE, -8, 16, false },		/* starts before */
		{ IBV_WR_RDMA_READ, PAGE - 63, 64, false },
		{ IBV_WR_RDMA_READ, 0, PAGE + 1, false },
		{ IBV_WR_ATOMIC_CMP_AND_SWP, PAGE, 8, false },
	} },
	{ "no_remote_write", ALL & ~IBV_ACCESS_REMOTE_WRITE, false, {
		{ IBV_WR_RDMA_WRITE, 0, 64, false },
		{ IBV_WR_RDMA_WRITE, 0, PAGE, false },		/* 4 packets */
	} },
	{ "no_remote_read", ALL & ~IBV_ACCESS_REMOTE_READ, false, {
		{ IBV_WR_RDMA_READ, 0, 64, false },
	} },
	{ "no_remote_atomic", ALL & ~IBV_ACCESS_REMOTE_ATOMIC, false, {
		{ IBV_WR_ATOMIC_CMP_AND_SWP, 0, 8, false },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, false },
	} },
	{ "other_pd", ALL, true, {
		{ IBV_WR_RDMA_WRITE, 0, 64, false },
		{ IBV_WR_RDMA_READ, 0, 64, false },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, false },
	} },
};

static const struct access_case *the_case;

static void requester(struct h_proc *p, const struct attempt *at)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	uint8_t *want = malloc(AREA);
	struct h_rbuf r;
	int sock = p->sock[0];
	bool atomic = at->op == IBV_WR_ATOMIC_CMP_AND_SWP ||
		      at->op == IBV_WR_ATOMIC_FETCH_AND_ADD;
	struct ibv_sge sge;

	H_CHECK(want);
	c.mtu = IBV_MTU_1024;
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, AREA, ALL);
	h_fill(b.mem, AREA, 70);
	memcpy(want, b.mem, AREA);
	h_ep_connect(p, &ep, sock);
	r = h_recv_rbuf(sock);

	sge = (struct ibv_sge){ (uintptr_t)b.mem, at->len, b.mr->lkey };
	if (atomic) {
		/* Operands that would change the target if executed: add 1, or
		 * compare with its current value (known from the responder's
		 * pattern) and swap in the complement. */
		uint8_t *bg = malloc(AREA);
		uint64_t cur;

		H_CHECK(bg);
		h_fill(bg, AREA, 71);
		memcpy(&cur, bg + PAGE + at->off, 8);
		free(bg);
		h_post_atomic(&ep, 1, at->op, &sge, IBV_SEND_SIGNALED,
			      r.addr + (uint64_t)at->off,
			      at->bad_rkey ? r.rkey ^ 1 : r.rkey,
			      at->op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 1 : cur,
			      ~cur);
	} else {
		h_post_rdma(&ep, 1, at->op, &sge, 1, IBV_SEND_SIGNALED,
			    r.addr + (uint64_t)at->off,
			    at->bad_rkey ? r.rkey ^ 1 : r.rkey, 0);
	}
	H_EXPECT_SEND(&ep, .wr_id = 1, .status = IBV_WC_REM_ACCESS_ERR);
	H_EQ(h_qp_state(ep.qp), IBV_QPS_ERR);

	/* Valid WRs behind the failed one are flushed, not executed. */
	sge.length = 8;
	h_post_rdma(&ep, 2, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	h_post_rdma(&ep, 3, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
	H_EXPECT_SEND(&ep, .wr_id = 2, .status = IBV_WC_WR_FLUSH_ERR);
	H_EXPECT_SEND(&ep, .wr_id = 3, .status = IBV_WC_WR_FLUSH_ERR);
	h_expect_no_wc(ep.scq, 20);
	h_expect_mem(b.mem, want, AREA, "requester memory after the violation");

	h_sync(sock);
	h_ep_destroy(&ep);
	h_buf_free(&b);
	free(want);
}

static void responder(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct ibv_pd *pd = p->pd;
	struct h_ep ep;
	struct ibv_mr *mr;
	uint8_t *area, *want = malloc(AREA);
	void *mem;
	struct h_rbuf r;
	int sock = p->sock[0];

	H_CHECK(want);
	H_OK(posix_memalign(&mem, PAGE, AREA));
	area = mem;
	h_fill(area, AREA, 71);
	memcpy(want, area, AREA);
	if (the_case->other_pd) {
		pd = ibv_alloc_pd(p->ctx);
		H_CHECK(pd);
	}
	mr = ibv_reg_mr(pd, area + PAGE, PAGE, the_case->mr_access);
	if (!mr)
		h_fail("ibv_reg_mr: %s", strerror(errno));
	c.mtu = IBV_MTU_1024;
	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, sock);
	r = (struct h_rbuf){ (uintptr_t)area + PAGE, mr->rkey, PAGE };
	h_send(sock, &r, sizeof(r));

	h_sync(sock);
	h_expect_mem(area, want, AREA, "responder memory after the violation");
	h_ep_destroy(&ep);
	H_OK(ibv_dereg_mr(mr));
	if (pd != p->pd)
		H_OK(ibv_dealloc_pd(pd));
	free(area);
	free(want);
}

static void run(struct h_proc *p)
{
	for (int i = 0; i < 6 && the_case->at[i].len; i++) {
		if (p->role == 0)
			requester(p, &the_case->at[i]);
		else
			responder(p);
	}
}

int main(int argc, char **argv)
{
	char name[64];
	struct h_test t = { .name = name, .nroles = 2, .role = { run, run },
			    .deadline_s = 25 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (argc > 1 && !strcmp(argv[1], cases[i].name))
			the_case = &cases[i];
	if (!the_case) {
		fprintf(stderr, "usage: %s <case>; cases:", argv[0]);
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			fprintf(stderr, " %s", cases[i].name);
		fprintf(stderr, "\n");
		return 2;
	}
	snprintf(name, sizeof(name), "rc.access.%s", the_case->name);
	return h_main(&t);
}
