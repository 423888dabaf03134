/*
 * The unreliable transports, between two processes.
 *
 *   ud        UD SENDs of 0, 1 and MTU bytes (+IMM): the 40-byte GRH area,
 *             src_qp, a wrong Q_Key dropped, a reply through an AH made by
 *             ibv_create_ah_from_wc; oversize and RDMA WRITE refused.
 *   uc        UC SEND and RDMA WRITE (+IMM) at several sizes; READ refused.
 *   uc_loss   UC under 5% packet loss: a message is delivered whole and
 *             correct or not at all, and the responder resynchronises.
 *
 * Role 0 sends, role 1 receives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	QKEY = 0x11223344,
	GRH = 40,
	NRECV = 64,
	LOSS_MSGS = 200,
	QUIET_MS = 300,		/* after the sender is done, nothing more comes */
};

struct ep {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t peer_qpn;
	union ibv_gid peer_gid;
};

struct info {
	uint32_t qpn;
	union ibv_gid gid;
};

static void ep_create(struct h_proc *p, struct ep *e, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = type,
		.cap = { .max_send_wr = 256, .max_recv_wr = 256,
			 .max_send_sge = 2, .max_recv_sge = 2 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = H_PORT };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	e->cq = ibv_create_cq(p->ctx, 512, NULL, NULL, 0);
	H_CHECK(e->cq);
	ia.send_cq = ia.recv_cq = e->cq;
	e->qp = ibv_create_qp(p->pd, &ia);
	H_CHECK(e->qp);
	if (type == IBV_QPT_UD) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	H_OK(ibv_modify_qp(e->qp, &a, mask));
}

/* Exchange addresses and go to RTS; both sides are in RTS on return. */
static void ep_connect(struct h_proc *p, struct ep *e, enum ibv_qp_type type)
{
	struct info me = { .qpn = e->qp->qp_num, .gid = p->gid }, peer;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int sock = p->sock[0];

	h_send(sock, &me, sizeof(me));
	h_recv(sock, &peer, sizeof(peer));
	e->peer_qpn = peer.qpn;
	e->peer_gid = peer.gid;
	if (type == IBV_QPT_UD) {
		H_OK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE));
	} else {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = peer.qpn;
		a.rq_psn = 0x123;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer.gid;
		a.ah_attr.grh.sgid_index = H_GID_INDEX;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = H_PORT;
		H_OK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV |
					   IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN));
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x123;
	H_OK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
	h_sync(sock);
}

static void ep_destroy(struct ep *e)
{
	H_OK(ibv_destroy_qp(e->qp));
	H_OK(ibv_destroy_cq(e->cq));
}

static struct ibv_wc poll_one(struct ep *e, const char *what)
{
	struct ibv_wc wc;

	if (!h_poll(e->cq, &wc, H_WC_TIMEOUT_MS))
		h_fail("no completion for %s", what);
	return wc;
}

static void post_recv(struct ep *e, struct h_buf *b, size_t off, size_t len,
		      uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)b->mem + off, (uint32_t)len,
			       b->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	H_OK(ibv_post_recv(e->qp, &wr, &bad));
}

static int post_send(struct ep *e, struct ibv_ah *ah, uint32_t qkey,
		     enum ibv_wr_opcode op, struct h_buf *b, size_t off,
		     size_t len, uint64_t wr_id, uint32_t imm,
		     uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)b->mem + off, (uint32_t)len,
			       b->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = htobe32(imm) }, *bad;

	if (ah) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = e->peer_qpn;
		wr.wr.ud.remote_qkey = qkey;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(e->qp, &wr, &bad);
}

static void expect_send_ok(struct ep *e, uint64_t wr_id)
{
	struct ibv_wc wc = poll_one(e, "send");

	H_EQ(wc.status, IBV_WC_SUCCESS);
	H_EQ(wc.wr_id, wr_id);
}

/* ---- UD ---------------------------------------------------------------- */

static const size_t ud_sizes[] = { 0, 1, 4096 };

