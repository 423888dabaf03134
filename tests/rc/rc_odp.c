/*
 * rc.odp: on-demand paging between two processes.
 *
 * The owner (role 1) registers with IBV_ACCESS_ON_DEMAND a range that can
 * not be accessed yet (reserved PROT_NONE: an unmapped range, which an
 * ordinary registration refuses with EFAULT, could be taken by another
 * mapping), and an implicit ODP MR for its whole address space.  Round by round, on fresh
 * QPs (an access error leaves the peer's QP in error):
 *
 *  1  a WRITE into the unmapped ODP range fails with a remote access error,
 *     and the owner lives on
 *  2  the owner maps the range: WRITE, READ and FETCH_ADD work there
 *  3  through the implicit MR's rkey, a WRITE and a READ reach a buffer the
 *     owner allocated after registering
 *  4  a SEND into a receive whose ODP buffer is unmapped: the receive
 *     completes with a local protection error, the peer's SEND with a
 *     remote operational error
 * and locally: a send from an unmapped ODP buffer fails to post (EFAULT);
 * ibv_advise_mr refuses a non-ODP MR and a bad advice (EINVAL), reports an
 * unmapped range with IBV_ADVISE_MR_FLAG_FLUSH (EFAULT), prefetches a
 * mapped one; the device reports ODP and implicit ODP.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

enum {
	PAGE = 4096,
	SPAN = 4 * PAGE,
	ROUNDS = 4,
	REMOTE = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
};

struct target {
	uint64_t hole;		/* the ODP range, unmapped in round 1 */
	uint32_t hole_rkey;
	uint64_t buf;		/* round 3: reached through the implicit MR */
	uint32_t implicit_rkey;
};

/* Address space reserved with no access: no page of it can be faulted in,
 * and no other mapping (the library's own) can land there meanwhile. */
static uint8_t *make_hole(void)
{
	void *p = mmap(NULL, SPAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	H_CHECK(p != MAP_FAILED);
	return p;
}

static void fill_hole(uint8_t *hole)
{
	H_OK(mprotect(hole, SPAN, PROT_READ | PROT_WRITE));
}

/* ---- the peer (role 0) ----------------------------------------------- */

static void peer_local(struct h_proc *p, struct h_ep *ep)
{
	uint8_t *hole = make_hole();
	struct ibv_mr *mr = ibv_reg_mr(p->pd, hole, SPAN,
				       IBV_ACCESS_LOCAL_WRITE |
					       IBV_ACCESS_ON_DEMAND);
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	if (!mr)
		h_fail("ibv_reg_mr(ON_DEMAND) of an unmapped range: %s",
		       strerror(errno));
	sge = (struct ibv_sge){ (uintptr_t)hole, 64, mr->lkey };
	H_EQ(ibv_post_send(ep->qp, &wr, &bad), EFAULT);
	H_OK(ibv_dereg_mr(mr));
	H_OK(munmap(hole, SPAN));
}

static void peer_round(struct h_proc *p, struct h_buf *b, int round)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct h_ep ep;
	struct target t;
	int sock = p->sock[0];
	struct ibv_sge sge = { (uintptr_t)b->mem, 64, b->mr->lkey };

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, sock);
	h_recv(sock, &t, sizeof(t));
	switch (round) {
	case 1:
		peer_local(p, &ep);
		h_fill(b->mem, 64, 1);
		h_post_rdma(&ep, 1, IBV_WR_RDMA_WRITE, &sge, 1,
			    IBV_SEND_SIGNALED, t.hole + 100, t.hole_rkey, 0);
		H_EXPECT_STATUS(&ep, 1, IBV_WC_REM_ACCESS_ERR,
			      "WRITE into an unmapped ODP range");
		break;
	case 2: {
		struct ibv_sge rs = { (uintptr_t)b->mem + PAGE, 64,
				      b->mr->lkey };
		uint64_t orig;

		h_fill(b->mem, 64, 2);
		h_post_rdma(&ep, 2, IBV_WR_RDMA_WRITE, &sge, 1,
			    IBV_SEND_SIGNALED, t.hole + 100, t.hole_rkey, 0);
		H_EXPECT_STATUS(&ep, 2, IBV_WC_SUCCESS, "WRITE once mapped");
		h_post_rdma(&ep, 3, IBV_WR_RDMA_READ, &rs, 1,
			    IBV_SEND_SIGNALED, t.hole + 100, t.hole_rkey, 0);
		H_EXPECT_STATUS(&ep, 3, IBV_WC_SUCCESS, "READ once mapped");
		h_expect_mem(b->mem + PAGE, b->mem, 64, "READ back");
		rs.length = 8;
		h_post_atomic(&ep, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, &rs,
			      IBV_SEND_SIGNALED, t.hole + 2 * PAGE,
			      t.hole_rkey, 5, 0);
		H_EXPECT_STATUS(&ep, 4, IBV_WC_SUCCESS, "FETCH_ADD once mapped");
		memcpy(&orig, b->mem + PAGE, 8);
		H_EQ(orig, 0);	/* a fresh anonymous page */
		break;
	}
	case 3: {
		struct ibv_sge rs = { (uintptr_t)b->mem + PAGE, 64,
				      b->mr->lkey };

		h_fill(b->mem, 64, 3);
		h_post_rdma(&ep, 5, IBV_WR_RDMA_WRITE, &sge, 1,
			    IBV_SEND_SIGNALED, t.buf, t.implicit_rkey, 0);
		H_EXPECT_STATUS(&ep, 5, IBV_WC_SUCCESS, "WRITE, implicit MR");
		memset(b->mem + PAGE, 0, 64);
		h_post_rdma(&ep, 6, IBV_WR_RDMA_READ, &rs, 1,
			    IBV_SEND_SIGNALED, t.buf, t.implicit_rkey, 0);
		H_EXPECT_STATUS(&ep, 6, IBV_WC_SUCCESS, "READ, implicit MR");
		h_expect_mem(b->mem + PAGE, b->mem, 64, "READ back");
		break;
	}
	case 4:
		h_sync(sock);	/* the receive is posted */
		h_post_rdma(&ep, 7, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED,
			    0, 0, 0);
		H_EXPECT_STATUS(&ep, 7, IBV_WC_REM_OP_ERR,
			      "SEND into an unmapped ODP receive");
		break;
	}
	h_sync(sock);
	h_ep_destroy(&ep);
}

