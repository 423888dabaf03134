/*
 * Memory regions and key checking.
 *
 * A key is the MR's index in nic->mrs shifted left by UROCE_KEY_SHIFT, with
 * fresh random bits below it on every registration: a stale key (the MR was
 * deregistered, its slot reused) or a guessed one then names no MR.  Indices
 * are handed out round-robin, so a slot is reused only after every other one
 * was, and lkey == rkey.
 *
 * The table is read lock-free: application threads under mr_lock held for
 * reading (posting, which resolves lkeys), the engine with no lock at all
 * (rkeys of inbound requests).  Writers take mr_lock for writing, and an MR
 * leaves the table before uroce_engine_quiesce() and only then is freed or
 * changed, so that a pointer the engine loaded before is no longer in use.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "samehost/samehost.h"
#include "transport/transport.h"
#include "verbs/ops.h"

/* verbs.h turns both into inline wrappers that pick ibv_reg_mr_iova2 when
 * optional access bits may be set; these are the exported entry points. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define KEY_RANDOM_MASK ((1u << UROCE_KEY_SHIFT) - 1)

/* ---- key randomness -------------------------------------------------------
 * splitmix64 seeded from getrandom(): statistically good, cheap, and not
 * guessable from outside the process.  Its state is only advanced under
 * nic->mr_lock held for writing (one NIC per process). */

static uint64_t key_rng;
static pthread_once_t key_rng_once = PTHREAD_ONCE_INIT;