static void ud_sender(struct h_proc *p)
{
	struct ep e;
	struct h_buf b;
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = H_PORT };
	struct ibv_ah *ah;
	struct ibv_wc wc;
	uint64_t id = 1;

	ep_create(p, &e, IBV_QPT_UD);
	h_buf_alloc(p, &b, 3 * 8192, IBV_ACCESS_LOCAL_WRITE);
	ep_connect(p, &e, IBV_QPT_UD);
	aa.grh.dgid = e.peer_gid;
	aa.grh.sgid_index = H_GID_INDEX;
	aa.grh.hop_limit = 64;
	ah = ibv_create_ah(p->pd, &aa);
	H_CHECK(ah);
	post_recv(&e, &b, 8192, GRH + 64, 99);

	/* refused at post time */
	H_EQ(post_send(&e, ah, QKEY, IBV_WR_SEND, &b, 0, 4097, 0, 0, 0, 0),
	     EINVAL);
	H_EQ(post_send(&e, ah, QKEY, IBV_WR_RDMA_WRITE, &b, 0, 8, 0, 0, 0, 0),
	     EINVAL);

	h_sync(p->sock[0]);	/* receives are posted */
	for (size_t i = 0; i < sizeof(ud_sizes) / sizeof(ud_sizes[0]); i++) {
		h_fill(b.mem, ud_sizes[i], 100 + i);
		H_OK(post_send(&e, ah, QKEY, IBV_WR_SEND, &b, 0, ud_sizes[i],
			       id, 0, 0, 0));
		expect_send_ok(&e, id++);
		H_OK(post_send(&e, ah, QKEY, IBV_WR_SEND_WITH_IMM, &b, 0,
			       ud_sizes[i], id, 0xabc000 + i, 0, 0));
		expect_send_ok(&e, id++);
		h_sync(p->sock[0]);
	}
	/* a wrong Q_Key is dropped by the receiver; then a good one */
	H_OK(post_send(&e, ah, QKEY + 1, IBV_WR_SEND, &b, 0, 8, id, 0, 0, 0));
	expect_send_ok(&e, id++);
	H_OK(post_send(&e, ah, QKEY, IBV_WR_SEND_WITH_IMM, &b, 0, 8, id, 77, 0,
		       0));
	expect_send_ok(&e, id++);

	/* the reply comes through an AH built from a work completion */
	wc = poll_one(&e, "reply");
	H_EQ(wc.status, IBV_WC_SUCCESS);
	H_EQ(wc.wr_id, 99);
	H_EQ(wc.byte_len, GRH + 5);
	H_EQ(wc.src_qp, e.peer_qpn);
	H_CHECK(!memcmp(b.mem + 8192 + GRH, "reply", 5));
	H_OK(ibv_destroy_ah(ah));
	h_sync(p->sock[0]);
	ep_destroy(&e);
	h_buf_free(&b);
}

static void ud_receiver(struct h_proc *p)
{
	struct ep e;
	struct h_buf b, want;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	size_t slot = GRH + 4096;
	uint64_t id = 0;

	ep_create(p, &e, IBV_QPT_UD);
	h_buf_alloc(p, &b, NRECV * slot, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &want, 4096, IBV_ACCESS_LOCAL_WRITE);
	ep_connect(p, &e, IBV_QPT_UD);
	for (int i = 0; i < NRECV; i++)
		post_recv(&e, &b, i * slot, slot, i);
	h_sync(p->sock[0]);

	for (size_t i = 0; i < sizeof(ud_sizes) / sizeof(ud_sizes[0]); i++) {
		h_fill(want.mem, ud_sizes[i], 100 + i);
		for (int imm = 0; imm < 2; imm++, id++) {
			const uint8_t *ip4;

			wc = poll_one(&e, "UD receive");
			H_EQ(wc.status, IBV_WC_SUCCESS);
			H_EQ(wc.wr_id, id);
			H_EQ(wc.opcode, IBV_WC_RECV);
			H_EQ(wc.byte_len, GRH + ud_sizes[i]);
			H_EQ(wc.src_qp, e.peer_qpn);
			H_CHECK(wc.wc_flags & IBV_WC_GRH);
			H_EQ(!!(wc.wc_flags & IBV_WC_WITH_IMM), imm);
			if (imm)
				H_EQ(be32toh(wc.imm_data), 0xabc000 + i);
			/* IPv4 GID: the IPv4 header in the last 20 bytes */
			ip4 = b.mem + id * slot + 20;
			H_EQ(ip4[0], 0x45);
			H_EQ(ip4[9], 17);
			H_CHECK(!memcmp(ip4 + 12, &e.peer_gid.raw[12], 4));
			h_expect_mem(b.mem + id * slot + GRH, want.mem,
				     ud_sizes[i], "UD payload");
		}
		h_sync(p->sock[0]);
	}
	/* the wrong-Q_Key datagram never shows: the next one is IMM 77 */
	wc = poll_one(&e, "UD after a bad Q_Key");
	H_EQ(wc.status, IBV_WC_SUCCESS);
	H_EQ(wc.wr_id, id);
	H_EQ(be32toh(wc.imm_data), 77);

	ah = ibv_create_ah_from_wc(p->pd, &wc, (struct ibv_grh *)(b.mem + id * slot),
				   H_PORT);
	H_CHECK(ah);
	memcpy(want.mem, "reply", 5);
	H_OK(post_send(&e, ah, QKEY, IBV_WR_SEND, &want, 0, 5, 500, 0, 0, 0));
	expect_send_ok(&e, 500);
	H_OK(ibv_destroy_ah(ah));
	h_sync(p->sock[0]);
	ep_destroy(&e);
	h_buf_free(&b);
	h_buf_free(&want);
}

