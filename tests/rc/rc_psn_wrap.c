/*
 * rc.psn_wrap: PSNs are 24 bits and wrap from 0xFFFFFF to 0.
 *
 * Both QPs start with sq_psn = rq_psn = 0xFFFFF0 and path MTU 1024, so the
 * wrap comes 16 packets in, in the middle of a message.  Role 0 pipelines a
 * 128-packet WRITE, a 128-packet READ (whose responses use role 0's PSNs
 * too), a 96-packet SEND from three SGEs, 20 single-packet SENDs and four
 * FETCH_ADDs (372 PSNs); then role 1 WRITEs 128 packets the other way.  All
 * completions arrive in order and every byte of both buffers is as expected.
 */
#include <string.h>
#include <stdlib.h>

#include "harness.h"

enum {
	KIB = 1024,
	BUF = 1024 * KIB,
	START_PSN = 0xfffff0,
	W_OFF = 0, W_LEN = 128 * KIB,		/* 0 -> 1 WRITE */
	R_OFF = 128 * KIB, R_LEN = 128 * KIB,	/* 0 reads 1 */
	S_OFF = 256 * KIB, S_LEN = 96 * KIB,	/* 0 -> 1 SEND */
	BACK_OFF = 384 * KIB, BACK_LEN = 128 * KIB,	/* 1 -> 0 WRITE */
	SMALL_OFF = 600 * KIB, SMALL = 20, SMALL_LEN = 100, SMALL_SLOT = 128,
	ATOM_OFF = 700 * KIB, ATOMS = 4,
	RES_OFF = 704 * KIB,
};

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_layout gather = h_split(S_OFF, S_LEN, 64, 0, 0);
	uint8_t *bg[2] = { malloc(BUF), malloc(BUF) }, *want = malloc(BUF);
	uint8_t *stream = malloc(S_LEN);
	bool a = p->role == 0;
	int sock = p->sock[0];
	struct ibv_sge sge[3];
	struct h_ep ep;
	struct h_buf b;
	struct h_rbuf r;
	uint64_t v;

	H_CHECK(bg[0] && bg[1] && want && stream);
	h_fill(bg[0], BUF, 90);
	h_fill(bg[1], BUF, 91);
	c.mtu = IBV_MTU_1024;
	c.psn = START_PSN;
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	memcpy(b.mem, bg[p->role], BUF);
	h_ep_connect(p, &ep, sock);
	h_send_rbuf(sock, &b);
	r = h_recv_rbuf(sock);

	if (a) {
		h_sync(sock);
		sge[0] = (struct ibv_sge){ (uintptr_t)b.mem + W_OFF, W_LEN, b.mr->lkey };
		h_post_rdma(&ep, 1, IBV_WR_RDMA_WRITE, sge, 1, IBV_SEND_SIGNALED,
			    r.addr + W_OFF, r.rkey, 0);
		sge[0] = (struct ibv_sge){ (uintptr_t)b.mem + R_OFF, R_LEN, b.mr->lkey };
		h_post_rdma(&ep, 2, IBV_WR_RDMA_READ, sge, 1, IBV_SEND_SIGNALED,
			    r.addr + R_OFF, r.rkey, 0);
		h_post_rdma(&ep, 3, IBV_WR_SEND, sge, h_sges(&gather, &b, sge),
			    IBV_SEND_SIGNALED, 0, 0, 0);
		for (uint64_t i = 0; i < SMALL; i++) {
			sge[0] = (struct ibv_sge){
				(uintptr_t)b.mem + SMALL_OFF + i * SMALL_LEN,
				SMALL_LEN, b.mr->lkey };
			h_post_rdma(&ep, 10 + i, IBV_WR_SEND, sge, 1,
				    IBV_SEND_SIGNALED, 0, 0, 0);
		}
		for (uint64_t i = 0; i < ATOMS; i++) {
			sge[0] = (struct ibv_sge){ (uintptr_t)b.mem + RES_OFF + 8 * i,
						   8, b.mr->lkey };
			h_post_atomic(&ep, 40 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, sge,
				      IBV_SEND_SIGNALED, r.addr + ATOM_OFF,
				      r.rkey, 1, 0);
		}
		H_EXPECT_SEND(&ep, .wr_id = 1, .opcode = IBV_WC_RDMA_WRITE);
		H_EXPECT_SEND(&ep, .wr_id = 2, .opcode = IBV_WC_RDMA_READ,
			      .byte_len = R_LEN);
		H_EXPECT_SEND(&ep, .wr_id = 3, .opcode = IBV_WC_SEND);
		for (uint64_t i = 0; i < SMALL; i++)
			H_EXPECT_SEND(&ep, .wr_id = 10 + i, .opcode = IBV_WC_SEND);
		for (uint64_t i = 0; i < ATOMS; i++)
			H_EXPECT_SEND(&ep, .wr_id = 40 + i,
				      .opcode = IBV_WC_FETCH_ADD, .byte_len = 8);
		h_sync(sock);
		h_sync(sock);	/* role 1's WRITE back is done */

		memcpy(want, bg[0], BUF);
		memcpy(want + R_OFF, bg[1] + R_OFF, R_LEN);
		memcpy(want + BACK_OFF, bg[1] + BACK_OFF, BACK_LEN);
		memcpy(&v, bg[1] + ATOM_OFF, 8);
		for (uint64_t i = 0; i < ATOMS; i++, v++)
			memcpy(want + RES_OFF + 8 * i, &v, 8);
	} else {
		sge[0] = (struct ibv_sge){ (uintptr_t)b.mem + S_OFF, S_LEN, b.mr->lkey };
		h_post_recv(&ep, 3, sge, 1);
		for (uint64_t i = 0; i < SMALL; i++) {
			sge[0] = (struct ibv_sge){
				(uintptr_t)b.mem + SMALL_OFF + i * SMALL_SLOT,
				SMALL_SLOT, b.mr->lkey };
			h_post_recv(&ep, 10 + i, sge, 1);
		}
		h_sync(sock);
		H_EXPECT_RECV(&ep, .wr_id = 3, .opcode = IBV_WC_RECV,
			      .byte_len = S_LEN);
		for (uint64_t i = 0; i < SMALL; i++)
			H_EXPECT_RECV(&ep, .wr_id = 10 + i, .opcode = IBV_WC_RECV,
				      .byte_len = SMALL_LEN);
		h_sync(sock);
		sge[0] = (struct ibv_sge){ (uintptr_t)b.mem + BACK_OFF, BACK_LEN,
					   b.mr->lkey };
		h_post_rdma(&ep, 50, IBV_WR_RDMA_WRITE, sge, 1, IBV_SEND_SIGNALED,
			    r.addr + BACK_OFF, r.rkey, 0);
		H_EXPECT_SEND(&ep, .wr_id = 50, .opcode = IBV_WC_RDMA_WRITE);
		h_sync(sock);

		memcpy(want, bg[1], BUF);
		memcpy(want + W_OFF, bg[0] + W_OFF, W_LEN);
		/* the SEND gathered role 0's three pieces into one buffer */
		for (size_t i = 0, done = 0; i < (size_t)gather.n; i++) {
			memcpy(stream + done, bg[0] + gather.pc[i].off,
			       gather.pc[i].len);
			done += gather.pc[i].len;
		}
		memcpy(want + S_OFF, stream, S_LEN);
		for (size_t i = 0; i < SMALL; i++)
			memcpy(want + SMALL_OFF + i * SMALL_SLOT,
			       bg[0] + SMALL_OFF + i * SMALL_LEN, SMALL_LEN);
		memcpy(&v, bg[1] + ATOM_OFF, 8);
		v += ATOMS;
		memcpy(want + ATOM_OFF, &v, 8);
	}
	h_expect_mem(b.mem, want, BUF, a ? "role 0 memory" : "role 1 memory");
	h_ep_destroy(&ep);
	h_buf_free(&b);
	free(bg[0]);
	free(bg[1]);
	free(want);
	free(stream);
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.psn_wrap",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 25,
	};

	return h_main(&t);
}
