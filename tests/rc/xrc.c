/*
 * XRC between two processes: role 0 is the initiator (XRC_SEND QPs), role 1
 * the target (an XRC domain with SRQs and XRC_RECV QPs).
 *
 *   - domain and SRQ verbs: the same inode gives the same domain, which
 *     cannot close while an SRQ is in it; only XRC SRQs have a number; XRC
 *     QPs take no receives; a target QP needs a domain.
 *   - one initiator QP reaches two SRQs of the domain, each completing on
 *     its own CQ: multi-packet SENDs and SEND with immediate, every byte
 *     checked; WRITE, READ and FETCH_ADD into memory of the SRQs' PD.
 *   - a request naming an SRQ of another domain is refused
 *     (IBV_WC_REM_INV_REQ_ERR) with nothing received; a WRITE with an rkey
 *     of another PD than the SRQ's fails with IBV_WC_REM_ACCESS_ERR and
 *     writes nothing.  Each error ends its QP pair, so each has its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum {
	MTU_BYTES = 1024,
	MSG = 10000,		/* ten packets at path MTU 1024 */
	NPAIRS = 3,		/* good, wrong domain, wrong PD */
	PSN = 0x4242,
	QUIET_MS = 200,
};

/* What the target tells the initiator. */
struct target_info {
	uint32_t tgt_qpn[NPAIRS];
	uint32_t srqn_a1, srqn_a2, srqn_b;
	struct h_rbuf mem;		/* in the SRQs' PD */
	struct h_rbuf other;		/* in another PD */
	union ibv_gid gid;
};

struct init_info {
	uint32_t ini_qpn[NPAIRS];
	union ibv_gid gid;
};

static void to_init(struct ibv_qp *qp, unsigned access)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = H_PORT,
		.qp_access_flags = access,
	};

	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

static void set_av(struct ibv_qp_attr *a, const union ibv_gid *gid)
{
	a->ah_attr.is_global = 1;
	a->ah_attr.grh.dgid = *gid;
	a->ah_attr.grh.sgid_index = H_GID_INDEX;
	a->ah_attr.grh.hop_limit = 64;
	a->ah_attr.port_num = H_PORT;
}

/* To RTR, then RTS, with the masks ibv_xsrq_pingpong uses: an initiator
 * has no receive side, a target no send side, so each sets half of RC's. */
static void xrc_connect(struct ibv_qp *qp, bool target, uint32_t dqpn,
			const union ibv_gid *gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = dqpn,
		.rq_psn = PSN,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 1,
	};
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
		  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;

	if (target)
		rtr |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	else
		rts |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		       IBV_QP_MAX_QP_RD_ATOMIC;
	set_av(&a, gid);
	H_OK(ibv_modify_qp(qp, &a, rtr));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	a.sq_psn = PSN;
	H_OK(ibv_modify_qp(qp, &a, rts));
}

static struct ibv_srq *xrc_srq(struct h_proc *p, struct ibv_xrcd *xrcd,
			       struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.xrcd = xrcd,
		.cq = cq,
		.pd = pd,
	};
	struct ibv_srq *srq = ibv_create_srq_ex(p->ctx, &a);

	H_CHECK(srq);
	return srq;
}

static uint32_t srq_num(struct ibv_srq *srq)
{
	uint32_t n = 0;

	H_OK(ibv_get_srq_num(srq, &n));
	H_CHECK(n != 0);
	return n;
}

static void srq_post(struct ibv_srq *srq, struct h_buf *b, size_t off,
		     size_t len, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)b->mem + off, (uint32_t)len,
			       b->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	H_OK(ibv_post_srq_recv(srq, &wr, &bad));
}

static struct ibv_xrcd *open_xrcd(struct h_proc *p, int fd)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = O_CREAT,
	};
	struct ibv_xrcd *x = ibv_open_xrcd(p->ctx, &a);

	H_CHECK(x);
	return x;
}

