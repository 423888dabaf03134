/*
 * rc.opcodes.mtu<N>: every RC opcode, for one path MTU (argv[1] bytes).
 *
 * Data operations run at the sizes where packetisation changes (0, 1, MTU-1,
 * MTU, MTU+1) and at 1 MiB, gathered from and scattered to three uneven SGEs
 * (a different split on the receive side for SEND).  Both sides fill their
 * whole buffer with a background pattern first; afterwards each buffer must
 * equal background + payload exactly, so a misplaced byte is caught as surely
 * as a missing one, and the source must be unchanged.
 *
 * Role 0 is the requester, role 1 the responder.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	BUF = H_MIB + 64 * 1024,
	LOCAL_OFF = 17,		/* odd offsets: no alignment is assumed */
	GAP = 67,		/* untouched bytes between SGEs */
	RECV_SLACK = 100,	/* receive buffers larger than the message */
	REMOTE_OFF = 4096 + 5,
	ATOMIC_OFF = 8192 + 24,	/* 8-byte aligned, as atomics require */
	RESULT_OFF = 3 * 4096 + 40,
};

static const enum ibv_wr_opcode data_ops[] = {
	IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
	IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
};

struct side {
	struct h_proc *p;
	int sock;
	bool requester;
	unsigned mtu;
	struct h_ep ep;
	struct h_buf buf;
	struct h_rbuf peer;
	uint8_t *image;		/* what buf must hold after the operation */
	uint8_t *stream;	/* the payload */
};

static const char *op_name(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND: return "SEND";
	case IBV_WR_SEND_WITH_IMM: return "SEND_WITH_IMM";
	case IBV_WR_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WR_RDMA_WRITE_WITH_IMM: return "RDMA_WRITE_WITH_IMM";
	case IBV_WR_RDMA_READ: return "RDMA_READ";
	case IBV_WR_ATOMIC_CMP_AND_SWP: return "ATOMIC_CMP_AND_SWP";
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return "ATOMIC_FETCH_AND_ADD";
	default: return "?";
	}
}

static enum ibv_wc_opcode send_wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM: return IBV_WC_SEND;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	default: return IBV_WC_FETCH_ADD;
	}
}

/* Background differs per side and per case, so stale data from an earlier
 * case can never pass for the right answer. */
static void fill_background(struct side *s, uint64_t seed)
{
	h_fill(s->buf.mem, BUF, seed * 31 + 7 + (uint64_t)s->requester);
	memcpy(s->image, s->buf.mem, BUF);
}

static void data_case(struct side *s, enum ibv_wr_opcode op, size_t len,
		      uint64_t seed)
{
	bool is_send = op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
	bool is_read = op == IBV_WR_RDMA_READ;
	bool with_imm = op == IBV_WR_SEND_WITH_IMM ||
			op == IBV_WR_RDMA_WRITE_WITH_IMM;
	uint32_t imm = (uint32_t)(seed * 0x9e3779b9u);
	struct h_layout local = h_split(LOCAL_OFF, len, GAP, 0, 0);
	struct h_layout recv = h_split(LOCAL_OFF, len, GAP, 1, RECV_SLACK);
	struct h_layout remote = { .n = 1, .pc = { { REMOTE_OFF, len } } };
	const struct h_layout *src, *dst;
	struct ibv_sge sge[3];
	char what[128];

	/* Where the payload starts and where it must land, seen from here. */
	if (s->requester) {
		src = is_read ? NULL : &local;
		dst = is_read ? &local : NULL;
	} else {
		src = is_read ? &remote : NULL;
		dst = is_read ? NULL : is_send ? &recv : &remote;
	}
	h_fill(s->stream, len, seed);
	fill_background(s, seed);
	if (src) {
		h_scatter(src, s->buf.mem, s->stream, len);
		h_scatter(src, s->image, s->stream, len);
	}
	if (dst)
		h_scatter(dst, s->image, s->stream, len);

	if (!s->requester && (is_send || with_imm))
		h_post_recv(&s->ep, seed, sge,
			    is_send ? h_sges(&recv, &s->buf, sge) : 0);
	h_sync(s->sock);

	if (s->requester) {
		h_post_rdma(&s->ep, seed, op, sge, h_sges(&local, &s->buf, sge),
			    IBV_SEND_SIGNALED, s->peer.addr + REMOTE_OFF,
			    s->peer.rkey, imm);
		H_EXPECT_SEND(&s->ep, .wr_id = seed, .opcode = send_wc_opcode(op),
			      .byte_len = (uint32_t)len);
	} else if (is_send || with_imm) {
		H_EXPECT_RECV(&s->ep, .wr_id = seed,
			      .opcode = is_send ? IBV_WC_RECV :
						  IBV_WC_RECV_RDMA_WITH_IMM,
			      .byte_len = (uint32_t)len, .with_imm = with_imm,
			      .imm = imm);
	}
	/* The requester's completion means the data is in place remotely. */
	h_sync(s->sock);
	snprintf(what, sizeof(what), "%s of %zu bytes, path MTU %u, %s memory",
		 op_name(op), len, s->mtu,
		 s->requester ? "requester" : "responder");
	h_expect_mem(s->buf.mem, s->image, BUF, what);
}

