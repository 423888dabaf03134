/*
 * rc.mpe.<case>: the memory placement extensions, ATOMIC WRITE and FLUSH
 * (ibv_wr_atomic_write, ibv_wr_flush), between two processes.
 *
 *   ok      64 atomic writes, a 64 KiB RDMA WRITE ordered before one more,
 *           FLUSHes of a range and of the whole MR, then an RDMA READ that
 *           must see it all; the responder's area must hold exactly that.
 *   lossy   the same with 20% of datagrams dropped and 10% duplicated: lost
 *           responses are recovered and duplicates are not executed twice.
 *   errors  each violation on a fresh QP pair: FLUSH without flushable
 *           access, FLUSH PERSISTENT on an MR only globally flushable, FLUSH
 *           out of bounds, ATOMIC WRITE misaligned, without REMOTE_WRITE and
 *           with a bad rkey; nothing may change at the responder.  Also the
 *           local checks: device caps, bad FLUSH arguments, the classic
 *           ibv_post_send refusing ATOMIC_WRITE.
 *
 * rdma-core 44's headers have no FLUSH: its ABI is declared below as
 * rdma-core 45 defines it, as a program built against that would use it.
 * Role 0 is the requester, role 1 the responder.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* rdma-core 45: verbs.h and the kernel's ib_user_verbs.h */
enum {
	WR_FLUSH = 14,
	WC_FLUSH = 8,
	QP_EX_WITH_FLUSH = 1 << 11,
	ACCESS_FLUSH_GLOBAL = 1 << 8,
	ACCESS_FLUSH_PERSISTENT = 1 << 9,
	FLUSH_GLOBAL = 1,
	FLUSH_PERSISTENT = 2,
	FLUSH_RANGE = 0,
	FLUSH_MR = 1,
};
#define DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define DEVICE_ATOMIC_WRITE (1ULL << 40)

struct qp_ex_45 {
	struct ibv_qp_ex x;
	void (*wr_flush)(struct ibv_qp_ex *qp, uint32_t rkey,
			 uint64_t remote_addr, size_t len, uint8_t type,
			 uint8_t level);
};

static void wr_flush(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
		     size_t len, uint8_t type, uint8_t level)
{
	((struct qp_ex_45 *)qpx)->wr_flush(qpx, rkey, addr, len, type, level);
}

enum {
	PAGE = 4096,
	AREA = 3 * PAGE,	/* the MR is [PAGE, 2 * PAGE) */
	ALL = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
	      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	FLUSHABLE = ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT,
	NWRITES = 64,
	BULK = 64 * 1024,	/* the ordering check's RDMA WRITE */
	FLAG_OFF = PAGE - 8,	/* the atomic write that follows it */
};

static uint64_t value_of(int i)
{
	return 0x1122334455667700ull + (uint64_t)i;
}

struct bad {
	const char *what;
	int mr_access;
	bool flush;
	uint8_t type, level;
	int64_t off;
	uint32_t len;
	bool bad_rkey;
	enum ibv_wc_status status;
};

static const struct bad bads[] = {
	{ "FLUSH without flushable access", ALL, true, FLUSH_GLOBAL,
	  FLUSH_RANGE, 0, 64, false, IBV_WC_REM_ACCESS_ERR },
	{ "FLUSH PERSISTENT, MR only global", ALL | ACCESS_FLUSH_GLOBAL, true,
	  FLUSH_PERSISTENT, FLUSH_MR, 0, 0, false, IBV_WC_REM_ACCESS_ERR },
	{ "FLUSH out of bounds", ALL | FLUSHABLE, true, FLUSH_GLOBAL,
	  FLUSH_RANGE, PAGE - 8, 16, false, IBV_WC_REM_ACCESS_ERR },
	{ "ATOMIC WRITE misaligned", ALL, false, 0, 0, 4, 8, false,
	  IBV_WC_REM_INV_REQ_ERR },
	{ "ATOMIC WRITE without REMOTE_WRITE", ALL & ~IBV_ACCESS_REMOTE_WRITE,
	  false, 0, 0, 0, 8, false, IBV_WC_REM_ACCESS_ERR },
	{ "ATOMIC WRITE, bad rkey", ALL, false, 0, 0, 0, 8, true,
	  IBV_WC_REM_ACCESS_ERR },
};

