/*
 * soak: a long mixed RC workload whose every byte is checked.
 *
 * Two processes (harness roles) connect --qps RC QPs; QP q's requester is
 * role q % 2, so traffic flows both ways.  Each QP carries a stream of
 * batches.  A batch is a plan of up to OPS operations drawn from a PRNG
 * seeded by (--seed, QP, batch), so both ends compute the same plan: RDMA
 * WRITE (with immediate sometimes), READ, SEND (with immediate sometimes),
 * FETCH_ADD and CMP_SWP on the QP's counter, of 1 B to 256 KiB at odd
 * offsets, some unsignaled; then a fenced zero-length SEND with immediate,
 * the batch's marker.  Every payload is PRNG bytes seeded by the operation:
 *   - the responder checks each SEND's bytes and each WRITE with immediate's
 *     on its receive completion, and the batch's plain WRITEs on the marker
 *     (RC places them before it);
 *   - the requester checks each READ's bytes and each atomic's old value
 *     (it models the counter) on its completion;
 *   - the counter's final value is the requester's model.
 * Batches use two halves of every area by parity: the requester starts batch
 * k + 2 once the responder, done checking batch k, has refilled its READ
 * sources, posted the receives, and sent a credit (a SEND with immediate k
 * the other way).  The marker's fence keeps batch k's READs complete before
 * the responder rewrites what they read.
 *
 * Completion order is checked per queue: every completion must be the next
 * signaled WR (or posted receive) of its queue.  A QP that has work left
 * and sees no completion for --hang-s seconds is a hang, and fails the run.
 *
 * The result line gives the bytes moved (payloads of both directions,
 * 8 per atomic), the time, the goodput, and the counters both processes'
 * uroce printed on closing (UROCE_DEBUG=1): retransmits, timeouts, ICRC
 * failures and the faults injected.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

enum {
	MAX_QPS = 64,
	OPS = 24,			/* operations per batch, marker apart */
	MARKER = 0xff,			/* op index of the marker's wr_id */
	MAX_LEN = 256 * 1024,		/* longest operation */
	WRITE_AREA = 1024 * 1024,	/* per batch parity */
	SEND_AREA = 512 * 1024,
	READ_AREA = 512 * 1024,
	ATOMIC_AREA = OPS * 8,
	CREDIT_RECVS = 4,		/* the requester's receives for credits */
	/* 67 ms: tail losses wait for it, and 8 of them in a row end the QP,
	 * which a 2-CPU machine shared with other work must not cause */
	ACK_TIMEOUT = 14,
	NAP_US = 20,
};

/* Per-QP area layout (offsets into the QP's buffer), both parities each. */
enum {
	OFF_SRC = 0,					/* WRITE, SEND sources */
	OFF_READ_DST = OFF_SRC + 2 * (WRITE_AREA + SEND_AREA),
	OFF_ATOMIC = OFF_READ_DST + 2 * READ_AREA,	/* atomic results */
	OFF_WRITE = OFF_ATOMIC + 2 * ATOMIC_AREA,	/* WRITE targets */
	OFF_RECV = OFF_WRITE + 2 * WRITE_AREA,		/* SEND targets */
	OFF_READ_SRC = OFF_RECV + 2 * SEND_AREA,
	OFF_COUNTER = OFF_READ_SRC + 2 * READ_AREA,
	QP_BUF = OFF_COUNTER + 4096,
};

enum op_kind { OP_WRITE, OP_WRITE_IMM, OP_READ, OP_SEND, OP_SEND_IMM,
	       OP_FETCH_ADD, OP_CMP_SWP, OP_KINDS };

struct op {
	enum op_kind kind;
	uint32_t len;		/* payload bytes (8 for atomics) */
	uint32_t off;		/* within its area's half */
	uint64_t seed;		/* payload bytes; atomics: their operands */
	bool signaled;
	uint32_t imm;
	/* atomics, filled in at posting from the requester's model */
	uint64_t compare_add, swap, old;
};

