/*
 * rc.flush: moving a QP to ERR flushes every outstanding WR.
 *
 * The requester posts five receives and six send-queue WRs (SEND, SEND,
 * WRITE, READ, SEND_WITH_IMM, FETCH_ADD).  The responder never posts a
 * receive and rnr_retry is 7, so the first SEND is RNR-retried for ever and
 * nothing behind it can complete (checked).  ibv_modify_qp(ERR) must then
 * complete all eleven with IBV_WC_WR_FLUSH_ERR: send queue and receive queue
 * each in posting order with the right wr_ids, and nothing more.  WRs posted
 * in ERR are accepted and flushed as well.
 *
 * Role 0 is the requester, role 1 the responder.
 */
#include <string.h>

#include "harness.h"

enum { BUF = 8192, RECVS = 5, SENDS = 6 };

static void requester(struct h_ep *ep, struct h_buf *b, struct h_rbuf r)
{
	struct ibv_sge sge = { (uintptr_t)b->mem, 64, b->mr->lkey };
	struct ibv_sge atom = { (uintptr_t)b->mem + 512, 8, b->mr->lkey };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	for (uint64_t i = 0; i < RECVS; i++)
		h_post_recv(ep, 100 + i, &sge, 1);
	h_post_rdma(ep, 1, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
	h_post_rdma(ep, 2, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
	h_post_rdma(ep, 3, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	h_post_rdma(ep, 4, IBV_WR_RDMA_READ, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	h_post_rdma(ep, 5, IBV_WR_SEND_WITH_IMM, &sge, 1, IBV_SEND_SIGNALED,
		    0, 0, 7);
	h_post_atomic(ep, 6, IBV_WR_ATOMIC_FETCH_AND_ADD, &atom,
		      IBV_SEND_SIGNALED, r.addr + 512, r.rkey, 1, 0);
	/* stuck behind the RNR-retried SEND */
	h_expect_no_wc(ep->scq, 100);
	h_expect_no_wc(ep->rcq, 0);

	H_OK(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE));
	H_EQ(h_qp_state(ep->qp), IBV_QPS_ERR);
	for (uint64_t i = 1; i <= SENDS; i++)
		H_EXPECT_SEND(ep, .wr_id = i, .status = IBV_WC_WR_FLUSH_ERR);
	for (uint64_t i = 0; i < RECVS; i++)
		H_EXPECT_RECV(ep, .wr_id = 100 + i, .status = IBV_WC_WR_FLUSH_ERR);
	h_expect_no_wc(ep->scq, 20);
	h_expect_no_wc(ep->rcq, 0);

	/* a QP in ERR still takes WRs, and flushes them */
	h_post_rdma(ep, 7, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
	h_post_recv(ep, 105, &sge, 1);
	H_EXPECT_SEND(ep, .wr_id = 7, .status = IBV_WC_WR_FLUSH_ERR);
	H_EXPECT_RECV(ep, .wr_id = 105, .status = IBV_WC_WR_FLUSH_ERR);
	h_expect_no_wc(ep->scq, 20);
	h_expect_no_wc(ep->rcq, 0);
}

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	uint8_t want[BUF];
	struct h_rbuf r;
	int sock = p->sock[0];

	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	h_fill(b.mem, BUF, 80 + (uint64_t)p->role);
	memcpy(want, b.mem, BUF);
	h_ep_connect(p, &ep, sock);
	h_send_rbuf(sock, &b);
	r = h_recv_rbuf(sock);
	if (p->role == 0)
		requester(&ep, &b, r);
	h_sync(sock);
	/* nothing flushed may have executed, on either side */
	h_expect_mem(b.mem, want, BUF, "memory after the flush");
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.flush",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 25,
	};

	return h_main(&t);
}
