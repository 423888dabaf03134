/*
 * The receive path (transport/receive.c and the responder and completer it
 * dispatches to) against arbitrary datagrams, at QPs of every type (RC, RC
 * on an SRQ, UC, UD, XRC target and initiator) in every state a packet can
 * meet (INIT, RTR, RTS, SQD, ERR), with send WQEs outstanding when the
 * input posts them and timers run when it asks.
 *
 * The input is a list of commands:
 *   0, 1  packet: QP, flags, length (2 bytes), bytes.  The flags make the
 *         harness fix what a fuzzer cannot guess: the ICRC, the destination
 *         QPN, the PSN the QP expects, the transport bits of the opcode, an
 *         R_Key and VA (taken as an offset) naming one of the MRs or memory
 *         windows (type 1, and type 2 bound through the RC QP in RTS), the
 *         key a SEND with Invalidate names, the SRQ an XRCETH names; and
 *         choose IPv6 and a source that is not the QP's peer.
 *   2     post a send WQE: QP, opcode, length
 *   3     run the timers of the QPs touched so far, the given number of
 *         16.8 ms steps ahead
 * Each input starts from the same state: the QPs it touched are reset and
 * brought back, the type 2 window bound again if it was invalidated, the
 * CQ drained, the memory rewritten.
 *
 * Oracles: the sanitizers; the guard pages around every registered region
 * and the read-only region never change; everything sent is read, and what
 * it reads of the regions lies inside the registered pages.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "net/icrc.h"
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

enum {
	PAGE = 4096,
	GUARD = 0xA5,
	FILL = 0x5A,
	PEER_QPN = 0x123,
	QKEY = 0x11111111,
	RQ_DEPTH = 4,
	SQ_DEPTH = 8,
	BATCH = 8,
	MAX_PKT = UROCE_RX_BUF,
};

/* ---- memory: three regions, each one registered page between guards ---- */

enum { MEM_RW, MEM_RO, MEM_LOCAL, NMEM };

static uint8_t *mem[NMEM];
static struct ibv_mr *mr[NMEM];
/* two windows on the read-write page: type 1 on its first half, type 2 on
 * its second */
static struct ibv_mw *mw1, *mw2;
enum { NKEYS = NMEM + 2, HALF = PAGE / 2 };

static uint8_t *page_of(int m)
{
	return mem[m] + PAGE;
}

static void mem_reset(void)
{
	for (int m = 0; m < NMEM; m++) {
		memset(mem[m], GUARD, PAGE);
		memset(mem[m] + PAGE, FILL, PAGE);
		memset(mem[m] + 2 * PAGE, GUARD, PAGE);
	}
}

static void mem_check(void)
{
	static uint8_t guard[PAGE], fill[PAGE];

	if (!guard[0]) {
		memset(guard, GUARD, PAGE);
		memset(fill, FILL, PAGE);
	}
	for (int m = 0; m < NMEM; m++) {
		FUZZ_CHECK(!memcmp(mem[m], guard, PAGE));
		FUZZ_CHECK(!memcmp(mem[m] + 2 * PAGE, guard, PAGE));
	}
	FUZZ_CHECK(!memcmp(page_of(MEM_RO), fill, PAGE));
}

/* What a send reads of the regions must be inside a registered page. */
static void check_tx(const struct uroce_txpkt *pkt)
{
	for (unsigned k = 0; k < pkt->niov; k++) {
		uintptr_t b = (uintptr_t)pkt->iov[k].iov_base;
		uintptr_t e = b + pkt->iov[k].iov_len;

		for (int m = 0; m < NMEM; m++) {
			uintptr_t lo = (uintptr_t)mem[m], hi = lo + 3 * PAGE;

			if (e <= lo || b >= hi || b == e)
				continue;
			FUZZ_CHECK(b >= lo + PAGE && e <= lo + 2 * PAGE);
		}
	}
}

/* ---- QPs: every kind in every state ---- */