struct plan {
	int n;
	struct op op[OPS];
	uint64_t bytes;
};

struct qp_state {
	struct h_ep ep;
	struct h_buf buf;
	struct h_rbuf peer;
	bool requester;
	uint64_t target, planned;	/* bytes: wanted, planned so far */
	uint32_t batches;		/* the QP's batch count, both ends */
	uint32_t next_post;		/* requester: next batch to post */
	uint32_t credits;		/* requester: batches the peer is done with */
	uint32_t markers;		/* requester: markers completed */
	uint32_t checked;		/* responder: batches checked */
	uint64_t counter;		/* requester: model of the peer's counter */
	struct plan plan[2];		/* by batch parity */
	/* expected completions, in order: wr_ids */
	uint64_t sq_want[256], rq_want[256];
	unsigned sq_head, sq_tail, rq_head, rq_tail;
	uint64_t credit_wr;		/* responder: credit sends posted */
	uint64_t last_progress_ns;
	uint64_t bytes_done;
};

struct run_cfg {
	uint64_t bytes;
	unsigned qps;
	uint64_t seed;
	unsigned hang_s;
};

static struct run_cfg rc = { .bytes = 256ull << 20, .qps = 8, .seed = 1,
			     .hang_s = 20 };
static uint8_t *scratch;

static uint64_t mix(uint64_t a, uint64_t b)
{
	uint64_t s = a * 0x100000001b3ull ^ b;

	return h_rand64(&s);
}

static uint64_t op_seed(unsigned q, uint32_t batch, int i)
{
	return mix(mix(mix(rc.seed, q), batch), (uint64_t)i);
}

/* Batch `batch` of QP q, the same at both ends. */
static void make_plan(unsigned q, uint32_t batch, struct plan *pl)
{
	static const unsigned weight[OP_KINDS] = {
		[OP_WRITE] = 30, [OP_WRITE_IMM] = 5, [OP_READ] = 20,
		[OP_SEND] = 20, [OP_SEND_IMM] = 5, [OP_FETCH_ADD] = 10,
		[OP_CMP_SWP] = 10,
	};
	uint64_t s = op_seed(q, batch, -1);
	uint32_t used[OP_KINDS] = { 0 };

	memset(pl, 0, sizeof(*pl));
	for (int i = 0; i < OPS; i++) {
		struct op *o = &pl->op[pl->n];
		unsigned w = (unsigned)(h_rand64(&s) % 100);
		uint64_t r = h_rand64(&s);
		uint32_t len = 1 + (uint32_t)(r % (1u << (r >> 32) % 19));
		uint32_t room, gap = (uint32_t)(r >> 40) % 8, *at;
		enum op_kind k = 0;

		while (w >= weight[k]) {
			w -= weight[k];
			k++;
		}
		o->kind = k;
		o->seed = op_seed(q, batch, i);
		o->signaled = !(r >> 60 == 0 &&
				(k == OP_WRITE || k == OP_SEND));
		o->imm = (uint32_t)(r >> 16);
		if (k == OP_FETCH_ADD || k == OP_CMP_SWP) {
			o->len = 8;
			o->off = (uint32_t)pl->n * 8;
			o->signaled = true;
			pl->bytes += 8;
			pl->n++;
			continue;
		}
		room = k == OP_READ ? READ_AREA
		       : k == OP_SEND || k == OP_SEND_IMM ? SEND_AREA
							  : WRITE_AREA;
		at = k == OP_READ ? &used[OP_READ]
		     : k == OP_SEND || k == OP_SEND_IMM ? &used[OP_SEND]
							: &used[OP_WRITE];
		if (len > MAX_LEN)
			len = MAX_LEN;
		if (*at + gap + len > room)
			continue;	/* that half is full: one op fewer */
		o->off = *at + gap;
		o->len = len;
		*at = o->off + len;
		pl->bytes += len;
		pl->n++;
	}
}

static uint8_t *area(struct qp_state *s, size_t off, uint32_t batch,
		     size_t half)
{
	return s->buf.mem + off + (batch & 1) * half;
}

