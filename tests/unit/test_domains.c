/*
 * Thread and parent domains (verbs/pd.c): a parent domain protects with the
 * PD it was made from, wherever a PD is taken (QPs, MRs, AHs, SRQs, CQs);
 * neither that PD nor the thread domain can go while it exists, nor the
 * parent domain while objects use it; bad attributes are EINVAL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>

#include "verbs/ops.h"

static struct ibv_context *ctx;

static int setup(void **state)
{
	struct ibv_device **devs = ibv_get_device_list(NULL);

	(void)state;
	assert_non_null(devs);
	ctx = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	assert_non_null(ctx);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(ibv_close_device(ctx), 0);
	return 0;
}

static void *never_alloc(struct ibv_pd *pd, void *pd_context, size_t size,
			 size_t alignment, uint64_t resource_type)
{
	(void)pd;
	(void)pd_context;
	(void)size;
	(void)alignment;
	(void)resource_type;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void never_free(struct ibv_pd *pd, void *pd_context, void *ptr,
		       uint64_t resource_type)
{
	(void)pd;
	(void)pd_context;
	(void)ptr;
	(void)resource_type;
}

static void test_parent_domain(void **state)
{
	struct ibv_td_init_attr tda = { 0 };
	struct ibv_td *td;
	struct ibv_pd *pd, *other, *parent;
	struct ibv_parent_domain_init_attr pa = { 0 };
	struct ibv_cq_init_attr_ex ca = { .cqe = 4,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD };
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4,
						.max_recv_wr = 4,
						.max_send_sge = 1,
						.max_recv_sge = 1 } };
	static char buf[4096];

	(void)state;
	tda.comp_mask = 1;
	assert_null(ibv_alloc_td(ctx, &tda));
	assert_int_equal(errno, EINVAL);
	tda.comp_mask = 0;
	td = ibv_alloc_td(ctx, &tda);
	assert_non_null(td);
	pd = ibv_alloc_pd(ctx);
	other = ibv_alloc_pd(ctx);
	assert_non_null(pd);
	assert_non_null(other);

	pa.pd = pd;
	pa.td = td;
	pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
	assert_null(ibv_alloc_parent_domain(ctx, &pa));	/* no callbacks */
	assert_int_equal(errno, EINVAL);
	pa.alloc = never_alloc;
	pa.free = never_free;
	parent = ibv_alloc_parent_domain(ctx, &pa);
	assert_non_null(parent);
	pa.pd = parent;		/* a parent of a parent domain */
	assert_null(ibv_alloc_parent_domain(ctx, &pa));
	assert_int_equal(errno, EINVAL);

	/* the PD and the thread domain stay while the parent domain does */
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_dealloc_td(td), EBUSY);

	/* it protects as its PD: an MR of the PD serves a QP of the parent
	 * domain, and one registered on it is the PD's */
	ca.parent_domain = other;	/* not a parent domain */
	assert_null(ibv_create_cq_ex(ctx, &ca));
	assert_int_equal(errno, EINVAL);
	ca.parent_domain = parent;
	cqx = ibv_create_cq_ex(ctx, &ca);
	assert_non_null(cqx);
	cq = ibv_cq_ex_to_cq(cqx);
	qa.send_cq = qa.recv_cq = cq;
	qp = ibv_create_qp(parent, &qa);
	assert_non_null(qp);
	mr = ibv_reg_mr(parent, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_ptr_equal(mr->pd, parent);
	assert_ptr_equal(to_upd(mr->pd), to_upd(pd));
	assert_ptr_equal(to_upd(qp->pd), to_upd(pd));
	assert_ptr_not_equal(to_upd(other), to_upd(pd));

	/* nothing goes while something uses it */
	assert_int_equal(ibv_dealloc_pd(parent), EBUSY);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_dealloc_pd(parent), EBUSY);	/* the CQ */
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_dealloc_pd(parent), 0);
	assert_int_equal(ibv_dealloc_td(td), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_dealloc_pd(other), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parent_domain),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
