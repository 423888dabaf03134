/* Every limit uroce advertises or enforces, in one place. */
#ifndef UROCE_PARAMS_H
#define UROCE_PARAMS_H

#include <stdint.h>

enum uroce_params {
	UROCE_UDP_PORT = 4791,		/* IANA RoCEv2 destination port */
	/* source port = base | process slot | flow class (uroce_qp_sport) */
	UROCE_SPORT_BASE = 0xC000,
	UROCE_SPORT_CLASS_BITS = 4,

	UROCE_VENDOR_ID = 0xFFFFFF,	/* unknown to perftest's vendor tables */
	UROCE_VENDOR_PART_ID = 0,
	UROCE_HW_VER = 0,

	/* QPN = slot << UROCE_QPN_SLOT_SHIFT | index.  The slot names the process
	 * that owns the QP among those sharing UDP port 4791 on one host. */
	UROCE_QPN_SLOT_SHIFT = 14,
	UROCE_MAX_SLOTS = 1 << (24 - UROCE_QPN_SLOT_SHIFT),
	UROCE_MAX_QP = (1 << UROCE_QPN_SLOT_SHIFT) - 1,
	/* DestQP of a multicast datagram (IBTA 10.5.2.5): never a QP's own
	 * number, though slot 1023's last index would spell it */
	UROCE_QPN_MULTICAST = 0xFFFFFF,

	/* rkey/lkey = index << UROCE_KEY_SHIFT | random key bits */
	UROCE_KEY_SHIFT = 12,
	UROCE_MAX_MR = (1 << 18) - 1,

	UROCE_MAX_QP_WR = 16384,
	UROCE_MAX_SGE = 32,
	UROCE_MAX_INLINE = 512,
	UROCE_MAX_CQ = 1 << 16,
	UROCE_MAX_CQE = (1 << 20) - 1,
	UROCE_MAX_PD = 1 << 16,
	UROCE_MAX_AH = 1 << 16,
	/* multicast groups, QPs per group and attachments in all: Soft-RoCE's */
	UROCE_MAX_MCAST_GRP = 8192,
	UROCE_MAX_MCAST_QP_ATTACH = 56,
	UROCE_MAX_TOTAL_MCAST_QP_ATTACH = 0x70000,
	UROCE_MAX_SRQ = 1 << 14,
	UROCE_MAX_SRQ_WR = 16384,
	UROCE_MAX_SRQ_SGE = 32,
	UROCE_MAX_RD_ATOMIC = 16,	/* READs/atomics a responder holds */
	/* READs/atomics a requester keeps in flight: only a counter, so as
	 * many as a peer serves (Soft-RoCE offers 128, and perftest asks
	 * for what the peer offers) */
	UROCE_MAX_INIT_RD_ATOMIC = 128,
	UROCE_MAX_COMP_CHANNELS = 1 << 16,
	/* Device memory (ibv_alloc_dm) is host memory the library owns: a
	 * software NIC has no memory of its own.  Bounded all the same, per
	 * process (one NIC each), at what mlx5's MEMIC offers, so that a
	 * program sized for hardware runs unchanged and one that asks for
	 * more fails here as it would there. */
	UROCE_MAX_DM_SIZE = 256 * 1024,
	UROCE_GID_TBL_LEN = 16,
	UROCE_PKEY_TBL_LEN = 1,
	UROCE_DEFAULT_PKEY = 0xFFFF,

	UROCE_MAX_MSG_SZ = 1U << 31,

