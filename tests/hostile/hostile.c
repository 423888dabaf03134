/*
 * hostile.<case>: what a peer that does not play by the rules cannot do to
 * a uroce target (issue #11, item 2).  See hostile.h for the processes.
 *
 * For every attack the test checks (a) the answer on the wire against the
 * IBTA rule cited at the check, (b) that the target's memory is exactly
 * what was legitimately written (every MR sits between guard pages), (c)
 * the target's counters, and (d) that the attacked QP is in the state the
 * spec gives it and that a legitimate uroce peer still passes traffic.
 *
 * A remote access error or invalid request ends the responder's RC QP
 * (IBTA 9.9.3, responder class B/C errors: NAK, then the QP goes to the
 * Error state, as uroce's responder.c and rxe have it), so such attacks
 * each run on a QP of their own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"
#include "target.h"
#include "wire.h"

enum {
	DEADLINE_S = 50,
	RESP_WAIT_MS = 3000,	/* an answer the target owes comes by then */
	SILENCE_MS = 300,	/* no answer within this is taken as none */
	STATE_POLLS = 1000,	/* a QP state change shows within 1 s */
	MR_LEN = 4096,
	ALL_REMOTE = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	RSS_GROWTH_MAX_KB = 32 * 1024,
	FLOOD_PACKETS = 100000,
	FLOOD_CPU_MAX_MS = 20000,
	READ_FLOOD = 2000,
	READ_FLOOD_LEN = 16 * 1024,
	IMG_MAX = READ_FLOOD_LEN + 2 * GUARD_LEN,	/* the largest MR's */
	CM_FLOOD = 20000,
	CM_BACKLOG = 4,
	KEY_SAMPLES = 256,
	KEY_GUESSES = 24,
	KEY_RANDOM_BITS = 12,	/* README/mr.c: index << 12 | random */
};

#define HUGE_VA 0xFFFFFFFFFFFFFFF8ull	/* VA + length wraps past 2^64 */

struct atk {
	int ctl;
	int fd;				/* ATK_IP:ROCE_PORT, where replies arrive */
	struct sockaddr_in self, target;
	uint32_t next_psn;
};

struct aqp {
	uint32_t id, qpn, psn;		/* psn: the next request's */
};

struct amr {
	uint32_t id, rkey, len;
	uint64_t va;
	uint8_t img[IMG_MAX];		/* what the guarded area must hold */
};

/* ---- driving the target ----------------------------------------------- */

static struct reply cmd(struct atk *a, struct cmd c)
{
	struct reply r;

	h_send(a->ctl, &c, sizeof(c));
	h_recv(a->ctl, &r, sizeof(r));
	return r;
}

static struct aqp qp_new_rd(struct atk *a, unsigned access, unsigned rd_atomic,
			    bool pd2)
{
	/* PSNs near the top of the space: requests wrap through 0 */
	uint32_t psn = a->next_psn;
	struct reply r = cmd(a, (struct cmd){ .op = C_QP, .a = access,
					      .b = rd_atomic, .c = pd2,
					      .d = psn });

	a->next_psn = (a->next_psn + 0x3F001) & 0xFFFFFF;
	return (struct aqp){ r.id, r.qpn, psn };
}

static struct aqp qp_new(struct atk *a)
{
	return qp_new_rd(a, ALL_REMOTE, 4, false);
}

static struct amr mr_new_pd(struct atk *a, uint32_t len, unsigned access,
			    bool pd2, uint64_t seed)
{
	struct reply r = cmd(a, (struct cmd){ .op = C_MR, .a = len,
					      .b = access, .c = pd2,
					      .x = seed });
	struct amr m = { r.id, r.rkey, len, r.va, { 0 } };

	H_CHECK(len + 2 * GUARD_LEN <= IMG_MAX);
	memset(m.img, GUARD_BYTE, len + 2 * GUARD_LEN);
	h_fill(m.img + GUARD_LEN, len, seed);
	return m;
}

static struct amr mr_new(struct atk *a, unsigned access)
{
	static uint64_t seed = 100;

	return mr_new_pd(a, MR_LEN, access, false, seed++);
}

static void expect_mem_at(const char *file, int line, struct atk *a,
			  const struct amr *m)
{
	size_t n = m->len + 2 * GUARD_LEN;
	uint8_t *got = malloc(n);

	H_CHECK(got);
	cmd(a, (struct cmd){ .op = C_MR_DUMP, .a = m->id });
	h_recv(a->ctl, got, n);
	h_expect_mem_at(file, line, got, m->img, n,
			"target memory (guards, region)");
	free(got);
}
#define expect_mem(a, m) expect_mem_at(__FILE__, __LINE__, a, m)

/* The target's engine sends a NAK before it moves the QP to Error: the
 * state may lag the NAK by a moment. */
static void expect_state_at(const char *file, int line, struct atk *a,
			    const struct aqp *q, enum ibv_qp_state want)
{
	struct reply r;

	for (int i = 0; i < STATE_POLLS; i++) {
		r = cmd(a, (struct cmd){ .op = C_QP_STATE, .a = q->id });
		if (r.state == want)
			return;
		h_sleep_ms(1);
	}
	h_fail_at(file, line, "QP 0x%x in state %u, want %u", q->qpn, r.state,
		  want);
}
#define expect_state(a, q, s) expect_state_at(__FILE__, __LINE__, a, q, s)

/* ---- packets ------------------------------------------------------------ */

static void send_from(int fd, const struct sockaddr_in *src,
		      const struct sockaddr_in *dst, struct w_pkt *k)
{
	w_seal(k, src, dst);
	w_send(fd, k, dst);
}

static void send_pkt(struct atk *a, struct w_pkt *k)
{
	send_from(a->fd, &a->self, &a->target, k);
}

static void write_pkt(struct w_pkt *k, const struct aqp *q, uint64_t va,
		      uint32_t rkey, uint32_t len, const void *data,
		      size_t paylen)
{
	w_bth(k, OP_WRITE_ONLY, q->qpn, q->psn);
	w_reth(k, va, rkey, len);
	w_append(k, data, paylen);
}