static uint64_t remote(struct qp_state *s, size_t off, uint32_t batch,
		       size_t half)
{
	return s->peer.addr + off + (batch & 1) * half;
}

static uint64_t wr_id(uint32_t batch, int i)
{
	return (uint64_t)batch << 8 | (uint64_t)i;
}

static void want(uint64_t *ring, unsigned *tail, unsigned head, uint64_t id)
{
	if (*tail - head >= 256)
		h_fail("more than 256 completions expected on one queue");
	ring[(*tail)++ % 256] = id;
}

static void check_bytes(const uint8_t *got, uint32_t len, uint64_t seed,
			unsigned q, uint32_t batch, int i, const char *what)
{
	char d[128];

	h_fill(scratch, len, seed);
	if (memcmp(got, scratch, len)) {
		snprintf(d, sizeof(d), "QP %u batch %u op %d (%s, %u bytes)",
			 q, batch, i, what, len);
		h_expect_mem(got, scratch, len, d);
	}
}

/* ---- requester ----------------------------------------------------------- */

static void post_batch(unsigned q, struct qp_state *s)
{
	uint32_t b = s->next_post++;
	struct plan *pl = &s->plan[b & 1];
	uint32_t lkey = s->buf.mr->lkey, rkey = s->peer.rkey;

	make_plan(q, b, pl);
	s->planned += pl->bytes;
	for (int i = 0; i < pl->n; i++) {
		struct op *o = &pl->op[i];
		unsigned flags = o->signaled ? IBV_SEND_SIGNALED : 0;
		struct ibv_sge sge = { .length = o->len, .lkey = lkey };
		uint8_t *src;

		switch (o->kind) {
		case OP_WRITE:
		case OP_WRITE_IMM:
			src = area(s, OFF_SRC, b, WRITE_AREA + SEND_AREA) + o->off;
			h_fill(src, o->len, o->seed);
			sge.addr = (uintptr_t)src;
			h_post_rdma(&s->ep, wr_id(b, i),
				    o->kind == OP_WRITE ? IBV_WR_RDMA_WRITE
							: IBV_WR_RDMA_WRITE_WITH_IMM,
				    &sge, 1, flags,
				    remote(s, OFF_WRITE, b, WRITE_AREA) + o->off,
				    rkey, o->imm);
			break;
		case OP_SEND:
		case OP_SEND_IMM:
			src = area(s, OFF_SRC, b, WRITE_AREA + SEND_AREA) +
			      WRITE_AREA + o->off;
			h_fill(src, o->len, o->seed);
			sge.addr = (uintptr_t)src;
			h_post_rdma(&s->ep, wr_id(b, i),
				    o->kind == OP_SEND ? IBV_WR_SEND
						       : IBV_WR_SEND_WITH_IMM,
				    &sge, 1, flags, 0, 0, o->imm);
			break;
		case OP_READ:
			sge.addr = (uintptr_t)area(s, OFF_READ_DST, b, READ_AREA) +
				   o->off;
			memset((void *)(uintptr_t)sge.addr, 0, o->len);
			h_post_rdma(&s->ep, wr_id(b, i), IBV_WR_RDMA_READ, &sge,
				    1, flags,
				    remote(s, OFF_READ_SRC, b, READ_AREA) + o->off,
				    rkey, 0);
			break;
		case OP_FETCH_ADD:
		case OP_CMP_SWP:
			sge.addr = (uintptr_t)area(s, OFF_ATOMIC, b, ATOMIC_AREA) +
				   o->off;
			o->old = s->counter;
			if (o->kind == OP_FETCH_ADD) {
				o->compare_add = o->seed >> 20;
				s->counter += o->compare_add;
			} else {
				/* one in four compares misses and swaps nothing */
				bool hit = o->seed & 3;

				o->compare_add = hit ? s->counter : ~s->counter;
				o->swap = o->seed;
				if (hit)
					s->counter = o->swap;
			}
			h_post_atomic(&s->ep, wr_id(b, i),
				      o->kind == OP_FETCH_ADD
					      ? IBV_WR_ATOMIC_FETCH_AND_ADD
					      : IBV_WR_ATOMIC_CMP_AND_SWP,
				      &sge, flags, remote(s, OFF_COUNTER, 0, 0),
				      rkey, o->compare_add, o->swap);
			break;
		default:
			h_fail("op kind %d", o->kind);
		}
		if (o->signaled)
			want(s->sq_want, &s->sq_tail, s->sq_head, wr_id(b, i));
	}
	/* the marker: after every READ and atomic of the batch has completed */
	h_post_rdma(&s->ep, wr_id(b, MARKER), IBV_WR_SEND_WITH_IMM, NULL, 0,
		    IBV_SEND_SIGNALED | IBV_SEND_FENCE, 0, 0, b);
	want(s->sq_want, &s->sq_tail, s->sq_head, wr_id(b, MARKER));
}

