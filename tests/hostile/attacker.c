/*
 * The attacker's means: driving the target over its control socket, and
 * the packets it sends and the answers it expects (attacker.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "attacker.h"
/* ---- driving the target ----------------------------------------------- */

struct reply cmd(struct atk *a, struct cmd c)
{
	struct reply r;

	h_send(a->ctl, &c, sizeof(c));
	h_recv(a->ctl, &r, sizeof(r));
	return r;
}

struct aqp qp_new_rd(struct atk *a, unsigned access, unsigned rd_atomic,
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

struct aqp qp_new(struct atk *a)
{
	return qp_new_rd(a, ALL_REMOTE, 4, false);
}

struct amr mr_new_pd(struct atk *a, uint32_t len, unsigned access,
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

struct amr mr_new(struct atk *a, unsigned access)
{
	static uint64_t seed = 100;

	return mr_new_pd(a, MR_LEN, access, false, seed++);
}

void expect_mem_at(const char *file, int line, struct atk *a,
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

/* The target's engine sends a NAK before it moves the QP to Error: the
 * state may lag the NAK by a moment. */
void expect_state_at(const char *file, int line, struct atk *a,
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

/* ---- packets ------------------------------------------------------------ */

void send_from(int fd, const struct sockaddr_in *src,
	       const struct sockaddr_in *dst, struct w_pkt *k)
{
	w_seal(k, src, dst);
	w_send(fd, k, dst);
}

void send_pkt(struct atk *a, struct w_pkt *k)
{
	send_from(a->fd, &a->self, &a->target, k);
}

void write_pkt(struct w_pkt *k, const struct aqp *q, uint64_t va,
	       uint32_t rkey, uint32_t len, const void *data,
	       size_t paylen)
{
	w_bth(k, OP_WRITE_ONLY, q->qpn, q->psn);
	w_reth(k, va, rkey, len);
	w_append(k, data, paylen);
}

/* RDMA WRITE Only of len bytes of seed's pattern, the payload len long. */
void write_only(struct atk *a, struct aqp *q, uint64_t va,
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
void written(struct amr *m, uint64_t va, uint32_t len, uint64_t seed)
{
	h_fill(m->img + GUARD_LEN + (va - m->va), len, seed);
}

void read_req(struct atk *a, const struct aqp *q, uint64_t va,
	      uint32_t rkey, uint32_t len)
{
	struct w_pkt k;

	w_bth(&k, OP_READ_REQ, q->qpn, q->psn);
	w_reth(&k, va, rkey, len);
	send_pkt(a, &k);
}

void atomic_req(struct atk *a, const struct aqp *q, uint8_t op,
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
struct w_resp expect_resp_at(const char *file, int line, struct atk *a,
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

void expect_silence_at(const char *file, int line, int fd,
		       const char *what)
{
	struct w_pkt k;
	struct w_resp r;

	if (w_recv(fd, &k, &r, SILENCE_MS))
		h_fail_at(file, line, "%s: the target answered (opcode 0x%02x "
			  "syndrome 0x%02x PSN 0x%06x); it must stay silent",
			  what, r.opcode, r.syndrome, r.psn);
}

uint32_t psn_plus(uint32_t psn, uint32_t n)
{
	return (psn + n) & 0xFFFFFF;
}

/* A refused request: the NAK (IBTA 9.9.3: class B/C responder errors are
 * NAKed with the request's PSN) and the responder QP in Error. */
void expect_refused_at(const char *file, int line, struct atk *a,
		       const struct aqp *q, uint8_t syndrome,
		       const char *what)
{
	expect_resp_at(file, line, a, OP_ACK, syndrome, q->psn, what);
	expect_state_at(file, line, a, q, IBV_QPS_ERR);
}