/* RDMA WRITE Only of len bytes of seed's pattern, the payload len long. */
static void write_only(struct atk *a, struct aqp *q, uint64_t va,
		       uint32_t rkey, uint32_t len, uint64_t seed)
{
	uint8_t data[PATH_MTU];
	struct w_pkt k;

	H_CHECK(len <= sizeof(data));
	h_fill(data, len, seed);
	write_pkt(&k, q, va, rkey, len, data, len);
	send_pkt(a, &k);
}

/* What a WRITE of seed's pattern that the target accepted leaves in m. */
static void written(struct amr *m, uint64_t va, uint32_t len, uint64_t seed)
{
	h_fill(m->img + GUARD_LEN + (va - m->va), len, seed);
}

static void read_req(struct atk *a, const struct aqp *q, uint64_t va,
		     uint32_t rkey, uint32_t len)
{
	struct w_pkt k;

	w_bth(&k, OP_READ_REQ, q->qpn, q->psn);
	w_reth(&k, va, rkey, len);
	send_pkt(a, &k);
}

static void atomic_req(struct atk *a, const struct aqp *q, uint8_t op,
		       uint64_t va, uint32_t rkey, uint64_t swap_add,
		       uint64_t compare)
{
	struct w_pkt k;

	w_bth(&k, op, q->qpn, q->psn);
	w_atomic_eth(&k, va, rkey, swap_add, compare);
	send_pkt(a, &k);
}

/* The next datagram from the target is opcode with PSN psn and, if it has
 * an AETH, syndrome (for an ACK: any credit count). */
static struct w_resp expect_resp_at(const char *file, int line, struct atk *a,
				    uint8_t opcode, uint8_t syndrome,
				    uint32_t psn, const char *what)
{
	static struct w_pkt k;
	struct w_resp r;

	if (!w_recv(a->fd, &k, &r, RESP_WAIT_MS))
		h_fail_at(file, line, "%s: no answer (want opcode 0x%02x "
			  "syndrome 0x%02x PSN 0x%06x)", what, opcode,
			  syndrome, psn);
	if (r.opcode != opcode || r.dqpn != ATK_QPN || r.psn != psn ||
	    (r.has_aeth && (syndrome == AETH_ACK_NO_CREDIT
				    ? (r.syndrome & 0x60) != 0
				    : r.syndrome != syndrome)))
		h_fail_at(file, line, "%s: got opcode 0x%02x syndrome 0x%02x "
			  "DestQP 0x%06x PSN 0x%06x, want 0x%02x 0x%02x 0x%06x "
			  "0x%06x", what, r.opcode, r.syndrome, r.dqpn, r.psn,
			  opcode, syndrome, ATK_QPN, psn);
	return r;
}
#define expect_resp(a, op, syn, psn, what)                                     \
	expect_resp_at(__FILE__, __LINE__, a, op, syn, psn, what)
#define expect_nak(a, syn, psn, what)                                          \
	expect_resp(a, OP_ACK, syn, psn, what)
#define expect_ack(a, psn, what)                                               \
	expect_resp(a, OP_ACK, AETH_ACK_NO_CREDIT, psn, what)

static void expect_silence_at(const char *file, int line, int fd,
			      const char *what)
{
	struct w_pkt k;
	struct w_resp r;

	if (w_recv(fd, &k, &r, SILENCE_MS))
		h_fail_at(file, line, "%s: the target answered (opcode 0x%02x "
			  "syndrome 0x%02x PSN 0x%06x); it must stay silent",
			  what, r.opcode, r.syndrome, r.psn);
}
#define expect_silence(a, what)                                                \
	expect_silence_at(__FILE__, __LINE__, (a)->fd, what)

static uint32_t psn_plus(uint32_t psn, uint32_t n)
{
	return (psn + n) & 0xFFFFFF;
}

/* A refused request: the NAK (IBTA 9.9.3: class B/C responder errors are
 * NAKed with the request's PSN) and the responder QP in Error. */
static void expect_refused_at(const char *file, int line, struct atk *a,
			      const struct aqp *q, uint8_t syndrome,
			      const char *what)
{
	expect_resp_at(file, line, a, OP_ACK, syndrome, q->psn, what);
	expect_state_at(file, line, a, q, IBV_QPS_ERR);
}
#define expect_refused(a, q, syn, what)                                        \
	expect_refused_at(__FILE__, __LINE__, a, q, syn, what)

/* ---- cases -------------------------------------------------------------- */

/* VA + length past 2^64 (or a length that ends past the MR) is outside
 * every MR: remote access error (C9-88 ff.: the R_Key check covers the
 * whole range). */
static void case_va_overflow(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	uint8_t data[16] = { 0 };
	struct w_pkt k;

	write_only(a, &q, HUGE_VA, m.rkey, 16, 1);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE at 2^64 - 8, 16 bytes");
	/* the RETH's whole DMA length is checked, not just the payload */
	q = qp_new(a);
	write_pkt(&k, &q, m.va + 8, m.rkey, 0x80000000u, data, sizeof(data));
	send_pkt(a, &k);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE of 2^31 bytes");
	q = qp_new(a);
	read_req(a, &q, 0ull - 4096, m.rkey, 8192);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "READ wrapping past 2^64");
	q = qp_new(a);
	atomic_req(a, &q, OP_FETCH_ADD, HUGE_VA, m.rkey, 1, 0);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "FETCH_ADD at 2^64 - 8");
	expect_mem(a, &m);
}

static void case_write_beyond(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	uint8_t data[PATH_MTU] = { 0 };
	struct w_pkt k;

	write_only(a, &q, m.va + MR_LEN - 8, m.rkey, 16, 3);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE across the MR's end");
	q = qp_new(a);
	write_only(a, &q, m.va - 8, m.rkey, 16, 4);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE across the MR's start");
	/* a multi-packet WRITE is checked in full at its FIRST packet */
	q = qp_new(a);
	w_bth(&k, OP_WRITE_FIRST, q.qpn, q.psn);
	w_reth(&k, m.va, m.rkey, MR_LEN + PATH_MTU);
	w_append(&k, data, PATH_MTU);
	send_pkt(a, &k);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE FIRST of MR + 1 KiB");
	/* more payload than the RETH's DMA length: invalid request (the
	 * responder's length check, IBTA 9.7), and nothing is placed */
	q = qp_new(a);
	write_pkt(&k, &q, m.va, m.rkey, 8, data, 16);
	send_pkt(a, &k);
	expect_refused(a, &q, NAK_INVALID_REQ, "WRITE payload > DMA length");
	expect_mem(a, &m);
}

