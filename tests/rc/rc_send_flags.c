/*
 * Send-queue features, one ctest entry each (argv[1]):
 *
 * rc.inline      IBV_SEND_INLINE up to max_inline_data (as ibv_query_qp
 *                reports it) for SEND, SEND_WITH_IMM, RDMA_WRITE and
 *                RDMA_WRITE_WITH_IMM from unregistered memory that is
 *                overwritten as soon as ibv_post_send returns; one byte more
 *                is refused without a completion and the QP stays usable.
 * rc.unsignaled  sq_sig_all = 0 with every 8th WR signaled on a 16-deep send
 *                queue: exactly the signaled WRs complete, in order, the
 *                queue never overflows, and all data lands.
 * rc.post_list   a linked list of mixed WRs in one ibv_post_send on an
 *                sq_sig_all = 1 QP (so unflagged WRs complete too) and a list
 *                of receives in one ibv_post_recv; then a list whose third WR
 *                is invalid: *bad_wr points at it, the two before it run, the
 *                ones from it on do not.
 * rc.held       WRITEs posted one by one right after a poll, behind
 *                unacknowledged ones (which UROCE_TX_HOLD batches over UDP)
 *                or ones the same-host path moved (a burst, which it moves
 *                in one system call), all land while the requester calls no
 *                verb: the ACKs of those ahead, or the engine, send them on,
 *                no poll needed; then the last one's completion is there.
 *
 * Role 0 is the requester, role 1 the responder.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { ALL_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };

/* Both sides keep an image of what their buffer must hold. */
struct side {
	struct h_proc *p;
	int sock;
	bool requester;
	struct h_ep ep;
	struct h_buf buf;
	struct h_rbuf peer;
	uint8_t *image;
};

static void side_open(struct h_proc *p, struct side *s, struct h_qp_cfg *c,
		      size_t len, uint64_t seed)
{
	s->p = p;
	s->sock = p->sock[0];
	s->requester = p->role == 0;
	h_ep_create(p, &s->ep, c);
	h_buf_alloc(p, &s->buf, len, ALL_ACCESS);
	s->image = malloc(len);
	H_CHECK(s->image);
	h_fill(s->buf.mem, len, seed + (uint64_t)p->role);
	memcpy(s->image, s->buf.mem, len);
	h_ep_connect(p, &s->ep, s->sock);
	h_send_rbuf(s->sock, &s->buf);
	s->peer = h_recv_rbuf(s->sock);
}

static void side_check_close(struct side *s, const char *what)
{
	h_expect_mem(s->buf.mem, s->image, s->buf.len, what);
	h_ep_destroy(&s->ep);
	h_buf_free(&s->buf);
	free(s->image);
}

/* ---- rc.inline ---------------------------------------------------------- */

enum { INLINE_WANT = 256, INLINE_BUF = 16384, INLINE_RECV_OFF = 8192 };

static void inline_case(struct side *s, uint32_t max_inline,
			enum ibv_wr_opcode op, uint32_t len, uint64_t seed)
{
	bool is_send = op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
	bool with_imm = op == IBV_WR_SEND_WITH_IMM ||
			op == IBV_WR_RDMA_WRITE_WITH_IMM;
	uint32_t imm = (uint32_t)seed * 2654435761u;
	uint8_t *stream = malloc(len + 1);
	/* SEND lands at the receive buffer, WRITE at a fixed remote offset */
	size_t dst_off = is_send ? INLINE_RECV_OFF : 100 + seed % 8;