/* The verbs on their own, before any traffic. */
static void check_verbs(struct h_proc *p, struct ibv_xrcd *xrcd, int fd,
			struct ibv_qp *tgt)
{
	struct ibv_xrcd *again = open_xrcd(p, fd);
	struct ibv_srq_init_attr basic_attr = {
		.attr = { .max_wr = 4, .max_sge = 1 },
	};
	struct ibv_srq *basic = ibv_create_srq(p->pd, &basic_attr);
	struct ibv_qp_init_attr_ex no_domain = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
	};
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
	uint32_t n;

	H_CHECK(again == xrcd);		/* one domain per inode */
	H_OK(ibv_close_xrcd(again));	/* still open once */
	H_CHECK(basic);
	H_EQ(ibv_get_srq_num(basic, &n), EINVAL);
	H_OK(ibv_destroy_srq(basic));
	H_EQ(ibv_post_recv(tgt, &wr, &bad), EINVAL);
	H_CHECK(bad == &wr);
	H_CHECK(!ibv_create_qp_ex(p->ctx, &no_domain));
	H_EQ(errno, EINVAL);
}

static void target(struct h_proc *p)
{
	char path[] = "/tmp/uroce-xrc-XXXXXX";
	int fd = mkstemp(path);
	struct ibv_pd *other_pd = ibv_alloc_pd(p->ctx);
	struct ibv_cq *cq1 = ibv_create_cq(p->ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cq2 = ibv_create_cq(p->ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(p->ctx, 16, NULL, NULL, 0);
	struct ibv_xrcd *xa, *xb;
	struct ibv_srq *a1, *a2, *b;
	struct ibv_qp *tgt[NPAIRS];
	struct h_buf rx, mem, other;
	uint8_t want[MSG], init_mem[MSG];
	struct target_info ti = { 0 };
	struct init_info ii;
	struct ibv_wc wc;
	const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

	H_CHECK(fd >= 0);
	unlink(path);
	H_CHECK(other_pd && cq1 && cq2 && cqb);
	xa = open_xrcd(p, fd);
	xb = open_xrcd(p, -1);		/* anonymous: a domain of its own */
	H_CHECK(xa != xb);
	a1 = xrc_srq(p, xa, p->pd, cq1);
	a2 = xrc_srq(p, xa, p->pd, cq2);
	b = xrc_srq(p, xb, p->pd, cqb);
	H_EQ(ibv_close_xrcd(xa), EBUSY);	/* SRQs are in it */
	for (int i = 0; i < NPAIRS; i++) {
		struct ibv_qp_init_attr_ex a = {
			.qp_type = IBV_QPT_XRC_RECV,
			.comp_mask = IBV_QP_INIT_ATTR_XRCD,
			.xrcd = xa,
		};

		tgt[i] = ibv_create_qp_ex(p->ctx, &a);
		H_CHECK(tgt[i]);
		to_init(tgt[i], remote);
		ti.tgt_qpn[i] = tgt[i]->qp_num;
	}
	check_verbs(p, xa, fd, tgt[0]);

	h_buf_alloc(p, &rx, 2 * MSG, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &mem, MSG, remote);
	h_buf_alloc_pd(other_pd, &other, MSG, remote);
	memset(rx.mem, 0, rx.len);
	h_fill(mem.mem, MSG, 5);
	memcpy(init_mem, mem.mem, MSG);
	memset(other.mem, 0xAB, MSG);
	srq_post(a1, &rx, 0, MSG, 11);
	srq_post(a2, &rx, MSG, MSG, 22);
	srq_post(b, &rx, 0, MSG, 33);

	ti.srqn_a1 = srq_num(a1);
	ti.srqn_a2 = srq_num(a2);
	ti.srqn_b = srq_num(b);
	H_CHECK(ti.srqn_a1 != ti.srqn_a2);
	ti.mem = (struct h_rbuf){ (uintptr_t)mem.mem, mem.mr->rkey, MSG };
	ti.other = (struct h_rbuf){ (uintptr_t)other.mem, other.mr->rkey, MSG };
	ti.gid = p->gid;
	h_send(p->sock[0], &ti, sizeof(ti));
	h_recv(p->sock[0], &ii, sizeof(ii));
	for (int i = 0; i < NPAIRS; i++)
		xrc_connect(tgt[i], true, ii.ini_qpn[i], &ii.gid);
	h_sync(p->sock[0]);

	/* the SENDs, each on its SRQ's CQ */
	h_fill(want, MSG, 1);
	if (!h_poll(cq1, &wc, H_WC_TIMEOUT_MS))
		h_fail("no receive on SRQ a1");
	H_EQ(wc.status, IBV_WC_SUCCESS);
	H_EQ(wc.wr_id, 11);
	H_EQ(wc.opcode, IBV_WC_RECV);
	H_EQ(wc.byte_len, MSG);
	h_expect_mem(rx.mem, want, MSG, "SEND to SRQ a1");
	h_fill(want, 100, 2);
	if (!h_poll(cq2, &wc, H_WC_TIMEOUT_MS))
		h_fail("no receive on SRQ a2");
	H_EQ(wc.status, IBV_WC_SUCCESS);
	H_EQ(wc.wr_id, 22);
	H_EQ(wc.byte_len, 100);
	H_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	H_EQ(be32toh(wc.imm_data), 0xC0FFEE);
	h_expect_mem(rx.mem + MSG, want, 100, "SEND with IMM to SRQ a2");

	/* the one-sided operations, once the initiator has them completed */
	h_sync(p->sock[0]);
	h_sync(p->sock[0]);
	h_fill(want, MSG, 3);
	memcpy(want + MSG / 2, init_mem + MSG / 2, MSG / 2);
	{
		uint64_t v;

		memcpy(&v, want + MSG / 2, sizeof(v));
		v += 7;		/* the FETCH_ADD */
		memcpy(want + MSG / 2, &v, sizeof(v));
	}
	h_expect_mem(mem.mem, want, MSG, "WRITE, READ, FETCH_ADD memory");
	/* then the errors */
	h_sync(p->sock[0]);
	h_expect_no_wc(cqb, QUIET_MS);	/* the wrong domain got nothing */
	h_expect_no_wc(cq1, 0);
	for (int i = 0; i < MSG; i++)
		if (other.mem[i] != 0xAB)
			h_fail("wrong-PD WRITE changed byte %d", i);
	H_EQ(h_qp_state(tgt[1]), IBV_QPS_ERR);
	H_EQ(h_qp_state(tgt[2]), IBV_QPS_ERR);

	for (int i = 0; i < NPAIRS; i++)
		H_OK(ibv_destroy_qp(tgt[i]));
	H_OK(ibv_destroy_srq(a1));
	H_OK(ibv_destroy_srq(a2));
	H_OK(ibv_destroy_srq(b));
	H_OK(ibv_close_xrcd(xa));
	H_OK(ibv_close_xrcd(xb));
	close(fd);
	h_buf_free(&rx);
	h_buf_free(&mem);
	h_buf_free(&other);
	H_OK(ibv_destroy_cq(cq1));
	H_OK(ibv_destroy_cq(cq2));
	H_OK(ibv_destroy_cq(cqb));
	H_OK(ibv_dealloc_pd(other_pd));
}

static void post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t srqn,
		 struct h_buf *b, size_t off, size_t len, uint64_t wr_id,
		 const struct h_rbuf *r, size_t roff)
{
	struct ibv_sge sge = { (uintptr_t)b->mem + off, (uint32_t)len,
			       b->mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(0xC0FFEE),
	}, *bad;

	wr.qp_type.xrc.remote_srqn = srqn;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = r->addr + roff;
		wr.wr.atomic.rkey = r->rkey;
		wr.wr.atomic.compare_add = 7;
	} else if (r) {
		wr.wr.rdma.remote_addr = r->addr + roff;
		wr.wr.rdma.rkey = r->rkey;
	}
	H_OK(ibv_post_send(qp, &wr, &bad));
}

