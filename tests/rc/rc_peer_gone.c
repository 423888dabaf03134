/*
 * rc.peer_gone.<how>: the responder disappears after a working exchange.
 *
 *   crash       the responder process _exit()s without releasing anything
 *   destroy_qp  the responder destroys its QP and stays alive
 *
 * With timeout 10 (4.096 us * 2^10 = 4.2 ms) and retry_cnt 7 the requester's
 * next WRITE must end with IBV_WC_RETRY_EXC_ERR after 1 + 7 unanswered
 * transmissions, i.e. about 34 ms: the test accepts half that as the lower
 * bound (timer granularity) and 2 s as the upper one (slow, loaded machines).
 * The WR behind it is flushed and the QP is in ERR.
 *
 * Role 0 is the requester, role 1 the responder.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { TIMEOUT = 10, RETRY_CNT = 7, MAX_MS = 2000, BUF = 4096 };

static bool crash;

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	struct h_rbuf r;
	struct ibv_sge sge;
	int sock = p->sock[0];
	double expect_ms = 4.096e-3 * (1 << TIMEOUT) * (1 + RETRY_CNT), ms;
	uint64_t t0;

	c.timeout = TIMEOUT;
	c.retry_cnt = RETRY_CNT;
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	h_ep_connect(p, &ep, sock);
	h_send_rbuf(sock, &b);
	r = h_recv_rbuf(sock);
	sge = (struct ibv_sge){ (uintptr_t)b.mem, 64, b.mr->lkey };

	if (p->role == 1) {
		h_sync(sock);		/* the first WRITE went through */
		if (crash)
			_exit(0);
		h_ep_destroy(&ep);
		h_sync(sock);		/* QP gone */
		h_sync(sock);		/* requester done */
		h_buf_free(&b);
		return;
	}

	/* The connection works... */
	h_post_rdma(&ep, 1, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	H_EXPECT_SEND(&ep, .wr_id = 1, .opcode = IBV_WC_RDMA_WRITE);
	h_sync(sock);
	/* ...until the peer is gone. */
	if (crash)
		H_CHECK(h_peer_closed(sock, 5000));
	else
		h_sync(sock);
	t0 = h_now_ns();
	h_post_rdma(&ep, 2, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	h_post_rdma(&ep, 3, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	H_EXPECT_SEND(&ep, .wr_id = 2, .status = IBV_WC_RETRY_EXC_ERR);
	ms = (double)(h_now_ns() - t0) / 1e6;
	printf("IBV_WC_RETRY_EXC_ERR after %.1f ms (%d x %.1f ms expected)\n",
	       ms, 1 + RETRY_CNT, expect_ms / (1 + RETRY_CNT));
	if (ms < expect_ms / 2 || ms > MAX_MS)
		h_fail("retries took %.1f ms, want %.1f..%d ms", ms,
		       expect_ms / 2, MAX_MS);
	H_EXPECT_SEND(&ep, .wr_id = 3, .status = IBV_WC_WR_FLUSH_ERR);
	H_EQ(h_qp_state(ep.qp), IBV_QPS_ERR);
	if (!crash)
		h_sync(sock);
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

int main(int argc, char **argv)
{
	struct h_test t = { .nroles = 2, .role = { run, run }, .deadline_s = 25 };

	if (argc > 1 && !strcmp(argv[1], "crash")) {
		t.name = "rc.peer_gone.crash";
		crash = true;
	} else if (argc > 1 && !strcmp(argv[1], "destroy_qp")) {
		t.name = "rc.peer_gone.destroy_qp";
	} else {
		fprintf(stderr, "usage: %s crash|destroy_qp\n", argv[0]);
		return 2;
	}
	return h_main(&t);
}
