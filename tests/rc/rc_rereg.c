/*
 * rc.rereg.*: re-registering and deregistering memory under a connection.
 *
 *   keys        ibv_rereg_mr keeps the MR's keys (as mlx5 does): the peer's
 *               rkey reaches the MR with the access it has now, granted or
 *               refused (IBV_WC_REM_ACCESS_ERR) as the last rereg says.
 *   translation a receive posted before a rereg that moves the MR no longer
 *               names registered memory: it completes with
 *               IBV_WC_LOC_PROT_ERR, the sender gets IBV_WC_REM_OP_ERR, and
 *               the old buffer is not written.
 *   dereg       the same for a receive whose MR was deregistered: nothing
 *               lands in memory that is no longer registered.
 *   pd          the same after a rereg into another PD; re-registering back
 *               into the QP's PD and resetting the QP brings it back, and
 *               the reset drops the completions of its previous life (the
 *               flushed receive), as libmlx5 does.
 *
 * Role 0 sends, role 1 receives.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { BUF = 4096, MSG = 256 };

static const char *scenario;

static void post_send(struct h_ep *ep, struct h_buf *b, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)b->mem, MSG, b->mr->lkey };

	h_post_rdma(ep, id, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
}

static void post_recv(struct h_ep *ep, struct h_buf *b, uint64_t id)
{
	struct ibv_sge sge = { (uintptr_t)b->mem, MSG, b->mr->lkey };

	h_post_recv(ep, id, &sge, 1);
}

/* Back to RTS through RESET with the same peer (its QP is reset too). */
static void restart(struct h_proc *p, struct h_ep *ep, int sock)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	H_OK(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = H_PORT;
	a.qp_access_flags = ep->cfg.access;
	H_OK(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					       IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS));
	h_ep_connect(p, ep, sock);
}

static void keys(struct h_proc *p, struct h_ep *ep, struct h_buf *b, int sock)
{
	if (p->role == 0) {
		struct h_rbuf r = h_recv_rbuf(sock);
		struct ibv_sge sge = { (uintptr_t)b->mem, MSG, b->mr->lkey };

		h_post_rdma(ep, 1, IBV_WR_RDMA_WRITE, &sge, 1,
			    IBV_SEND_SIGNALED, r.addr, r.rkey, 0);
		H_EXPECT_SEND(ep, .wr_id = 1, .opcode = IBV_WC_RDMA_WRITE);
		h_sync(sock);	/* the peer adds REMOTE_READ */
		h_sync(sock);
		h_post_rdma(ep, 2, IBV_WR_RDMA_READ, &sge, 1,
			    IBV_SEND_SIGNALED, r.addr, r.rkey, 0);
		H_EXPECT_SEND(ep, .wr_id = 2, .opcode = IBV_WC_RDMA_READ,
			      .byte_len = MSG);
		h_sync(sock);	/* the peer takes REMOTE_WRITE away */
		h_sync(sock);
		h_post_rdma(ep, 3, IBV_WR_RDMA_WRITE, &sge, 1,
			    IBV_SEND_SIGNALED, r.addr, r.rkey, 0);
		H_EXPECT_SEND(ep, .wr_id = 3,
			      .status = IBV_WC_REM_ACCESS_ERR);
		return;
	}
	uint32_t lkey = b->mr->lkey, rkey = b->mr->rkey;

	h_send_rbuf(sock, b);
	h_sync(sock);
	H_EQ(ibv_rereg_mr(b->mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ), 0);
	H_EQ(b->mr->lkey, lkey);
	H_EQ(b->mr->rkey, rkey);
	h_sync(sock);
	h_sync(sock);
	H_EQ(ibv_rereg_mr(b->mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			  IBV_ACCESS_LOCAL_WRITE), 0);
	h_sync(sock);
	/* the refused WRITE put the QP in error: nothing else arrives */
	h_expect_no_wc(ep->rcq, 100);
}

/* The receiver's stale WQE fails, the old buffer stays as it was. */
static void stale_recv(struct h_proc *p, struct h_ep *ep, struct h_buf *b,
		       int sock)
{
	if (p->role == 0) {
		h_sync(sock);
		post_send(ep, b, 1);
		H_EXPECT_SEND(ep, .wr_id = 1, .status = IBV_WC_REM_OP_ERR);
		if (!strcmp(scenario, "pd")) {
			h_sync(sock);
			restart(p, ep, sock);
			h_sync(sock);
			post_send(ep, b, 2);
			H_EXPECT_SEND(ep, .wr_id = 2);
		}
		h_sync(sock);
		return;
	}
	uint8_t *old = b->mem, want[BUF];
	struct ibv_pd *other = NULL;
	void *moved = NULL;

	memcpy(want, old, BUF);
	post_recv(ep, b, 10);
	post_recv(ep, b, 11);
	if (!strcmp(scenario, "translation")) {
		moved = aligned_alloc(4096, BUF);
		H_CHECK(moved);
		H_EQ(ibv_rereg_mr(b->mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
				  moved, BUF, 0), 0);
	} else if (!strcmp(scenario, "dereg")) {
		H_OK(ibv_dereg_mr(b->mr));
		b->mr = NULL;
	} else {
		other = ibv_alloc_pd(p->ctx);
		H_CHECK(other);
		H_EQ(ibv_rereg_mr(b->mr, IBV_REREG_MR_CHANGE_PD, other, NULL,
				  0, 0), 0);
	}
	h_sync(sock);
	H_EXPECT_RECV(ep, .wr_id = 10, .status = IBV_WC_LOC_PROT_ERR);
	h_expect_mem(old, want, BUF, "the buffer the stale receive named");
	if (other) {
		/* the second receive was flushed: the reset drops that too */
		H_EQ(ibv_rereg_mr(b->mr, IBV_REREG_MR_CHANGE_PD, p->pd, NULL,
				  0, 0), 0);
		h_sync(sock);
		restart(p, ep, sock);
		h_expect_no_wc(ep->rcq, 0);
		post_recv(ep, b, 12);
		h_sync(sock);
		H_EXPECT_RECV(ep, .wr_id = 12, .opcode = IBV_WC_RECV,
			      .byte_len = MSG);
		H_OK(ibv_dealloc_pd(other));
	}
	h_sync(sock);
	if (moved) {
		/* back to the buffer h_buf_free frees, before moved goes */
		H_EQ(ibv_rereg_mr(b->mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
				  old, BUF, 0), 0);
		free(moved);
	} else if (!b->mr) {
		b->mr = ibv_reg_mr(p->pd, b->mem, BUF, IBV_ACCESS_LOCAL_WRITE);
		H_CHECK(b->mr);
	}
}

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct h_buf b;
	int sock = p->sock[0];

	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	h_fill(b.mem, BUF, 90 + (uint64_t)p->role);
	h_ep_connect(p, &ep, sock);
	if (!strcmp(scenario, "keys"))
		keys(p, &ep, &b, sock);
	else
		stale_recv(p, &ep, &b, sock);
	h_sync(sock);
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

int main(int argc, char **argv)
{
	const struct h_test t = {
		.name = "rc.rereg",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 25,
	};

	if (argc != 2 || (strcmp(argv[1], "keys") &&
			  strcmp(argv[1], "translation") &&
			  strcmp(argv[1], "dereg") && strcmp(argv[1], "pd")))
		return 2;
	scenario = argv[1];
	return h_main(&t);
}