static void case_read_beyond(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);

	read_req(a, &q, m.va + MR_LEN - 8, m.rkey, 16);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "READ across the MR's end");
	q = qp_new(a);
	read_req(a, &q, m.va - 1, m.rkey, 1);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "READ of the byte before");
	/* C9-94: a DMA length over 2^31 is invalid whatever the key */
	q = qp_new(a);
	read_req(a, &q, m.va, m.rkey, 0x80000001u);
	expect_refused(a, &q, NAK_INVALID_REQ, "READ of 2^31 + 1 bytes");
	expect_mem(a, &m);
}

/* C9-88: a zero-length RDMA request moves nothing, and its R_Key and VA
 * need not be valid; it is acknowledged and executes as a no-op. */
static void case_zero_length(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	struct w_resp r;

	write_only(a, &q, 0xDEAD0000ull, 0x0BADBAD0u, 0, 5);
	expect_ack(a, q.psn, "zero-length WRITE, bogus R_Key");
	q.psn = psn_plus(q.psn, 1);
	read_req(a, &q, 0xDEAD0000ull, 0x0BADBAD0u, 0);
	r = expect_resp(a, OP_READ_RESP_ONLY, AETH_ACK_NO_CREDIT, q.psn,
			"zero-length READ, bogus R_Key");
	H_EQ(r.paylen, 0);
	q.psn = psn_plus(q.psn, 1);
	expect_state(a, &q, IBV_QPS_RTS);
	write_only(a, &q, m.va, m.rkey, 64, 6);
	expect_ack(a, q.psn, "WRITE after the zero-length requests");
	written(&m, m.va, 64, 6);
	expect_mem(a, &m);
}

/* Atomics act on naturally aligned 8 bytes; a misaligned VA is an invalid
 * request (IBTA 9.4, atomic operations; rxe's responder NAKs it so
 * too), not an access error. */
static void case_atomic_unaligned(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	uint64_t before;
	struct w_resp r;

	atomic_req(a, &q, OP_CMP_SWAP, m.va + 4, m.rkey, 1, 0);
	expect_refused(a, &q, NAK_INVALID_REQ, "CMP_SWAP at VA % 8 == 4");
	q = qp_new(a);
	atomic_req(a, &q, OP_FETCH_ADD, m.va + 1, m.rkey, 1, 0);
	expect_refused(a, &q, NAK_INVALID_REQ, "FETCH_ADD at VA % 8 == 1");
	/* the aligned one works and answers the original value */
	q = qp_new(a);
	memcpy(&before, m.img + GUARD_LEN + 8, 8);
	atomic_req(a, &q, OP_FETCH_ADD, m.va + 8, m.rkey, 3, 0);
	r = expect_resp(a, OP_ATOMIC_ACK, AETH_ACK_NO_CREDIT, q.psn,
			"aligned FETCH_ADD");
	H_EQ(r.atomic_orig, before);
	before += 3;
	memcpy(m.img + GUARD_LEN + 8, &before, 8);
	expect_state(a, &q, IBV_QPS_RTS);
	expect_mem(a, &m);
}

/* C9-88 ff.: the MR and the QP must both allow remote atomics. */
static void case_atomic_no_access(struct atk *a)
{
	struct amr rw = mr_new(a, IBV_ACCESS_LOCAL_WRITE |
				  IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ);
	struct amr all = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);

	atomic_req(a, &q, OP_FETCH_ADD, rw.va, rw.rkey, 1, 0);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "FETCH_ADD, MR without atomics");
	q = qp_new_rd(a, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 4,
		      false);
	atomic_req(a, &q, OP_CMP_SWAP, all.va, all.rkey, 1, 0);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "CMP_SWAP, QP without atomics");
	expect_mem(a, &rw);
	expect_mem(a, &all);
}

/* A deregistered MR's key names nothing (deregistration invalidates its
 * keys, IBTA 10.6), though the memory is still the target's. */
static void case_dereg(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);

	write_only(a, &q, m.va, m.rkey, 32, 7);
	expect_ack(a, q.psn, "WRITE while registered");
	written(&m, m.va, 32, 7);
	q.psn = psn_plus(q.psn, 1);
	cmd(a, (struct cmd){ .op = C_MR_DEREG, .a = m.id });
	write_only(a, &q, m.va, m.rkey, 32, 8);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE with the old key");
	q = qp_new(a);
	read_req(a, &q, m.va, m.rkey, 32);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "READ with the old key");
	expect_mem(a, &m);
}

/* ibv_rereg_mr keeps the keys (as mlx5 does, README), so the old key
 * reaches the MR as it is now: not the memory it left, and only with the
 * rights it has now. */
static void case_rereg(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct amr old = m;
	struct reply r;
	struct aqp q;
	struct w_resp resp;

	r = cmd(a, (struct cmd){ .op = C_MR_REREG, .a = m.id,
				 .b = IBV_REREG_MR_CHANGE_TRANSLATION });
	old.id = r.id;
	m.va = r.va;
	memset(m.img, GUARD_BYTE, MR_LEN + 2 * GUARD_LEN);
	h_fill(m.img + GUARD_LEN, MR_LEN, 0);
	H_EQ(r.rkey, m.rkey);
	q = qp_new(a);
	write_only(a, &q, old.va, m.rkey, 32, 9);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE to the old translation");
	q = qp_new(a);
	write_only(a, &q, m.va, m.rkey, 32, 10);
	expect_ack(a, q.psn, "WRITE to the new translation");
	written(&m, m.va, 32, 10);
	cmd(a, (struct cmd){ .op = C_MR_REREG, .a = m.id,
			     .b = IBV_REREG_MR_CHANGE_ACCESS,
			     .c = IBV_ACCESS_LOCAL_WRITE |
				  IBV_ACCESS_REMOTE_READ });
	q = qp_new(a);
	write_only(a, &q, m.va, m.rkey, 32, 11);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE after read-only rereg");
	q = qp_new(a);
	read_req(a, &q, m.va, m.rkey, 32);
	resp = expect_resp(a, OP_READ_RESP_ONLY, AETH_ACK_NO_CREDIT, q.psn,
			   "READ after read-only rereg");
	H_EQ(resp.paylen, 32);
	h_expect_mem(resp.payload, m.img + GUARD_LEN, 32, "READ data");
	expect_mem(a, &old);
	expect_mem(a, &m);
}

