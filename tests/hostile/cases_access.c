/*
 * Attacks on keys, bounds and rights: what an R_Key does not grant is
 * refused (attacker.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "attacker.h"
/* ---- cases -------------------------------------------------------------- */

/* VA + length past 2^64 (or a length that ends past the MR) is outside
 * every MR: remote access error (C9-88 ff.: the R_Key check covers the
 * whole range). */
void case_va_overflow(struct atk *a)
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

void case_write_beyond(struct atk *a)
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

void case_read_beyond(struct atk *a)
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
void case_zero_length(struct atk *a)
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
void case_atomic_unaligned(struct atk *a)
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
void case_atomic_no_access(struct atk *a)
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
void case_dereg(struct atk *a)
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
void case_rereg(struct atk *a)
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
void case_mw(struct atk *a)
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
void case_other_pd(struct atk *a)
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
