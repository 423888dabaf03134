/*
 * rc.mw: memory windows, type 1 and type 2B, between two processes.
 *
 * The owner (role 1) registers a three-page area with LOCAL_WRITE and
 * MW_BIND only, so every remote access the peer (role 0) gets is one a
 * window granted, over the middle page.  Each round runs on freshly
 * connected QPs (a remote access error leaves the peer's QP in error):
 *
 *  1  type 1 bound by ibv_bind_mw: WRITE and READ inside work; an atomic
 *     (not granted) fails with a remote access error
 *  2  the same key through another QP of the PD works (type 1 is the
 *     PD's); a WRITE running past the window's end fails
 *  3  the MR cannot be deregistered under a bound window (EBUSY); bound
 *     again with length 0 the window is gone: the old key fails
 *  4  type 2 bound by IBV_WR_BIND_MW: WRITE works; the peer's SEND with
 *     Invalidate names it (the receive says so) and then it fails
 *  5  bound again through one QP, used through another: fails; LOCAL_INV
 *     on the owner's QP: the key fails through the first QP too
 *  6  SEND with Invalidate of a key that is no window: both sides fail
 *  and, in the owner alone, bad binds and bad uses fail locally.
 * After every round the owner's area must hold exactly what was written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum {
	PAGE = 4096,
	AREA = 3 * PAGE,
	WIN_OFF = PAGE,		/* the window: the middle page */
	ROUNDS = 6,
	MR_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND,
	RW = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
};

struct win {
	uint64_t addr;		/* the window's first byte */
	uint32_t rkey;
};

/* ---- the peer (role 0) ----------------------------------------------- */

static struct h_buf pbuf;

static void write_at(struct h_ep *ep, const struct win *w, uint64_t off,
		     uint32_t len, uint64_t seed, enum ibv_wc_status status,
		     const char *what)
{
	struct ibv_sge sge = { (uintptr_t)pbuf.mem, len, pbuf.mr->lkey };

	h_fill(pbuf.mem, len, seed);
	h_post_rdma(ep, seed, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    w->addr + off, w->rkey, 0);
	H_EXPECT_STATUS(ep, seed, status, what);
}

static void send_inv(struct h_ep *ep, uint32_t rkey,
		     enum ibv_wc_status status, const char *what)
{
	struct ibv_sge sge = { (uintptr_t)pbuf.mem, 16, pbuf.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 77, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_INV,
				  .send_flags = IBV_SEND_SIGNALED,
				  .invalidate_rkey = rkey }, *bad;

	H_OK(ibv_post_send(ep->qp, &wr, &bad));
	H_EXPECT_STATUS(ep, 77, status, what);
}

static void peer_round(struct h_proc *p, int round)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep, ep2;
	int sock = p->sock[0];
	struct win w;

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, sock);
	if (round == 5) {
		h_ep_create(p, &ep2, &c);
		h_ep_connect(p, &ep2, sock);
	}
	h_recv(sock, &w, sizeof(w));
	switch (round) {
	case 1: {
		struct ibv_sge sge = { (uintptr_t)pbuf.mem + PAGE, 64,
				       pbuf.mr->lkey };

		write_at(&ep, &w, 100, 64, 11, IBV_WC_SUCCESS, "WRITE inside");
		h_post_rdma(&ep, 12, IBV_WR_RDMA_READ, &sge, 1,
			    IBV_SEND_SIGNALED, w.addr + 100, w.rkey, 0);
		H_EXPECT_STATUS(&ep, 12, IBV_WC_SUCCESS, "READ inside");
		h_expect_mem(pbuf.mem + PAGE, pbuf.mem, 64, "READ back");
		h_post_atomic(&ep, 13, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge,
			      IBV_SEND_SIGNALED, w.addr, w.rkey, 1, 0);
		H_EXPECT_STATUS(&ep, 13, IBV_WC_REM_ACCESS_ERR,
			      "atomic the window does not grant");
		break;
	}
	case 2:
		write_at(&ep, &w, 200, 64, 21, IBV_WC_SUCCESS,
			 "type 1 key through another QP");
		write_at(&ep, &w, PAGE - 32, 64, 22, IBV_WC_REM_ACCESS_ERR,
			 "WRITE past the window's end");
		break;
	case 3:
		write_at(&ep, &w, 300, 64, 31, IBV_WC_REM_ACCESS_ERR,
			 "key of an unbound type 1 window");
		break;
	case 4:
		write_at(&ep, &w, 400, 64, 41, IBV_WC_SUCCESS, "type 2 WRITE");
		send_inv(&ep, w.rkey, IBV_WC_SUCCESS, "SEND with Invalidate");
		h_sync(sock);	/* the owner saw the receive */
		write_at(&ep, &w, 400, 64, 42, IBV_WC_REM_ACCESS_ERR,
			 "key invalidated by SEND with Invalidate");
		break;
	case 5:
		write_at(&ep2, &w, 500, 64, 51, IBV_WC_REM_ACCESS_ERR,
			 "type 2 key through a QP that did not bind it");
		write_at(&ep, &w, 500, 64, 52, IBV_WC_SUCCESS,
			 "type 2 key through the QP that bound it");
		h_sync(sock);
		h_sync(sock);	/* the owner invalidated it locally */
		write_at(&ep, &w, 500, 64, 53, IBV_WC_REM_ACCESS_ERR,
			 "key invalidated by LOCAL_INV");
		h_ep_destroy(&ep2);
		break;
	case 6:
		send_inv(&ep, w.rkey ^ 0x5A5A00, IBV_WC_REM_INV_REQ_ERR,
			 "SEND with Invalidate of no window");
		break;
	}
	h_sync(sock);
	h_ep_destroy(&ep);
}

