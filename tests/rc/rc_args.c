/*
 * rc.args: verbs called with bad arguments fail with EINVAL and change
 * nothing (ibv_modify_qp(3): "EINVAL Invalid value provided in attr or in
 * attr_mask"; ibv_reg_mr(3): remote write or atomic access requires local
 * write):
 *  - ibv_reg_mr with REMOTE_WRITE or REMOTE_ATOMIC but not LOCAL_WRITE;
 *  - ibv_create_qp asking for more WRs or SGEs than ibv_query_device allows;
 *  - ibv_post_send on a QP in RESET and in INIT (*bad_wr set);
 *  - ibv_modify_qp skipping a state (RESET->RTR), leaving out a required
 *    attribute (RESET->INIT without IBV_QP_PORT, INIT->RTR without
 *    IBV_QP_MIN_RNR_TIMER, RTR->RTS without IBV_QP_TIMEOUT), asking for more
 *    responder resources than the device has, or going back (RTS->RTR); the
 *    state stays as it was;
 *  - on a connected QP, ibv_post_send and ibv_post_recv with num_sge above
 *    the QP's max_send_sge / max_recv_sge (*bad_wr set, no completion), after
 *    which the QP still works.
 * Role 0 checks, role 1 is the peer for the connected QP.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { BUF = 4096 };

static void reg_mr_checks(struct h_proc *p, void *mem)
{
	static const int bad[] = {
		IBV_ACCESS_REMOTE_WRITE,
		IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ibv_mr *mr;

		errno = 0;
		mr = ibv_reg_mr(p->pd, mem, BUF, bad[i]);
		if (mr)
			h_fail("ibv_reg_mr accepted access 0x%x", bad[i]);
		H_EQ(errno, EINVAL);
	}
}

static void create_qp_checks(struct h_proc *p, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp_init_attr over;

	over = ia;
	over.cap.max_send_wr = (uint32_t)p->dev.max_qp_wr + 1;
	errno = 0;
	H_CHECK(!ibv_create_qp(p->pd, &over));
	H_EQ(errno, EINVAL);
	over = ia;
	over.cap.max_send_sge = (uint32_t)p->dev.max_sge + 1;
	errno = 0;
	H_CHECK(!ibv_create_qp(p->pd, &over));
	H_EQ(errno, EINVAL);
}

static void expect_modify_einval(struct ibv_qp *qp, struct ibv_qp_attr *a,
				 int mask, enum ibv_qp_state stays)
{
	H_EQ(ibv_modify_qp(qp, a, mask), EINVAL);
	H_EQ(h_qp_state(qp), stays);
}

static void state_checks(struct h_proc *p, struct ibv_cq *cq, void *mem,
			 struct ibv_mr *mr)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_sge sge = { (uintptr_t)mem, 8, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_qp_attr a = { 0 };
	struct ibv_qp *qp = ibv_create_qp(p->pd, &ia);
	const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			      IBV_QP_ACCESS_FLAGS;
	const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

	H_CHECK(qp);
	H_EQ(h_qp_state(qp), IBV_QPS_RESET);
	bad = NULL;
	H_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
	H_CHECK(bad == &wr);

	a.qp_state = IBV_QPS_RTR;
	expect_modify_einval(qp, &a, IBV_QP_STATE, IBV_QPS_RESET);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = H_PORT;
	a.qp_access_flags = 1 << 12;	/* no MR's right, nor an optional hint */
	expect_modify_einval(qp, &a, init_mask, IBV_QPS_RESET);
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	expect_modify_einval(qp, &a, init_mask & ~IBV_QP_PORT, IBV_QPS_RESET);
	H_OK(ibv_modify_qp(qp, &a, init_mask));
	H_EQ(h_qp_state(qp), IBV_QPS_INIT);
	/* An MR's flags, as DAPL passes them, are taken as the kernel takes
	 * them; only the remote rights mean anything to the QP. */
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING;
	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS));
	{
		struct ibv_qp_attr q;
		struct ibv_qp_init_attr qi;

		H_OK(ibv_query_qp(qp, &q, IBV_QP_ACCESS_FLAGS, &qi));
		H_CHECK(q.qp_access_flags & IBV_ACCESS_MW_BIND);
	}
	bad = NULL;
	H_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
	H_CHECK(bad == &wr);

	/* a loopback path to ourselves: the attributes are all valid */
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->gid;
	a.ah_attr.grh.sgid_index = H_GID_INDEX;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = H_PORT;
	expect_modify_einval(qp, &a, rtr_mask & ~IBV_QP_MIN_RNR_TIMER,
			     IBV_QPS_INIT);
	a.max_dest_rd_atomic = (uint8_t)(p->dev.max_qp_rd_atom + 1);
	expect_modify_einval(qp, &a, rtr_mask, IBV_QPS_INIT);
	a.max_dest_rd_atomic = 1;
	H_OK(ibv_modify_qp(qp, &a, rtr_mask));

	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	expect_modify_einval(qp, &a,
			     IBV_QP_STATE | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
			     IBV_QPS_RTR);
	H_OK(ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				   IBV_QP_MAX_QP_RD_ATOMIC));
	a.qp_state = IBV_QPS_RTR;
	expect_modify_einval(qp, &a, IBV_QP_STATE, IBV_QPS_RTS);
	h_expect_no_wc(cq, 0);
	H_OK(ibv_destroy_qp(qp));
}

static void sge_checks(struct h_ep *ep, struct h_buf *b, struct h_rbuf r)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_sge *sge;
	uint32_t n;

	H_OK(ibv_query_qp(ep->qp, &a, IBV_QP_CAP, &ia));
	n = (a.cap.max_send_sge > a.cap.max_recv_sge ? a.cap.max_send_sge :
						       a.cap.max_recv_sge) + 1;
	sge = calloc(n, sizeof(*sge));
	H_CHECK(sge);
	for (uint32_t i = 0; i < n; i++)
		sge[i] = (struct ibv_sge){ (uintptr_t)b->mem + i, 1, b->mr->lkey };

	{
		struct ibv_send_wr wr = {
			.wr_id = 1, .sg_list = sge,
			.num_sge = (int)a.cap.max_send_sge + 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { r.addr, r.rkey } }, *bad = NULL;

		H_EQ(ibv_post_send(ep->qp, &wr, &bad), EINVAL);
		H_CHECK(bad == &wr);
	}
	{
		struct ibv_recv_wr wr = {
			.wr_id = 2, .sg_list = sge,
			.num_sge = (int)a.cap.max_recv_sge + 1 }, *bad = NULL;

		H_EQ(ibv_post_recv(ep->qp, &wr, &bad), EINVAL);
		H_CHECK(bad == &wr);
	}
	h_expect_no_wc(ep->scq, 20);
	h_expect_no_wc(ep->rcq, 0);

	h_post_rdma(ep, 3, IBV_WR_RDMA_WRITE, sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	H_EXPECT_SEND(ep, .wr_id = 3, .opcode = IBV_WC_RDMA_WRITE);
	free(sge);
}

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	struct h_rbuf r;
	int sock = p->sock[0];

	h_buf_alloc(p, &b, BUF,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	h_ep_create(p, &ep, &c);
	if (p->role == 0) {
		reg_mr_checks(p, b.mem);
		create_qp_checks(p, ep.scq);
		state_checks(p, ep.scq, b.mem, b.mr);
	}
	h_ep_connect(p, &ep, sock);
	h_send_rbuf(sock, &b);
	r = h_recv_rbuf(sock);
	if (p->role == 0)
		sge_checks(&ep, &b, r);
	h_sync(sock);
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.args",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 25,
	};

	return h_main(&t);
}