enum kind { K_RC, K_RC_SRQ, K_UC, K_UD, K_XRC_TGT, K_XRC_INI, NKINDS };

static const enum ibv_qp_state states[] = {
	IBV_QPS_RTS, IBV_QPS_RTR, IBV_QPS_SQD, IBV_QPS_INIT, IBV_QPS_ERR,
};
enum { NSTATES = ARRAY_SIZE(states), NQP = NKINDS * NSTATES };

static struct {
	struct ibv_qp *qp;
	enum kind kind;
	enum ibv_qp_state want;
	bool dirty;
} qps[NQP];

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_ah *ah;
static struct ibv_srq *srq_rc;
/* XRC: the target QPs' domain and its SRQ, another domain's SRQ */
static struct ibv_xrcd *xrcd, *xrcd_other;
static struct ibv_srq *srq_xrc, *srq_xrc_other;
static uint32_t srqn[3];	/* XRCETH values the harness can name */

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	FUZZ_CHECK(ibv_modify_qp(qp, a, mask | IBV_QP_STATE) == 0);
}

static void post_recvs(struct ibv_qp *qp, struct ibv_srq *srq)
{
	for (int i = 0; i < 64; i++) {
		struct ibv_sge sge = { (uintptr_t)page_of(MEM_LOCAL), PAGE,
				       mr[MEM_LOCAL]->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		if (srq ? ibv_post_srq_recv(srq, &wr, &bad)
			: ibv_post_recv(qp, &wr, &bad))
			break;	/* full */
	}
}

/* From RESET to the slot's state, its receive queue full. */
static void bring_up(int i)
{
	struct ibv_qp *qp = qps[i].qp;
	enum kind k = qps[i].kind;
	enum ibv_qp_state want = qps[i].want;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qkey = QKEY,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC };

	modify(qp, &a, IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			       (k == K_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
	if (k == K_RC || k == K_UC || k == K_UD)
		post_recvs(qp, NULL);
	if (want == IBV_QPS_INIT)
		return;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = PEER_QPN;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
	a.ah_attr.grh.dgid.raw[12] = 127;
	a.ah_attr.grh.dgid.raw[15] = 1;
	switch (k) {
	case K_UD:
		modify(qp, &a, 0);
		break;
	case K_UC:
	case K_XRC_INI:
		modify(qp, &a, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN);
		break;
	default:
		modify(qp, &a, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER);
		break;
	}
	if (want == IBV_QPS_RTR)
		return;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x10;
	a.timeout = 1;
	a.retry_cnt = 1;
	a.rnr_retry = 1;
	a.max_rd_atomic = 4;
	switch (k) {
	case K_UD:
	case K_UC:
		modify(qp, &a, IBV_QP_SQ_PSN);
		break;
	case K_XRC_TGT:
		modify(qp, &a, IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
		break;
	default:
		modify(qp, &a, IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_MAX_QP_RD_ATOMIC);
		break;
	}
	if (want == IBV_QPS_SQD || want == IBV_QPS_ERR) {
		a.qp_state = want;
		modify(qp, &a, 0);
	}
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = RQ_DEPTH, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.xrcd = x,
		.cq = cq,
		.pd = pd,
	};
	struct ibv_srq *s = ibv_create_srq_ex(fuzz_ctx, &a);

	FUZZ_CHECK(s);
	return s;
}

static struct ibv_qp *create_qp(enum kind k)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq, .recv_cq = cq, .pd = pd,
		.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = RQ_DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD,
	};

	switch (k) {
	case K_RC:
		a.qp_type = IBV_QPT_RC;
		break;
	case K_RC_SRQ:
		a.qp_type = IBV_QPT_RC;
		a.srq = srq_rc;
		break;
	case K_UC:
		a.qp_type = IBV_QPT_UC;
		break;
	case K_UD:
		a.qp_type = IBV_QPT_UD;
		break;
	case K_XRC_TGT:
		a = (struct ibv_qp_init_attr_ex){
			.qp_type = IBV_QPT_XRC_RECV,
			.comp_mask = IBV_QP_INIT_ATTR_XRCD,
			.xrcd = xrcd,
		};
		break;
	default:
		a.qp_type = IBV_QPT_XRC_SEND;
		a.recv_cq = NULL;
		a.cap.max_recv_wr = 0;
		break;
	}
	struct ibv_qp *qp = ibv_create_qp_ex(fuzz_ctx, &a);

	FUZZ_CHECK(qp);
	return qp;
}