static void peer(struct h_proc *p)
{
	struct h_buf b;

	h_buf_alloc(p, &b, 2 * PAGE, REMOTE);
	for (int round = 1; round <= ROUNDS; round++)
		peer_round(p, &b, round);
	h_buf_free(&b);
}

/* ---- the owner (role 1) ---------------------------------------------- */

static void owner_local(struct h_proc *p, struct ibv_mr *odp, uint8_t *hole)
{
	struct ibv_device_attr_ex ax;
	struct h_buf plain;
	struct ibv_sge sge = { (uintptr_t)hole, PAGE, odp->lkey };

	H_OK(ibv_query_device_ex(p->ctx, NULL, &ax));
	H_CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT);
	H_CHECK(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	H_CHECK(ax.odp_caps.per_transport_caps.rc_odp_caps &
		IBV_ODP_SUPPORT_WRITE);
	/* an ordinary registration needs the pages there: a range below
	 * vm.mmap_min_addr (64 KiB by default), which nothing maps, where a
	 * range unmapped just before could be taken again by another
	 * thread's allocation at any time */
	errno = 0;
	H_CHECK(!ibv_reg_mr(p->pd, (void *)(uintptr_t)PAGE, SPAN, REMOTE) &&
		errno == EFAULT);

	H_EQ(ibv_advise_mr(p->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
			   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), EFAULT);
	H_EQ(ibv_advise_mr(p->pd, (enum ibv_advise_mr_advice)7, 0, &sge, 1),
	     EINVAL);
	h_buf_alloc(p, &plain, PAGE, IBV_ACCESS_LOCAL_WRITE);
	sge = (struct ibv_sge){ (uintptr_t)plain.mem, PAGE, plain.mr->lkey };
	H_EQ(ibv_advise_mr(p->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1),
	     EINVAL);
	h_buf_free(&plain);
}

static void owner(struct h_proc *p)
{
	uint8_t *hole = make_hole(), *want = calloc(1, SPAN);
	uint8_t *late;
	struct ibv_mr *odp, *implicit;
	int sock = p->sock[0];
	uint64_t add = 5;

	H_CHECK(want);
	odp = ibv_reg_mr(p->pd, hole, SPAN, REMOTE | IBV_ACCESS_ON_DEMAND);
	implicit = ibv_reg_mr(p->pd, NULL, SIZE_MAX,
			      REMOTE | IBV_ACCESS_ON_DEMAND);
	if (!odp || !implicit)
		h_fail("ODP registration: %s", strerror(errno));
	owner_local(p, odp, hole);
	/* allocated after the implicit MR was registered */
	late = calloc(1, PAGE);
	H_CHECK(late);

	for (int round = 1; round <= ROUNDS; round++) {
		struct h_qp_cfg c = h_qp_defaults(p);
		struct h_ep ep;
		struct target t = { (uintptr_t)hole, odp->rkey,
				    (uintptr_t)late, implicit->rkey };

		h_ep_create(p, &ep, &c);
		h_ep_connect(p, &ep, sock);
		if (round == 2) {
			struct ibv_sge sge = { (uintptr_t)hole, SPAN,
					       odp->lkey };

			fill_hole(hole);
			H_OK(ibv_advise_mr(p->pd,
					   IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
					   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
			h_fill(want + 100, 64, 2);
			memcpy(want + 2 * PAGE, &add, 8);
		}
		h_send(sock, &t, sizeof(t));
		if (round == 4) {
			uint8_t *hole2 = make_hole();
			struct ibv_mr *rmr = ibv_reg_mr(p->pd, hole2, SPAN,
							IBV_ACCESS_LOCAL_WRITE |
								IBV_ACCESS_ON_DEMAND);
			struct ibv_sge rs;
			struct ibv_wc wc;

			H_CHECK(rmr);
			rs = (struct ibv_sge){ (uintptr_t)hole2, PAGE, rmr->lkey };
			h_post_recv(&ep, 40, &rs, 1);
			h_sync(sock);
			if (!h_poll(ep.rcq, &wc, H_WC_TIMEOUT_MS))
				h_fail("no receive completion");
			H_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
			h_sync(sock);
			h_ep_destroy(&ep);
			H_OK(ibv_dereg_mr(rmr));
			H_OK(munmap(hole2, SPAN));
			continue;
		}
		h_sync(sock);
		if (round >= 2)
			h_expect_mem(hole, want, SPAN, "the ODP range");
		if (round == 3) {
			uint8_t w[64];

			h_fill(w, 64, 3);
			h_expect_mem(late, w, 64, "the buffer under the implicit MR");
		}
		h_ep_destroy(&ep);
	}
	H_OK(ibv_dereg_mr(implicit));
	H_OK(ibv_dereg_mr(odp));
	H_OK(munmap(hole, SPAN));
	free(late);
	free(want);
}

int main(void)
{
	struct h_test t = { .name = "rc.odp", .nroles = 2,
			    .role = { peer, owner }, .deadline_s = 50 };

	return h_main(&t);
}