static void post_credit_recv(struct qp_state *s, uint64_t id)
{
	h_post_recv(&s->ep, id, NULL, 0);
	want(s->rq_want, &s->rq_tail, s->rq_head, id);
}

static void requester_send_wc(unsigned q, struct qp_state *s,
			      const struct ibv_wc *wc)
{
	uint32_t b = (uint32_t)(wc->wr_id >> 8);
	int i = (int)(wc->wr_id & 0xff);
	const struct op *o;

	if (i == MARKER) {
		s->markers++;
		s->bytes_done += s->plan[b & 1].bytes;
		return;
	}
	o = &s->plan[b & 1].op[i];
	if (o->kind == OP_READ) {
		if (wc->opcode != IBV_WC_RDMA_READ || wc->byte_len != o->len)
			h_fail("QP %u batch %u op %d: READ completion opcode %d "
			       "byte_len %u, want %u", q, b, i, wc->opcode,
			       wc->byte_len, o->len);
		check_bytes(area(s, OFF_READ_DST, b, READ_AREA) + o->off,
			    o->len, o->seed, q, b, i, "READ");
	} else if (o->kind == OP_FETCH_ADD || o->kind == OP_CMP_SWP) {
		uint64_t old;

		memcpy(&old, area(s, OFF_ATOMIC, b, ATOMIC_AREA) + o->off, 8);
		if (old != o->old)
			h_fail("QP %u batch %u op %d: %s returned 0x%" PRIx64
			       ", want 0x%" PRIx64, q, b, i,
			       o->kind == OP_FETCH_ADD ? "FETCH_ADD" : "CMP_SWP",
			       old, o->old);
	}
}

static void requester_recv_wc(unsigned q, struct qp_state *s,
			      const struct ibv_wc *wc)
{
	if (wc->opcode != IBV_WC_RECV || !(wc->wc_flags & IBV_WC_WITH_IMM) ||
	    wc->imm_data != s->credits)
		h_fail("QP %u: credit %u: opcode %d flags 0x%x imm %u", q,
		       s->credits, wc->opcode, wc->wc_flags, wc->imm_data);
	s->credits++;
	post_credit_recv(s, wc->wr_id + CREDIT_RECVS);
}

/* ---- responder ----------------------------------------------------------- */

/* Ready for batch b: its READ sources filled, its receives posted. */
static void prepare_batch(unsigned q, struct qp_state *s, uint32_t b)
{
	struct plan *pl = &s->plan[b & 1];

	make_plan(q, b, pl);
	for (int i = 0; i < pl->n; i++) {
		struct op *o = &pl->op[i];
		struct ibv_sge sge = { .length = o->len, .lkey = s->buf.mr->lkey };

		switch (o->kind) {
		case OP_READ:
			h_fill(area(s, OFF_READ_SRC, b, READ_AREA) + o->off,
			       o->len, o->seed);
			continue;
		case OP_SEND:
		case OP_SEND_IMM:
			sge.addr = (uintptr_t)area(s, OFF_RECV, b, SEND_AREA) +
				   o->off;
			memset((void *)(uintptr_t)sge.addr, 0, o->len);
			h_post_recv(&s->ep, wr_id(b, i), &sge, 1);
			break;
		case OP_WRITE_IMM:
			h_post_recv(&s->ep, wr_id(b, i), NULL, 0);
			break;
		default:
			continue;
		}
		want(s->rq_want, &s->rq_tail, s->rq_head, wr_id(b, i));
	}
	h_post_recv(&s->ep, wr_id(b, MARKER), NULL, 0);
	want(s->rq_want, &s->rq_tail, s->rq_head, wr_id(b, MARKER));
}