static void drain_cq(void)
{
	struct ibv_wc wc[32];

	for (int i = 0; i < 1000 && ibv_poll_cq(cq, 32, wc) > 0; i++)
		;
}

static const struct ibv_mw_bind_info window_info = {
	.length = HALF,
	.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			   IBV_ACCESS_REMOTE_ATOMIC,
};

/* Binds through the RC QP in RTS (slot 0) and waits for the completion. */
static void bind_done(void)
{
	struct ibv_wc wc;
	int n = 0;

	for (int i = 0; i < 1000 && n == 0; i++)
		n = ibv_poll_cq(cq, 1, &wc);
	FUZZ_CHECK(n == 1 && wc.status == IBV_WC_SUCCESS &&
		   wc.opcode == IBV_WC_BIND_MW);
}

static void bind_type1(void)
{
	struct ibv_mw_bind b = { .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = window_info };

	b.bind_info.mr = mr[MEM_RW];
	b.bind_info.addr = (uintptr_t)page_of(MEM_RW);
	FUZZ_CHECK(ibv_bind_mw(qps[0].qp, mw1, &b) == 0);
	bind_done();
}

static void bind_type2(void)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	wr.bind_mw.bind_info = window_info;
	wr.bind_mw.bind_info.mr = mr[MEM_RW];
	wr.bind_mw.bind_info.addr = (uintptr_t)page_of(MEM_RW) + HALF;
	FUZZ_CHECK(ibv_post_send(qps[0].qp, &wr, &bad) == 0);
	bind_done();
	mw2->rkey = wr.bind_mw.rkey;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
	};
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = RQ_DEPTH,
						  .max_sge = 1 } };
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	static const int access[NMEM] = {
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
			UROCE_ACCESS_FLUSH_GLOBAL |
			UROCE_ACCESS_FLUSH_PERSISTENT | IBV_ACCESS_MW_BIND,
		IBV_ACCESS_REMOTE_READ,
		IBV_ACCESS_LOCAL_WRITE,
	};

	(void)argc;
	(void)argv;
	fuzz_open_device(check_tx);
	pd = ibv_alloc_pd(fuzz_ctx);
	cq = ibv_create_cq(fuzz_ctx, 4096, NULL, NULL, 0);
	FUZZ_CHECK(pd && cq);
	for (int m = 0; m < NMEM; m++) {
		mem[m] = aligned_alloc(PAGE, 3 * PAGE);
		FUZZ_CHECK(mem[m]);
		mr[m] = ibv_reg_mr(pd, page_of(m), PAGE, access[m]);
		FUZZ_CHECK(mr[m]);
	}
	mem_reset();
	aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
	aa.grh.dgid.raw[12] = 127;
	aa.grh.dgid.raw[15] = 1;
	ah = ibv_create_ah(pd, &aa);
	srq_rc = ibv_create_srq(pd, &sa);
	xrcd = ibv_open_xrcd(fuzz_ctx, &xa);
	xrcd_other = ibv_open_xrcd(fuzz_ctx, &xa);
	FUZZ_CHECK(ah && srq_rc && xrcd && xrcd_other);
	srq_xrc = xrc_srq(xrcd);
	srq_xrc_other = xrc_srq(xrcd_other);
	FUZZ_CHECK(ibv_get_srq_num(srq_xrc, &srqn[0]) == 0);
	FUZZ_CHECK(ibv_get_srq_num(srq_xrc_other, &srqn[1]) == 0);
	srqn[2] = 0x00FFFFFF;
	post_recvs(NULL, srq_rc);
	post_recvs(NULL, srq_xrc);
	post_recvs(NULL, srq_xrc_other);
	for (int i = 0; i < NQP; i++) {
		qps[i].kind = i / NSTATES;
		qps[i].want = states[i % NSTATES];
		qps[i].qp = create_qp(qps[i].kind);
		bring_up(i);
	}
	FUZZ_CHECK(qps[0].kind == K_RC && qps[0].want == IBV_QPS_RTS);
	mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	FUZZ_CHECK(mw1 && mw2);
	drain_cq();
	bind_type1();
	bind_type2();
	return 0;
}