	H_CHECK(stream);
	h_fill(stream, len, seed);
	if (!s->requester) {
		struct ibv_sge sge = { .addr = (uintptr_t)s->buf.mem + INLINE_RECV_OFF,
				       .length = max_inline + 64,
				       .lkey = s->buf.mr->lkey };

		if (is_send || with_imm)
			h_post_recv(&s->ep, seed, &sge, is_send ? 1 : 0);
		memcpy(s->image + dst_off, stream, len);
	}
	h_sync(s->sock);
	if (s->requester) {
		/* Unregistered memory and a bogus lkey: inline data is copied
		 * by ibv_post_send and its lkey is never looked at. */
		uint8_t *src = malloc(len + 1);
		uint32_t cut = len / 3;
		struct ibv_sge sge[2] = {
			{ .addr = (uintptr_t)src, .length = cut, .lkey = 0xbad },
			{ .addr = (uintptr_t)src + cut, .length = len - cut,
			  .lkey = 0xbad },
		};
		int nsge = cut ? 2 : 1;

		H_CHECK(src);
		memcpy(src, stream, len);
		h_post_rdma(&s->ep, seed, op, cut ? sge : sge + 1, nsge,
			    IBV_SEND_INLINE | IBV_SEND_SIGNALED,
			    s->peer.addr + dst_off, s->peer.rkey, imm);
		memset(src, 0xee, len);
		H_EXPECT_SEND(&s->ep, .wr_id = seed,
			      .opcode = is_send ? IBV_WC_SEND : IBV_WC_RDMA_WRITE);
		free(src);
	} else if (is_send || with_imm) {
		H_EXPECT_RECV(&s->ep, .wr_id = seed,
			      .opcode = is_send ? IBV_WC_RECV :
						  IBV_WC_RECV_RDMA_WITH_IMM,
			      .byte_len = len, .with_imm = with_imm, .imm = imm);
	}
	h_sync(s->sock);
	if (!s->requester)
		h_expect_mem(s->buf.mem, s->image, s->buf.len, "inline data");
	free(stream);
}

static void run_inline(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct side s;
	uint32_t m = 0;

	c.cap.max_inline_data = INLINE_WANT;
	side_open(p, &s, &c, INLINE_BUF, 10);
	if (s.requester) {
		H_OK(ibv_query_qp(s.ep.qp, &a, IBV_QP_CAP, &ia));
		m = a.cap.max_inline_data;
		H_CHECK(m >= INLINE_WANT && m + 64 <= INLINE_BUF - INLINE_RECV_OFF);
		h_send(s.sock, &m, sizeof(m));
	} else {
		h_recv(s.sock, &m, sizeof(m));
	}

	inline_case(&s, m, IBV_WR_SEND, 1, 1);
	inline_case(&s, m, IBV_WR_SEND, 17, 2);
	inline_case(&s, m, IBV_WR_SEND, m / 2, 3);
	inline_case(&s, m, IBV_WR_SEND, m - 1, 4);
	inline_case(&s, m, IBV_WR_SEND, m, 5);
	inline_case(&s, m, IBV_WR_SEND_WITH_IMM, m, 6);
	inline_case(&s, m, IBV_WR_RDMA_WRITE, m, 7);
	inline_case(&s, m, IBV_WR_RDMA_WRITE_WITH_IMM, m / 3, 8);

	if (s.requester) {
		uint8_t *src = calloc(1, m + 1);
		struct ibv_sge sge = { .addr = (uintptr_t)src, .length = m + 1 };
		struct ibv_send_wr wr = { .wr_id = 99, .sg_list = &sge,
					  .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_INLINE |
							IBV_SEND_SIGNALED,
					  .wr.rdma = { s.peer.addr, s.peer.rkey } },
				   *bad = NULL;

		H_CHECK(src);
		H_CHECK(ibv_post_send(s.ep.qp, &wr, &bad) != 0);
		H_CHECK(bad == &wr);
		h_expect_no_wc(s.ep.scq, 50);
		free(src);
	}
	/* refused WR left no trace: the QP still works */
	inline_case(&s, m, IBV_WR_SEND, 8, 9);
	side_check_close(&s, "inline, final memory");
}

/* ---- rc.unsignaled ------------------------------------------------------ */