/* A window over the MR's second KiB, bound through q. */
static struct reply bind_window(struct atk *a, const struct amr *m,
				const struct aqp *q, enum ibv_mw_type type)
{
	return cmd(a, (struct cmd){ .op = C_MW, .a = m->id, .b = q->id,
				    .c = type, .d = 1024, .x = 1024 });
}

/* Memory windows (IBTA 10.6.7): a window grants exactly its range, a type 2
 * window only through the QP that bound it, and an invalidated (locally,
 * or by the peer's SEND with Invalidate) or deallocated window nothing. */
static void case_mw(struct atk *a)
{
	struct amr m = mr_new(a, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	uint64_t win = m.va + 1024;
	struct aqp q = qp_new(a), other;
	struct reply w, r;
	struct w_pkt k;
	uint8_t data[16] = { 0 };

	/* the MR itself grants nothing remote */
	write_only(a, &q, win, m.rkey, 16, 12);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE with the MR's key");

	q = qp_new(a);
	w = bind_window(a, &m, &q, IBV_MW_TYPE_2);
	write_only(a, &q, win, w.rkey, 16, 13);
	expect_ack(a, q.psn, "WRITE inside a type 2 window");
	written(&m, win, 16, 13);
	q.psn = psn_plus(q.psn, 1);
	write_only(a, &q, win + 1024 - 8, w.rkey, 16, 14);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE across the window's end");

	q = qp_new(a);
	w = bind_window(a, &m, &q, IBV_MW_TYPE_2);
	other = qp_new(a);
	write_only(a, &other, win, w.rkey, 16, 15);
	expect_refused(a, &other, NAK_REMOTE_ACCESS,
		       "type 2 window through another QP");
	cmd(a, (struct cmd){ .op = C_MW_LOCAL_INV, .a = w.id, .b = q.id });
	write_only(a, &q, win, w.rkey, 16, 16);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE after LOCAL_INV");

	/* SEND with Invalidate (9.4.1.1) ends the window for good */
	q = qp_new(a);
	w = bind_window(a, &m, &q, IBV_MW_TYPE_2);
	cmd(a, (struct cmd){ .op = C_RECV_POST, .a = q.id });
	w_bth(&k, OP_SEND_ONLY_INV, q.qpn, q.psn);
	w_put32(k.b + k.len, w.rkey);
	k.len += 4;
	w_append(&k, data, sizeof(data));
	send_pkt(a, &k);
	expect_ack(a, q.psn, "SEND with Invalidate");
	r = cmd(a, (struct cmd){ .op = C_RECV_WAIT, .a = q.id });
	H_EQ(r.state, IBV_WC_SUCCESS);
	H_CHECK(r.n & IBV_WC_WITH_INV);
	H_EQ(r.rkey, w.rkey);
	q.psn = psn_plus(q.psn, 1);
	write_only(a, &q, win, w.rkey, 16, 17);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE after remote invalidation");

	/* type 1: the PD's; gone once deallocated */
	q = qp_new(a);
	w = bind_window(a, &m, &q, IBV_MW_TYPE_1);
	write_only(a, &q, win + 64, w.rkey, 16, 18);
	expect_ack(a, q.psn, "WRITE inside a type 1 window");
	written(&m, win + 64, 16, 18);
	q.psn = psn_plus(q.psn, 1);
	cmd(a, (struct cmd){ .op = C_MW_FREE, .a = w.id });
	write_only(a, &q, win, w.rkey, 16, 19);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE after ibv_dealloc_mw");
	expect_mem(a, &m);
}

/* C9-88 ff.: the MR must be in the QP's PD. */
static void case_other_pd(struct atk *a)
{
	struct amr m = mr_new_pd(a, MR_LEN, ALL_REMOTE, true, 20);
	struct aqp q = qp_new(a);

	write_only(a, &q, m.va, m.rkey, 16, 21);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "WRITE, MR of another PD");
	q = qp_new(a);
	read_req(a, &q, m.va, m.rkey, 16);
	expect_refused(a, &q, NAK_REMOTE_ACCESS, "READ, MR of another PD");
	q = qp_new_rd(a, ALL_REMOTE, 4, true);
	write_only(a, &q, m.va, m.rkey, 16, 22);
	expect_ack(a, q.psn, "WRITE from a QP of the MR's own PD");
	written(&m, m.va, 16, 22);
	expect_mem(a, &m);
}

/* A connected QP takes packets only from the address it is connected to
 * and on its own address (IBTA 9.6, packet header validation, with Annex
 * A17's IP addresses in the GRH's place: a connected service's packet from
 * any other source is silently dropped).  The dropped packet consumes no
 * PSN. */
static void case_wrong_source_ip(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	int spoof = w_socket(SPOOF_IP, ROCE_PORT);
	struct sockaddr_in spoof_addr = w_addr(SPOOF_IP, ROCE_PORT);
	struct sockaddr_in other_dst = w_addr("127.0.0.4", ROCE_PORT);
	struct w_pkt k;
	uint8_t data[32];

	h_fill(data, sizeof(data), 23);
	write_pkt(&k, &q, m.va, m.rkey, 32, data, 32);
	send_from(spoof, &spoof_addr, &a->target, &k);
	expect_silence(a, "WRITE from " SPOOF_IP);
	expect_silence_at(__FILE__, __LINE__, spoof, "WRITE from " SPOOF_IP);
	write_pkt(&k, &q, m.va, m.rkey, 32, data, 32);
	send_from(a->fd, &a->self, &other_dst, &k);
	expect_silence(a, "WRITE to 127.0.0.4, not the QP's address");
	expect_state(a, &q, IBV_QPS_RTS);
	write_only(a, &q, m.va, m.rkey, 32, 24);
	expect_ack(a, q.psn, "the same PSN from the connected address");
	written(&m, m.va, 32, 24);
	close(spoof);
	expect_mem(a, &m);
}