static void check_caps(struct h_proc *p)
{
	struct ibv_device_attr_ex ax;

	H_OK(ibv_query_device_ex(p->ctx, NULL, &ax));
	H_CHECK(ax.device_cap_flags_ex & DEVICE_ATOMIC_WRITE);
	H_CHECK(ax.device_cap_flags_ex & DEVICE_FLUSH_GLOBAL);
	H_CHECK(ax.device_cap_flags_ex & DEVICE_FLUSH_PERSISTENT);
}

static struct h_qp_cfg mpe_cfg(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);

	c.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | QP_EX_WITH_FLUSH |
			   IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
	c.mtu = IBV_MTU_1024;
	return c;
}

/* Bad arguments fail locally, before anything is sent. */
static void check_local_errors(struct h_ep *ep, const struct h_rbuf *r)
{
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(ep->qp);
	uint64_t v = 1;
	struct ibv_sge sge = { (uintptr_t)&v, 8, 0 };
	struct ibv_send_wr wr = { .opcode = IBV_WR_ATOMIC_WRITE,
				  .sg_list = &sge, .num_sge = 1 }, *bad;

	H_EQ(ibv_post_send(ep->qp, &wr, &bad), EINVAL);
	wr.opcode = (enum ibv_wr_opcode)WR_FLUSH;
	H_EQ(ibv_post_send(ep->qp, &wr, &bad), EINVAL);
	ibv_wr_start(qpx);
	wr_flush(qpx, r->rkey, r->addr, 8, 0, FLUSH_RANGE);	/* no type */
	H_EQ(ibv_wr_complete(qpx), EINVAL);
	ibv_wr_start(qpx);
	wr_flush(qpx, r->rkey, r->addr, 8, FLUSH_GLOBAL, 2);	/* no such level */
	H_EQ(ibv_wr_complete(qpx), EINVAL);
	h_expect_no_wc(ep->scq, 20);
}

