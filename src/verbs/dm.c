/*
 * Device memory (ibv_alloc_dm, ibv_memcpy_to/from_dm, ibv_reg_dm_mr).
 *
 * On a NIC it is memory on the adapter, which RDMA reaches without crossing
 * PCIe.  uroce has none: its device memory is host memory the library owns,
 * up to UROCE_MAX_DM_SIZE in all per process (the NIC is per process).  The
 * application reaches it only by copying and through MRs registered on it,
 * which are ordinary MRs over that memory and zero-based, as rdma-core makes
 * every DM MR (where device memory lives is not the application's business).
 *
 * The rules are those of the kernel and of rdma-core's provider of device
 * memory, mlx5 (MEMIC), so that a program that works here works there.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs/ops.h"

enum {
	/* MEMIC's allocation unit, and a cache line: lengths are charged in
	 * it and every DM starts aligned to it, so that an 8-byte atomic at an
	 * 8-byte aligned offset of a DM MR is aligned in host memory too. */
	DM_GRANULE = 64,
	/* mlx5 moves device memory in 4-byte words and refuses copies at
	 * other offsets or of other lengths; uroce could copy any bytes but
	 * holds programs to the rule they meet on hardware. */
	DM_WORD = 4,
};

/* What mlx5 lets an MR on device memory have: no memory windows, no
 * on-demand paging, no huge page promise (the memory is the device's). */
#define DM_MR_ACCESS                                                           \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                    \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |                   \
	 IBV_ACCESS_ZERO_BASED | IBV_ACCESS_OPTIONAL_RANGE)

struct uroce_dm {
	struct ibv_dm ibdm;
	uint8_t *mem;
	size_t length;			/* as allocated: the bound of every access */
	size_t charged;			/* against UROCE_MAX_DM_SIZE */
	atomic_uint mr_users;		/* MRs registered on it: free is EBUSY */
};

/* Device memory in use by this process's NIC. */
static atomic_size_t dm_in_use;

static struct uroce_dm *to_udm(struct ibv_dm *dm)
{
	return container_of(dm, struct uroce_dm, ibdm);
}

/* EFAULT outside the DM, else EINVAL off the 4-byte grid, as mlx5 checks. */
static int dm_check_access(const struct uroce_dm *dm, uint64_t offset,
			   size_t length)
{
	if (!uroce_range_inside(0, dm->length, offset, length))
		return EFAULT;
	if ((offset | length) & (DM_WORD - 1))
		return EINVAL;
	return 0;
}

static int dm_memcpy_to(struct ibv_dm *ibdm, uint64_t offset,
			const void *host_addr, size_t length)
{
	struct uroce_dm *dm = to_udm(ibdm);
	int err = dm_check_access(dm, offset, length);

	if (!err)
		memcpy(dm->mem + offset, host_addr, length);
	return err;
}

static int dm_memcpy_from(void *host_addr, struct ibv_dm *ibdm,
			  uint64_t offset, size_t length)
{
	struct uroce_dm *dm = to_udm(ibdm);
	int err = dm_check_access(dm, offset, length);

	if (!err)
		memcpy(host_addr, dm->mem + offset, length);
	return err;
}

/* Take bytes of device memory; false when that much is no longer free. */
static bool dm_charge(size_t bytes)
{
	size_t used = atomic_load(&dm_in_use);

	do {
		if (bytes > UROCE_MAX_DM_SIZE - used)
			return false;
	} while (!atomic_compare_exchange_weak(&dm_in_use, &used,
					       used + bytes));
	return true;
}

struct ibv_dm *uroce_alloc_dm(struct ibv_context *ctx,
			      struct ibv_alloc_dm_attr *attr)
{
	struct uroce_dm *dm;
	size_t charged, align;
	void *mem;

	/* No comp_mask bits are defined.  Like MEMIC, an empty allocation,
	 * one larger than max_dm_size and an alignment the memory cannot
	 * have (larger than all of it) are invalid. */
	if (!attr || attr->comp_mask || !attr->length ||
	    attr->length > UROCE_MAX_DM_SIZE || attr->log_align_req >= 32 ||
	    (1ul << attr->log_align_req) > UROCE_MAX_DM_SIZE) {
		errno = EINVAL;
		return NULL;
	}
	charged = (attr->length + DM_GRANULE - 1) & ~(size_t)(DM_GRANULE - 1);
	align = (size_t)1 << attr->log_align_req;
	if (align < DM_GRANULE)
		align = DM_GRANULE;
	if (!dm_charge(charged)) {
		errno = ENOMEM;		/* what the kernel says when MEMIC is full */
		return NULL;
	}
	dm = calloc(1, sizeof(*dm));
	if (!dm || posix_memalign(&mem, align, charged)) {
		free(dm);
		atomic_fetch_sub(&dm_in_use, charged);
		errno = ENOMEM;
		return NULL;
	}
	/* fresh device memory must not show what the heap held before */
	memset(mem, 0, charged);
	dm->mem = mem;
	dm->length = attr->length;
	dm->charged = charged;
	atomic_init(&dm->mr_users, 0);
	dm->ibdm.context = ctx;
	dm->ibdm.memcpy_to_dm = dm_memcpy_to;
	dm->ibdm.memcpy_from_dm = dm_memcpy_from;
	/* comp_mask stays 0: there is no handle, as no import can succeed */
	return &dm->ibdm;
}

int uroce_free_dm(struct ibv_dm *ibdm)
{
	struct uroce_dm *dm = to_udm(ibdm);

	/* the kernel's rule: an MR on it holds it */
	if (atomic_load(&dm->mr_users))
		return EBUSY;
	free(dm->mem);
	atomic_fetch_sub(&dm_in_use, dm->charged);
	free(dm);
	return 0;
}

struct ibv_mr *uroce_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *ibdm,
			       uint64_t offset, size_t length,
			       unsigned int access)
{
	struct uroce_dm *dm;
	struct ibv_mr *mr;

	/* Zero-based only, as rdma-core and the kernel insist; the range must
	 * lie within the DM, which may leave it empty (the kernel allows). */
	if (!ibdm || ibdm->context != pd->context || (access & ~DM_MR_ACCESS) ||
	    !(access & IBV_ACCESS_ZERO_BASED)) {
		errno = EINVAL;
		return NULL;
	}
	dm = to_udm(ibdm);
	if (offset > dm->length || length > dm->length - offset) {
		errno = EINVAL;
		return NULL;
	}
	/* counted first, so that a free_dm meanwhile finds it busy */
	atomic_fetch_add(&dm->mr_users, 1);
	mr = uroce_reg_mr_at(pd, dm->mem + offset, length, 0, access);
	if (!mr) {
		atomic_fetch_sub(&dm->mr_users, 1);
		return NULL;
	}
	to_umr(mr)->dm_users = &dm->mr_users;
	return mr;
}