enum { UNSIG_WRS = 4000, UNSIG_LEN = 64, UNSIG_EVERY = 8, UNSIG_DEPTH = 16 };

static void run_unsignaled(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct side s;

	c.cap.max_send_wr = UNSIG_DEPTH;
	c.sq_sig_all = 0;
	side_open(p, &s, &c, UNSIG_WRS * UNSIG_LEN, 20);
	if (s.requester) {
		uint64_t retired = 0;	/* WRs known to have left the queue */

		for (uint64_t i = 0; i < UNSIG_WRS; i++) {
			bool sig = i % UNSIG_EVERY == UNSIG_EVERY - 1;
			struct ibv_sge sge = {
				.addr = (uintptr_t)s.buf.mem + i * UNSIG_LEN,
				.length = UNSIG_LEN, .lkey = s.buf.mr->lkey };

			/* A full queue frees up with the next signaled
			 * completion, which retires all WRs before it too. */
			if (i - retired == UNSIG_DEPTH) {
				uint64_t next = retired + UNSIG_EVERY - 1;

				H_EXPECT_SEND(&s.ep, .wr_id = next,
					      .opcode = IBV_WC_RDMA_WRITE);
				retired = next + 1;
			}
			h_post_rdma(&s.ep, i, IBV_WR_RDMA_WRITE, &sge, 1,
				    sig ? IBV_SEND_SIGNALED : 0,
				    s.peer.addr + i * UNSIG_LEN, s.peer.rkey, 0);
		}
		for (; retired < UNSIG_WRS; retired += UNSIG_EVERY)
			H_EXPECT_SEND(&s.ep, .wr_id = retired + UNSIG_EVERY - 1,
				      .opcode = IBV_WC_RDMA_WRITE);
		h_expect_no_wc(s.ep.scq, 50);
	} else {
		/* every chunk now holds the requester's bytes */
		h_fill(s.image, UNSIG_WRS * UNSIG_LEN, 20);
	}
	h_sync(s.sock);
	side_check_close(&s, "unsignaled WRITEs");
}

/* ---- rc.held ------------------------------------------------------------ */

enum { HELD_WRS = 200, HELD_LEN = 100, HELD_WAIT_S = 10 };

static void run_held(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct side s;
	char landed;

	c.cap.max_send_wr = HELD_WRS;
	c.sq_sig_all = 0;
	side_open(p, &s, &c, HELD_WRS * HELD_LEN, 40);
	if (s.requester) {
		struct ibv_wc wc;

		/* a polling application is one whose bursts are held */
		if (ibv_poll_cq(s.ep.scq, 1, &wc) != 0)
			h_fail("completion before any request");
		for (uint64_t i = 0; i < HELD_WRS; i++) {
			struct ibv_sge sge = {
				.addr = (uintptr_t)s.buf.mem + i * HELD_LEN,
				.length = HELD_LEN, .lkey = s.buf.mr->lkey };

			h_post_rdma(&s.ep, i, IBV_WR_RDMA_WRITE, &sge, 1,
				    i == HELD_WRS - 1 ? IBV_SEND_SIGNALED : 0,
				    s.peer.addr + i * HELD_LEN, s.peer.rkey, 0);
		}
		/* no verb until the target has every byte */
		h_recv(s.sock, &landed, 1);
		H_EXPECT_SEND(&s.ep, .wr_id = HELD_WRS - 1,
			      .opcode = IBV_WC_RDMA_WRITE);
		h_expect_no_wc(s.ep.scq, 50);
	} else {
		uint64_t end = h_now_ns() + HELD_WAIT_S * 1000000000ull;

		h_fill(s.image, HELD_WRS * HELD_LEN, 40);
		while (memcmp(s.buf.mem, s.image, HELD_WRS * HELD_LEN) &&
		       h_now_ns() < end)
			h_sleep_ms(1);
		landed = 1;
		h_send(s.sock, &landed, 1);
	}
	h_sync(s.sock);
	side_check_close(&s, "WRITEs posted behind unacknowledged ones");
}