static void key_rng_seed(void)
{
	struct timespec ts;

	if (getrandom(&key_rng, sizeof(key_rng), GRND_NONBLOCK) ==
	    (ssize_t)sizeof(key_rng))
		return;
	/* No entropy yet (early boot) or no getrandom: never fall back to a
	 * fixed seed, which would make keys identical in every process. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	key_rng = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
		  ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)&ts;
}

static uint32_t key_random_bits(void)
{
	uint64_t z;

	pthread_once(&key_rng_once, key_rng_seed);
	z = (key_rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (uint32_t)z & KEY_RANDOM_MASK;
}

/* ---- table ---------------------------------------------------------------- */

/* Give mr a free index and a fresh key and make it visible; caller holds
 * mr_lock for writing. */
static int mr_publish_locked(struct uroce_nic *nic, struct uroce_mr *mr)
{
	for (unsigned tries = 0; tries < UROCE_MAX_MR; tries++) {
		unsigned idx = nic->next_mr_index;

		nic->next_mr_index = idx % UROCE_MAX_MR + 1;
		if (atomic_load_explicit(&nic->mrs[idx], memory_order_relaxed))
			continue;
		mr->index = idx;
		mr->ibmr.handle = idx;
		mr->ibmr.lkey = (uint32_t)idx << UROCE_KEY_SHIFT |
				key_random_bits();
		mr->ibmr.rkey = mr->ibmr.lkey;
		/* release: readers that see the pointer see the fields */
		atomic_store_explicit(&nic->mrs[idx], mr, memory_order_release);
		return 0;
	}
	return ENOMEM;
}

int uroce_key_publish(struct uroce_nic *nic, struct uroce_mr *mr)
{
	int err;

	pthread_rwlock_wrlock(&nic->mr_lock);
	err = mr_publish_locked(nic, mr);
	pthread_rwlock_unlock(&nic->mr_lock);
	return err;
}

/* Take mr out of the table and wait until no reader can still hold it. */
static void mr_unpublish(struct uroce_nic *nic, struct uroce_mr *mr)
{
	uroce_sh_mr_withdraw(nic, mr->index);
	pthread_rwlock_wrlock(&nic->mr_lock);
	atomic_store_explicit(&nic->mrs[mr->index], NULL, memory_order_relaxed);
	mr->index = 0;
	pthread_rwlock_unlock(&nic->mr_lock);
	/* Not under mr_lock: a poster may hold an RQ lock the engine waits
	 * for while it waits for mr_lock itself. */
	uroce_engine_quiesce(nic);
}

void uroce_key_unpublish(struct uroce_nic *nic, struct uroce_mr *mr)
{
	mr_unpublish(nic, mr);
}

struct uroce_mr *uroce_mr_lookup(struct uroce_nic *nic, uint32_t key)
{
	uint32_t idx = key >> UROCE_KEY_SHIFT;
	struct uroce_mr *mr;

	if (!idx || idx > UROCE_MAX_MR)
		return NULL;
	mr = atomic_load_explicit(&nic->mrs[idx], memory_order_acquire);
	/* atomic: a window's bind changes its slot's key in place (mw.c) */
	if (!mr || __atomic_load_n(&mr->ibmr.lkey, __ATOMIC_RELAXED) != key)
		return NULL;
	return mr;
}

uint8_t *uroce_mr_ptr(const struct uroce_mr *mr, uint64_t addr, uint64_t len)
{
	if (!uroce_range_inside(mr->iova, mr->ibmr.length, addr, len))
		return NULL;
	/* as integers: an implicit ODP MR starts at address 0 (NULL) */
	return (uint8_t *)((uintptr_t)mr->ibmr.addr + (addr - mr->iova));
}

/* The element's memory if mr (which may be NULL) grants it, else NULL. */
static uint8_t *sge_ptr(const struct uroce_mr *mr, const struct uroce_pd *pd,
			bool need_write, uint64_t va, uint32_t len)
{
	/* a window's key is remote only (IBTA 10.6.7.1) */
	if (!mr || mr->mw || mr->pd != pd ||
	    (need_write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
		return NULL;
	return uroce_mr_ptr(mr, va, len);
}

int uroce_resolve_sges(struct uroce_nic *nic, struct uroce_pd *pd,
		       const struct ibv_sge *in, int n, bool need_write,
		       bool defer_errors, struct uroce_sge *out,
		       uint32_t *total)
{
	uint64_t sum = 0;
	int err = 0;

	if (n < 0)
		return EINVAL;
	pthread_rwlock_rdlock(&nic->mr_lock);
	for (int i = 0; i < n; i++) {
		const struct uroce_mr *mr;

		out[i].length = in[i].length;
		out[i].lkey = in[i].lkey;
		out[i].va = in[i].addr;
		out[i].mr = NULL;
		out[i].addr = NULL;
		/* An empty element moves no data, so there is nothing for
		 * its key to protect (applications pass lkey 0 with it). */
		if (!in[i].length)
			continue;
		mr = uroce_mr_lookup(nic, in[i].lkey);
		out[i].addr = sge_ptr(mr, pd, need_write, in[i].addr,
				      in[i].length);
		if (!out[i].addr && !defer_errors) {
			err = EINVAL;
			break;
		}
		/* a send's ODP pages are faulted in now; a receive's when
		 * it is consumed (uroce_sges_recheck) */
		if (out[i].addr && !defer_errors &&
		    (mr->access & IBV_ACCESS_ON_DEMAND) &&
		    uroce_odp_fault(out[i].addr, in[i].length, need_write)) {
			err = EFAULT;
			break;
		}
		if (out[i].addr) {
			out[i].mr = mr;
			out[i].gen = mr->gen;
		}
		sum += in[i].length;
	}
	pthread_rwlock_unlock(&nic->mr_lock);
	if (!err && sum > UINT32_MAX)
		err = EINVAL;
	if (!err)
		*total = (uint32_t)sum;
	return err;
}

/* ---- registration ---------------------------------------------------------- */

/* Validate access flags as the kernel does for ibv_reg_mr, and return the
 * mandatory bits to keep.  Optional bits (IBV_ACCESS_RELAXED_ORDERING, ...)
 * are hints a device may ignore; uroce always orders. */
static int check_access(unsigned int access, int *kept)
{
	unsigned int mand = access & ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;

	if (mand & ~(unsigned int)UROCE_ACCESS_SUPPORTED)
		return EINVAL;
	/* IBTA o10-37: the local side must be writable for remote writes */
	if ((mand & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(mand & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	*kept = (int)mand;
	return 0;
}

/* Implicit ODP: one MR for the whole address space (iova = address). */
static bool implicit_odp(const void *addr, size_t length, int access)
{
	return !addr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND);
}

/* The kernel pins the pages at registration and fails with EFAULT when some
 * are not mapped.  uroce pins nothing, but checking that the range is mapped
 * turns a wild pointer into that same error instead of a SIGSEGV in the
 * engine later.  An ODP range may be mapped later (verbs/odp.c). */
static int check_range(void *addr, size_t length, uint64_t iova, int access)
{
	if (implicit_odp(addr, length, access))
		return 0;
	if (!length || (uintptr_t)addr + length < (uintptr_t)addr ||
	    iova + length < iova)
		return EINVAL;
	return (access & IBV_ACCESS_ON_DEMAND) ? 0
					       : uroce_range_mapped(addr, length);
}

/* An application's memory, whose range is checked; or device memory
 * (verbs/dm.c), uroce's own, which may be registered empty (the kernel lets
 * a DM MR end anywhere within the DM). */
enum reg_what { REG_USER, REG_DM };

static struct ibv_mr *reg_mr(struct ibv_pd *ibpd, void *addr, size_t length,
			     uint64_t iova, unsigned int access,
			     enum reg_what what)
{
	struct uroce_nic *nic;
	struct uroce_mr *mr;
	int kept, err;

	if (!ibpd) {
		errno = EINVAL;
		return NULL;
	}
	err = check_access(access, &kept);
	if (!err && (kept & IBV_ACCESS_ZERO_BASED))
		iova = 0;
	if (!err && implicit_odp(addr, length, kept))
		iova = 0;
	if (!err && what == REG_USER)
		err = check_range(addr, length, iova, kept);
	if (err) {
		errno = err;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	nic = to_uctx(ibpd->context)->nic;
	mr->ibmr.context = ibpd->context;
	mr->ibmr.pd = ibpd;
	mr->ibmr.addr = addr;
	mr->ibmr.length = length;
	mr->pd = to_upd(ibpd);
	mr->iova = iova;
	mr->access = kept;

	uroce_pd_hold(ibpd, 1);
	pthread_rwlock_wrlock(&nic->mr_lock);
	err = mr_publish_locked(nic, mr);
	pthread_rwlock_unlock(&nic->mr_lock);
	if (err) {
		uroce_pd_hold(ibpd, -1);
		free(mr);
		errno = err;
		return NULL;
	}
	uroce_sh_mr_publish(nic, mr);
	return &mr->ibmr;
}

struct ibv_mr *uroce_reg_mr_at(struct ibv_pd *ibpd, void *addr, size_t length,
			       uint64_t iova, unsigned int access)
{
	return reg_mr(ibpd, addr, length, iova, access, REG_DM);
}

UROCE_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
				       size_t length, int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned int)access,
		      REG_USER);
}

UROCE_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
					    size_t length, uint64_t iova,
					    int access)
{
	return reg_mr(pd, addr, length, iova, (unsigned int)access, REG_USER);
}

UROCE_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
					     size_t length, uint64_t iova,
					     unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access, REG_USER);
}

