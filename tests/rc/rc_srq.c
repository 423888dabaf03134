/*
 * rc.srq: two RC QPs share one SRQ on the receiving side.  SENDs on both
 * land in the SRQ's buffers in order; the armed limit raises exactly one
 * IBV_EVENT_SRQ_LIMIT_REACHED when the posted receives drop below it, and
 * disarms itself (ibv_query_srq then reports limit 0).
 *
 * Role 0 sends on two QPs, role 1 receives through the SRQ.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	NQP = 2,
	NRECV = 12,
	LIMIT = 5,
	MSG = 3000,		/* three packets at MTU 1024 */
	NSEND = 4,		/* per QP: 8 in all, leaving 4 < LIMIT */
};

struct info {
	uint32_t qpn[NQP];
	union ibv_gid gid;
};

static struct ibv_qp *create_qp(struct h_proc *p, struct ibv_cq *cq,
				struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .srq = srq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_send_sge = 1,
			 .max_recv_wr = srq ? 0 : 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = H_PORT };
	struct ibv_qp *qp = ibv_create_qp(p->pd, &ia);

	H_CHECK(qp);
	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	return qp;
}

static void to_rts(struct ibv_qp *qp, uint32_t dqpn, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = dqpn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = H_PORT,
			     .grh = { .dgid = *gid, .sgid_index = H_GID_INDEX,
				      .hop_limit = 64 } },
	};

	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

/* Exchange QPNs and GIDs; both sides are in RTS on return. */
static void connect_all(struct h_proc *p, struct ibv_qp **qp)
{
	struct info me = { .gid = p->gid }, peer;

	for (int i = 0; i < NQP; i++)
		me.qpn[i] = qp[i]->qp_num;
	h_send(p->sock[0], &me, sizeof(me));
	h_recv(p->sock[0], &peer, sizeof(peer));
	for (int i = 0; i < NQP; i++)
		to_rts(qp[i], peer.qpn[i], &peer.gid);
	h_sync(p->sock[0]);
}

static void sender(struct h_proc *p)
{
	struct ibv_cq *cq = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qp[NQP];
	struct h_buf b;
	struct ibv_wc wc;

	H_CHECK(cq);
	for (int i = 0; i < NQP; i++)
		qp[i] = create_qp(p, cq, NULL);
	h_buf_alloc(p, &b, MSG, IBV_ACCESS_LOCAL_WRITE);
	connect_all(p, qp);
	h_sync(p->sock[0]);	/* receives posted, limit armed */
	for (int n = 0; n < NSEND; n++) {
		for (int i = 0; i < NQP; i++) {
			struct ibv_sge sge = { (uintptr_t)b.mem, MSG,
					       b.mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = (uint64_t)(n * NQP + i),
				.sg_list = &sge, .num_sge = 1,
				.opcode = IBV_WR_SEND_WITH_IMM,
				.send_flags = IBV_SEND_SIGNALED,
				.imm_data = htobe32((uint32_t)(n * NQP + i)),
			}, *bad;

			h_fill(b.mem, MSG, 500 + n * NQP + i);
			H_OK(ibv_post_send(qp[i], &wr, &bad));
			H_CHECK(h_poll(cq, &wc, H_WC_TIMEOUT_MS));
			H_EQ(wc.status, IBV_WC_SUCCESS);
		}
	}
	h_sync(p->sock[0]);
	for (int i = 0; i < NQP; i++)
		H_OK(ibv_destroy_qp(qp[i]));
	H_OK(ibv_destroy_cq(cq));
	h_buf_free(&b);
}

static void receiver(struct h_proc *p)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_cq *cq = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
	struct ibv_srq *srq = ibv_create_srq(p->pd, &sa);
	struct ibv_srq_attr attr = { .srq_limit = LIMIT };
	struct ibv_async_event ev;
	struct pollfd pfd = { .fd = p->ctx->async_fd, .events = POLLIN };
	struct ibv_qp *qp[NQP];
	struct h_buf b, want;
	struct ibv_wc wc;
	int events = 0;

	H_CHECK(cq);
	H_CHECK(srq);
	for (int i = 0; i < NQP; i++)
		qp[i] = create_qp(p, cq, srq);
	/* a QP on an SRQ has no receive queue of its own */
	{
		struct ibv_recv_wr wr = { 0 }, *bad;

		H_EQ(ibv_post_recv(qp[0], &wr, &bad), EINVAL);
	}
	h_buf_alloc(p, &b, NRECV * MSG, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &want, MSG, IBV_ACCESS_LOCAL_WRITE);
	connect_all(p, qp);
	for (int i = 0; i < NRECV; i++) {
		struct ibv_sge sge = { (uintptr_t)b.mem + (size_t)i * MSG, MSG,
				       b.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		H_OK(ibv_post_srq_recv(srq, &wr, &bad));
	}
	/* a limit above the posted count would fire at once: arm below */
	H_OK(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT));
	h_sync(p->sock[0]);

	for (int k = 0; k < NSEND * NQP; k++) {
		int m;

		H_CHECK(h_poll(cq, &wc, H_WC_TIMEOUT_MS));
		H_EQ(wc.status, IBV_WC_SUCCESS);
		H_EQ(wc.byte_len, MSG);
		/* SRQ buffers are taken in posting order, whichever QP */
		H_EQ(wc.wr_id, k);
		H_CHECK(wc.qp_num == qp[0]->qp_num || wc.qp_num == qp[1]->qp_num);
		m = (int)be32toh(wc.imm_data);
		h_fill(want.mem, MSG, 500 + m);
		h_expect_mem(b.mem + (size_t)k * MSG, want.mem, MSG, "SRQ SEND");
	}
	h_sync(p->sock[0]);

	/* exactly one limit event */
	while (poll(&pfd, 1, events ? 200 : H_WC_TIMEOUT_MS) == 1) {
		H_OK(ibv_get_async_event(p->ctx, &ev));
		H_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
		H_CHECK(ev.element.srq == srq);
		ibv_ack_async_event(&ev);
		events++;
	}
	H_EQ(events, 1);
	H_OK(ibv_query_srq(srq, &attr));
	H_EQ(attr.srq_limit, 0);

	for (int i = 0; i < NQP; i++)
		H_OK(ibv_destroy_qp(qp[i]));
	H_OK(ibv_destroy_srq(srq));
	H_OK(ibv_destroy_cq(cq));
	h_buf_free(&b);
	h_buf_free(&want);
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.srq", .nroles = 2, .role = { sender, receiver },
		.deadline_s = 30,
	};

	return h_main(&t);
}