static void responder_recv_wc(unsigned q, struct qp_state *s,
			      const struct ibv_wc *wc)
{
	uint32_t b = (uint32_t)(wc->wr_id >> 8);
	int i = (int)(wc->wr_id & 0xff);
	const struct plan *pl = &s->plan[b & 1];
	const struct op *o;
	enum ibv_wc_opcode opc = IBV_WC_RECV;
	uint32_t len = 0, imm = b;
	bool with_imm = true;

	if (i != MARKER) {
		o = &pl->op[i];
		opc = o->kind == OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
					      : IBV_WC_RECV;
		len = o->len;
		imm = o->imm;
		with_imm = o->kind != OP_SEND;
	}
	if (wc->opcode != opc || !!(wc->wc_flags & IBV_WC_WITH_IMM) != with_imm ||
	    (with_imm && wc->imm_data != imm) ||
	    (opc == IBV_WC_RECV && wc->byte_len != len))
		h_fail("QP %u batch %u op %d: receive opcode %d flags 0x%x imm "
		       "0x%x byte_len %u, want opcode %d imm 0x%x byte_len %u",
		       q, b, i, wc->opcode, wc->wc_flags, wc->imm_data,
		       wc->byte_len, opc, imm, len);
	if (i != MARKER) {
		if (o->kind == OP_WRITE_IMM)
			check_bytes(area(s, OFF_WRITE, b, WRITE_AREA) + o->off,
				    o->len, o->seed, q, b, i, "WRITE with imm");
		else
			check_bytes(area(s, OFF_RECV, b, SEND_AREA) + o->off,
				    o->len, o->seed, q, b, i, "SEND");
		return;
	}
	/* the marker: every WRITE of the batch has landed before it */
	for (int k = 0; k < pl->n; k++)
		if (pl->op[k].kind == OP_WRITE)
			check_bytes(area(s, OFF_WRITE, b, WRITE_AREA) +
					    pl->op[k].off,
				    pl->op[k].len, pl->op[k].seed, q, b, k,
				    "WRITE");
	s->bytes_done += pl->bytes;
	s->checked++;
	if (b + 2 < s->batches)
		prepare_batch(q, s, b + 2);
	h_post_rdma(&s->ep, s->credit_wr, IBV_WR_SEND_WITH_IMM, NULL, 0,
		    IBV_SEND_SIGNALED, 0, 0, b);
	want(s->sq_want, &s->sq_tail, s->sq_head, s->credit_wr++);
}

/* ---- both ---------------------------------------------------------------- */

/* How many batches QP q runs: until its share of the bytes is planned. */
static uint32_t count_batches(unsigned q, uint64_t target)
{
	struct plan pl;
	uint64_t sum = 0;
	uint32_t b = 0;

	while (sum < target && b < UINT32_MAX / 2) {
		make_plan(q, b++, &pl);
		sum += pl.bytes;
	}
	return b;
}

static bool qp_done(const struct qp_state *s)
{
	if (s->requester)
		return s->markers == s->batches && s->credits == s->batches &&
		       s->sq_head == s->sq_tail;
	return s->checked == s->batches && s->sq_head == s->sq_tail;
}

