/*
 * Device memory (verbs/dm.c): allocation limits and the per-process budget,
 * copies on the 4-byte grid and inside the DM only, the rules of MRs on it
 * (zero-based, within the DM, mlx5's access flags, possibly empty) and that
 * an MR holds its DM; then RDMA between two RC QPs of this process, looped
 * back through 127.0.0.1: a DM MR serves remote WRITE, READ and atomics with
 * its rkey, iova 0 being its first byte, and local SGEs of sends and
 * receives with its lkey.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs/ops.h"

enum { WC_TIMEOUT_MS = 5000 };

static const unsigned int DM_ACCESS = IBV_ACCESS_ZERO_BASED |
	IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
	IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static int setup(void **state)
{
	struct ibv_device **devs = ibv_get_device_list(NULL);

	(void)state;
	assert_non_null(devs);
	ctx = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	assert_non_null(ctx);
	pd = ibv_alloc_pd(ctx);
	assert_non_null(pd);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
	return 0;
}

static struct ibv_dm *dm_alloc(size_t length, uint32_t log_align)
{
	struct ibv_alloc_dm_attr attr = { .length = length,
					  .log_align_req = log_align };

	return ibv_alloc_dm(ctx, &attr);
}

static void expect_alloc_error(size_t length, uint32_t log_align,
			       uint32_t comp_mask, int err)
{
	struct ibv_alloc_dm_attr attr = { .length = length,
					  .log_align_req = log_align,
					  .comp_mask = comp_mask };

	errno = 0;
	assert_null(ibv_alloc_dm(ctx, &attr));
	assert_int_equal(errno, err);
}

/* The DM's host memory, seen through an MR on it (white-box). */
static uint8_t *dm_host(struct ibv_mr *mr)
{
	return uroce_mr_ptr(to_umr(mr), 0, mr->length);
}

static void test_alloc(void **state)
{
	struct ibv_device_attr_ex attr;
	struct ibv_dm *dm, *more;
	struct ibv_mr *mr;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(ibv_query_device_ex(ctx, NULL, &attr), 0);
	assert_int_equal(attr.max_dm_size, UROCE_MAX_DM_SIZE);

	expect_alloc_error(64, 0, 1, EINVAL);		/* no bits defined */
	expect_alloc_error(0, 0, 0, EINVAL);
	expect_alloc_error(UROCE_MAX_DM_SIZE + 1, 0, 0, EINVAL);
	expect_alloc_error(64, 19, 0, EINVAL);		/* > all of it */
	expect_alloc_error(64, 63, 0, EINVAL);

	/* the alignment asked for, and at least 64 bytes; zeroed */
	dm = dm_alloc(100, 12);
	assert_non_null(dm);
	mr = ibv_reg_dm_mr(pd, dm, 0, 100, DM_ACCESS);
	assert_non_null(mr);
	assert_int_equal((uintptr_t)dm_host(mr) % 4096, 0);
	memset(buf, 0xff, sizeof(buf));
	assert_int_equal(ibv_memcpy_from_dm(buf, dm, 36, 64), 0);
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
	dm = dm_alloc(4, 0);
	assert_non_null(dm);
	mr = ibv_reg_dm_mr(pd, dm, 0, 4, DM_ACCESS);
	assert_non_null(mr);
	assert_int_equal((uintptr_t)dm_host(mr) % 64, 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_free_dm(dm), 0);

	/* max_dm_size is all there is: what is in use is not free */
	dm = dm_alloc(UROCE_MAX_DM_SIZE - 64, 0);
	assert_non_null(dm);
	more = dm_alloc(1, 0);			/* charged 64 bytes */
	assert_non_null(more);
	expect_alloc_error(1, 0, 0, ENOMEM);
	assert_int_equal(ibv_free_dm(more), 0);
	more = dm_alloc(64, 0);
	assert_non_null(more);
	assert_int_equal(ibv_free_dm(more), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
	dm = dm_alloc(UROCE_MAX_DM_SIZE, 0);
	assert_non_null(dm);
	assert_int_equal(ibv_free_dm(dm), 0);
}

static void test_copy(void **state)
{
	uint8_t in[104], out[104], zero[104] = { 0 };
	struct ibv_dm *dm = dm_alloc(102, 0);

	(void)state;
	assert_non_null(dm);
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i + 1);
	assert_int_equal(ibv_memcpy_to_dm(dm, 0, in, 100), 0);
	memset(out, 0, sizeof(out));
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 0, 100), 0);
	assert_memory_equal(out, in, 100);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 40, 8), 0);
	assert_memory_equal(out, in + 40, 8);

	/* off the 4-byte grid */
	assert_int_equal(ibv_memcpy_to_dm(dm, 2, in, 4), EINVAL);
	assert_int_equal(ibv_memcpy_to_dm(dm, 4, in, 2), EINVAL);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 1, 4), EINVAL);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 0, 3), EINVAL);
	/* outside the DM (the last 2 of its 102 bytes are not on the grid) */
	assert_int_equal(ibv_memcpy_to_dm(dm, 100, zero, 4), EFAULT);
	assert_int_equal(ibv_memcpy_to_dm(dm, 0, zero, 104), EFAULT);
	assert_int_equal(ibv_memcpy_to_dm(dm, 104, zero, 4), EFAULT);
	assert_int_equal(ibv_memcpy_to_dm(dm, UINT64_MAX - 3, zero, 8), EFAULT);
	memset(out, 0xAB, sizeof(out));
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 96, 8), EFAULT);
	assert_int_equal(ibv_memcpy_from_dm(out, dm, UINT64_MAX - 3, 8), EFAULT);
	for (size_t i = 0; i < sizeof(out); i++)
		assert_int_equal(out[i], 0xAB);		/* nothing copied */
	/* and none of the refused writes touched it */
	assert_int_equal(ibv_memcpy_from_dm(out, dm, 0, 100), 0);
	assert_memory_equal(out, in, 100);
	/* nothing at its very end */
	assert_int_equal(ibv_memcpy_to_dm(dm, 100, in, 0), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
}