/* The UDP source port of RoCEv2 is flow entropy (Annex A17; mlx5 lets
 * applications change it on a live QP), not an identity: a packet from
 * another port of the connected address is taken.  What protects the QP
 * from a second sender there is the PSN: a stale one is a duplicate,
 * acknowledged again and not executed (C9-105). */
static void case_wrong_source_port(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	int fd = w_socket(ATK_IP, 0);
	struct sockaddr_in src;
	socklen_t len = sizeof(src);
	struct w_pkt k;
	uint8_t data[32];

	H_CHECK(!getsockname(fd, (struct sockaddr *)&src, &len));
	h_fill(data, sizeof(data), 25);
	write_pkt(&k, &q, m.va, m.rkey, 32, data, 32);
	send_from(fd, &src, &a->target, &k);
	expect_ack(a, q.psn, "WRITE from another source port");
	written(&m, m.va, 32, 25);
	h_fill(data, sizeof(data), 26);
	write_pkt(&k, &q, m.va, m.rkey, 32, data, 32);
	send_from(fd, &src, &a->target, &k);
	expect_ack(a, q.psn, "duplicate WRITE: acknowledged again");
	expect_state(a, &q, IBV_QPS_RTS);
	close(fd);
	expect_mem(a, &m);
}

/* A packet for a QP that does not exist, or of another transport than the
 * QP's, is silently dropped (IBTA 9.6, DestQP and opcode checks). */
static void case_wrong_dest_qpn(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	struct aqp none = q;
	struct w_pkt k;
	uint8_t data[16] = { 0 };

	none.qpn ^= 1u << 13;	/* same process slot, an index never used */
	write_only(a, &none, m.va, m.rkey, 16, 27);
	expect_silence(a, "WRITE to a QPN nobody has");
	w_bth(&k, OP_UC_WRITE_ONLY, q.qpn, q.psn);
	w_reth(&k, m.va, m.rkey, 16);
	w_append(&k, data, 16);
	send_pkt(a, &k);
	expect_silence(a, "UC WRITE to an RC QP");
	expect_state(a, &q, IBV_QPS_RTS);
	write_only(a, &q, m.va, m.rkey, 16, 28);
	expect_ack(a, q.psn, "WRITE to the right QP");
	written(&m, m.va, 16, 28);
	expect_mem(a, &m);
}

/*
 * A destroyed QP's number comes back only after every other index of the
 * process was handed out; the new QP starts at a new PSN.  Replayed packets
 * of the old connection are behind it: duplicates (C9-105), acknowledged
 * and never executed, and a duplicate READ or atomic the new QP has no
 * responder resource for gets no answer (it never executed it).
 */
static void case_psn_replay(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a);
	struct w_pkt old[3];
	struct reply r;
	uint8_t data[32];

	h_fill(data, sizeof(data), 29);
	write_pkt(&old[0], &q, m.va, m.rkey, 32, data, 32);
	send_pkt(a, &old[0]);
	expect_ack(a, q.psn, "WRITE on the first connection");
	q.psn = psn_plus(q.psn, 1);
	w_bth(&old[1], OP_READ_REQ, q.qpn, q.psn);
	w_reth(&old[1], m.va, m.rkey, 32);
	send_pkt(a, &old[1]);
	expect_resp(a, OP_READ_RESP_ONLY, AETH_ACK_NO_CREDIT, q.psn, "READ");
	q.psn = psn_plus(q.psn, 1);
	w_bth(&old[2], OP_FETCH_ADD, q.qpn, q.psn);
	w_atomic_eth(&old[2], m.va + 64, m.rkey, 5, 0);
	send_pkt(a, &old[2]);
	expect_resp(a, OP_ATOMIC_ACK, AETH_ACK_NO_CREDIT, q.psn, "FETCH_ADD");

	/* new contents, so that a re-executed WRITE or atomic shows */
	cmd(a, (struct cmd){ .op = C_MR_FILL, .a = m.id, .x = 30 });
	h_fill(m.img + GUARD_LEN, MR_LEN, 30);
	q.psn = psn_plus(q.psn, 0x1000);
	r = cmd(a, (struct cmd){ .op = C_QP_REUSE, .a = q.id, .b = 4,
				 .d = q.psn, .x = ALL_REMOTE });
	H_EQ(r.qpn, q.qpn);
	printf("QPN 0x%x handed out again after %u creations\n", r.qpn, r.n);
	for (int i = 0; i < 3; i++)
		w_send(a->fd, &old[i], &a->target);	/* sealed already */
	/* C9-105: the duplicate WRITE is acknowledged with the PSN of the
	 * last request the new QP executed (none yet: rq_psn - 1) */
	expect_ack(a, psn_plus(q.psn, 0xFFFFFF), "replayed WRITE");
	expect_silence(a, "replayed READ and FETCH_ADD");
	expect_state(a, &q, IBV_QPS_RTS);
	write_only(a, &q, m.va + 128, m.rkey, 16, 31);
	expect_ack(a, q.psn, "WRITE on the new connection");
	written(&m, m.va + 128, 16, 31);
	expect_mem(a, &m);
}

static struct reply usage(struct atk *a)
{
	return cmd(a, (struct cmd){ .op = C_USAGE });
}

static void expect_bounded(const struct reply *before,
			   const struct reply *after, uint64_t cpu_max_ms,
			   const char *what)
{
	printf("%s: target RSS %u -> %u kB, CPU %llu ms\n", what, before->n,
	       after->n, (unsigned long long)(after->x - before->x));
	if (after->n > before->n + RSS_GROWTH_MAX_KB)
		h_fail("%s: target RSS grew from %u to %u kB", what, before->n,
		       after->n);
	if (after->x - before->x > cpu_max_ms)
		h_fail("%s: target used %llu ms of CPU", what,
		       (unsigned long long)(after->x - before->x));
}