static void take_wc(unsigned q, struct qp_state *s, bool send,
		    const struct ibv_wc *wc)
{
	uint64_t *ring = send ? s->sq_want : s->rq_want;
	unsigned *head = send ? &s->sq_head : &s->rq_head;
	unsigned tail = send ? s->sq_tail : s->rq_tail;

	if (wc->status != IBV_WC_SUCCESS) {
		const struct op *o = &s->plan[(wc->wr_id >> 8) & 1]
					      .op[wc->wr_id & 0xff];

		if (s->requester && send && (wc->wr_id & 0xff) != MARKER)
			h_fail("QP %u: send completion wr_id 0x%" PRIx64
			       " (op kind %d, %u bytes): %s", q, wc->wr_id,
			       o->kind, o->len, ibv_wc_status_str(wc->status));
		h_fail("QP %u: %s completion wr_id 0x%" PRIx64 ": %s", q,
		       send ? "send" : "receive", wc->wr_id,
		       ibv_wc_status_str(wc->status));
	}
	if (*head == tail || wc->wr_id != ring[*head % 256])
		h_fail("QP %u: %s completion out of order: wr_id 0x%" PRIx64
		       ", want 0x%" PRIx64, q, send ? "send" : "receive",
		       wc->wr_id, *head == tail ? 0 : ring[*head % 256]);
	(*head)++;
	s->last_progress_ns = h_now_ns();
	if (s->requester && send)
		requester_send_wc(q, s, wc);
	else if (s->requester)
		requester_recv_wc(q, s, wc);
	else if (!send)
		responder_recv_wc(q, s, wc);
}

/* Polls every QP until all are done; fails on a hang. */
static void run_loop(struct qp_state *qs, unsigned n)
{
	struct ibv_wc wc[16];
	uint64_t hang_ns = (uint64_t)rc.hang_s * 1000000000ull;
	unsigned left = n;

	for (unsigned q = 0; q < n; q++)
		qs[q].last_progress_ns = h_now_ns();
	/* every idle pass naps NAP_US; the watchdog ends any run that stops
	 * making progress long before this count */
	for (uint64_t pass = 0; left > 0; pass++) {
		bool any = false;

		left = 0;
		for (unsigned q = 0; q < n; q++) {
			struct qp_state *s = &qs[q];
			int got;

			if (qp_done(s))
				continue;
			left++;
			/* batch k + 2 reuses batch k's halves and plan: the
			 * peer must be done with it, and so must we */
			while (s->requester && s->next_post < s->batches &&
			       s->next_post < s->credits + 2 &&
			       s->next_post < s->markers + 2)
				post_batch(q, s);
			for (int k = 0; k < 2; k++) {
				struct ibv_cq *cq = k ? s->ep.rcq : s->ep.scq;

				got = ibv_poll_cq(cq, 16, wc);
				if (got < 0)
					h_fail("ibv_poll_cq: %d", got);
				for (int j = 0; j < got; j++)
					take_wc(q, s, !k, &wc[j]);
				any |= got > 0;
			}
			if (h_now_ns() - s->last_progress_ns > hang_ns)
				h_fail("hang: QP %u (%s) made no progress for %u s: "
				       "batch %u of %u posted, %u markers, %u "
				       "credits, %u checked", q,
				       s->requester ? "requester" : "responder",
				       rc.hang_s, s->next_post, s->batches,
				       s->markers, s->credits, s->checked);
		}
		if (!any)
			usleep(NAP_US);
		if (pass > (uint64_t)1 << 40)
			h_fail("poll passes exhausted");
	}
}

/* The counters uroce prints when the device closes (UROCE_DEBUG=1), in
 * the order of counter_names. */
struct counters {
	uint64_t retransmits, timeouts, seq_naks_sent, rx_bad_icrc,
		rx_malformed, rx_duplicate, fault_drops, fault_corrupts, fault_delays,
		fault_reorders, fault_tx_drops, fault_tx_corrupts;
};

static const char *const counter_names[] = {
	"retransmits", "timeouts", "seq_naks_sent", "rx_bad_icrc",
	"rx_malformed", "rx_duplicate", "fault_drops", "fault_corrupts",
	"fault_delays", "fault_reorders", "fault_tx_drops", "fault_tx_corrupts",
};