UROCE_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct uroce_mr *mr;

	if (!ibmr)
		return EINVAL;
	mr = to_umr(ibmr);
	/* windows bound to it would outlive their memory */
	if (atomic_load(&mr->mws_bound))
		return EBUSY;
	mr_unpublish(to_uctx(ibmr->context)->nic, mr);
	uroce_pd_hold(ibmr->pd, -1);
	/* after the quiesce: the DM may go once no request can reach it */
	if (mr->dm_users)
		atomic_fetch_sub(mr->dm_users, 1);
	free(mr);
	return 0;
}

bool uroce_sges_recheck(struct uroce_nic *nic, const struct uroce_pd *pd,
			struct uroce_sge *sge, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct uroce_mr *mr;

		if (!sge[i].length)
			continue;
		mr = uroce_mr_lookup(nic, sge[i].lkey);
		if (!mr || mr != sge[i].mr || mr->gen != sge[i].gen ||
		    mr->pd != pd) {
			sge[i].addr = sge_ptr(mr, pd, true, sge[i].va,
					      sge[i].length);
			if (!sge[i].addr)
				return false;
			sge[i].mr = mr;
			sge[i].gen = mr->gen;
		}
		if ((mr->access & IBV_ACCESS_ON_DEMAND) &&
		    uroce_odp_fault(sge[i].addr, sge[i].length, true))
			return false;
	}
	return true;
}

