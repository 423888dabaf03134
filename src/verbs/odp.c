/*
 * On-demand paging (IBV_ACCESS_ON_DEMAND).
 *
 * uroce pins nothing: every MR's pages are the process's own and the CPU
 * faults them in when the engine copies.  What ODP changes is what may be
 * registered: a range that is not (yet) mapped, or all of the address space
 * at once (implicit ODP, ibv_reg_mr(pd, NULL, SIZE_MAX, ...)).  The engine
 * must then not touch such memory blindly, or an unmapped page would crash
 * the process instead of failing one request.  So an ODP range is faulted
 * in first, as a NIC's page fault would be, where it is used: when a remote
 * request arrives (responder), when a receive is consumed, and when a send
 * is posted.  A range that cannot be faulted in fails that request: remote
 * access error, local protection error, or EFAULT from the post.
 * ibv_advise_mr prefetches the same way.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs/ops.h"

/* Linux 5.14; older kernels refuse them with EINVAL */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int uroce_range_mapped(const void *addr, size_t length)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(page - 1);
	uintptr_t end = (uintptr_t)addr + length;
	unsigned char vec[4096];

	while (start < end) {
		size_t chunk = end - start;

		if (chunk > sizeof(vec) * page)
			chunk = sizeof(vec) * page;
		if (mincore((void *)start, chunk, vec))
			return errno == ENOMEM ? EFAULT : errno;
		start += chunk;
	}
	return 0;
}

static bool can_populate;
static pthread_once_t populate_once = PTHREAD_ONCE_INIT;

/* Whether this kernel has MADV_POPULATE_*: asked of a page surely mapped
 * readable (this program's own text), since the same EINVAL also means
 * "not accessible" (PROT_NONE) where it does. */
static void probe_populate(void)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t self = (uintptr_t)&probe_populate & ~(page - 1);

	can_populate = !madvise((void *)self, page, MADV_POPULATE_READ);
}

int uroce_odp_fault(const void *addr, size_t length, bool write)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(page - 1);
	uintptr_t end = (uintptr_t)addr + length;

	if (!length)
		return 0;
	if (end < start)
		return EFAULT;
	pthread_once(&populate_once, probe_populate);
	/* a kernel older than 5.14: that the pages are mapped is all that
	 * can be checked without touching them (PROT_NONE passes) */
	if (!can_populate)
		return uroce_range_mapped(addr, length);
	if (!madvise((void *)start, end - start,
		     write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ))
		return 0;
	return EFAULT;
}

int uroce_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		    uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge)
{
	struct uroce_nic *nic = to_uctx(pd->context)->nic;
	int err = 0;

	if ((advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
	     advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	     advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) ||
	    (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || !num_sge ||
	    !sg_list)
		return EINVAL;
	pthread_rwlock_rdlock(&nic->mr_lock);
	for (uint32_t i = 0; i < num_sge && !err; i++) {
		struct uroce_mr *mr = uroce_mr_lookup(nic, sg_list[i].lkey);
		uint8_t *p;

		/* only ODP MRs of this PD take advice (as the kernel's
		 * ib_uverbs_advise_mr) */
		if (!mr || mr->mw || mr->pd != to_upd(pd) ||
		    !(mr->access & IBV_ACCESS_ON_DEMAND)) {
			err = EINVAL;
			break;
		}
		p = uroce_mr_ptr(mr, sg_list[i].addr, sg_list[i].length);
		if (!p) {
			err = EFAULT;
			break;
		}
		if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
			/* map what is present, fault nothing in */
			uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
			uintptr_t s = (uintptr_t)p & ~(page - 1);

			madvise((void *)s, (uintptr_t)p + sg_list[i].length - s,
				MADV_WILLNEED);
			continue;
		}
		err = uroce_odp_fault(p, sg_list[i].length,
				      advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE);
		/* without FLUSH the prefetch is a hint: its outcome is not
		 * the caller's to wait for */
		if (!(flags & IBV_ADVISE_MR_FLAG_FLUSH))
			err = 0;
	}
	pthread_rwlock_unlock(&nic->mr_lock);
	return err;
}