/*
 * More READs than max_dest_rd_atomic (1 here) in flight: each is answered
 * when it arrives and its responder resource is reused (as rxe does, whose
 * responder says it is the requester's job not to exceed the negotiated
 * depth), so nothing grows.  Only the newest READ can be replayed as a
 * duplicate.
 */
static void case_read_flood(struct atk *a)
{
	struct amr m = mr_new_pd(a, READ_FLOOD_LEN, ALL_REMOTE, false, 32);
	struct aqp q = qp_new_rd(a, ALL_REMOTE, 1, false);
	uint32_t first = q.psn, last = 0, per = READ_FLOOD_LEN / PATH_MTU;
	struct reply before = usage(a), after;
	struct w_resp r;
	struct w_pkt k;
	unsigned got = 0;

	for (int i = 0; i < READ_FLOOD; i++) {
		last = q.psn;
		read_req(a, &q, m.va, m.rkey, READ_FLOOD_LEN);
		q.psn = psn_plus(q.psn, per);
	}
	/* take what the socket holds; the rest the kernel dropped */
	while (got < READ_FLOOD * per && w_recv(a->fd, &k, &r, SILENCE_MS))
		got++;
	after = usage(a);
	printf("%u READ responses of %u reached the attacker\n", got,
	       READ_FLOOD * per);
	H_CHECK(got > 0);
	expect_bounded(&before, &after, FLOOD_CPU_MAX_MS, "READ flood");
	expect_state(a, &q, IBV_QPS_RTS);

	/* the oldest READ's resource was reused: no replay */
	read_req(a, &(struct aqp){ q.id, q.qpn, first }, m.va, m.rkey,
		 READ_FLOOD_LEN);
	expect_silence(a, "duplicate of the oldest READ");
	read_req(a, &(struct aqp){ q.id, q.qpn, last }, m.va, m.rkey,
		 READ_FLOOD_LEN);
	expect_resp(a, OP_READ_RESP_FIRST, AETH_ACK_NO_CREDIT, last,
		    "duplicate of the newest READ");
	for (uint32_t i = 1; i < per; i++)
		expect_resp(a, i == per - 1 ? OP_READ_RESP_LAST
					    : OP_READ_RESP_MIDDLE,
			    AETH_ACK_NO_CREDIT, psn_plus(last, i),
			    "duplicate of the newest READ");
	read_req(a, &q, m.va, m.rkey, 64);
	r = expect_resp(a, OP_READ_RESP_ONLY, AETH_ACK_NO_CREDIT, q.psn,
			"READ after the flood");
	H_EQ(r.paylen, 64);
	h_expect_mem(r.payload, m.img + GUARD_LEN, 64, "READ data");
	expect_mem(a, &m);
}

/*
 * 10^5 hostile datagrams: requests ahead of the expected PSN (one PSN
 * sequence error NAK for the gap, then silence until it closes, IBTA 9.7),
 * garbage, requests for a QP nobody has, and in-sequence requests with a
 * bad ICRC (dropped, Annex A17).  Memory and CPU stay bounded and the QP
 * carries on at the PSN it expected.
 */
static void case_flood(struct atk *a)
{
	struct amr m = mr_new(a, ALL_REMOTE);
	struct aqp q = qp_new(a), none = q;
	struct reply before = usage(a), after;
	uint64_t rng = 33;
	unsigned naks = 0, answers = 0;
	struct w_pkt k;
	struct w_resp r;
	uint8_t data[64];

	none.qpn ^= 1u << 13;
	h_fill(data, sizeof(data), 34);
	for (uint32_t i = 0; i < FLOOD_PACKETS; i++) {
		struct aqp ahead = { q.id, q.qpn, psn_plus(q.psn, 1 + i) };

		switch (i % 4) {
		case 0:
			write_pkt(&k, &ahead, m.va, m.rkey, 64, data, 64);
			send_pkt(a, &k);
			break;
		case 1:
			k.len = 20 + h_rand64(&rng) % 300;
			h_fill(k.b, k.len, h_rand64(&rng));
			w_send(a->fd, &k, &a->target);
			break;
		case 2:
			write_pkt(&k, &none, m.va, m.rkey, 64, data, 64);
			send_pkt(a, &k);
			break;
		default:
			write_pkt(&k, &q, m.va, m.rkey, 64, data, 64);
			w_seal(&k, &a->self, &a->target);
			k.b[k.len - 1] ^= 0x5A;
			w_send(a->fd, &k, &a->target);
			break;
		}
	}
	while (answers < 1000 && w_recv(a->fd, &k, &r, SILENCE_MS)) {
		answers++;
		naks += r.opcode == OP_ACK && r.syndrome == NAK_PSN_SEQ &&
			r.psn == q.psn;
	}
	after = usage(a);
	expect_bounded(&before, &after, FLOOD_CPU_MAX_MS, "flood");
	if (answers != 1 || naks != 1)
		h_fail("flood: %u answers, %u PSN sequence NAKs; want the one "
		       "NAK", answers, naks);
	expect_state(a, &q, IBV_QPS_RTS);
	write_only(a, &q, m.va, m.rkey, 64, 35);
	expect_ack(a, q.psn, "the expected PSN after the flood");
	written(&m, m.va, 64, 35);
	expect_mem(a, &m);
}

