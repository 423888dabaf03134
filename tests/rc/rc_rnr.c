/*
 * Receiver not ready (argv[1]):
 *
 * rc.rnr.delayed_recv    two SENDs are posted before the responder has any
 *                        receive; it posts them 50 ms later.  With rnr_retry 7
 *                        (retry for ever) both complete successfully, no
 *                        earlier than the receives were posted, with the data
 *                        intact.
 * rc.rnr.retry_exceeded  rnr_retry 0 and no receive ever: the SEND completes
 *                        with IBV_WC_RNR_RETRY_EXC_ERR, the WR behind it is
 *                        flushed, the requester QP is in ERR, while the
 *                        responder QP stays in RTS and sees no completion.
 *
 * Role 0 is the requester, role 1 the responder.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"

enum {
	DELAY_MS = 50,
	MAX_MS = 3000,		/* generous: ASan builds on a loaded 2-core box */
	LEN0 = 5000,		/* two packets at path MTU 4096 */
	LEN1 = 1,
	BUF = 16384,
	RECV_OFF = 8192,
};

static void delayed_recv(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	uint8_t want[BUF];
	int sock = p->sock[0];

	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF, IBV_ACCESS_LOCAL_WRITE);
	h_fill(b.mem, BUF, 50 + (uint64_t)p->role);
	h_ep_connect(p, &ep, sock);

	if (p->role == 0) {
		struct ibv_sge s0 = { (uintptr_t)b.mem, LEN0, b.mr->lkey };
		struct ibv_sge s1 = { (uintptr_t)b.mem + LEN0, LEN1, b.mr->lkey };
		uint64_t t0 = h_now_ns(), ms;
		char go = 'P';

		h_post_rdma(&ep, 1, IBV_WR_SEND, &s0, 1, IBV_SEND_SIGNALED, 0, 0, 0);
		h_post_rdma(&ep, 2, IBV_WR_SEND_WITH_IMM, &s1, 1,
			    IBV_SEND_SIGNALED, 0, 0, 0x11223344);
		h_send(sock, &go, 1);
		H_EXPECT_SEND(&ep, .wr_id = 1, .opcode = IBV_WC_SEND);
		H_EXPECT_SEND(&ep, .wr_id = 2, .opcode = IBV_WC_SEND);
		ms = (h_now_ns() - t0) / 1000000;
		printf("SENDs completed %llu ms after posting\n",
		       (unsigned long long)ms);
		/* an RC SEND is acknowledged only once a receive took it */
		H_CHECK(ms >= DELAY_MS && ms < DELAY_MS + MAX_MS);
		h_fill(want, BUF, 50);	/* the source is left as it was */
	} else {
		struct ibv_sge s0 = { (uintptr_t)b.mem + RECV_OFF, 6000, b.mr->lkey };
		struct ibv_sge s1 = { (uintptr_t)b.mem + RECV_OFF + 6000, 100,
				      b.mr->lkey };
		uint8_t req[LEN0 + LEN1];
		char go;

		h_recv(sock, &go, 1);
		h_sleep_ms(DELAY_MS);
		h_post_recv(&ep, 10, &s0, 1);
		h_post_recv(&ep, 11, &s1, 1);
		H_EXPECT_RECV(&ep, .wr_id = 10, .opcode = IBV_WC_RECV,
			      .byte_len = LEN0);
		H_EXPECT_RECV(&ep, .wr_id = 11, .opcode = IBV_WC_RECV,
			      .byte_len = LEN1, .with_imm = true,
			      .imm = 0x11223344);
		/* background, with the two messages at their receive buffers */
		h_fill(want, BUF, 51);
		h_fill(req, sizeof(req), 50);
		memcpy(want + RECV_OFF, req, LEN0);
		memcpy(want + RECV_OFF + 6000, req + LEN0, LEN1);
	}
	h_sync(sock);
	h_expect_mem(b.mem, want, BUF, "memory after the delayed receives");
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

static void retry_exceeded(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	int sock = p->sock[0];

	c.rnr_retry = 0;
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF, IBV_ACCESS_LOCAL_WRITE);
	h_ep_connect(p, &ep, sock);

	if (p->role == 0) {
		struct ibv_sge sge = { (uintptr_t)b.mem, 64, b.mr->lkey };
		uint64_t t0 = h_now_ns(), ms;

		h_post_rdma(&ep, 1, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
		h_post_rdma(&ep, 2, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
		H_EXPECT_SEND(&ep, .wr_id = 1, .status = IBV_WC_RNR_RETRY_EXC_ERR);
		ms = (h_now_ns() - t0) / 1000000;
		H_CHECK(ms < MAX_MS);
		H_EXPECT_SEND(&ep, .wr_id = 2, .status = IBV_WC_WR_FLUSH_ERR);
		h_expect_no_wc(ep.scq, 20);
		H_EQ(h_qp_state(ep.qp), IBV_QPS_ERR);
	}
	h_sync(sock);
	if (p->role == 1) {
		/* an RNR NAK is not an error for the responder */
		h_expect_no_wc(ep.rcq, 20);
		H_EQ(h_qp_state(ep.qp), IBV_QPS_RTS);
	}
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

int main(int argc, char **argv)
{
	struct h_test t = { .nroles = 2, .deadline_s = 25 };

	if (argc > 1 && !strcmp(argv[1], "delayed_recv")) {
		t.name = "rc.rnr.delayed_recv";
		t.role[0] = t.role[1] = delayed_recv;
	} else if (argc > 1 && !strcmp(argv[1], "retry_exceeded")) {
		t.name = "rc.rnr.retry_exceeded";
		t.role[0] = t.role[1] = retry_exceeded;
	} else {
		fprintf(stderr, "usage: %s delayed_recv|retry_exceeded\n", argv[0]);
		return 2;
	}
	return h_main(&t);
}
