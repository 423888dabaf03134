/*
 * rc.limits: every object limit ibv_query_device advertises is what works.
 * In one process under a soft limit of 1024 file descriptors, as many PDs,
 * CQs, MRs, memory windows, AHs, SRQs and QPs as advertised are created
 * (each kind alone), then one more must fail with an errno, not crash or
 * succeed; then all are destroyed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "harness.h"

enum kind { PD, CQ, MR, MW, AH, SRQ, QP, KINDS };
static const char *const names[KINDS] = { "PD", "CQ", "MR", "MW", "AH",
					  "SRQ", "QP" };

static struct ibv_cq *shared_cq;
static uint8_t page[4096] __attribute__((aligned(4096)));

static void *create(struct h_proc *p, enum kind k)
{
	switch (k) {
	case PD:
		return ibv_alloc_pd(p->ctx);
	case CQ:
		return ibv_create_cq(p->ctx, 1, NULL, NULL, 0);
	case MR:
		return ibv_reg_mr(p->pd, page, sizeof(page),
				  IBV_ACCESS_LOCAL_WRITE);
	case MW:
		return ibv_alloc_mw(p->pd, IBV_MW_TYPE_2);
	case AH: {
		struct ibv_ah_attr a = { .is_global = 1, .port_num = H_PORT,
					 .grh = { .dgid = p->gid,
						  .hop_limit = 64 } };

		return ibv_create_ah(p->pd, &a);
	}
	case SRQ: {
		struct ibv_srq_init_attr a = { .attr = { .max_wr = 1,
							 .max_sge = 1 } };

		return ibv_create_srq(p->pd, &a);
	}
	default: {
		struct ibv_qp_init_attr a = {
			.send_cq = shared_cq, .recv_cq = shared_cq,
			.qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};

		return ibv_create_qp(p->pd, &a);
	}
	}
}

static void destroy(enum kind k, void *o)
{
	switch (k) {
	case PD: H_OK(ibv_dealloc_pd(o)); break;
	case CQ: H_OK(ibv_destroy_cq(o)); break;
	case MR: H_OK(ibv_dereg_mr(o)); break;
	case MW: H_OK(ibv_dealloc_mw(o)); break;
	case AH: H_OK(ibv_destroy_ah(o)); break;
	case SRQ: H_OK(ibv_destroy_srq(o)); break;
	default: H_OK(ibv_destroy_qp(o)); break;
	}
}

static void run(struct h_proc *p)
{
	struct rlimit rl;
	long limit[KINDS] = {
		[PD] = p->dev.max_pd, [CQ] = p->dev.max_cq,
		[MR] = p->dev.max_mr, [MW] = p->dev.max_mw,
		[AH] = p->dev.max_ah, [SRQ] = p->dev.max_srq,
		[QP] = p->dev.max_qp,
	};

	H_OK(getrlimit(RLIMIT_NOFILE, &rl) ? errno : 0);
	/* ulimit -n 1024, or less where the hard limit is lower */
	rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
	H_OK(setrlimit(RLIMIT_NOFILE, &rl) ? errno : 0);
	shared_cq = ibv_create_cq(p->ctx, 1, NULL, NULL, 0);
	H_CHECK(shared_cq);
	for (int k = 0; k < KINDS; k++) {
		/* the process's own PD and the QPs' CQ count against theirs */
		long n = limit[k] - (k == PD || k == CQ);
		void **o = calloc((size_t)n, sizeof(*o));
		void *extra;

		H_CHECK(limit[k] > 0 && o);
		for (long i = 0; i < n; i++) {
			o[i] = create(p, (enum kind)k);
			if (!o[i])
				h_fail("%s %ld of %ld advertised: %s", names[k],
				       i + 1, limit[k], strerror(errno));
		}
		errno = 0;
		extra = create(p, (enum kind)k);
		if (extra || !errno)
			h_fail("%s beyond the advertised %ld: %s", names[k],
			       limit[k], extra ? "created" : "no errno");
		printf("rc.limits: %ld %ss (advertised), one more: %s\n",
		       limit[k], names[k], strerror(errno));
		for (long i = 0; i < n; i++)
			destroy((enum kind)k, o[i]);
		free(o);
	}
	H_OK(ibv_destroy_cq(shared_cq));
}

int main(void)
{
	struct h_test t = { .name = "rc.limits", .nroles = 1,
			    .role = { run }, .deadline_s = 200 };

	return h_main(&t);
}