static void requester_ok(struct h_proc *p)
{
	struct h_qp_cfg c = mpe_cfg(p);
	struct h_ep ep;
	struct h_buf b;
	struct h_rbuf r;
	struct ibv_qp_ex *qpx;
	int sock = p->sock[0];
	uint64_t flag = 0xF1A6F1A6F1A6F1A6ull;

	check_caps(p);
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BULK + PAGE, ALL);
	h_ep_connect(p, &ep, sock);
	r = h_recv_rbuf(sock);
	qpx = ibv_qp_to_qp_ex(ep.qp);
	H_CHECK(qpx);
	check_local_errors(&ep, &r);

	for (int i = 0; i < NWRITES; i++) {
		uint64_t v = value_of(i);

		ibv_wr_start(qpx);
		qpx->wr_id = (uint64_t)i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_atomic_write(qpx, r.rkey, r.addr + 8 * (uint64_t)i, &v);
		H_OK(ibv_wr_complete(qpx));
	}
	for (int i = 0; i < NWRITES; i++)
		H_EXPECT_SEND(&ep, .wr_id = (uint64_t)i,
			      .opcode = IBV_WC_ATOMIC_WRITE);

	/* A bulk WRITE into the responder's own buffer (in the area's
	 * second page onwards it does not fit: the responder registers a
	 * separate 64 KiB region for it) and the flag after it, in one
	 * chain: when the flag is seen the bulk data must all be there. */
	{
		struct h_rbuf bulk = h_recv_rbuf(sock);
		struct ibv_sge sge = { (uintptr_t)b.mem, BULK, b.mr->lkey };

		h_fill(b.mem, BULK, 99);
		ibv_wr_start(qpx);
		qpx->wr_id = 100;
		qpx->wr_flags = 0;
		ibv_wr_rdma_write(qpx, bulk.rkey, bulk.addr);
		ibv_wr_set_sge_list(qpx, 1, &sge);
		qpx->wr_id = 101;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_atomic_write(qpx, r.rkey, r.addr + FLAG_OFF, &flag);
		qpx->wr_id = 102;
		wr_flush(qpx, r.rkey, r.addr, NWRITES * 8, FLUSH_GLOBAL,
			 FLUSH_RANGE);
		qpx->wr_id = 103;
		wr_flush(qpx, r.rkey, r.addr, 0, FLUSH_GLOBAL | FLUSH_PERSISTENT,
			 FLUSH_MR);
		H_OK(ibv_wr_complete(qpx));
		H_EXPECT_SEND(&ep, .wr_id = 101, .opcode = IBV_WC_ATOMIC_WRITE);
		H_EXPECT_SEND(&ep, .wr_id = 102,
			      .opcode = (enum ibv_wc_opcode)WC_FLUSH);
		H_EXPECT_SEND(&ep, .wr_id = 103,
			      .opcode = (enum ibv_wc_opcode)WC_FLUSH);
	}

	/* what a READ after the FLUSH sees */
	{
		struct ibv_sge sge = { (uintptr_t)b.mem, PAGE, b.mr->lkey };
		uint64_t got;

		h_post_rdma(&ep, 200, IBV_WR_RDMA_READ, &sge, 1,
			    IBV_SEND_SIGNALED, r.addr, r.rkey, 0);
		H_EXPECT_SEND(&ep, .wr_id = 200, .opcode = IBV_WC_RDMA_READ,
			      .byte_len = PAGE);
		for (int i = 0; i < NWRITES; i++) {
			memcpy(&got, b.mem + 8 * i, 8);
			H_EQ(got, value_of(i));
		}
		memcpy(&got, b.mem + FLAG_OFF, 8);
		H_EQ(got, flag);
	}
	h_sync(sock);
	h_ep_destroy(&ep);
	h_buf_free(&b);
}

static void responder_ok(struct h_proc *p)
{
	struct h_qp_cfg c = mpe_cfg(p);
	struct h_ep ep;
	struct h_buf bulk;
	struct ibv_mr *mr;
	uint8_t *area, *want = malloc(AREA), *bulk_want = malloc(BULK);
	void *mem;
	struct h_rbuf r;
	int sock = p->sock[0];
	uint64_t flag = 0xF1A6F1A6F1A6F1A6ull;

	H_CHECK(want && bulk_want);
	H_OK(posix_memalign(&mem, PAGE, AREA));
	area = mem;
	h_fill(area, AREA, 71);
	memcpy(want, area, AREA);
	for (int i = 0; i < NWRITES; i++) {
		uint64_t v = value_of(i);

		memcpy(want + PAGE + 8 * i, &v, 8);
	}
	memcpy(want + PAGE + FLAG_OFF, &flag, 8);
	mr = ibv_reg_mr(p->pd, area + PAGE, PAGE, ALL | FLUSHABLE);
	if (!mr)
		h_fail("ibv_reg_mr with the FLUSH access bits: %s",
		       strerror(errno));
	h_buf_alloc(p, &bulk, BULK, ALL);
	h_fill(bulk_want, BULK, 99);
	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, sock);
	r = (struct h_rbuf){ (uintptr_t)area + PAGE, mr->rkey, PAGE };
	h_send(sock, &r, sizeof(r));
	h_send_rbuf(sock, &bulk);

	/* the flag is stored after the bulk data: seeing it, all is there */
	for (uint64_t t0 = h_now_ns();;) {
		uint64_t got = __atomic_load_n((uint64_t *)(area + PAGE + FLAG_OFF),
					       __ATOMIC_ACQUIRE);

		if (got == flag)
			break;
		if (h_now_ns() - t0 > 10ull * 1000 * 1000 * 1000)
			h_fail("the flag never arrived");
		h_sleep_ms(1);
	}
	h_expect_mem(bulk.mem, bulk_want, BULK, "bulk data under the flag");
	h_sync(sock);
	h_expect_mem(area, want, AREA, "responder area");
	h_ep_destroy(&ep);
	H_OK(ibv_dereg_mr(mr));
	h_buf_free(&bulk);
	free(area);
	free(want);
	free(bulk_want);
}

