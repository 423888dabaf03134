/*
 * Verbs ABI that rdma-core added after release 44, whose headers uroce is
 * built with: FLUSH (rdma-core 45, kernel 6.2).  The values and the place of
 * wr_flush in struct ibv_qp_ex are those of rdma-core's newer verbs.h and the
 * kernel's ib_user_verbs.h, so that a program built against a newer
 * rdma-core finds them in uroce's libibverbs.so.1.
 */
#ifndef UROCE_VERBS_NEWER_H
#define UROCE_VERBS_NEWER_H

#include <infiniband/verbs.h>

enum {
	UROCE_WR_FLUSH = 14,			/* enum ibv_wr_opcode */
	UROCE_WC_FLUSH = 8,			/* enum ibv_wc_opcode */
	UROCE_QP_EX_WITH_FLUSH = 1 << 11,	/* ibv_qp_create_send_ops_flags */
	UROCE_ACCESS_FLUSH_GLOBAL = 1 << 8,	/* enum ibv_access_flags */
	UROCE_ACCESS_FLUSH_PERSISTENT = 1 << 9,
	/* ibv_wr_flush's type (a bit set) and level */
	UROCE_FLUSH_GLOBAL = 1,
	UROCE_FLUSH_PERSISTENT = 2,
	UROCE_FLUSH_RANGE = 0,
	UROCE_FLUSH_MR = 1,
};

/* ibv_device_attr_ex.device_cap_flags_ex (IB_UVERBS_DEVICE_*) */
#define UROCE_DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define UROCE_DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define UROCE_DEVICE_ATOMIC_WRITE (1ULL << 40)

/* The member that follows wr_atomic_write in a newer struct ibv_qp_ex. */
typedef void (*uroce_wr_flush_fn)(struct ibv_qp_ex *qp, uint32_t rkey,
				  uint64_t remote_addr, size_t len,
				  uint8_t type, uint8_t level);

#endif