/* ---- rc.post_list --------------------------------------------------------- */

/* Buffer map (both sides): requester's sources and READ sinks, responder's
 * targets and receive buffers. */
enum {
	PL_BUF = 65536,
	PL_W0 = 0, PL_W0_LEN = 2000,		/* WRITE, 2 SGEs */
	PL_S1 = 3000, PL_S1_LEN = 1000,		/* SEND */
	PL_R2 = 8192, PL_R2_LEN = 3000,		/* READ source (responder) */
	PL_R2_SINK = 12000,			/* READ sink (requester) */
	PL_S3 = 16000,				/* SEND_WITH_IMM, 1 byte */
	PL_W4 = 17000, PL_W4_LEN = 300,		/* WRITE_WITH_IMM */
	PL_ATOM = 18000,			/* FETCH_ADD then CMP_SWP */
	PL_RES5 = 18100, PL_RES6 = 18200,	/* their results */
	PL_W8 = 20000, PL_W8_LEN = 5000,	/* WRITE over one 4096 MTU */
	PL_R9_SINK = 26000, PL_R9_LEN = 10,	/* READ back WRITE 0 */
	PL_RECV = 32768, PL_RECV_LEN = 2048,	/* 4 receives */
	PL_BAD = 50000,				/* targets of the bad list */
};

static void post_list_main(struct side *s)
{
	uint8_t *mem = s->buf.mem;
	uint32_t lk = s->buf.mr->lkey, rk = s->peer.rkey;
	uint64_t ra = s->peer.addr, old;
	struct ibv_sge sg[10] = {
		{ (uintptr_t)mem + PL_W0, 700, lk },
		{ (uintptr_t)mem + PL_W0 + 700, PL_W0_LEN - 700, lk },
		{ (uintptr_t)mem + PL_S1, PL_S1_LEN, lk },
		{ (uintptr_t)mem + PL_R2_SINK, PL_R2_LEN, lk },
		{ (uintptr_t)mem + PL_S3, 1, lk },
		{ (uintptr_t)mem + PL_W4, PL_W4_LEN, lk },
		{ (uintptr_t)mem + PL_RES5, 8, lk },
		{ (uintptr_t)mem + PL_RES6, 8, lk },
		{ (uintptr_t)mem + PL_W8, PL_W8_LEN, lk },
		{ (uintptr_t)mem + PL_R9_SINK, PL_R9_LEN, lk },
	};
	struct ibv_send_wr wr[10] = {
		{ .opcode = IBV_WR_RDMA_WRITE, .sg_list = &sg[0], .num_sge = 2,
		  .wr.rdma = { ra + PL_W0, rk } },
		{ .opcode = IBV_WR_SEND, .sg_list = &sg[2], .num_sge = 1 },
		{ .opcode = IBV_WR_RDMA_READ, .sg_list = &sg[3], .num_sge = 1,
		  .wr.rdma = { ra + PL_R2, rk } },
		{ .opcode = IBV_WR_SEND_WITH_IMM, .sg_list = &sg[4], .num_sge = 1,
		  .imm_data = 0x01020304 },
		{ .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .sg_list = &sg[5],
		  .num_sge = 1, .imm_data = 0xa0b0c0d0,
		  .wr.rdma = { ra + PL_W4, rk } },
		{ .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .sg_list = &sg[6],
		  .num_sge = 1,
		  .wr.atomic = { .remote_addr = ra + PL_ATOM, .compare_add = 5,
				 .rkey = rk } },
		{ .opcode = IBV_WR_ATOMIC_CMP_AND_SWP, .sg_list = &sg[7],
		  .num_sge = 1, .wr.atomic = { .remote_addr = ra + PL_ATOM,
					       .rkey = rk } },
		{ .opcode = IBV_WR_SEND, .num_sge = 0 },
		{ .opcode = IBV_WR_RDMA_WRITE, .sg_list = &sg[8], .num_sge = 1,
		  .wr.rdma = { ra + PL_W8, rk } },
		/* RC executes in order: this READ sees WRITE 0's data */
		{ .opcode = IBV_WR_RDMA_READ, .sg_list = &sg[9], .num_sge = 1,
		  .wr.rdma = { ra + PL_W0, rk } },
	};
	static const enum ibv_wc_opcode want[10] = {
		IBV_WC_RDMA_WRITE, IBV_WC_SEND, IBV_WC_RDMA_READ, IBV_WC_SEND,
		IBV_WC_RDMA_WRITE, IBV_WC_FETCH_ADD, IBV_WC_COMP_SWAP,
		IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
	};
	static const uint32_t want_len[10] = { [2] = PL_R2_LEN, [5] = 8, [6] = 8,
					       [9] = PL_R9_LEN };
	uint8_t *peer = malloc(PL_BUF);
	struct ibv_send_wr *bad = NULL;

	/* The responder's initial memory, to predict what READs return. */
	H_CHECK(peer);
	h_fill(peer, PL_BUF, 30 + 1);
	memcpy(&old, peer + PL_ATOM, 8);
	/* succeeds only if the FETCH_ADD before it has executed */
	wr[6].wr.atomic.compare_add = old + 5;
	wr[6].wr.atomic.swap = ~old;
	for (int i = 0; i < 10; i++) {
		wr[i].wr_id = 1000 + (uint64_t)i;
		wr[i].next = i < 9 ? &wr[i + 1] : NULL;
	}
	memcpy(s->image + PL_R2_SINK, peer + PL_R2, PL_R2_LEN);
	memcpy(s->image + PL_RES5, &old, 8);
	old += 5;
	memcpy(s->image + PL_RES6, &old, 8);
	memcpy(s->image + PL_R9_SINK, mem + PL_W0, PL_R9_LEN);

	H_OK(ibv_post_send(s->ep.qp, &wr[0], &bad));
	for (int i = 0; i < 10; i++)
		H_EXPECT_SEND(&s->ep, .wr_id = 1000 + (uint64_t)i,
			      .opcode = want[i], .byte_len = want_len[i]);
	h_expect_no_wc(s->ep.scq, 20);
	free(peer);
}