static void close_and_count(struct h_proc *p, struct counters *c)
{
	uint64_t v[sizeof(counter_names) / sizeof(counter_names[0])];

	_Static_assert(sizeof(v) == sizeof(*c), "one name per counter");
	h_close_counting(p, counter_names, v, sizeof(v) / sizeof(v[0]));
	memcpy(c, v, sizeof(*c));
}

struct report {
	uint64_t bytes;
	struct counters c;
};

static void role(struct h_proc *p)
{
	static struct qp_state qs[MAX_QPS];
	int sock = p->sock[0];
	uint64_t t0, ns;
	struct report mine = { 0 }, peer;
	struct h_qp_cfg cfg = h_qp_defaults(p);

	scratch = malloc(MAX_LEN);
	H_CHECK(scratch);
	cfg.timeout = ACK_TIMEOUT;
	cfg.cap.max_send_sge = cfg.cap.max_recv_sge = 1;
	for (unsigned q = 0; q < rc.qps; q++) {
		struct qp_state *s = &qs[q];

		/* half the QPs at path MTU 1024, many packets per message */
		cfg.mtu = q % 4 < 2 ? IBV_MTU_4096 : IBV_MTU_1024;
		h_ep_create(p, &s->ep, &cfg);
		h_buf_alloc(p, &s->buf, QP_BUF,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_ATOMIC);
		h_ep_connect(p, &s->ep, sock);
		h_send_rbuf(sock, &s->buf);
		s->peer = h_recv_rbuf(sock);
		s->requester = (int)(q % 2) == p->role;
		s->target = rc.bytes / rc.qps;
		s->batches = count_batches(q, s->target);
		if (s->requester) {
			for (unsigned k = 0; k < CREDIT_RECVS; k++)
				post_credit_recv(s, k);
		} else {
			prepare_batch(q, s, 0);
			if (s->batches > 1)
				prepare_batch(q, s, 1);
		}
	}
	h_sync(sock);
	t0 = h_now_ns();
	run_loop(qs, rc.qps);
	h_sync(sock);
	ns = h_now_ns() - t0;

	/* the counters: each end tells the other its model */
	for (unsigned q = 0; q < rc.qps; q++) {
		struct qp_state *s = &qs[q];
		uint64_t model, got;

		if (s->requester) {
			h_send(sock, &s->counter, sizeof(s->counter));
			mine.bytes += s->bytes_done;
			continue;
		}
		h_recv(sock, &model, sizeof(model));
		memcpy(&got, s->buf.mem + OFF_COUNTER, sizeof(got));
		if (got != model)
			h_fail("QP %u: counter 0x%" PRIx64 ", want 0x%" PRIx64,
			       q, got, model);
	}
	for (unsigned q = 0; q < rc.qps; q++) {
		struct qp_state *s = &qs[q];

		h_expect_no_wc(s->ep.scq, 0);
		/* the requester's spare credit receives stay posted */
		if (!s->requester)
			h_expect_no_wc(s->ep.rcq, 0);
		h_ep_destroy(&s->ep);
		h_buf_free(&s->buf);
	}
	close_and_count(p, &mine.c);
	if (p->role == 1) {
		h_send(sock, &mine, sizeof(mine));
		free(scratch);
		return;
	}
	h_recv(sock, &peer, sizeof(peer));
	{
		uint64_t bytes = mine.bytes + peer.bytes;
		double s = (double)ns / 1e9;
		const struct counters *a = &mine.c, *b = &peer.c;

		printf("SOAK %s bytes=%" PRIu64 " seconds=%.2f goodput_MBps=%.1f "
		       "retransmits=%" PRIu64 " timeouts=%" PRIu64
		       " seq_naks=%" PRIu64 " rx_bad_icrc=%" PRIu64
		       " rx_malformed=%" PRIu64 " rx_duplicate=%" PRIu64 " fault_drops=%" PRIu64
		       " fault_corrupts=%" PRIu64 " fault_delays=%" PRIu64
		       " fault_reorders=%" PRIu64 " fault_tx_drops=%" PRIu64
		       " fault_tx_corrupts=%" PRIu64 " errors=0 hangs=0\n",
		       p->t->name, bytes, s, (double)bytes / 1e6 / s,
		       a->retransmits + b->retransmits, a->timeouts + b->timeouts,
		       a->seq_naks_sent + b->seq_naks_sent,
		       a->rx_bad_icrc + b->rx_bad_icrc,
		       a->rx_malformed + b->rx_malformed,
		       a->rx_duplicate + b->rx_duplicate,
		       a->fault_drops + b->fault_drops,
		       a->fault_corrupts + b->fault_corrupts,
		       a->fault_delays + b->fault_delays,
		       a->fault_reorders + b->fault_reorders,
		       a->fault_tx_drops + b->fault_tx_drops,
		       a->fault_tx_corrupts + b->fault_tx_corrupts);
		/* every packet corrupted on receipt must have been refused,
		 * by the ICRC check or by a header check ahead of it (one
		 * corrupted on sending may have been dropped on receipt) */
		if (a->rx_bad_icrc + b->rx_bad_icrc + a->rx_malformed +
			    b->rx_malformed <
		    a->fault_corrupts + b->fault_corrupts)
			h_fail("%" PRIu64 " ICRC failures and %" PRIu64
			       " malformed for %" PRIu64
			       " packets corrupted on receipt",
			       a->rx_bad_icrc + b->rx_bad_icrc,
			       a->rx_malformed + b->rx_malformed,
			       a->fault_corrupts + b->fault_corrupts);
	}
	free(scratch);
}