static void atomic_case(struct side *s, enum ibv_wr_opcode op,
			uint64_t compare_add, uint64_t swap, uint64_t before,
			uint64_t after, uint64_t seed)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->buf.mem + RESULT_OFF,
			       .length = 8, .lkey = s->buf.mr->lkey };
	char what[128];

	fill_background(s, seed);
	if (s->requester) {
		memcpy(s->image + RESULT_OFF, &before, 8);
	} else {
		memcpy(s->buf.mem + ATOMIC_OFF, &before, 8);
		memcpy(s->image + ATOMIC_OFF, &after, 8);
	}
	h_sync(s->sock);
	if (s->requester) {
		h_post_atomic(&s->ep, seed, op, &sge, IBV_SEND_SIGNALED,
			      s->peer.addr + ATOMIC_OFF, s->peer.rkey,
			      compare_add, swap);
		H_EXPECT_SEND(&s->ep, .wr_id = seed, .opcode = send_wc_opcode(op),
			      .byte_len = 8);
	}
	h_sync(s->sock);
	snprintf(what, sizeof(what), "%s (case %llu), %s memory", op_name(op),
		 (unsigned long long)seed, s->requester ? "requester" : "responder");
	h_expect_mem(s->buf.mem, s->image, BUF, what);
}

static void run(struct h_proc *p)
{
	struct side s = { .p = p, .sock = p->sock[0], .requester = p->role == 0 };
	struct h_qp_cfg c = h_qp_defaults(p);
	uint64_t rng = 42, v0, v1, v2, add;

	c.mtu = h_mtu_enum(p->t->arg);
	s.mtu = h_mtu_bytes(c.mtu);
	h_ep_create(p, &s.ep, &c);
	H_CHECK(s.ep.cfg.cap.max_send_sge >= 3 && s.ep.cfg.cap.max_recv_sge >= 3);
	h_buf_alloc(p, &s.buf, BUF,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	s.image = malloc(BUF);
	s.stream = malloc(H_MIB);
	H_CHECK(s.image && s.stream);
	h_ep_connect(p, &s.ep, s.sock);
	h_send_rbuf(s.sock, &s.buf);
	s.peer = h_recv_rbuf(s.sock);

	const size_t sizes[] = { 0, 1, s.mtu - 1, s.mtu, s.mtu + 1, H_MIB };
	for (size_t o = 0; o < sizeof(data_ops) / sizeof(data_ops[0]); o++)
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
			data_case(&s, data_ops[o], sizes[z],
				  (uint64_t)s.mtu << 16 | o << 8 | z);

	/* Atomics on 8 bytes: the original value comes back, memory is updated
	 * (or, for a failed compare, left alone), and addition wraps. */
	v0 = h_rand64(&rng);
	v1 = h_rand64(&rng);
	v2 = h_rand64(&rng);
	add = h_rand64(&rng);
	atomic_case(&s, IBV_WR_ATOMIC_CMP_AND_SWP, v0, v1, v0, v1, 901);
	atomic_case(&s, IBV_WR_ATOMIC_CMP_AND_SWP, v0, v2, v1, v1, 902);
	atomic_case(&s, IBV_WR_ATOMIC_FETCH_AND_ADD, add, 0, v1, v1 + add, 903);
	atomic_case(&s, IBV_WR_ATOMIC_FETCH_AND_ADD, UINT64_MAX, 0, v2, v2 - 1,
		    904);

	h_ep_destroy(&s.ep);
	h_buf_free(&s.buf);
	free(s.image);
	free(s.stream);
}

int main(int argc, char **argv)
{
	char name[64];
	struct h_test t = {
		.name = name,
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 50,
		.arg = argc > 1 ? atol(argv[1]) : 1024,
	};

	snprintf(name, sizeof(name), "rc.opcodes.mtu%ld", t.arg);
	return h_main(&t);
}
