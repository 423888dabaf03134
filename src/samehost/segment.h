/*
 * The layout of a process's same-host segment, shared between segment.c
 * (which publishes into its own and maps its peers') and execute.c (which
 * checks requests against a peer's).
 *
 * Entries are written by their owner under a sequence count (odd while
 * written) and read by peers without a lock.  A peer marks itself busy in
 * its user slot before it reads an entry and until its copy has finished;
 * an owner that withdraws an entry writes it first and then waits for the
 * busy users: either the peer sees the withdrawal, or the owner sees the
 * peer and waits for its copy to end.
 */
#ifndef UROCE_SAMEHOST_SEGMENT_H
#define UROCE_SAMEHOST_SEGMENT_H

#include <sys/types.h>

#include "samehost/samehost.h"

enum {
	SH_MAGIC = 0x31687365636f7275ull,	/* "uroicesh1", little-endian */
	SH_MASK_WORDS = UROCE_MAX_SLOTS / 64,
};

struct sh_qp {
	_Atomic uint32_t seq;
	uint32_t accepting;	/* RC in RTR, RTS or SQD */
	uint32_t qpn;		/* its own number (entries are reused) */
	uint32_t dest_qpn;
	uint32_t access;	/* qp_access_flags */
	uint32_t pad;
	uint64_t pd;		/* the PD, as an identifier */
};

struct sh_mr {
	_Atomic uint32_t seq;
	uint32_t key;		/* 0: nothing a peer may use */
	uint32_t access;
	uint32_t pad;
	uint64_t pd, iova, length;
	uint64_t addr;		/* where iova is in the owner */
};

/* One per process that may access this one, by its slot. */
struct sh_user {
	_Atomic uint32_t busy;	/* copies in progress */
	_Atomic int32_t pid;
	char pad[56];
};

struct sh_seg {
	uint64_t magic;
	uint64_t nonce;		/* random: proves pid and segment match */
	uint64_t self;		/* where this header is in the owner */
	int32_t pid;
	uint32_t slot;
	_Atomic uint64_t user_mask[SH_MASK_WORDS];	/* slots ever used */
	struct sh_user users[UROCE_MAX_SLOTS];
	struct sh_qp qps[UROCE_MAX_QP + 1];
	struct sh_mr mrs[UROCE_MAX_MR + 1];
};

/* A peer process's segment, mapped here. */
struct uroce_sh_peer {
	struct sh_seg *seg;
	pid_t pid;
	unsigned slot;
	atomic_bool dead;	/* a copy found the process gone */
	struct uroce_sh_peer *next;
};

/* Entries (struct sh_qp, struct sh_mr) begin with their sequence count and
 * are copied whole, a 32-bit word at a time.  sh_write replaces dst's
 * fields by src's; sh_read copies src to dst as it was at one moment, false
 * if it kept changing. */
void sh_write(void *dst, const void *src, size_t size);
bool sh_read(void *dst, const void *src, size_t size);

#endif
