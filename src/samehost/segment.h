/*
 * The layout of a process's same-host segment, shared between segment.c
 * (which publishes into its own and maps its peers') and
 * transport/samehost_execute.c (which checks requests against a peer's).
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
	SH_PAGE = 4096,
	/* MR entries per page of the MR table, and bitmap words for its
	 * pages */
	SH_MRS_PER_PAGE = SH_PAGE / 48,
	SH_MR_PAGES = (UROCE_MAX_MR + 1 + SH_MRS_PER_PAGE - 1) / SH_MRS_PER_PAGE,
	SH_MR_PAGE_WORDS = (SH_MR_PAGES + 63) / 64,
	/* packet ring from one peer process: a full window of 4 KiB packets
	 * and then some */
	SH_RING_DATA = 1 << 20,
	SH_RING_ALIGN = 64,
	SH_RING_WRAP = 0xFFFFFFFFu,	/* entry length: go on at the start */
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

struct sh_mr {			/* 48 bytes */
	_Atomic uint32_t seq;
	uint32_t key;		/* 0: nothing a peer may use */
	uint32_t access;
	uint32_t pad;
	uint64_t pd, iova, length;
	uint64_t addr;		/* where iova is in the owner */
};

_Static_assert(sizeof(struct sh_mr) == 48, "SH_MRS_PER_PAGE assumes 48");

/* One per process that may access this one, by its slot. */
struct sh_user {
	_Atomic uint32_t busy;	/* copies in progress */
	_Atomic int32_t pid;
	char pad[56];
};

/* A page of MR entries, allocated in the file only when an MR is published
 * there: a process with a few MRs costs a few pages of /dev/shm, and a full
 * /dev/shm (a container's is 64 MiB) keeps MRs off the path rather than
 * raising SIGBUS on a write, or on a peer's read, of a page that cannot be
 * allocated.  Peers read an entry only once its page's bit is set. */
struct sh_mr_page {
	struct sh_mr mr[SH_MRS_PER_PAGE];
	char pad[SH_PAGE - SH_MRS_PER_PAGE * sizeof(struct sh_mr)];
};

/*
 * The packets of a peer process's same-host QPs, for this process to receive
 * as it receives datagrams (transport/receive.c checks them alike): the
 * RoCEv2 packets themselves, ICRC and all, so that the transport (PSNs,
 * ACKs, RNR, retransmission) runs unchanged over a link that is only
 * memory.  One producer process (its threads take its own lock), one
 * consumer (under rx_lock).  head and tail count bytes from the start.
 */
struct sh_ring_pkt {
	uint32_t len;		/* UDP payload bytes, or SH_RING_WRAP */
	uint16_t sport;		/* the sender's UDP source port */
	uint8_t family;		/* AF_INET or AF_INET6 */
	uint8_t pad;
	uint8_t src[16], dst[16];	/* IPv4 in the first 4 bytes */
	uint8_t pad2[24];
	uint8_t data[];		/* BTH .. ICRC */
};

struct sh_ring {
	_Atomic uint64_t head;	/* written by the producer */
	char pad[56];
	_Atomic uint64_t tail;	/* written by the consumer */
	char pad2[56];
	uint8_t data[SH_RING_DATA];
};

struct sh_seg {
	uint64_t magic;
	uint64_t nonce;		/* random: proves pid and segment match */
	uint64_t self;		/* where this header is in the owner */
	int32_t pid;
	uint32_t slot;
	int32_t wake_fd;	/* the process's doorbell (pidfd_getfd) */
	/* capturing or injecting faults: peers must use the wire */
	_Atomic uint32_t wire_only;
	/* ns of the application's last receiving poll, 0 once it left:
	 * while recent, a packet put in a ring is found without a doorbell */
	_Atomic uint64_t app_poll_ns;
	_Atomic uint64_t user_mask[SH_MASK_WORDS];	/* slots ever used */
	_Atomic uint64_t ring_mask[SH_MASK_WORDS];	/* slots with a ring */
	_Atomic uint64_t mr_pages[SH_MR_PAGE_WORDS];	/* allocated pages */
	struct sh_user users[UROCE_MAX_SLOTS];
	struct sh_qp qps[UROCE_MAX_QP + 1];
	struct sh_mr_page mrs[SH_MR_PAGES] __attribute__((aligned(SH_PAGE)));
	/* by producer slot; allocated by the producer when it attaches */
	struct sh_ring rings[UROCE_MAX_SLOTS] __attribute__((aligned(SH_PAGE)));
};