static void expect_reg_error(struct ibv_pd *p, struct ibv_dm *dm,
			     uint64_t offset, size_t length,
			     unsigned int access)
{
	errno = 0;
	assert_null(ibv_reg_dm_mr(p, dm, offset, length, access));
	assert_int_equal(errno, EINVAL);
}

static void test_mr_rules(void **state)
{
	const unsigned int zb_lw = IBV_ACCESS_ZERO_BASED |
				   IBV_ACCESS_LOCAL_WRITE;
	struct ibv_dm *dm = dm_alloc(256, 0);
	struct ibv_device **devs;
	struct ibv_context *ctx2;
	struct ibv_pd *pd2;
	struct ibv_mr *mr, *whole, *empty;

	(void)state;
	assert_non_null(dm);
	expect_reg_error(pd, dm, 0, 64, IBV_ACCESS_LOCAL_WRITE); /* not 0-based */
	expect_reg_error(pd, dm, 0, 64, IBV_ACCESS_ZERO_BASED |
			 IBV_ACCESS_REMOTE_WRITE);	/* without LOCAL_WRITE */
	expect_reg_error(pd, dm, 0, 64, IBV_ACCESS_ZERO_BASED |
			 IBV_ACCESS_REMOTE_ATOMIC);
	expect_reg_error(pd, dm, 0, 64, zb_lw | IBV_ACCESS_ON_DEMAND);
	expect_reg_error(pd, dm, 0, 64, zb_lw | IBV_ACCESS_MW_BIND);
	expect_reg_error(pd, dm, 0, 64, zb_lw | IBV_ACCESS_HUGETLB);
	expect_reg_error(pd, dm, 0, 260, zb_lw);
	expect_reg_error(pd, dm, 200, 60, zb_lw);
	expect_reg_error(pd, dm, 260, 0, zb_lw);
	expect_reg_error(pd, dm, UINT64_MAX, 2, zb_lw);

	/* a DM of another context */
	devs = ibv_get_device_list(NULL);
	assert_non_null(devs);
	ctx2 = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	assert_non_null(ctx2);
	pd2 = ibv_alloc_pd(ctx2);
	assert_non_null(pd2);
	expect_reg_error(pd2, dm, 0, 64, zb_lw);
	assert_int_equal(ibv_dealloc_pd(pd2), 0);
	assert_int_equal(ibv_close_device(ctx2), 0);

	/* zero-based over [64, 192) of the DM; optional bits are hints */
	mr = ibv_reg_dm_mr(pd, dm, 64, 128,
			   DM_ACCESS | IBV_ACCESS_RELAXED_ORDERING);
	assert_non_null(mr);
	whole = ibv_reg_dm_mr(pd, dm, 0, 256, zb_lw);
	assert_non_null(whole);
	assert_int_equal(mr->length, 128);
	assert_int_equal(mr->lkey, mr->rkey);
	assert_int_not_equal(mr->lkey, whole->lkey);
	assert_int_equal(to_umr(mr)->iova, 0);
	assert_ptr_equal(uroce_mr_ptr(to_umr(mr), 0, 128), dm_host(whole) + 64);
	assert_null(uroce_mr_ptr(to_umr(mr), 1, 128));
	/* empty, even at the very end: keys that name no memory */
	empty = ibv_reg_dm_mr(pd, dm, 256, 0, zb_lw);
	assert_non_null(empty);
	assert_int_equal(empty->length, 0);
	assert_ptr_equal(uroce_mr_lookup(to_uctx(ctx)->nic, empty->lkey),
			 to_umr(empty));
	assert_null(uroce_mr_ptr(to_umr(empty), 0, 1));

	/* every MR on it holds the DM, and the PD */
	assert_int_equal(ibv_free_dm(dm), EBUSY);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dereg_mr(whole), 0);
	assert_int_equal(ibv_free_dm(dm), EBUSY);
	assert_int_equal(ibv_dereg_mr(empty), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
}