/* ---- one input ---- */

enum {
	F_ICRC = 1 << 0,	/* seal with a valid ICRC */
	F_QPN = 1 << 1,		/* DestQP := the chosen QP */
	F_PSN = 1 << 2,		/* PSN := the one the QP expects */
	F_IPV6 = 1 << 3,
	F_STRANGER = 1 << 4,	/* not from the QP's peer */
	F_KEY = 1 << 5,		/* R_Key and VA name one of the regions */
	F_XRCETH = 1 << 6,	/* the XRCETH names one of the SRQs */
	F_SERVICE = 1 << 7,	/* opcode in the QP's transport */
};

static uint8_t service_of(enum kind k)
{
	switch (k) {
	case K_UC:
		return IB_OPC_UC;
	case K_UD:
		return IB_OPC_UD;
	case K_XRC_TGT:
	case K_XRC_INI:
		return IB_OPC_XRC;
	default:
		return IB_OPC_RC;
	}
}

/* Keys by index: the MRs', then the windows'. */
static uint32_t key_of(unsigned k)
{
	return k < NMEM ? mr[k]->rkey : k == NMEM ? mw1->rkey : mw2->rkey;
}

static uintptr_t base_of(unsigned k)
{
	return k < NMEM ? (uintptr_t)page_of(k)
			: (uintptr_t)page_of(MEM_RW) + (k - NMEM) * HALF;
}

/* The R_Key field picks a key; the VA field, read as a signed offset from
 * where the key's memory starts, is rewritten into its address (which
 * differs from run to run). */
static void fix_key(uint8_t *h, bool atomic)
{
	unsigned k = (atomic ? atmeth_rkey(h) : reth_rkey(h)) % NKEYS;

	put_be64(h, base_of(k) + get_be64(h));
	put_be32(h + 8, key_of(k));
}

static uint8_t bufs[BATCH][MAX_PKT];
static struct uroce_rxpkt batch[BATCH];
static int nbatch;

static void flush_batch(void)
{
	if (nbatch)
		fuzz_deliver(batch, nbatch);
	nbatch = 0;
}

static void cmd_packet(struct fuzz_in *in)
{
	int i = fuzz_u8(in) % NQP;
	uint8_t flags = fuzz_u8(in);
	uint32_t len = fuzz_u16(in) % (MAX_PKT + 1);
	struct uroce_qp *uqp = to_uqp(qps[i].qp);
	const struct ib_opcode_info *info;
	uint8_t *b;

	/* the PSN expected after the packets before it */
	if (flags & F_PSN)
		flush_batch();
	b = bufs[nbatch];
	if (len > in->left)
		len = in->left;
	fuzz_bytes(in, b, len);
	qps[i].dirty = true;
	if (len >= BTH_LEN) {
		if (flags & F_SERVICE)
			b[0] = service_of(qps[i].kind) | (b[0] & 0x1F);
		info = &ib_opcodes[b[0]];
		if (flags & F_QPN)
			put_be32(b + 4, (get_be32(b + 4) & ~QPN_MASK) |
						uqp->ibqpx.qp_base.qp_num);
		if (flags & F_PSN)
			put_be32(b + 8, (get_be32(b + 8) & ~PSN_MASK) |
						(info->mask & OPM_REQ ?
							 uqp->resp.psn :
							 uqp->comp.psn));
		if ((flags & F_KEY) && info->reth &&
		    len >= info->reth + RETH_LEN)
			fix_key(b + info->reth, false);
		if ((flags & F_KEY) && info->atmeth &&
		    len >= info->atmeth + ATMETH_LEN)
			fix_key(b + info->atmeth, true);
		if ((flags & F_KEY) && info->ieth && len >= info->ieth + IETH_LEN)
			put_be32(b + info->ieth,
				 key_of(get_be32(b + info->ieth) % NKEYS));
		if ((flags & F_XRCETH) && (info->mask & OPM_XRCETH) &&
		    len >= BTH_LEN + XRCETH_LEN)
			put_be32(b + BTH_LEN,
				 srqn[get_be32(b + BTH_LEN) % ARRAY_SIZE(srqn)]);
	}
	fuzz_rx_init(&batch[nbatch], b, len, flags & F_IPV6,
		     flags & F_STRANGER, flags & F_ICRC);
	if (++nbatch == BATCH)
		flush_batch();
}