	/* Transport: unacknowledged packets in flight per QP (the most its
	 * congestion window grows to), and how often a long message asks
	 * for an ACK so the window keeps moving.  4 MiB at a 4 KiB MTU: on
	 * loopback 1 MiB WRITEs went 3,250 MiB/s at 128, 3,900 at 1024;
	 * more gained nothing. */
	UROCE_DEFAULT_WINDOW = 1024,
	/* A same-host QP's packets (SENDs; WRITEs and READs mostly go by
	 * cross-memory copies) wait in the peer's 1 MiB ring: half of it at a
	 * 4 KiB MTU.  A larger window only fills the ring, and the sender
	 * backs off: ib_send_bw 1 MiB went 5,900 MiB/s at 128, 3,200 at 1024. */
	UROCE_SH_WINDOW = 128,
	/* Unacknowledged packets of all of a process's reliable QPs at once
	 * (16 MiB at a 4 KiB MTU), shared out among those sending (each
	 * keeps at least MIN_WINDOW, and past the budget waits its turn:
	 * transport/requester.c).  What is in flight past what the path
	 * needs only waits in the receiver's socket and stretches every
	 * round trip: at 8,192, 16 QPs' round trips reached 30 ms and
	 * crossed the 67 ms ACK timeout ~200 times in 4 s.  Measured on
	 * loopback (UDP ib_write_bw 64 KiB): -q 1000 1,000-1,400 MiB/s at
	 * 8,192 without the wait, 1,600-1,900 at 4,096 with it; 2,048
	 * costs -q 4 a sixth; a smaller minimum costs -q 1000 its system
	 * calls (windows of 2 went 550 MiB/s). */
	UROCE_INFLIGHT_BUDGET = 4096,
	UROCE_MIN_WINDOW = 8,
	/* The loss probe (transport/completer.c) waits at least this long
	 * for an ACK, and leaves at least this much for the round trip's
	 * variation: a receiver descheduled for a while must not look like
	 * a loss (a probe resends a packet, a second in a row the whole
	 * window). */
	UROCE_PROBE_MIN_NS = 1000000,
	UROCE_PROBE_PER_SENDER_NS = 50000,	/* see probe_wait_ns */
	UROCE_PROBE_VAR_MIN_NS = 200000,
	/* spurious tail probes raise a QP's probe floor, up to this, and
	 * it halves back every UROCE_PROBE_FLOOR_DECAY_NS (completer.c) */
	UROCE_PROBE_FLOOR_MAX_NS = 32000000,
	UROCE_PROBE_FLOOR_DECAY_NS = 1000000000,
	/* The port's link rate (1X EDR): what query_port reports, and what
	 * UC and UD, which nothing else slows down, are paced to. */
	UROCE_DEFAULT_RATE_MBPS = 25000,
	UROCE_ACKREQ_EVERY = 32,
	/* How long the engine leaves receiving to an application thread
	 * after its last poll of an empty CQ (transport/progress.c) */
	UROCE_ENGINE_DEFER_NS = 200000,
	/* A thread about to sleep in ibv_get_cq_event polls first, for at
	 * most this long (UROCE_WAIT_POLL_US), as long as its events came
	 * that soon (transport/progress.c) */
	UROCE_WAIT_POLL_US = 50,
	UROCE_WAIT_POLL_MAX_US = 1000,
	/* An application that posts on a QP within this long of receiving
	 * a request for it in ibv_poll_cq (no longer than an ACK could wait
	 * for the engine) answers it; once it has answered this many times
	 * in a row, the ACK it owes waits for the answer to ride ahead of it
	 * (transport/receive.c).  A connection's handshake is shorter than
	 * that streak, a request-response loop longer. */
	UROCE_ACK_RIDE_NS = UROCE_ENGINE_DEFER_NS,
	UROCE_ACK_RIDE_AFTER = 64,
	/* Same-host WRITEs held for a burst (transport/requester.c) go at
	 * the latest this long after the last one was held; and a WRITE is
	 * held only this long after the application's last poll */
	UROCE_SH_HOLD_NS = 1000000,

	/* packets per receive call: room for 16 GRO datagrams of up to 64
	 * segments each */
	UROCE_RX_BATCH = 1024,
	/* IPv4 senders whose identification habit is remembered
	 * (transport/receive.c): 2^8, hashed by address */
	UROCE_ID_HABITS_LOG2 = 8,
	UROCE_TX_BATCH = 64,		/* datagrams per sendmmsg */
	UROCE_MAX_HDR = 64,		/* largest header stack we build */
	UROCE_GRH_LEN = 40,		/* UD: GRH area ahead of each message */
	UROCE_RX_BUF = 4096 + 128,	/* MTU payload + headers + ICRC */
};

/* UROCE_FAULTS=delay: at most this many datagrams are held back at once,
 * each behind 1..UROCE_FAULT_DELAY_MAX later arrivals. */
/* A QPN's parts (24 bits: the owning process's slot, then its index). */
static inline uint32_t uroce_qpn_slot(uint32_t qpn)
{
	return (qpn >> UROCE_QPN_SLOT_SHIFT) & (UROCE_MAX_SLOTS - 1);
}

static inline uint32_t uroce_qpn_index(uint32_t qpn)
{
	return qpn & UROCE_MAX_QP;
}

static inline uint32_t uroce_qpn(uint32_t slot, uint32_t index)
{
	return slot << UROCE_QPN_SLOT_SHIFT | index;
}

enum { UROCE_FAULT_DELAY_SLOTS = 8, UROCE_FAULT_DELAY_MAX = 64 };
/* UROCE_FAULTS=tx_busy: how long the link stays busy once it is */
#define UROCE_FAULT_BUSY_NS 60000000ull

/* Where the per-host service (uroced) listens, unless UROCE_SERVICE says
 * otherwise. */
#define UROCE_SERVICE_DIR "/run/uroce"

#endif