static void post_list_target(struct side *s)
{
	struct ibv_sge sg[4];
	struct ibv_recv_wr rw[4], *bad = NULL;
	uint64_t v;
	uint8_t *req = malloc(PL_BUF);

	/* The requester's initial memory: the source of everything it sends. */
	H_CHECK(req);
	h_fill(req, PL_BUF, 30);
	for (int i = 0; i < 4; i++) {
		sg[i] = (struct ibv_sge){
			(uintptr_t)s->buf.mem + PL_RECV + (size_t)i * PL_RECV_LEN,
			PL_RECV_LEN, s->buf.mr->lkey };
		rw[i] = (struct ibv_recv_wr){ .wr_id = 200 + (uint64_t)i,
					      .next = i < 3 ? &rw[i + 1] : NULL,
					      .sg_list = &sg[i], .num_sge = 1 };
	}
	H_OK(ibv_post_recv(s->ep.qp, &rw[0], &bad));
	h_sync(s->sock);

	H_EXPECT_RECV(&s->ep, .wr_id = 200, .opcode = IBV_WC_RECV,
		      .byte_len = PL_S1_LEN);
	H_EXPECT_RECV(&s->ep, .wr_id = 201, .opcode = IBV_WC_RECV, .byte_len = 1,
		      .with_imm = true, .imm = 0x01020304);
	H_EXPECT_RECV(&s->ep, .wr_id = 202, .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
		      .byte_len = PL_W4_LEN, .with_imm = true, .imm = 0xa0b0c0d0);
	H_EXPECT_RECV(&s->ep, .wr_id = 203, .opcode = IBV_WC_RECV, .byte_len = 0);
	h_expect_no_wc(s->ep.rcq, 20);

	memcpy(s->image + PL_W0, req + PL_W0, PL_W0_LEN);
	memcpy(s->image + PL_RECV, req + PL_S1, PL_S1_LEN);
	memcpy(s->image + PL_RECV + PL_RECV_LEN, req + PL_S3, 1);
	memcpy(s->image + PL_W4, req + PL_W4, PL_W4_LEN);
	memcpy(&v, s->image + PL_ATOM, 8);
	v = ~v;
	memcpy(s->image + PL_ATOM, &v, 8);
	memcpy(s->image + PL_W8, req + PL_W8, PL_W8_LEN);
	free(req);
}