/* A CM REQ (IBTA 12.6) for the target's listener, from ATK_IP. */
static void cm_req(struct w_pkt *k, uint16_t port, uint32_t comm_id)
{
	uint8_t *mad, *req, *cma;

	w_bth(k, OP_UD_SEND_ONLY, 1, comm_id);
	w_put32(k->b + k->len, 0x80010000u);		/* GSI Q_Key */
	w_put32(k->b + k->len + 4, 1);			/* source QP 1 */
	k->len += W_DETH;
	mad = k->b + k->len;
	memset(mad, 0, 256);
	k->len += 256;
	mad[0] = 1;			/* base version */
	mad[1] = 0x07;			/* class: CM */
	mad[2] = 2;			/* class version */
	mad[3] = 0x03;			/* method: Send */
	w_put64(mad + 8, 0xA77ACC0000000000ull | comm_id);	/* TID */
	w_put16(mad + 16, 0x0010);	/* attribute: REQ */
	req = mad + 24;
	w_put32(req + 0, comm_id);			/* local comm ID */
	w_put64(req + 8, 0x0000000001060000ull | port);	/* rdma_cm TCP */
	w_put64(req + 16, 0x0200A77AC0000001ull);	/* CA GUID */
	w_put32(req + 32, (0x100000 + comm_id) << 8 | 1);	/* QPN, resp res */
	req[39] = 1;					/* initiator depth */
	req[43] = 20 << 3;		/* remote CM response timeout; RC */
	w_put32(req + 44, 0x123456u << 8 | 20 << 3 | 7);	/* PSN; timeout,
								 * retries */
	w_put16(req + 48, 0xFFFF);			/* P_Key */
	req[50] = 3 << 4 | 7;		/* path MTU 1024, RNR retry */
	req[51] = 15 << 4;		/* max CM retries */
	w_put16(req + 52, 0xFFFF);
	w_put16(req + 54, 0xFFFF);
	req[56 + 10] = req[56 + 11] = 0xFF;		/* ::ffff:ATK_IP */
	inet_pton(AF_INET, ATK_IP, req + 56 + 12);
	req[72 + 10] = req[72 + 11] = 0xFF;		/* ::ffff:TARGET_IP */
	inet_pton(AF_INET, TARGET_IP, req + 72 + 12);
	req[93] = 64;					/* hop limit */
	req[95] = 14 << 3;				/* local ACK timeout */
	cma = req + 140;		/* rdma_cm's private data header */
	cma[1] = 4 << 4;
	w_put16(cma + 2, 40000);
	inet_pton(AF_INET, ATK_IP, cma + 4 + 12);
	inet_pton(AF_INET, TARGET_IP, cma + 20 + 12);
}

/*
 * A flood of CM REQs for a listener whose application does not answer:
 * the CM holds at most the listen backlog of them and drops the rest
 * (counted), as the kernel's CM does; the application then refuses those
 * it holds, and a legitimate connection still gets through.
 */
static void case_cm_flood(struct atk *a)
{
	struct reply l = cmd(a, (struct cmd){ .op = C_CM_LISTEN, .a = CM_BACKLOG });
	struct reply before = usage(a), after, d;
	struct w_pkt k;

	for (uint32_t i = 1; i <= CM_FLOOD; i++) {
		cm_req(&k, (uint16_t)l.n, i);
		send_pkt(a, &k);
	}
	h_sleep_ms(SILENCE_MS);
	after = usage(a);
	expect_bounded(&before, &after, FLOOD_CPU_MAX_MS, "CM REQ flood");
	d = cmd(a, (struct cmd){ .op = C_CM_DRAIN });
	printf("the listener held %u connection requests of %u\n", d.n,
	       CM_FLOOD);
	if (d.n < 1 || d.n > CM_BACKLOG)
		h_fail("%u connection requests held, backlog %u", d.n,
		       CM_BACKLOG);
	w_drain(a->fd);
}

/*
 * R_Keys are index << 12 | 12 random bits, fresh at every registration
 * (src/verbs/mr.c).  The index is predictable, so the random bits are all
 * an attacker must guess: 2^12 values.  A wrong guess is a remote access
 * error, and the QP is then in Error and answers nothing, the right key
 * included: every guess costs a connection.
 */
static void case_rkey_guess(struct atk *a)
{
	struct reply keys = cmd(a, (struct cmd){ .op = C_KEYS, .a = KEY_SAMPLES });
	const uint32_t mask = (1u << KEY_RANDOM_BITS) - 1;
	struct amr m = mr_new(a, ALL_REMOTE);
	uint8_t seen[1u << KEY_RANDOM_BITS] = { 0 };
	unsigned distinct = 0;
	uint64_t rng = 36;
	struct aqp q;

	for (unsigned i = 0; i < keys.n; i++) {
		distinct += !seen[keys.keys[i] & mask];
		seen[keys.keys[i] & mask] = 1;
	}
	/* 256 draws from 4096 values: some 8 collide; a counter or a
	 * constant would give far fewer distinct values */
	printf("%u distinct low %d bits in %u fresh R_Keys\n", distinct,
	       KEY_RANDOM_BITS, keys.n);
	H_CHECK(distinct >= KEY_SAMPLES - 32);
	for (int g = 0; g < KEY_GUESSES; g++) {
		uint32_t guess = (m.rkey & ~mask) |
				 (uint32_t)(h_rand64(&rng) & mask);

		if (guess == m.rkey)
			guess ^= 1;
		q = qp_new(a);
		write_only(a, &q, m.va, guess, 16, 37);
		expect_refused(a, &q, NAK_REMOTE_ACCESS, "guessed R_Key");
		/* the next guess on this connection, even the right key,
		 * finds a QP in Error: no answer, nothing written */
		q.psn = psn_plus(q.psn, 1);
		write_only(a, &q, m.va, m.rkey, 16, 38);
		expect_silence(a, "the right key on the QP in Error");
	}
	printf("%d random R_Key bits: %u connections per key found on "
	       "average\n", KEY_RANDOM_BITS, 1u << (KEY_RANDOM_BITS - 1));
	expect_mem(a, &m);
}

/* ---- counters ----------------------------------------------------------- */

struct counter {
	const char *name;
	unsigned long min, max;
};

#define ANY ~0ul

struct hcase {
	const char *name;
	void (*run)(struct atk *a);
	bool cm;		/* the peer also connects through rdma_cm */
	struct counter want[6];
};

