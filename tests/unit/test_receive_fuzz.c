/*
 * Hostile input to the receive path (transport/receive.c and everything it
 * dispatches to): random datagrams, and well-formed RC requests with a valid
 * ICRC but random opcodes, PSNs, pads, lengths, R_Keys and addresses aimed
 * around the edges of a registered region.  Nothing may crash (the suite
 * also runs under ASan/UBSan), nothing may be written outside the region
 * that allows remote writes, and every rejected packet is counted.  The same
 * again at an XRC target QP, whose requests also name an SRQ: one of its
 * domain, one of another domain, or any number.
 *
 * The packets go through the link's ICRC check into uroce_recv_batch() of a
 * real device opened in this process, under rx_lock as the engine would
 * deliver them, from the
 * address the QP is connected to.  Deterministic: a fixed seed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "net/icrc.h"
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

enum {
	PAGE = 4096,
	ROUNDS = 40000,
	BATCH = 4,		/* short: the QP often fails and is revived */
	GUARD = 0xA5,
	MTU = 1024,
	PEER_QPN = 0x123,
	PEER_PORT = 0xC123,
};

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	/* splitmix64 */
	uint64_t z = (rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;	/* the QP under attack: RC, then XRC target */
static uint8_t service = IB_OPC_RC;
/* XRC: the target's domain and its SRQ, another domain's SRQ */
static struct ibv_xrcd *xrcd, *xrcd_other;
static struct ibv_srq *srq, *srq_other;
static uint32_t srqn, srqn_other;
static struct ibv_mr *mr, *mr_ro, *mr_recv;
static uint8_t *mem, *mem_ro, *mem_recv;	/* 3 pages: guard, MR, guard */

static void connect_qp(void)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};

	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = PEER_QPN;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = 0;	/* ::ffff:127.0.0.1 */
	a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
	a.ah_attr.grh.dgid.raw[12] = 127;
	a.ah_attr.grh.dgid.raw[15] = 1;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
				       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 1;
	a.retry_cnt = 1;
	a.rnr_retry = 1;
	a.max_rd_atomic = 4;
	/* an XRC target QP sends nothing but responses */
	assert_int_equal(ibv_modify_qp(qp, &a, qp->qp_type == IBV_QPT_XRC_RECV ?
				       IBV_QP_STATE | IBV_QP_TIMEOUT |
				       IBV_QP_SQ_PSN :
				       IBV_QP_STATE | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
			 0);
}

static void post_recvs(void)
{
	for (int i = 0; i < 8; i++) {
		struct ibv_sge sge = { (uintptr_t)mem_recv + PAGE, PAGE,
				       mr_recv->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		if (srq ? ibv_post_srq_recv(srq, &wr, &bad)
			: ibv_post_recv(qp, &wr, &bad))
			break;	/* full */
	}
}

/* A hostile QP takes itself to ERR: bring it back, as an application would
 * after the error completion. */
static void revive(void)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	struct ibv_wc wc[16];

	while (ibv_poll_cq(cq, 16, wc) > 0)
		;
	if (to_uqp(qp)->state != IBV_QPS_ERR)
		return;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	connect_qp();
	post_recvs();
}

static uint8_t *alloc3(void)
{
	uint8_t *p = aligned_alloc(PAGE, 3 * PAGE);

	assert_non_null(p);
	memset(p, GUARD, 3 * PAGE);
	return p;
}