static void peer(struct h_proc *p)
{
	h_buf_alloc(p, &pbuf, 2 * PAGE,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	for (int round = 1; round <= ROUNDS; round++)
		peer_round(p, round);
	h_buf_free(&pbuf);
}

/* ---- the owner (role 1) ---------------------------------------------- */

static uint8_t *area, *want;
static struct ibv_mr *mr;

static void expect_wc(struct ibv_cq *cq, uint64_t id, enum ibv_wc_opcode op,
		      enum ibv_wc_status status, const char *what)
{
	struct ibv_wc wc;

	if (!h_poll(cq, &wc, H_WC_TIMEOUT_MS))
		h_fail("%s: no completion", what);
	if (wc.wr_id != id || wc.status != status ||
	    (status == IBV_WC_SUCCESS && wc.opcode != op))
		h_fail("%s: wr %llu opcode %d status %s", what,
		       (unsigned long long)wc.wr_id, wc.opcode,
		       ibv_wc_status_str(wc.status));
}

static void bind1(struct h_ep *ep, struct ibv_mw *mw, uint64_t len,
		  unsigned access)
{
	struct ibv_mw_bind b = {
		.wr_id = 90, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)area + WIN_OFF,
			       .length = len, .mw_access_flags = access },
	};

	H_OK(ibv_bind_mw(ep->qp, mw, &b));
	expect_wc(ep->scq, 90, IBV_WC_BIND_MW, IBV_WC_SUCCESS, "ibv_bind_mw");
}

/* Binds a type 2 window with the key after *key (the application's to
 * choose, in the window's index) and leaves that key in *key. */
static uint32_t bind2(struct h_ep *ep, struct ibv_mw *mw, struct ibv_mr *to,
		      enum ibv_wc_status status, uint32_t *key)
{
	struct ibv_send_wr wr = { .wr_id = 91, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	*key = ibv_inc_rkey(*key);
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = *key;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = to, .addr = (uintptr_t)area + WIN_OFF, .length = PAGE,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	H_OK(ibv_post_send(ep->qp, &wr, &bad));
	expect_wc(ep->scq, 91, IBV_WC_BIND_MW, status, "IBV_WR_BIND_MW");
	return *key;
}

static void written(uint64_t off, uint32_t len, uint64_t seed)
{
	h_fill(want + WIN_OFF + off, len, seed);
}

/* Bad requests that fail in the owner's own process. */
static void local_errors(struct h_proc *p, struct ibv_mw *mw1)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct ibv_mw *mw2 = ibv_alloc_mw(p->pd, IBV_MW_TYPE_2);
	struct ibv_mr *plain = ibv_reg_mr(p->pd, area, PAGE,
					  IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { (uintptr_t)area + WIN_OFF, 8, mw1->rkey };
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW }, *bad;
	struct ibv_device_attr attr;
	uint32_t key;