static void requester_bad(struct h_proc *p, const struct bad *at)
{
	struct h_qp_cfg c = mpe_cfg(p);
	struct h_ep ep;
	struct h_rbuf r;
	struct ibv_qp_ex *qpx;
	int sock = p->sock[0];
	uint32_t rkey;
	uint64_t v = 0xBADBADBADBADBAD0ull;

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, sock);
	r = h_recv_rbuf(sock);
	rkey = at->bad_rkey ? r.rkey ^ 1 : r.rkey;
	qpx = ibv_qp_to_qp_ex(ep.qp);
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	if (at->flush)
		wr_flush(qpx, rkey, r.addr + (uint64_t)at->off, at->len,
			 at->type, at->level);
	else
		ibv_wr_atomic_write(qpx, rkey, r.addr + (uint64_t)at->off, &v);
	H_OK(ibv_wr_complete(qpx));
	H_EXPECT_STATUS(&ep, 1, at->status, at->what);
	H_EQ(h_qp_state(ep.qp), IBV_QPS_ERR);
	h_sync(sock);
	h_ep_destroy(&ep);
}

static void responder_bad(struct h_proc *p, const struct bad *at)
{
	struct h_qp_cfg c = mpe_cfg(p);
	struct h_ep ep;
	struct ibv_mr *mr;
	uint8_t *area, *want = malloc(AREA);
	void *mem;
	struct h_rbuf r;
	int sock = p->sock[0];

	H_CHECK(want);
	H_OK(posix_memalign(&mem, PAGE, AREA));
	area = mem;
	h_fill(area, AREA, 72);
	memcpy(want, area, AREA);
	mr = ibv_reg_mr(p->pd, area + PAGE, PAGE, at->mr_access);
	if (!mr)
		h_fail("ibv_reg_mr: %s", strerror(errno));
	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, sock);
	r = (struct h_rbuf){ (uintptr_t)area + PAGE, mr->rkey, PAGE };
	h_send(sock, &r, sizeof(r));
	h_sync(sock);
	h_expect_mem(area, want, AREA, at->what);
	h_ep_destroy(&ep);
	H_OK(ibv_dereg_mr(mr));
	free(area);
	free(want);
}

static void run_ok(struct h_proc *p)
{
	if (p->role == 0)
		requester_ok(p);
	else
		responder_ok(p);
}

static void run_errors(struct h_proc *p)
{
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		if (p->role == 0)
			requester_bad(p, &bads[i]);
		else
			responder_bad(p, &bads[i]);
	}
}

int main(int argc, char **argv)
{
	struct h_test t = { .nroles = 2, .deadline_s = 50 };
	const char *c = argc > 1 ? argv[1] : "";

	if (!strcmp(c, "ok") || !strcmp(c, "lossy")) {
		t.name = !strcmp(c, "ok") ? "rc.mpe.ok" : "rc.mpe.lossy";
		t.role[0] = t.role[1] = run_ok;
		if (!strcmp(c, "lossy"))
			t.faults = "drop=0.2,dup=0.1,seed=7";
	} else if (!strcmp(c, "errors")) {
		t.name = "rc.mpe.errors";
		t.role[0] = t.role[1] = run_errors;
	} else {
		fprintf(stderr, "usage: %s ok|lossy|errors\n", argv[0]);
		return 2;
	}
	return h_main(&t);
}