/* ---- UC ---------------------------------------------------------------- */

static const size_t uc_sizes[] = { 0, 1, 1023, 1024, 1025, 65536 };

static void uc_sender(struct h_proc *p)
{
	struct ep e;
	struct h_buf b;
	struct h_rbuf r;
	uint64_t id = 1;

	ep_create(p, &e, IBV_QPT_UC);
	h_buf_alloc(p, &b, 65536, IBV_ACCESS_LOCAL_WRITE);
	ep_connect(p, &e, IBV_QPT_UC);
	r = h_recv_rbuf(p->sock[0]);
	H_EQ(post_send(&e, NULL, 0, IBV_WR_RDMA_READ, &b, 0, 8, 0, 0, r.addr,
		       r.rkey), EINVAL);
	for (size_t i = 0; i < sizeof(uc_sizes) / sizeof(uc_sizes[0]); i++) {
		h_fill(b.mem, uc_sizes[i], 200 + i);
		h_sync(p->sock[0]);	/* a receive is posted */
		H_OK(post_send(&e, NULL, 0, IBV_WR_SEND_WITH_IMM, &b, 0,
			       uc_sizes[i], id, (uint32_t)i, 0, 0));
		expect_send_ok(&e, id++);
		H_OK(post_send(&e, NULL, 0, IBV_WR_RDMA_WRITE_WITH_IMM, &b, 0,
			       uc_sizes[i], id, 1000 + (uint32_t)i, r.addr,
			       r.rkey));
		expect_send_ok(&e, id++);
		h_sync(p->sock[0]);
	}
	ep_destroy(&e);
	h_buf_free(&b);
}

static void uc_receiver(struct h_proc *p)
{
	struct ep e;
	struct h_buf b, w, want;
	struct ibv_wc wc;

	ep_create(p, &e, IBV_QPT_UC);
	h_buf_alloc(p, &b, 65536, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &w, 65536, IBV_ACCESS_LOCAL_WRITE |
				  IBV_ACCESS_REMOTE_WRITE);
	h_buf_alloc(p, &want, 65536, IBV_ACCESS_LOCAL_WRITE);
	ep_connect(p, &e, IBV_QPT_UC);
	h_send_rbuf(p->sock[0], &w);
	for (size_t i = 0; i < sizeof(uc_sizes) / sizeof(uc_sizes[0]); i++) {
		post_recv(&e, &b, 0, 65536, 2 * i);
		post_recv(&e, &b, 0, 0, 2 * i + 1);	/* for the WRITE's IMM */
		h_sync(p->sock[0]);
		h_fill(want.mem, uc_sizes[i], 200 + i);
		wc = poll_one(&e, "UC SEND");
		H_EQ(wc.status, IBV_WC_SUCCESS);
		H_EQ(wc.opcode, IBV_WC_RECV);
		H_EQ(wc.byte_len, uc_sizes[i]);
		H_EQ(be32toh(wc.imm_data), i);
		h_expect_mem(b.mem, want.mem, uc_sizes[i], "UC SEND");
		wc = poll_one(&e, "UC WRITE_WITH_IMM");
		H_EQ(wc.status, IBV_WC_SUCCESS);
		H_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
		H_EQ(be32toh(wc.imm_data), 1000 + i);
		h_expect_mem(w.mem, want.mem, uc_sizes[i], "UC WRITE");
		h_sync(p->sock[0]);
	}
	ep_destroy(&e);
	h_buf_free(&b);
	h_buf_free(&w);
	h_buf_free(&want);
}