/* ---- loopback RDMA ---------------------------------------------------------- */

struct ep {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static void ep_create(struct ep *ep)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};

	ep->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	assert_non_null(ep->cq);
	ia.send_cq = ia.recv_cq = ep->cq;
	ep->qp = ibv_create_qp(pd, &ia);
	assert_non_null(ep->qp);
	assert_int_equal(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE |
				       IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS), 0);
}

/* RTR and RTS towards peer, through GID 0 (127.0.0.1) of this device. */
static void ep_connect(struct ep *ep, const struct ep *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = peer->qp->qp_num,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1 },
	};

	assert_int_equal(ibv_query_gid(ctx, 1, 0, &a.ah_attr.grh.dgid), 0);
	assert_int_equal(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_AV |
				       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	assert_int_equal(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE |
				       IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				       IBV_QP_MAX_QP_RD_ATOMIC), 0);
}

static void ep_destroy(struct ep *ep)
{
	assert_int_equal(ibv_destroy_qp(ep->qp), 0);
	assert_int_equal(ibv_destroy_cq(ep->cq), 0);
}

static struct ibv_wc poll_one(struct ep *ep)
{
	struct timespec t0, t;
	struct ibv_wc wc;
	int n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!(n = ibv_poll_cq(ep->cq, 1, &wc))) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		assert_true((t.tv_sec - t0.tv_sec) * 1000 +
			    (t.tv_nsec - t0.tv_nsec) / 1000000 < WC_TIMEOUT_MS);
	}
	assert_int_equal(n, 1);
	return wc;
}

static void expect_wc(struct ep *ep, enum ibv_wc_status status,
		      enum ibv_wc_opcode opcode)
{
	struct ibv_wc wc = poll_one(ep);

	assert_int_equal(wc.status, status);
	if (status == IBV_WC_SUCCESS)
		assert_int_equal(wc.opcode, opcode);
}

static void post(struct ep *ep, enum ibv_wr_opcode op, uint64_t addr,
		 uint32_t length, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = op },
			   *bad;

	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 5;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	assert_int_equal(ibv_post_send(ep->qp, &wr, &bad), 0);
}

