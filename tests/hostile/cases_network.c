/*
 * Attacks from the network: wrong addresses, ports and QP numbers, replayed
 * PSNs, floods of requests and CM REQs, and R_Key guessing (attacker.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "attacker.h"
void case_wrong_source_ip(struct atk *a)
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
void case_wrong_source_port(struct atk *a)
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
void case_wrong_dest_qpn(struct atk *a)
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
void case_psn_replay(struct atk *a)
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
void case_read_flood(struct atk *a)
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
void case_flood(struct atk *a)
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
void case_cm_flood(struct atk *a)
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
void case_rkey_guess(struct atk *a)
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