/* ---- UC under loss ------------------------------------------------------ */

enum { LOSS_LEN = 3 * 1024 + 100 };	/* four packets at MTU 1024 */

static void uc_loss_sender(struct h_proc *p)
{
	struct ep e;
	struct h_buf b;

	ep_create(p, &e, IBV_QPT_UC);
	h_buf_alloc(p, &b, (size_t)LOSS_MSGS * LOSS_LEN, IBV_ACCESS_LOCAL_WRITE);
	ep_connect(p, &e, IBV_QPT_UC);
	for (int i = 0; i < LOSS_MSGS; i++)
		h_fill(b.mem + (size_t)i * LOSS_LEN, LOSS_LEN, 300 + i);
	h_sync(p->sock[0]);
	for (int i = 0; i < LOSS_MSGS; i++) {
		H_OK(post_send(&e, NULL, 0, IBV_WR_SEND_WITH_IMM, &b,
			       (size_t)i * LOSS_LEN, LOSS_LEN, i, i, 0, 0));
		expect_send_ok(&e, i);
	}
	h_sync(p->sock[0]);
	ep_destroy(&e);
	h_buf_free(&b);
}

static void uc_loss_receiver(struct h_proc *p)
{
	struct ep e;
	struct h_buf b, want;
	struct ibv_wc wc;
	int got = 0, last = -1;

	ep_create(p, &e, IBV_QPT_UC);
	h_buf_alloc(p, &b, (size_t)LOSS_MSGS * LOSS_LEN, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &want, LOSS_LEN, IBV_ACCESS_LOCAL_WRITE);
	ep_connect(p, &e, IBV_QPT_UC);
	for (int i = 0; i < LOSS_MSGS; i++)
		post_recv(&e, &b, (size_t)i * LOSS_LEN, LOSS_LEN, i);
	h_sync(p->sock[0]);
	h_sync(p->sock[0]);	/* the sender has sent everything */
	while (h_poll(e.cq, &wc, QUIET_MS)) {
		int m = (int)be32toh(wc.imm_data);

		H_EQ(wc.status, IBV_WC_SUCCESS);
		H_EQ(wc.byte_len, LOSS_LEN);
		H_CHECK(m > last && m < LOSS_MSGS);	/* in order, once */
		last = m;
		/* receive WQEs of lost messages are reused, so message m
		 * sits in the buffer of WQE wr_id */
		h_fill(want.mem, LOSS_LEN, 300 + m);
		h_expect_mem(b.mem + wc.wr_id * LOSS_LEN, want.mem, LOSS_LEN,
			     "UC message under loss");
		got++;
	}
	printf("%d of %d UC messages delivered under 5%% loss\n", got,
	       LOSS_MSGS);
	/* 4 packets each: about 81% survive; far fewer means no resync */
	H_CHECK(got > LOSS_MSGS / 2 && got < LOSS_MSGS);
	ep_destroy(&e);
	h_buf_free(&b);
	h_buf_free(&want);
}

int main(int argc, char **argv)
{
	struct h_test t = { .nroles = 2, .deadline_s = 30 };
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "ud")) {
		t.name = "ud.basic";
		t.role[0] = ud_sender;
		t.role[1] = ud_receiver;
	} else if (!strcmp(mode, "uc")) {
		t.name = "uc.basic";
		t.role[0] = uc_sender;
		t.role[1] = uc_receiver;
	} else if (!strcmp(mode, "uc_loss")) {
		t.name = "uc.loss";
		t.role[0] = uc_loss_sender;
		t.role[1] = uc_loss_receiver;
		t.faults = "drop=0.05,seed=11";
	} else {
		fprintf(stderr, "usage: %s ud|uc|uc_loss\n", argv[0]);
		return 2;
	}
	return h_main(&t);
}
