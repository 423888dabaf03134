/*
 * Protection domains.  A PD is only a name that MRs, QPs, AHs and SRQs share
 * so that keys and addresses are checked against the right owner; what it
 * must track is who still uses it, because rdma-core refuses to free a PD
 * that objects still point to (the kernel returns EBUSY).
 */
#include <errno.h>
#include <stdlib.h>

#include "uroce.h"

UROCE_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct uroce_pd *pd;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->ibpd.context = context;
	atomic_init(&pd->use_cnt, 0);
	return &pd->ibpd;
}

UROCE_EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct uroce_pd *pd;

	if (!ibpd)
		return EINVAL;
	pd = to_upd(ibpd);
	if (atomic_load(&pd->use_cnt))
		return EBUSY;
	free(pd);
	return 0;
}