	H_CHECK(mw2 && plain);
	H_OK(ibv_query_device(p->ctx, &attr));
	H_CHECK(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
	H_CHECK(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
	H_CHECK(attr.max_mw > 0);
	errno = 0;
	H_CHECK(!ibv_alloc_mw(p->pd, (enum ibv_mw_type)3) && errno == EINVAL);

	h_ep_create(p, &ep, &c);
	/* a loopback connection of the owner's own, so that the QP can
	 * reach RTS with no peer */
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR,
					 .path_mtu = IBV_MTU_1024,
					 .dest_qp_num = ep.qp->qp_num,
					 .max_dest_rd_atomic = 1,
					 .min_rnr_timer = 12,
					 .ah_attr = { .is_global = 1,
						      .port_num = H_PORT,
						      .grh = { .dgid = p->gid,
							       .hop_limit = 64 } } };

		H_OK(ibv_modify_qp(ep.qp, &a,
				   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC |
					   IBV_QP_MIN_RNR_TIMER));
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS,
					  .timeout = 14, .retry_cnt = 7,
					  .rnr_retry = 7, .max_rd_atomic = 1 };
		H_OK(ibv_modify_qp(ep.qp, &a,
				   IBV_QP_STATE | IBV_QP_TIMEOUT |
					   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
	}
	/* a type 1 window is bound only by ibv_bind_mw */
	wr.bind_mw.mw = mw1;
	H_EQ(ibv_post_send(ep.qp, &wr, &bad), EINVAL);
	/* a window's key is no lkey */
	wr = (struct ibv_send_wr){ .opcode = IBV_WR_SEND, .sg_list = &sge,
				   .num_sge = 1 };
	H_EQ(ibv_post_send(ep.qp, &wr, &bad), EINVAL);
	/* binding to an MR without MW_BIND fails, and the QP with it */
	key = mw2->rkey;
	bind2(&ep, mw2, plain, IBV_WC_MW_BIND_ERR, &key);
	H_EQ(h_qp_state(ep.qp), IBV_QPS_ERR);
	h_ep_destroy(&ep);
	H_OK(ibv_dealloc_mw(mw2));
	H_OK(ibv_dereg_mr(plain));
}

static void owner(struct h_proc *p)
{
	struct ibv_mw *mw1, *mw2 = NULL;
	uint32_t key2 = 0;
	struct h_qp_cfg c = h_qp_defaults(p);
	int sock = p->sock[0];
	void *mem;

	H_OK(posix_memalign(&mem, PAGE, AREA));
	area = mem;
	want = malloc(AREA);
	H_CHECK(want);
	h_fill(area, AREA, 5);
	memcpy(want, area, AREA);
	mr = ibv_reg_mr(p->pd, area, AREA, MR_ACCESS);
	mw1 = ibv_alloc_mw(p->pd, IBV_MW_TYPE_1);
	if (!mr || !mw1)
		h_fail("ibv_reg_mr / ibv_alloc_mw: %s", strerror(errno));
	local_errors(p, mw1);

	for (int round = 1; round <= ROUNDS; round++) {
		struct h_ep ep, ep2;
		struct win w = { (uintptr_t)area + WIN_OFF, 0 };
		struct ibv_sge rsge;
		struct h_buf ib;

		h_ep_create(p, &ep, &c);
		h_ep_connect(p, &ep, sock);
		if (round == 5) {
			h_ep_create(p, &ep2, &c);
			h_ep_connect(p, &ep2, sock);
		}
		h_buf_alloc(p, &ib, 64, IBV_ACCESS_LOCAL_WRITE);
		rsge = (struct ibv_sge){ (uintptr_t)ib.mem, 64, ib.mr->lkey };
		h_post_recv(&ep, 1, &rsge, 1);
		switch (round) {
		case 1:
			bind1(&ep, mw1, PAGE, RW);
			written(100, 64, 11);
			break;
		case 2:
			written(200, 64, 21);
			break;
		case 3:
			H_EQ(ibv_dereg_mr(mr), EBUSY);
			w.rkey = mw1->rkey;
			bind1(&ep, mw1, 0, 0);
			break;
		case 4:
		case 5:
			if (!mw2) {
				mw2 = ibv_alloc_mw(p->pd, IBV_MW_TYPE_2);
				H_CHECK(mw2);
				key2 = mw2->rkey;
			}
			w.rkey = bind2(&ep, mw2, mr, IBV_WC_SUCCESS, &key2);
			/* round 5's first WRITE (seed 51) is refused */
			written(round * 100, 64, round == 4 ? 41 : 52);
			break;
		case 6:
			w.rkey = mw1->rkey;
			break;
		}
		if (!w.rkey)
			w.rkey = mw1->rkey;
		h_send(sock, &w, sizeof(w));
		if (round == 4) {
			struct ibv_wc wc;

			if (!h_poll(ep.rcq, &wc, H_WC_TIMEOUT_MS))
				h_fail("no receive for SEND with Invalidate");
			H_EQ(wc.status, IBV_WC_SUCCESS);
			H_CHECK(wc.wc_flags & IBV_WC_WITH_INV);
			H_EQ(wc.invalidated_rkey, w.rkey);
			H_EQ(wc.byte_len, 16);
			h_sync(sock);
		} else if (round == 5) {
			struct ibv_send_wr inv = {
				.wr_id = 92, .opcode = IBV_WR_LOCAL_INV,
				.send_flags = IBV_SEND_SIGNALED,
				.invalidate_rkey = w.rkey }, *bad;

			h_sync(sock);
			H_OK(ibv_post_send(ep.qp, &inv, &bad));
			expect_wc(ep.scq, 92, IBV_WC_LOCAL_INV, IBV_WC_SUCCESS,
				  "LOCAL_INV");
			/* invalid now: a second invalidation fails */
			h_sync(sock);
		} else if (round == 6) {
			struct ibv_wc wc;

			if (!h_poll(ep.rcq, &wc, H_WC_TIMEOUT_MS))
				h_fail("no receive for the bad invalidation");
			H_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
		}
		h_sync(sock);
		h_expect_mem(area, want, AREA, "the owner's area");
		if (round == 5)
			h_ep_destroy(&ep2);
		h_ep_destroy(&ep);
		h_buf_free(&ib);
	}
	H_OK(ibv_dealloc_mw(mw2));
	H_OK(ibv_dealloc_mw(mw1));
	H_OK(ibv_dereg_mr(mr));
	free(area);
	free(want);
}

int main(void)
{
	struct h_test t = { .name = "rc.mw", .nroles = 2,
			    .role = { peer, owner }, .deadline_s = 50 };

	return h_main(&t);
}