static void cmd_post(struct fuzz_in *in)
{
	static const enum ibv_wr_opcode ops[] = {
		IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
		IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
		IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
	};
	int i = fuzz_u8(in) % NQP;
	enum ibv_wr_opcode op = ops[fuzz_u8(in) % ARRAY_SIZE(ops)];
	uint32_t len = fuzz_u16(in) % (PAGE + 1);
	struct ibv_sge sge = { (uintptr_t)page_of(MEM_LOCAL), len,
			       mr[MEM_LOCAL]->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	flush_batch();
	qps[i].dirty = true;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		sge.length = 8;
		wr.wr.atomic.remote_addr = 0x1000;
		wr.wr.atomic.rkey = 0x77;
	} else {
		wr.wr.rdma.remote_addr = 0x1000;
		wr.wr.rdma.rkey = 0x77;
	}
	if (qps[i].kind == K_UD) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = PEER_QPN;
		wr.wr.ud.remote_qkey = QKEY;
	}
	if (qps[i].kind == K_XRC_INI)
		wr.qp_type.xrc.remote_srqn = 0x42;
	/* refused in some states and for some QP types: that is fine */
	(void)ibv_post_send(qps[i].qp, &wr, &bad);
}

static void cmd_timers(struct fuzz_in *in)
{
	uint64_t now = uroce_now_ns() + ((uint64_t)fuzz_u8(in) << 24);

	flush_batch();
	/* a QP the input has not touched has no timer armed */
	for (int i = 0; i < NQP; i++) {
		struct uroce_qp *qp = to_uqp(qps[i].qp);

		if (!qps[i].dirty)
			continue;
		pthread_mutex_lock(&qp->sq_lock);
		uroce_comp_timer(qp, now);
		pthread_mutex_unlock(&qp->sq_lock);
	}
}

static void reset_all(void)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	drain_cq();
	for (int i = 0; i < NQP; i++) {
		if (!qps[i].dirty)
			continue;
		modify(qps[i].qp, &a, 0);
		bring_up(i);
		qps[i].dirty = false;
	}
	/* what the input's packets took off the SRQs */
	post_recvs(NULL, srq_rc);
	post_recvs(NULL, srq_xrc);
	post_recvs(NULL, srq_xrc_other);
	drain_cq();
	/* a SEND with Invalidate unbinds it */
	if (!container_of(mw2, struct uroce_mw, ibmw)->bound)
		bind_type2();
	mem_reset();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };

	for (int cmds = 0; in.left && cmds < 64; cmds++) {
		switch (fuzz_u8(&in) % 4) {
		case 0:
		case 1:
			cmd_packet(&in);
			break;
		case 2:
			cmd_post(&in);
			break;
		default:
			cmd_timers(&in);
			break;
		}
	}
	flush_batch();
	drain_cq();
	mem_check();
	reset_all();
	return 0;
}