static int setup(void **state)
{
	struct ibv_device **devs;

	(void)state;
	devs = ibv_get_device_list(NULL);
	assert_non_null(devs);
	assert_non_null(devs[0]);
	ctx = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	assert_non_null(ctx);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	assert_non_null(pd);
	assert_non_null(cq);
	mem = alloc3();
	mem_ro = alloc3();
	mem_recv = alloc3();
	mr = ibv_reg_mr(pd, mem + PAGE, PAGE, IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			IBV_ACCESS_REMOTE_ATOMIC);
	mr_ro = ibv_reg_mr(pd, mem_ro + PAGE, PAGE, IBV_ACCESS_REMOTE_READ);
	mr_recv = ibv_reg_mr(pd, mem_recv + PAGE, PAGE, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(mr);
	assert_non_null(mr_ro);
	assert_non_null(mr_recv);

	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);
	connect_qp();
	post_recvs();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(ibv_destroy_qp(qp), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dereg_mr(mr_ro), 0);
	assert_int_equal(ibv_dereg_mr(mr_recv), 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	assert_int_equal(ibv_close_device(ctx), 0);
	free(mem);
	free(mem_ro);
	free(mem_recv);
	return 0;
}

/* An address around the region's edges, or anywhere. */
static uint64_t aim(uint64_t base)
{
	switch (rnd() % 4) {
	case 0:
		return base + rnd() % PAGE;
	case 1:
		return base - 64 + rnd() % 128;
	case 2:
		return base + PAGE - 64 + rnd() % 128;
	default:
		return rnd();
	}
}

/* A request to our QP with a valid ICRC and hostile contents. */
static uint32_t build(uint8_t *buf, uint32_t psn_base)
{
	static const uint8_t ops[] = {
		IB_OP_SEND_FIRST, IB_OP_SEND_MIDDLE, IB_OP_SEND_LAST,
		IB_OP_SEND_LAST_IMM, IB_OP_SEND_ONLY, IB_OP_SEND_ONLY_IMM,
		IB_OP_WRITE_FIRST, IB_OP_WRITE_MIDDLE, IB_OP_WRITE_LAST,
		IB_OP_WRITE_LAST_IMM, IB_OP_WRITE_ONLY, IB_OP_WRITE_ONLY_IMM,
		IB_OP_READ_REQ, IB_OP_CMP_SWAP, IB_OP_FETCH_ADD, IB_OP_ACK,
		IB_OP_READ_RESP_ONLY, IB_OP_ATOMIC_ACK, 0x1F,
	};
	uint8_t op = service | ops[rnd() % sizeof(ops)];
	const struct ib_opcode_info *info = &ib_opcodes[op];
	uint32_t hdr = info->mask ? info->hdr_len : BTH_LEN;
	uint32_t paylen = rnd() % 3 ? rnd() % (MTU + 8) : MTU;
	uint32_t len, pad;
	uint32_t key = rnd() % 4 ? (rnd() % 2 ? mr->rkey : mr_ro->rkey)
				 : (uint32_t)rnd();
	uint64_t base = key == mr_ro->rkey ? (uintptr_t)mem_ro + PAGE
					   : (uintptr_t)mem + PAGE;

	if (!(info->mask & OPM_PAYLOAD))
		paylen = rnd() % 8 ? 0 : rnd() % 16;
	/* mostly the pad a requester would use, so that deeper checks run */
	pad = rnd() % 8 ? (4 - (paylen & 3)) & 3 : rnd() % 4;
	len = hdr + paylen + pad + ICRC_LEN;
	for (uint32_t i = 0; i < len; i++)
		buf[i] = (uint8_t)rnd();
	bth_init(buf, op, (int)(rnd() & 1), (int)pad, 0xFFFF, qp->qp_num,
		 (int)(rnd() & 1),
		 rnd() % 2 ? psn_base : psn_base + (uint32_t)(rnd() % 8) - 4);
	if (info->mask & OPM_XRCETH) {
		static const uint32_t *const names[] = { &srqn, &srqn, &srqn_other };
		uint32_t n = rnd() % 8 ? *names[rnd() % 3] : (uint32_t)rnd();

		put_be32(buf + BTH_LEN, n);
	}
	if (info->reth)
		reth_set(buf + info->reth, aim(base), key,
			 rnd() % 2 ? (uint32_t)(rnd() % (3 * PAGE))
				   : (uint32_t)rnd());
	if (info->atmeth) {
		uint64_t va = aim(base) & (rnd() % 4 ? ~7ull : ~0ull);

		atmeth_set(buf + info->atmeth, va, key, rnd(), rnd());
	}
	return len;
}

static void deliver(struct uroce_rxpkt *pkts, int n)
{
	struct uroce_nic *nic = to_uctx(ctx)->nic;

	pthread_mutex_lock(&nic->rx_lock);
	n = (int)uroce_link_rx_verify(nic, pkts, (unsigned)n);
	uroce_recv_batch(nic, pkts, n);
	uroce_flush_acks(nic);
	pthread_mutex_unlock(&nic->rx_lock);
}

static void seal(struct uroce_rxpkt *rx)
{
	struct iovec iov = { rx->data, rx->len - ICRC_LEN };
	struct uroce_icrc_ip ip = {
		.family = AF_INET,
		.src = &rx->src.in4.sin_addr,
		.dst = &rx->dst.in4.sin_addr,
		.sport = ntohs(rx->src.in4.sin_port),
		.dport = ntohs(rx->dst.in4.sin_port),
		.df = true,
	};

	uroce_icrc_put(rx->data + rx->len - ICRC_LEN,
		       uroce_icrc_compute(&ip, &iov, 1));
}

static void check_guards(void)
{
	for (int i = 0; i < PAGE; i++) {
		assert_int_equal(mem[i], GUARD);
		assert_int_equal(mem[2 * PAGE + i], GUARD);
		assert_int_equal(mem_ro[i], GUARD);
		assert_int_equal(mem_ro[PAGE + i], GUARD);	/* read only */
		assert_int_equal(mem_ro[2 * PAGE + i], GUARD);
		assert_int_equal(mem_recv[i], GUARD);
		assert_int_equal(mem_recv[2 * PAGE + i], GUARD);
	}
}

static void test_hostile_requests(void **state)
{
	static uint8_t bufs[BATCH][MTU + 256];
	struct uroce_rxpkt pkts[BATCH];
	struct uroce_nic *nic = to_uctx(ctx)->nic;
	unsigned long bad_before = atomic_load(&nic->stats.rx_malformed) +
				   atomic_load(&nic->stats.rx_bad_icrc);

	int i;

	(void)state;
	for (int round = 0; round < ROUNDS / BATCH; round++) {
		for (int i = 0; i < BATCH; i++) {
			struct uroce_rxpkt *rx = &pkts[i];

			memset(rx, 0, sizeof(*rx));
			rx->data = bufs[i];
			rx->src.in4.sin_family = AF_INET;
			rx->src.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			rx->src.in4.sin_port = htons(PEER_PORT);
			rx->dst.in4.sin_family = AF_INET;
			rx->dst.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			rx->dst.in4.sin_port = htons(4791);
			switch (rnd() % 8) {
			case 0:		/* garbage of any length */
				rx->len = rnd() % sizeof(bufs[i]);
				for (uint32_t k = 0; k < rx->len; k++)
					bufs[i][k] = (uint8_t)rnd();
				break;
			case 1:		/* a good packet, one bit flipped */
				rx->len = build(bufs[i], to_uqp(qp)->resp.psn);
				seal(rx);
				bufs[i][rnd() % rx->len] ^= 1 << (rnd() % 8);
				break;
			default:
				rx->len = build(bufs[i], to_uqp(qp)->resp.psn);
				seal(rx);
				break;
			}
		}
		deliver(pkts, BATCH);
		revive();
	}
	check_guards();
	/* the deep paths ran: some WRITE or atomic landed in the region */
	for (i = 0; i < PAGE && mem[PAGE + i] == GUARD; i++)
		;
	assert_true(i < PAGE);
	assert_true(atomic_load(&nic->stats.rx_malformed) +
		    atomic_load(&nic->stats.rx_bad_icrc) > bad_before);
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.xrcd = x,
		.cq = cq,
		.pd = pd,
	};
	struct ibv_srq *s = ibv_create_srq_ex(ctx, &a);

	assert_non_null(s);
	return s;
}