static void expect(struct ibv_cq *cq, uint64_t wr_id,
		   enum ibv_wc_status status)
{
	struct ibv_wc wc;

	if (!h_poll(cq, &wc, H_WC_TIMEOUT_MS))
		h_fail("no completion for wr %llu", (unsigned long long)wr_id);
	if (wc.status != status)
		h_fail("wr %llu: %s, want %s", (unsigned long long)wr_id,
		       ibv_wc_status_str(wc.status), ibv_wc_status_str(status));
	H_EQ(wc.wr_id, wr_id);
}

static void initiator(struct h_proc *p)
{
	struct ibv_cq *cq = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
	struct ibv_qp *ini[NPAIRS];
	struct target_info ti;
	struct init_info ii = { .gid = p->gid };
	struct h_buf b;
	uint8_t want[MSG], orig[8];
	uint64_t v;
	struct ibv_recv_wr rwr = { .wr_id = 1 }, *rbad;

	H_CHECK(cq);
	for (int i = 0; i < NPAIRS; i++) {
		struct ibv_qp_init_attr_ex a = {
			.qp_type = IBV_QPT_XRC_SEND,
			.comp_mask = IBV_QP_INIT_ATTR_PD,
			.pd = p->pd,
			.send_cq = cq,
			.cap = { .max_send_wr = 16, .max_send_sge = 1 },
		};

		ini[i] = ibv_create_qp_ex(p->ctx, &a);
		H_CHECK(ini[i]);
		to_init(ini[i], 0);
		ii.ini_qpn[i] = ini[i]->qp_num;
	}
	H_EQ(ibv_post_recv(ini[0], &rwr, &rbad), EINVAL);	/* no RQ */
	h_buf_alloc(p, &b, 2 * MSG, IBV_ACCESS_LOCAL_WRITE);
	h_recv(p->sock[0], &ti, sizeof(ti));
	h_send(p->sock[0], &ii, sizeof(ii));
	for (int i = 0; i < NPAIRS; i++)
		xrc_connect(ini[i], false, ti.tgt_qpn[i], &ti.gid);
	h_sync(p->sock[0]);

	/* one QP, two SRQs */
	h_fill(b.mem, MSG, 1);
	post(ini[0], IBV_WR_SEND, ti.srqn_a1, &b, 0, MSG, 1, NULL, 0);
	expect(cq, 1, IBV_WC_SUCCESS);
	h_fill(b.mem, 100, 2);
	post(ini[0], IBV_WR_SEND_WITH_IMM, ti.srqn_a2, &b, 0, 100, 2, NULL, 0);
	expect(cq, 2, IBV_WC_SUCCESS);
	h_sync(p->sock[0]);

	/* WRITE the first half, READ the second, add 7 to its first word */
	h_fill(b.mem, MSG, 3);
	post(ini[0], IBV_WR_RDMA_WRITE, ti.srqn_a1, &b, 0, MSG / 2, 3,
	     &ti.mem, 0);
	expect(cq, 3, IBV_WC_SUCCESS);
	post(ini[0], IBV_WR_RDMA_READ, ti.srqn_a2, &b, MSG, MSG / 2, 4,
	     &ti.mem, MSG / 2);
	expect(cq, 4, IBV_WC_SUCCESS);
	h_fill(want, MSG, 5);		/* the target's initial bytes */
	h_expect_mem(b.mem + MSG, want + MSG / 2, MSG / 2, "READ");
	post(ini[0], IBV_WR_ATOMIC_FETCH_AND_ADD, ti.srqn_a1, &b, 0, 8, 5,
	     &ti.mem, MSG / 2);
	expect(cq, 5, IBV_WC_SUCCESS);
	memcpy(orig, b.mem, 8);
	memcpy(&v, want + MSG / 2, 8);
	h_expect_mem(orig, &v, 8, "FETCH_ADD's original value");
	h_sync(p->sock[0]);

	/* an SRQ of another domain; a key of another PD than the SRQ's */
	post(ini[1], IBV_WR_SEND, ti.srqn_b, &b, 0, 100, 6, NULL, 0);
	expect(cq, 6, IBV_WC_REM_INV_REQ_ERR);
	post(ini[2], IBV_WR_RDMA_WRITE, ti.srqn_a1, &b, 0, 100, 7,
	     &ti.other, 0);
	expect(cq, 7, IBV_WC_REM_ACCESS_ERR);
	H_EQ(h_qp_state(ini[0]), IBV_QPS_RTS);
	h_sync(p->sock[0]);

	for (int i = 0; i < NPAIRS; i++)
		H_OK(ibv_destroy_qp(ini[i]));
	h_buf_free(&b);
	H_OK(ibv_destroy_cq(cq));
}

int main(void)
{
	struct h_test t = {
		.name = "xrc.basic",
		.nroles = 2,
		.role = { initiator, target },
		.deadline_s = 30,
	};

	return h_main(&t);
}