static void test_rdma_loopback(void **state)
{
	enum { DM_LEN = 4096, MR_OFF = 1024, MR_LEN = 2048, N = 1000 };
	static _Alignas(64) uint8_t buf[4096];
	uint8_t expect[N], got[N];
	uint64_t counter = 37, old;
	struct ibv_dm *dm = dm_alloc(DM_LEN, 0);
	struct ibv_mr *dmmr, *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ep a, b;

	(void)state;
	assert_non_null(dm);
	/* b's DM MR is [MR_OFF, MR_OFF + MR_LEN) of the DM, at iova 0 */
	dmmr = ibv_reg_dm_mr(pd, dm, MR_OFF, MR_LEN, DM_ACCESS);
	assert_non_null(dmmr);
	mr = ibv_reg_mr(pd, buf, sizeof(buf),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(mr);
	ep_create(&a);
	ep_create(&b);
	ep_connect(&a, &b);
	ep_connect(&b, &a);

	/* remote WRITE into it */
	for (size_t i = 0; i < N; i++)
		buf[i] = expect[i] = (uint8_t)(i * 7 + 3);
	post(&a, IBV_WR_RDMA_WRITE, (uintptr_t)buf, N, mr->lkey, 8,
	     dmmr->rkey);
	expect_wc(&a, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	assert_int_equal(ibv_memcpy_from_dm(got, dm, MR_OFF + 8, N), 0);
	assert_memory_equal(got, expect, N);
	assert_int_equal(ibv_memcpy_from_dm(got, dm, MR_OFF, 8), 0);
	for (size_t i = 0; i < 8; i++)
		assert_int_equal(got[i], 0);	/* before iova 8: untouched */

	/* remote READ out of it */
	for (size_t i = 0; i < N; i++)
		expect[i] = (uint8_t)(i ^ 0x5A);
	assert_int_equal(ibv_memcpy_to_dm(dm, MR_OFF + 1024, expect, N), 0);
	memset(buf, 0, sizeof(buf));
	post(&a, IBV_WR_RDMA_READ, (uintptr_t)buf, N, mr->lkey, 1024,
	     dmmr->rkey);
	expect_wc(&a, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	assert_memory_equal(buf, expect, N);

	/* remote atomic on it */
	assert_int_equal(ibv_memcpy_to_dm(dm, MR_OFF + 16, &counter, 8), 0);
	post(&a, IBV_WR_ATOMIC_FETCH_AND_ADD, (uintptr_t)buf, 8, mr->lkey, 16,
	     dmmr->rkey);
	expect_wc(&a, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD);
	memcpy(&old, buf, 8);
	assert_int_equal(old, 37);
	assert_int_equal(ibv_memcpy_from_dm(&counter, dm, MR_OFF + 16, 8), 0);
	assert_int_equal(counter, 42);

	/* its lkey gathers (b writes out of it) ... */
	memset(buf, 0, sizeof(buf));
	post(&b, IBV_WR_RDMA_WRITE, 1024, N, dmmr->lkey, (uintptr_t)buf,
	     mr->rkey);
	expect_wc(&b, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	assert_memory_equal(buf, expect, N);
	/* ... and scatters (b receives into it) */
	sge = (struct ibv_sge){ .addr = 64, .length = N, .lkey = dmmr->lkey };
	assert_int_equal(ibv_post_recv(b.qp, &rwr, &rbad), 0);
	for (size_t i = 0; i < N; i++)
		buf[i] = expect[i] = (uint8_t)(255 - i);
	post(&a, IBV_WR_SEND, (uintptr_t)buf, N, mr->lkey, 0, 0);
	expect_wc(&a, IBV_WC_SUCCESS, IBV_WC_SEND);
	expect_wc(&b, IBV_WC_SUCCESS, IBV_WC_RECV);
	assert_int_equal(ibv_memcpy_from_dm(got, dm, MR_OFF + 64, N), 0);
	assert_memory_equal(got, expect, N);

	/* the MR's bounds are its own, not the DM's: one byte past its end
	 * is a remote access error, and the DM beyond stays as it was */
	post(&a, IBV_WR_RDMA_WRITE, (uintptr_t)buf, 8, mr->lkey, MR_LEN - 4,
	     dmmr->rkey);
	expect_wc(&a, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE);
	assert_int_equal(ibv_memcpy_from_dm(got, dm, MR_OFF + MR_LEN - 4, 8),
			 0);
	for (size_t i = 0; i < 8; i++)
		assert_int_equal(got[i], 0);

	ep_destroy(&a);
	ep_destroy(&b);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dereg_mr(dmmr), 0);
	assert_int_equal(ibv_free_dm(dm), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alloc),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_mr_rules),
		cmocka_unit_test(test_rdma_loopback),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