/* A list whose third WR asks for more SGEs than the QP has. */
static void post_list_bad(struct side *s)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_sge *sg;
	struct ibv_send_wr wr[4], *bad = NULL;
	uint32_t max_sge;

	H_OK(ibv_query_qp(s->ep.qp, &a, IBV_QP_CAP, &ia));
	max_sge = a.cap.max_send_sge;
	sg = calloc(max_sge + 1, sizeof(*sg));
	H_CHECK(sg);
	for (uint32_t i = 0; i <= max_sge; i++)
		sg[i] = (struct ibv_sge){ (uintptr_t)s->buf.mem + PL_BAD + i, 1,
					  s->buf.mr->lkey };
	for (int i = 0; i < 4; i++)
		wr[i] = (struct ibv_send_wr){
			.wr_id = 2000 + (uint64_t)i,
			.next = i < 3 ? &wr[i + 1] : NULL,
			.sg_list = sg, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.wr.rdma = { s->peer.addr + PL_BAD + 64 * (uint64_t)i,
				     s->peer.rkey } };
	wr[2].num_sge = (int)max_sge + 1;
	H_EQ(ibv_post_send(s->ep.qp, &wr[0], &bad), EINVAL);
	H_CHECK(bad == &wr[2]);
	H_EXPECT_SEND(&s->ep, .wr_id = 2000, .opcode = IBV_WC_RDMA_WRITE);
	H_EXPECT_SEND(&s->ep, .wr_id = 2001, .opcode = IBV_WC_RDMA_WRITE);
	h_expect_no_wc(s->ep.scq, 50);
	free(sg);
}

static void run_post_list(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct side s;

	c.sq_sig_all = 1;
	side_open(p, &s, &c, PL_BUF, 30);
	if (s.requester) {
		h_sync(s.sock);
		post_list_main(&s);
		post_list_bad(&s);
	} else {
		uint8_t req[PL_BAD + 1];

		post_list_target(&s);
		/* of the bad list only the two WRs before the bad one land */
		h_fill(req, sizeof(req), 30);
		s.image[PL_BAD] = req[PL_BAD];
		s.image[PL_BAD + 64] = req[PL_BAD];
	}
	h_sync(s.sock);
	side_check_close(&s, "post lists");
}

int main(int argc, char **argv)
{
	static const struct {
		const char *arg;
		void (*fn)(struct h_proc *p);
	} cases[] = {
		{ "inline", run_inline },
		{ "unsignaled", run_unsignaled },
		{ "post_list", run_post_list },
		{ "held", run_held },
	};
	char name[64];
	struct h_test t = { .name = name, .nroles = 2, .deadline_s = 25 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (argc > 1 && !strcmp(argv[1], cases[i].arg)) {
			t.role[0] = t.role[1] = cases[i].fn;
			snprintf(name, sizeof(name), "rc.%s", cases[i].arg);
			return h_main(&t);
		}
	}
	fprintf(stderr, "usage: %s inline|unsignaled|post_list|held\n", argv[0]);
	return 2;
}