static void test_hostile_xrc_requests(void **state)
{
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
	};
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
	};
	struct ibv_qp *rc = qp;

	xrcd = ibv_open_xrcd(ctx, &xa);
	xrcd_other = ibv_open_xrcd(ctx, &xa);
	assert_non_null(xrcd);
	assert_non_null(xrcd_other);
	srq = xrc_srq(xrcd);
	srq_other = xrc_srq(xrcd_other);
	assert_int_equal(ibv_get_srq_num(srq, &srqn), 0);
	assert_int_equal(ibv_get_srq_num(srq_other, &srqn_other), 0);
	qa.xrcd = xrcd;
	qp = ibv_create_qp_ex(ctx, &qa);
	assert_non_null(qp);
	service = IB_OPC_XRC;
	connect_qp();
	post_recvs();
	/* so that writes landing show the deep paths ran for XRC too */
	memset(mem + PAGE, GUARD, PAGE);

	test_hostile_requests(state);

	assert_int_equal(ibv_destroy_qp(qp), 0);
	qp = rc;
	service = IB_OPC_RC;
	assert_int_equal(ibv_destroy_srq(srq), 0);
	assert_int_equal(ibv_destroy_srq(srq_other), 0);
	srq = srq_other = NULL;
	assert_int_equal(ibv_close_xrcd(xrcd), 0);
	assert_int_equal(ibv_close_xrcd(xrcd_other), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_requests),
		cmocka_unit_test(test_hostile_xrc_requests),
	};

	/* nothing from the environment may change what is tested */
	unsetenv("UROCE_CONFIG");
	unsetenv("UROCE_FAULTS");
	unsetenv("UROCE_MTU");
	unsetenv("UROCE_ADDRS");
	return cmocka_run_group_tests(tests, setup, teardown);
}