static const struct hcase cases[] = {
	{ "va_overflow", case_va_overflow, false,
	  { { "access_errors", 4, 4 } } },
	{ "write_beyond", case_write_beyond, false,
	  { { "access_errors", 3, 3 } } },
	{ "read_beyond", case_read_beyond, false,
	  { { "access_errors", 2, 2 } } },
	{ "zero_length", case_zero_length, false,
	  { { "access_errors", 0, 0 } } },
	{ "atomic_unaligned", case_atomic_unaligned, false,
	  { { "access_errors", 0, 0 } } },
	{ "atomic_no_access", case_atomic_no_access, false,
	  { { "access_errors", 2, 2 } } },
	{ "dereg", case_dereg, false, { { "access_errors", 2, 2 } } },
	{ "rereg", case_rereg, false, { { "access_errors", 2, 2 } } },
	{ "mw", case_mw, false, { { "access_errors", 6, 6 } } },
	{ "other_pd", case_other_pd, false, { { "access_errors", 2, 2 } } },
	{ "wrong_source_ip", case_wrong_source_ip, false,
	  { { "rx_bad_source", 2, 2 } } },
	{ "wrong_source_port", case_wrong_source_port, false,
	  { { "rx_duplicate", 1, ANY } } },
	{ "wrong_dest_qpn", case_wrong_dest_qpn, false,
	  { { "rx_unknown_qp", 1, 1 }, { "rx_malformed", 1, 1 } } },
	{ "psn_replay", case_psn_replay, false,
	  { { "rx_duplicate", 3, ANY } } },
	{ "read_flood", case_read_flood, false,
	  { { "rx_duplicate", 2, ANY } } },
	{ "flood", case_flood, false,
	  { { "seq_naks_sent", 1, 1 }, { "rx_bad_icrc", 1, ANY },
	    { "rx_unknown_qp", 1, ANY }, { "rx_out_of_window", 1, ANY } } },
	{ "cm_flood", case_cm_flood, true,
	  { { "mad_backlog_drops", 1, CM_FLOOD } } },
	{ "rkey_guess", case_rkey_guess, false,
	  { { "access_errors", KEY_GUESSES, KEY_GUESSES },
	    { "rx_bad_state", KEY_GUESSES, KEY_GUESSES } } },
};

/* The target's stderr: its counters, as UROCE_DEBUG=1 prints them when the
 * device closes ("uroce: slot N: name value"), checked against want. */
static void check_counters(FILE *log, const struct hcase *c)
{
	char line[512];
	unsigned long got[6] = { 0 };

	rewind(log);
	for (int i = 0; i < 100000 && fgets(line, sizeof(line), log); i++) {
		char name[64];
		unsigned long v;
		unsigned slot;

		fputs(line, stdout);
		if (sscanf(line, "uroce: slot %u: %63s %lu", &slot, name, &v) != 3)
			continue;
		for (int k = 0; k < 6 && c->want[k].name; k++)
			if (!strcmp(name, c->want[k].name))
				got[k] = v;
	}
	for (int k = 0; k < 6 && c->want[k].name; k++)
		if (got[k] < c->want[k].min || got[k] > c->want[k].max)
			h_fail("target counter %s = %lu, want %lu..%lu",
			       c->want[k].name, got[k], c->want[k].min,
			       c->want[k].max);
}

/* ---- processes ---------------------------------------------------------- */

static const struct h_test proc_test = { .name = "hostile", .nroles = 2,
					 .deadline_s = DEADLINE_S };

static _Noreturn void uroce_role(int role, int ctl, int link, bool cm)
{
	struct h_proc p = { .t = &proc_test, .role = role };

	alarm(DEADLINE_S);
	h_open(&p);
	if (role == 0)
		target_main(&p, ctl, link);
	else
		peer_main(&p, link, cm);
	h_close(&p);
	exit(0);
}

/* The attacker: no verbs, only sockets. */
static _Noreturn void attacker(const struct hcase *c, int ctl)
{
	struct atk a = { .ctl = ctl, .next_psn = 0xFFFFF0 };
	struct reply done;

	alarm(DEADLINE_S);
	a.fd = w_socket(ATK_IP, ROCE_PORT);
	a.self = w_addr(ATK_IP, ROCE_PORT);
	a.target = w_addr(TARGET_IP, ROCE_PORT);
	c->run(&a);
	h_send(a.ctl, &(struct cmd){ .op = C_DONE }, sizeof(struct cmd));
	h_recv(a.ctl, &done, sizeof(done));
	exit(0);
}

static bool reap(pid_t pid, const char *who)
{
	int status;

	/* every child has an alarm of its own: this returns */
	if (waitpid(pid, &status, 0) != pid)
		return false;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return true;
	fprintf(stderr, "%s (pid %d) %s %d\n", who, (int)pid,
		WIFEXITED(status) ? "exited with status" : "died of signal",
		WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	return false;
}

int main(int argc, char **argv)
{
	const struct hcase *c = NULL;
	int ctl[2], link[2];
	FILE *log = tmpfile();
	pid_t target, peer, atk;
	bool ok;

	for (size_t i = 0; argc == 2 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name))
			c = &cases[i];
	if (!c) {
		fprintf(stderr, "usage: %s <case>\n", argv[0]);
		return 2;
	}
	if (!log || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, link)) {
		perror("tmpfile/socketpair");
		return 1;
	}
	/* the uroce processes get the settings the test needs: everything on
	 * UDP, and the target's counters printed when its device closes */
	setenv("UROCE_SHM", "0", 1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	fflush(NULL);
	target = fork();
	if (target == 0) {
		close(ctl[0]);
		close(link[1]);
		if (dup2(fileno(log), STDERR_FILENO) < 0 ||
		    setenv("UROCE_DEBUG", "1", 1))
			_exit(1);
		uroce_role(0, ctl[1], link[0], c->cm);
	}
	peer = fork();
	if (peer == 0) {
		close(ctl[0]);
		close(ctl[1]);
		close(link[0]);
		uroce_role(1, -1, link[1], c->cm);
	}
	atk = fork();
	if (atk == 0) {
		close(ctl[1]);
		close(link[0]);
		close(link[1]);
		attacker(c, ctl[0]);
	}
	if (target < 0 || peer < 0 || atk < 0) {
		perror("fork");
		return 1;
	}
	close(ctl[0]);
	close(ctl[1]);
	close(link[0]);
	close(link[1]);
	ok = reap(atk, "attacker");
	ok = reap(target, "target") && ok;
	ok = reap(peer, "peer") && ok;
	if (!ok) {
		/* the target's failure, if it was the first, is in its log */
		check_counters(log, &(struct hcase){ 0 });
		return 1;
	}
	check_counters(log, c);
	printf("PASS hostile.%s\n", c->name);
	return 0;
}