/* The entry of MR index idx, or NULL when its page holds no entry yet. */
static inline struct sh_mr *sh_mr_entry(struct sh_seg *seg, uint32_t idx)
{
	uint32_t page = idx / SH_MRS_PER_PAGE;

	if (!(atomic_load_explicit(&seg->mr_pages[page / 64],
				   memory_order_acquire) &
	      (1ull << (page % 64))))
		return NULL;
	return &seg->mrs[page].mr[idx % SH_MRS_PER_PAGE];
}

/* A peer process's segment, mapped here. */
struct uroce_sh_peer {
	struct sh_seg *seg;
	pid_t pid;
	unsigned slot;
	ino_t ino;	/* its file: the name may be a new owner's later */
	/* when a producer last found our ring full and looked whether the
	 * peer is alive (uroce_sh_xmit) */
	atomic_uint_fast64_t full_probe_ns;
	/* a copy found the process gone or the kernel refusing: no more
	 * copies (its ring, plain shared memory, still carries packets) */
	atomic_bool dead;
	/* our ring in its segment and its engine's doorbell, or NULL / -1
	 * when packets to it go over UDP */
	struct sh_ring *ring;
	int doorbell;
	pthread_mutex_t ring_lock;	/* our threads producing into it */
	struct uroce_sh_peer *next;
};

/* Whether qp and its same-host peer must talk on the wire for now: either
 * end captures or injects faults (uroce_sh_set_wire_only). */
static inline bool uroce_sh_peer_wire_only(const struct uroce_qp *qp)
{
	return atomic_load_explicit(&qp->nic->wire_only,
				    memory_order_relaxed) ||
	       atomic_load_explicit(&qp->sh_peer->seg->wire_only,
				    memory_order_relaxed);
}

/* Whether the peer's process is gone (segment.c). */
bool uroce_sh_peer_gone(const struct uroce_sh_peer *peer);

enum { SH_RECV_RINGS = 64 };	/* rings one receive call reads at most */

/* This process's same-host state (nic->sh). */
struct uroce_sh {
	struct sh_seg *seg;	/* ours; NULL when it could not be made */
	int fd;			/* its file, to allocate MR pages in */
	pthread_mutex_t page_lock;
	char name[80];
	uint64_t netns;
	pthread_mutex_t lock;	/* the peer tables */
	/* the mapped segment of the process in each slot, as last seen;
	 * every one ever mapped stays mapped (QPs may point to it) */
	struct uroce_sh_peer *by_slot[UROCE_MAX_SLOTS];
	struct uroce_sh_peer *all;
	/* rings read by the receive call in progress, and how far (rx_lock) */
	struct {
		struct sh_ring *ring;
		uint64_t tail;
	} done[SH_RECV_RINGS];
	unsigned ndone;
	/* receive calls since the rings last gave packets, and in all */
	unsigned quiet_calls;
	unsigned rx_calls;
};

/* Entries (struct sh_qp, struct sh_mr) begin with their sequence count and
 * are copied whole, a 32-bit word at a time.  sh_write replaces dst's
 * fields by src's; sh_read copies src to dst as it was at one moment, false
 * if it kept changing. */
void sh_write(void *dst, const void *src, size_t size);
bool sh_read(void *dst, const void *src, size_t size);

#endif