static uint64_t parse_size(const char *v)
{
	char *end;
	double x = strtod(v, &end);
	uint64_t mult = 1;

	switch (*end) {
	case 'G': mult = 1ull << 30; end++; break;
	case 'M': mult = 1ull << 20; end++; break;
	case 'K': mult = 1ull << 10; end++; break;
	}
	if (end == v || *end || !(x > 0))
		return 0;
	return (uint64_t)(x * (double)mult);
}

static _Noreturn void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s --name NAME [--bytes N[KMG]] [--qps N] [--seed N]\n"
		"          [--hang-s N] [--deadline-s N] [--faults UROCE_FAULTS]\n"
		"          [--netns PATH0,PATH1 --addrs ADDR0,ADDR1]\n", prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static char netns[2][256], addrs[2][64];
	struct h_test t = { .nroles = 2, .role = { role, role },
			    .deadline_s = 600 };

	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage(argv[0]);
		i++;
		if (!strcmp(k, "--name"))
			t.name = v;
		else if (!strcmp(k, "--bytes"))
			rc.bytes = parse_size(v);
		else if (!strcmp(k, "--qps"))
			rc.qps = (unsigned)atoi(v);
		else if (!strcmp(k, "--seed"))
			rc.seed = strtoull(v, NULL, 0);
		else if (!strcmp(k, "--hang-s"))
			rc.hang_s = (unsigned)atoi(v);
		else if (!strcmp(k, "--deadline-s"))
			t.deadline_s = (unsigned)atoi(v);
		else if (!strcmp(k, "--faults"))
			t.faults = v;
		else if (!strcmp(k, "--netns") &&
			 sscanf(v, "%255[^,],%255s", netns[0], netns[1]) == 2) {
			t.netns[0] = netns[0];
			t.netns[1] = netns[1];
		} else if (!strcmp(k, "--addrs") &&
			   sscanf(v, "%63[^,],%63s", addrs[0], addrs[1]) == 2) {
			t.addrs[0] = addrs[0];
			t.addrs[1] = addrs[1];
		} else {
			usage(argv[0]);
		}
	}
	if (!t.name || !rc.bytes || rc.qps < 2 || rc.qps > MAX_QPS ||
	    !rc.hang_s || !t.deadline_s)
		usage(argv[0]);
	/* the counters come from what uroce prints on closing */
	if (setenv("UROCE_DEBUG", "1", 1))
		return 1;
	return h_main(&t);
}
