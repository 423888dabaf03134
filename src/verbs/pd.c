/*
 * Protection domains.  A PD is only a name that MRs, QPs, AHs and SRQs share
 * so that keys and addresses are checked against the right owner; what it
 * must track is who still uses it, because rdma-core refuses to free a PD
 * that objects still point to (the kernel returns EBUSY).
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs/ops.h"

UROCE_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct uroce_pd *pd;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	if (!uroce_nic_take(&to_uctx(context)->nic->used.pd, UROCE_MAX_PD)) {
		errno = ENOMEM;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		atomic_fetch_sub(&to_uctx(context)->nic->used.pd, 1);
		errno = ENOMEM;
		return NULL;
	}
	pd->ibpd.context = context;
	atomic_init(&pd->use_cnt, 0);
	return &pd->ibpd;
}

/* The object behind ibpd itself (to_upd() answers a parent domain's PD). */
static struct uroce_pd *pd_object(struct ibv_pd *ibpd)
{
	return container_of(ibpd, struct uroce_pd, ibpd);
}

bool uroce_pd_is_parent(struct ibv_pd *ibpd)
{
	return pd_object(ibpd)->protection != NULL;
}

void uroce_pd_hold(struct ibv_pd *ibpd, int delta)
{
	struct uroce_pd *pd = pd_object(ibpd);

	atomic_fetch_add(&pd->use_cnt, delta);
	if (pd->protection)
		atomic_fetch_add(&pd->protection->use_cnt, delta);
}

UROCE_EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct uroce_pd *pd;

	if (!ibpd)
		return EINVAL;
	pd = pd_object(ibpd);
	if (atomic_load(&pd->use_cnt))
		return EBUSY;
	if (pd->protection)
		atomic_fetch_sub(&pd->protection->use_cnt, 1);
	else	/* a parent domain is no PD of the device's */
		atomic_fetch_sub(&to_uctx(ibpd->context)->nic->used.pd, 1);
	if (pd->td_users)
		atomic_fetch_sub(pd->td_users, 1);
	free(pd);
	return 0;
}

/* ---- thread and parent domains ----------------------------------------------
 * A thread domain promises that one thread uses what is made in it, which
 * lets a NIC's provider drop locks; uroce's locks stay, so it is a token.  A
 * parent domain stands for its PD (and thread domain) wherever a PD is
 * taken.  Its allocators are accepted and not called: uroce's queues are
 * ordinary heap memory no device reads, and a provider may always use its
 * own (IBV_ALLOCATOR_USE_DEFAULT is the same choice made by the callback). */

struct uroce_td {
	struct ibv_td ibtd;
	atomic_uint use_cnt;	/* parent domains made with it */
};

struct ibv_td *uroce_alloc_td(struct ibv_context *ctx,
			      struct ibv_td_init_attr *attr)
{
	struct uroce_td *td;

	if (!attr || attr->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	td = calloc(1, sizeof(*td));
	if (!td) {
		errno = ENOMEM;
		return NULL;
	}
	td->ibtd.context = ctx;
	atomic_init(&td->use_cnt, 0);
	return &td->ibtd;
}

int uroce_dealloc_td(struct ibv_td *ibtd)
{
	struct uroce_td *td = container_of(ibtd, struct uroce_td, ibtd);

	if (atomic_load(&td->use_cnt))
		return EBUSY;
	free(td);
	return 0;
}

struct ibv_pd *uroce_alloc_parent_domain(struct ibv_context *ctx,
					 struct ibv_parent_domain_init_attr *attr)
{
	struct ibv_pd *parent;
	struct uroce_pd *pd;

	if (!attr || !attr->pd || attr->pd->context != ctx ||
	    pd_object(attr->pd)->protection ||	/* not of a parent domain */
	    (attr->td && attr->td->context != ctx) ||
	    (attr->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
					   IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)) ||
	    ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	     (!attr->alloc || !attr->free))) {
		errno = EINVAL;
		return NULL;
	}
	parent = ibv_alloc_pd(ctx);
	if (!parent)
		return NULL;
	pd = pd_object(parent);
	pd->protection = pd_object(attr->pd);
	atomic_fetch_add(&pd->protection->use_cnt, 1);
	if (attr->td) {
		pd->td_users = &container_of(attr->td, struct uroce_td,
					     ibtd)->use_cnt;
		atomic_fetch_add(pd->td_users, 1);
	}
	return &pd->ibpd;
}