/* Stands in a re-registering MR's slot: no key matches it (an index is
 * never 0), and no registration takes the slot meanwhile. */
static struct uroce_mr mr_reserved;

/* Re-registration keeps the MR's keys, as mlx5 does and as rdma-core's
 * pyverbs tests expect (a peer keeps using the rkey it was given).  The MR
 * leaves the table while it changes, and uroce_engine_quiesce() makes sure that
 * no request still uses the old translation, access or PD once this
 * returns; receive WQEs posted before are checked again when consumed.
 * Every input is checked first, so a failure leaves the MR intact
 * (IBV_REREG_MR_ERR_INPUT). */
UROCE_EXPORT int ibv_rereg_mr(struct ibv_mr *ibmr, int flags,
			      struct ibv_pd *ibpd, void *addr, size_t length,
			      int access)
{
	struct uroce_mr *mr;
	struct uroce_nic *nic;
	struct uroce_pd *new_pd;
	int kept, err = 0;
	uint64_t iova;

	if (!ibmr || !flags || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) &&
	     (!ibpd || ibpd->context != ibmr->context))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	mr = to_umr(ibmr);
	/* a DM MR is refused as the kernel refuses it; windows bound to the
	 * MR hold its old translation */
	if (mr->dm_users || atomic_load(&mr->mws_bound)) {
		errno = mr->dm_users ? EINVAL : EBUSY;
		return IBV_REREG_MR_ERR_INPUT;
	}
	nic = to_uctx(ibmr->context)->nic;
	new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? to_upd(ibpd) : mr->pd;
	kept = mr->access;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		err = check_access((unsigned int)access, &kept);
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		iova = (kept & IBV_ACCESS_ZERO_BASED) ? 0 : (uintptr_t)addr;
		if (!err)
			err = check_range(addr, length, iova, kept);
	} else {
		addr = ibmr->addr;
		length = ibmr->length;
		iova = mr->iova;
	}
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_INPUT;
	}

	uroce_sh_mr_withdraw(nic, mr->index);
	pthread_rwlock_wrlock(&nic->mr_lock);
	atomic_store_explicit(&nic->mrs[mr->index], &mr_reserved,
			      memory_order_relaxed);
	pthread_rwlock_unlock(&nic->mr_lock);
	uroce_engine_quiesce(nic);	/* not under mr_lock: see mr_unpublish */
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		uroce_pd_hold(ibpd, 1);
		uroce_pd_hold(ibmr->pd, -1);
		ibmr->pd = ibpd;
	}
	mr->pd = new_pd;
	mr->iova = iova;
	mr->access = kept;
	mr->gen++;
	ibmr->addr = addr;
	ibmr->length = length;

	pthread_rwlock_wrlock(&nic->mr_lock);
	atomic_store_explicit(&nic->mrs[mr->index], mr, memory_order_release);
	pthread_rwlock_unlock(&nic->mr_lock);
	uroce_sh_mr_publish(nic, mr);
	return 0;
}
