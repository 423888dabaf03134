/*
 * UD multicast between three processes of one host.
 *
 *   verbs     attach/detach arguments as the kernel answers them: an RC QP
 *             or a unicast GID EINVAL, attaching twice no error, detaching
 *             a group not attached EINVAL; the device's limits; more
 *             groups than the kernel lets one socket join (20); a QP
 *             destroyed while attached.
 *   deliver   role 0 sends to an IPv4 group (DestQP 0xFFFFFF); every QP
 *             attached, in role 1 (two) and role 2 (one), gets every
 *             datagram in order with the group as the GRH's destination,
 *             and so does a second QP of the sender (loopback), but not the
 *             sending QP, created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB,
 *             nor a QP that is not attached.  After one of role 1's QPs
 *             detaches, it gets nothing more and the others go on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum {
	QKEY = 0x01234567,	/* rdma_cm's RDMA_UDP_QKEY */
	GRH = 40,
	SLOT = GRH + 1024,
	NRECV = 64,
	FIRST = 20,		/* datagrams before the detach */
	SECOND = 5,		/* and after */
	QUIET_MS = 300,
	MANY_GROUPS = 40,	/* twice net.ipv4.igmp_max_memberships */
};

struct mq {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct h_buf b;
};

static void mq_create(struct h_proc *p, struct mq *m, bool block_self)
{
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 64, .max_recv_wr = NRECV,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = p->pd,
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = H_PORT,
				 .qkey = QKEY };

	if (block_self) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	}
	m->cq = ibv_create_cq(p->ctx, 2 * NRECV, NULL, NULL, 0);
	H_CHECK(m->cq);
	ia.send_cq = ia.recv_cq = m->cq;
	m->qp = ibv_create_qp_ex(p->ctx, &ia);
	H_CHECK(m->qp);
	H_OK(ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				      IBV_QP_PORT | IBV_QP_QKEY));
	a.qp_state = IBV_QPS_RTR;
	H_OK(ibv_modify_qp(m->qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	H_OK(ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
	h_buf_alloc(p, &m->b, NRECV * SLOT, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < NRECV; i++) {
		struct ibv_sge sge = { (uintptr_t)m->b.mem + i * SLOT, SLOT,
				       m->b.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		H_OK(ibv_post_recv(m->qp, &wr, &bad));
	}
}

static void mq_destroy(struct mq *m)
{
	H_OK(ibv_destroy_qp(m->qp));
	H_OK(ibv_destroy_cq(m->cq));
	h_buf_free(&m->b);
}

/* The group of this run: 239.255.x.y from the test's process group, so
 * that two runs at once do not hear each other. */
static union ibv_gid group_gid(void)
{
	union ibv_gid g = { .raw = { [10] = 0xff, [11] = 0xff, [12] = 239,
				     [13] = 255 } };
	unsigned id = (unsigned)getpgrp();

	g.raw[14] = id >> 8 & 0xff;
	g.raw[15] = id & 0xff;
	return g;
}

/* Expects datagrams first..first+n-1 (their immediate data) on m, in
 * order, from the group. */
static void expect_datagrams(struct mq *m, unsigned *next_slot, unsigned first,
			     unsigned n)
{
	union ibv_gid mgid = group_gid();

	for (unsigned i = first; i < first + n; i++) {
		struct ibv_wc wc;
		const uint8_t *ip4;
		uint8_t want[64];

		if (!h_poll(m->cq, &wc, H_WC_TIMEOUT_MS))
			h_fail("datagram %u never came", i);
		H_EQ(wc.status, IBV_WC_SUCCESS);
		H_EQ(wc.opcode, IBV_WC_RECV);
		H_EQ(wc.wr_id, *next_slot);
		H_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
		H_EQ(be32toh(wc.imm_data), i);
		H_EQ(wc.byte_len, GRH + 1 + i % 64);
		ip4 = m->b.mem + *next_slot * SLOT + 20;
		H_EQ(ip4[0], 0x45);
		H_CHECK(!memcmp(ip4 + 16, &mgid.raw[12], 4));
		h_fill(want, 1 + i % 64, i);
		h_expect_mem(m->b.mem + *next_slot * SLOT + GRH, want,
			     1 + i % 64, "multicast payload");
		++*next_slot;
	}
}

static void expect_quiet(struct mq *m, const char *who)
{
	struct ibv_wc wc;

	if (h_poll(m->cq, &wc, QUIET_MS))
		h_fail("%s received a datagram (imm %u)", who,
		       be32toh(wc.imm_data));
}

/* ---- verbs --------------------------------------------------------------- */

static void verbs_role(struct h_proc *p)
{
	union ibv_gid mgid = group_gid(), unicast = p->gid;
	struct ibv_qp_init_attr rc_ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *rc;
	struct mq m;

	H_CHECK(p->dev.max_mcast_grp > 0);
	H_CHECK(p->dev.max_mcast_qp_attach > 0);
	H_CHECK(p->dev.max_total_mcast_qp_attach >=
		p->dev.max_mcast_qp_attach);
	mq_create(p, &m, false);
	rc_ia.send_cq = rc_ia.recv_cq = m.cq;
	rc = ibv_create_qp(p->pd, &rc_ia);
	H_CHECK(rc);
	H_EQ(ibv_attach_mcast(rc, &mgid, 0), EINVAL);
	H_EQ(ibv_attach_mcast(m.qp, &unicast, 0), EINVAL);
	H_EQ(ibv_detach_mcast(m.qp, &mgid, 0), EINVAL);
	H_OK(ibv_attach_mcast(m.qp, &mgid, 0));
	H_OK(ibv_attach_mcast(m.qp, &mgid, 0));
	H_OK(ibv_detach_mcast(m.qp, &mgid, 0));
	H_EQ(ibv_detach_mcast(m.qp, &mgid, 0), EINVAL);
	for (unsigned i = 0; i < MANY_GROUPS; i++) {
		union ibv_gid g = mgid;

		g.raw[13] = 254;
		g.raw[15] = i;
		H_OK(ibv_attach_mcast(m.qp, &g, 0));
	}
	for (unsigned i = 0; i < MANY_GROUPS; i++) {
		union ibv_gid g = mgid;

		g.raw[13] = 254;
		g.raw[15] = i;
		H_OK(ibv_detach_mcast(m.qp, &g, 0));
	}
	/* destroyed attached: it leaves the group as it goes */
	H_OK(ibv_attach_mcast(m.qp, &mgid, 0));
	H_OK(ibv_destroy_qp(rc));
	mq_destroy(&m);
}

/* ---- deliver ------------------------------------------------------------- */

static void sender(struct h_proc *p)
{
	union ibv_gid mgid = group_gid();
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = H_PORT,
				  .grh = { .dgid = mgid, .hop_limit = 64,
					   .sgid_index = H_GID_INDEX } };
	struct mq tx, loop;
	unsigned loop_next = 0;
	struct ibv_ah *ah;
	struct h_buf b;

	mq_create(p, &tx, true);
	mq_create(p, &loop, false);
	H_OK(ibv_attach_mcast(tx.qp, &mgid, 0));
	H_OK(ibv_attach_mcast(loop.qp, &mgid, 0));
	h_buf_alloc(p, &b, 64, IBV_ACCESS_LOCAL_WRITE);
	ah = ibv_create_ah(p->pd, &aa);
	H_CHECK(ah);

	for (unsigned phase = 0; phase < 2; phase++) {
		unsigned first = phase ? FIRST : 0, n = phase ? SECOND : FIRST;

		/* the receivers are attached (or, in phase 1, detached) */
		h_sync(p->sock[0]);
		h_sync(p->sock[1]);
		for (unsigned i = first; i < first + n; i++) {
			struct ibv_sge sge = { (uintptr_t)b.mem, 1 + i % 64,
					       b.mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = i, .sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_SEND_WITH_IMM,
				.send_flags = IBV_SEND_SIGNALED,
				.imm_data = htobe32(i),
				.wr.ud = { .ah = ah, .remote_qpn = 0xFFFFFF,
					   .remote_qkey = QKEY },
			}, *bad;
			struct ibv_wc wc;

			h_fill(b.mem, 1 + i % 64, i);
			H_OK(ibv_post_send(tx.qp, &wr, &bad));
			if (!h_poll(tx.cq, &wc, H_WC_TIMEOUT_MS))
				h_fail("no send completion");
			H_EQ(wc.status, IBV_WC_SUCCESS);
			H_EQ(wc.opcode, IBV_WC_SEND);
			/* one at a time: UD has no flow control */
			expect_datagrams(&loop, &loop_next, i, 1);
		}
		h_sync(p->sock[0]);
		h_sync(p->sock[1]);
	}
	expect_quiet(&tx, "the sending QP");
	H_OK(ibv_destroy_ah(ah));
	h_buf_free(&b);
	mq_destroy(&tx);
	mq_destroy(&loop);
}

static void receiver(struct h_proc *p)
{
	union ibv_gid mgid = group_gid();
	bool two = p->role == 1;
	struct mq a, b, none;
	unsigned a_next = 0, b_next = 0;

	mq_create(p, &a, false);
	if (two) {
		mq_create(p, &b, false);
		mq_create(p, &none, false);
		H_OK(ibv_attach_mcast(b.qp, &mgid, 0));
	}
	H_OK(ibv_attach_mcast(a.qp, &mgid, 0));
	h_sync(p->sock[0]);
	h_sync(p->sock[0]);	/* all sent */
	expect_datagrams(&a, &a_next, 0, FIRST);
	if (two) {
		expect_datagrams(&b, &b_next, 0, FIRST);
		/* b leaves; a goes on */
		H_OK(ibv_detach_mcast(b.qp, &mgid, 0));
	}
	h_sync(p->sock[0]);
	h_sync(p->sock[0]);
	expect_datagrams(&a, &a_next, FIRST, SECOND);
	if (two) {
		expect_quiet(&b, "a detached QP");
		expect_quiet(&none, "a QP never attached");
		mq_destroy(&b);
		mq_destroy(&none);
	}
	mq_destroy(&a);
}

int main(int argc, char **argv)
{
	struct h_test t = { .deadline_s = 30 };
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "verbs")) {
		t.name = "ud.mcast.verbs";
		t.nroles = 1;
		t.role[0] = verbs_role;
	} else if (!strcmp(mode, "deliver")) {
		t.name = "ud.mcast.deliver";
		t.nroles = 3;
		t.role[0] = sender;
		t.role[1] = receiver;
		t.role[2] = receiver;
	} else {
		fprintf(stderr, "usage: %s verbs|deliver\n", argv[0]);
		return 2;
	}
	return h_main(&t);
}
