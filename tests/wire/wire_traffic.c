/*
 * Traffic for the wire tests: one side of a requester/responder pair that
 * makes uroce send every opcode it emits (RC, UC and UD), and, on the
 * requester side, prints what it posted as JSON lines on stdout for
 * wire_check.py to compare with the decoded capture.
 *
 *   wire_traffic requester|responder <control socket path> all|loss
 *
 * The two processes meet on a filesystem AF_UNIX socket (the responder
 * listens), which works across network namespaces.  Each uses GID index 0,
 * so UROCE_ADDRS picks the address family and the addresses.
 *
 * "all": on QP pair A, SEND and SEND with immediate (0 bytes, 1 packet with
 * pad, 3 packets), WRITE and WRITE with immediate (1 and 3 packets), READ (1
 * and 3 response packets), compare-and-swap and fetch-and-add; then a SEND
 * the responder has no receive for yet (RNR NAK); then on QP pair B a WRITE
 * with a bad R_Key (remote access NAK); then on UC pair C the SENDs and
 * WRITEs of pair A (the PSNs wrap around too); then UD SENDs and SENDs with
 * immediate of 0, 1, 101 and MTU bytes from UD QP D to two UD QPs, one with
 * the Q_Key the work request names and one with the Q_Key of D itself, which
 * a work request Q_Key with the high bit set stands for.
 * "loss": multi-packet WRITEs, SENDs and READs, run with the responder
 * dropping received packets (UROCE_FAULTS), which brings sequence NAKs.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "harness.h"

enum {
	MTU = 1024,
	BIG = 2 * MTU + 512,	/* FIRST, MIDDLE, LAST */
	SMALL = 101,		/* ONLY with 3 pad bytes */
	LOSS_LEN = 8 * MTU,
	LOSS_ROUNDS = 3,
	BUF = 64 * 1024,
	ATOMIC_OFF = 32 * 1024,	/* 8-byte aligned */
	RESULT_OFF = 40 * 1024,
	REQ_PSN = 0xFFFFF0,	/* the PSNs of pair A wrap around */
	UC_PSN = 0xFFFFF8,	/* and those of pair C */
	UD_PSN = 0xFFFFFC,	/* and those of UD QP D */
	RESP_PSN = 0x123456,
	RNR_TIMER = 18,		/* 5.12 ms: a handful of RNR NAKs */
	RNR_DELAY_MS = 30,
	LOSS_TIMEOUT = 10,	/* 4 ms local ACK timeout */
	CONNECT_MS = 30000,
	DEADLINE_S = 60,
	GRH = 40,		/* a UD receive starts with the GRH area */
	HOP_LIMIT = 64,		/* the netns traffic crosses a router */
	QKEY_NAMED = 0x11223344,	/* of the UD QP the WR names it for */
	QKEY_OWN = 0x0A0B0C0D,	/* of D, and of the QP it reaches so */
};

/* The high bit stands for the sending QP's own Q_Key (IBTA 10.2.5); the low
 * bits are the other receiver's Q_Key, so that a sender that only cleared
 * the bit would reach the wrong QP, which drops the datagram. */
#define QKEY_USE_OWN (0x80000000u | QKEY_NAMED)

#define ATOMIC_INIT 0x1111222233334444ull
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct pair {
	struct h_ep ep;
	struct h_buf buf;
	struct h_rbuf peer;
};

static int control_socket(bool listener, const char *path)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	uint64_t end = h_now_ns() + CONNECT_MS * 1000000ull;

	if (fd < 0 || strlen(path) >= sizeof(un.sun_path))
		h_fail("control socket %s: %s", path, strerror(errno));
	strcpy(un.sun_path, path);
	if (listener) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int c;

		unlink(path);
		if (bind(fd, (struct sockaddr *)&un, sizeof(un)) || listen(fd, 1))
			h_fail("listen on %s: %s", path, strerror(errno));
		if (poll(&pfd, 1, CONNECT_MS) != 1)
			h_fail("no requester connected to %s", path);
		c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			h_fail("accept: %s", strerror(errno));
		close(fd);
		unlink(path);
		return c;
	}
	/* the responder may not be listening yet */
	while (connect(fd, (struct sockaddr *)&un, sizeof(un))) {
		if (h_now_ns() > end)
			h_fail("connect to %s: %s", path, strerror(errno));
		h_sleep_ms(10);
	}
	return fd;
}

static void open_device(struct h_proc *p)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device *dev = NULL;

	for (int i = 0; list && list[i] && !dev; i++)
		if (!strcmp(ibv_get_device_name(list[i]), H_DEVICE_NAME))
			dev = list[i];
	if (!dev)
		h_fail("no device %s (LD_LIBRARY_PATH=%s)", H_DEVICE_NAME,
		       getenv("LD_LIBRARY_PATH") ?: "");
	p->ctx = ibv_open_device(dev);
	if (!p->ctx)
		h_fail("ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	H_OK(ibv_query_gid(p->ctx, H_PORT, 0, &p->gid));
	p->pd = ibv_alloc_pd(p->ctx);
	if (!p->pd)
		h_fail("ibv_alloc_pd: %s", strerror(errno));
}

static void post_recvs(struct pair *x, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)x->buf.mem,
				       .length = BUF, .lkey = x->buf.mr->lkey };

		h_post_recv(&x->ep, 1000 + i, &sge, 1);
	}
}

/* A UC or UD QP, which h_ep_create (RC only) does not make, in INIT, with
 * CQs and capacities as h_ep_create gives.  qkey is for UD. */
static void ep_create(struct h_proc *p, struct h_ep *ep,
		      const struct h_qp_cfg *c, enum ibv_qp_type type,
		      uint32_t qkey)
{
	struct ibv_qp_init_attr ia = { .qp_type = type, .cap = c->cap,
				       .sq_sig_all = c->sq_sig_all };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = H_PORT };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	memset(ep, 0, sizeof(*ep));
	ep->cfg = *c;
	ep->scq = ibv_create_cq(p->ctx, (int)c->cap.max_send_wr, NULL, NULL, 0);
	ep->rcq = ibv_create_cq(p->ctx, (int)c->cap.max_recv_wr, NULL, NULL, 0);
	if (!ep->scq || !ep->rcq)
		h_fail("ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ep->scq;
	ia.recv_cq = ep->rcq;
	ep->qp = ibv_create_qp(p->pd, &ia);
	if (!ep->qp)
		h_fail("ibv_create_qp: %s", strerror(errno));
	if (type == IBV_QPT_UD) {
		a.qkey = qkey;
		mask |= IBV_QP_QKEY;
	} else {
		/* UC takes no remote READ or atomic access */
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	H_OK(ibv_modify_qp(ep->qp, &a, mask));
}

/* What the other process needs to reach a QP. */
struct qp_info {
	uint32_t qpn, psn;
	union ibv_gid gid;
};

/* To RTS; for UC, peer is the other QP.  Neither has RC's ACK timers and
 * limits, and a UD QP has no peer (each WR's AH names one). */
static void ep_ready(struct h_ep *ep, const struct qp_info *peer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask = IBV_QP_STATE;

	if (peer) {
		a.path_mtu = ep->cfg.mtu;
		a.dest_qp_num = peer->qpn;
		a.rq_psn = peer->psn;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer->gid;
		a.ah_attr.grh.sgid_index = H_GID_INDEX;
		a.ah_attr.grh.hop_limit = HOP_LIMIT;
		a.ah_attr.port_num = H_PORT;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
	}
	H_OK(ibv_modify_qp(ep->qp, &a, mask));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = ep->cfg.psn;
	H_OK(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
}

/* h_ep_connect for UC: both sides are in RTS on return. */
static void uc_connect(struct h_proc *p, struct h_ep *ep, int sock)
{
	struct qp_info me = { .qpn = ep->qp->qp_num, .psn = ep->cfg.psn,
			      .gid = p->gid }, peer;

	h_send(sock, &me, sizeof(me));
	h_recv(sock, &peer, sizeof(peer));
	ep->peer_qpn = peer.qpn;
	ep_ready(ep, &peer);
	h_sync(sock);
}

/* nrecv receives are posted before the requester can send anything. */
static void pair_open(struct h_proc *p, struct pair *x, int sock,
		      enum ibv_qp_type type, uint32_t psn, uint8_t timeout,
		      unsigned nrecv)
{
	struct h_qp_cfg c = h_qp_defaults(p);

	c.mtu = h_mtu_enum(MTU);
	c.psn = psn;
	c.min_rnr_timer = RNR_TIMER;
	c.timeout = timeout;
	c.sq_sig_all = 1;
	if (type == IBV_QPT_RC)
		h_ep_create(p, &x->ep, &c);
	else
		ep_create(p, &x->ep, &c, type, 0);
	h_buf_alloc(p, &x->buf, BUF, c.access);
	*(uint64_t *)(x->buf.mem + ATOMIC_OFF) = ATOMIC_INIT;
	post_recvs(x, nrecv);
	h_send_rbuf(sock, &x->buf);
	x->peer = h_recv_rbuf(sock);
	if (type == IBV_QPT_RC)
		h_ep_connect(p, &x->ep, sock);
	else
		uc_connect(p, &x->ep, sock);
}

static void pair_close(struct pair *x)
{
	h_ep_destroy(&x->ep);
	h_buf_free(&x->buf);
}

static const char *op_name(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND: return "SEND";
	case IBV_WR_SEND_WITH_IMM: return "SEND_IMM";
	case IBV_WR_RDMA_WRITE: return "WRITE";
	case IBV_WR_RDMA_WRITE_WITH_IMM: return "WRITE_IMM";
	case IBV_WR_RDMA_READ: return "READ";
	case IBV_WR_ATOMIC_CMP_AND_SWP: return "CMP_SWAP";
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return "FETCH_ADD";
	default: return "?";
	}
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
	default: return IBV_WC_SEND;
	}
}

/* The requester's QP ep and its peer; qkey is ep's, for UD. */
static void print_pair(const char *name, const struct h_ep *ep, unsigned mtu,
		       uint32_t qkey)
{
	enum ibv_qp_type t = ep->qp->qp_type;

	printf("{\"kind\": \"pair\", \"pair\": \"%s\", \"type\": \"%s\", "
	       "\"req_qpn\": %u, \"resp_qpn\": %u, \"psn\": %u, \"mtu\": %u, "
	       "\"min_rnr_timer\": %u, \"qkey\": %u}\n", name,
	       t == IBV_QPT_UD ? "UD" : t == IBV_QPT_UC ? "UC" : "RC",
	       ep->qp->qp_num, ep->peer_qpn, ep->cfg.psn, mtu, RNR_TIMER, qkey);
}

/* One work request, posted, completed and reported. */
struct req {
	enum ibv_wr_opcode op;
	uint32_t len;
	uint32_t imm;			/* host order */
	uint32_t rkey_xor;		/* spoils the R_Key */
	enum ibv_wc_status status;
	bool rnr;			/* the responder has no receive yet */
};

static void run_req(const char *name, struct pair *x, const struct req *r,
		    int sock)
{
	static uint64_t wr_id = 1;
	bool atomic = r->op == IBV_WR_ATOMIC_CMP_AND_SWP ||
		      r->op == IBV_WR_ATOMIC_FETCH_AND_ADD;
	uint64_t va = x->peer.addr + (atomic ? ATOMIC_OFF : 3);
	uint32_t rkey = x->peer.rkey ^ r->rkey_xor;
	struct ibv_sge sge = {
		.addr = (uintptr_t)x->buf.mem + (atomic ? RESULT_OFF : 0),
		.length = atomic ? 8 : r->len,
		.lkey = x->buf.mr->lkey,
	};
	uint64_t compare = ATOMIC_INIT, swap = 0x5555666677778888ull;
	uint64_t orig = 0;

	if (r->op == IBV_WR_ATOMIC_FETCH_AND_ADD)
		compare = 5;		/* the addend */
	if (r->rnr)
		h_sync(sock);		/* the responder starts its delay */
	if (atomic)
		h_post_atomic(&x->ep, wr_id, r->op, &sge, 0, va, rkey, compare,
			      swap);
	else
		h_post_rdma(&x->ep, wr_id, r->op, &sge, r->len ? 1 : 0, 0, va,
			    rkey, htonl(r->imm));
	H_EXPECT_SEND(&x->ep, .wr_id = wr_id, .status = r->status,
		      .opcode = wc_opcode(r->op),
		      .byte_len = r->op == IBV_WR_RDMA_READ ? r->len :
				  atomic ? 8 : 0);
	if (atomic)
		memcpy(&orig, x->buf.mem + RESULT_OFF, 8);
	wr_id++;
	printf("{\"kind\": \"wr\", \"pair\": \"%s\", \"op\": \"%s\", "
	       "\"len\": %u, \"imm\": %u, \"va\": %llu, \"rkey\": %u, "
	       "\"compare_add\": %llu, \"swap\": %llu, \"orig\": %llu, "
	       "\"status\": \"%s\", \"rnr\": %s}\n", name, op_name(r->op),
	       atomic ? 8 : r->len, r->imm, (unsigned long long)va, rkey,
	       (unsigned long long)compare,
	       (unsigned long long)(r->op == IBV_WR_ATOMIC_CMP_AND_SWP ? swap : 0),
	       (unsigned long long)orig, ibv_wc_status_str(r->status),
	       r->rnr ? "true" : "false");
	fflush(stdout);
}

/* Receives the responder needs for reqs, in order. */
static unsigned recvs_needed(const struct req *reqs, unsigned n)
{
	unsigned k = 0;

	for (unsigned i = 0; i < n; i++)
		k += reqs[i].op == IBV_WR_SEND ||
		     reqs[i].op == IBV_WR_SEND_WITH_IMM ||
		     reqs[i].op == IBV_WR_RDMA_WRITE_WITH_IMM;
	return k;
}

static const struct req all_reqs[] = {
	{ .op = IBV_WR_SEND, .len = 0 },
	{ .op = IBV_WR_SEND, .len = SMALL },
	{ .op = IBV_WR_SEND, .len = BIG },
	{ .op = IBV_WR_SEND_WITH_IMM, .len = SMALL, .imm = 0x01020304 },
	{ .op = IBV_WR_SEND_WITH_IMM, .len = BIG, .imm = 0xA0B0C0D0 },
	{ .op = IBV_WR_RDMA_WRITE, .len = SMALL },
	{ .op = IBV_WR_RDMA_WRITE, .len = BIG },
	{ .op = IBV_WR_RDMA_WRITE_WITH_IMM, .len = SMALL, .imm = 0x11223344 },
	{ .op = IBV_WR_RDMA_WRITE_WITH_IMM, .len = BIG, .imm = 0xFFEEDDCC },
	{ .op = IBV_WR_RDMA_READ, .len = SMALL },
	{ .op = IBV_WR_RDMA_READ, .len = BIG },
	{ .op = IBV_WR_ATOMIC_CMP_AND_SWP, .len = 8 },
	{ .op = IBV_WR_ATOMIC_FETCH_AND_ADD, .len = 8 },
};

static const struct req rnr_req = {
	.op = IBV_WR_SEND, .len = 64, .rnr = true,
};
static const struct req bad_rkey_req = {
	.op = IBV_WR_RDMA_WRITE, .len = SMALL, .rkey_xor = 0x80,
	.status = IBV_WC_REM_ACCESS_ERR,
};

static const struct req loss_reqs[] = {
	{ .op = IBV_WR_RDMA_WRITE, .len = LOSS_LEN },
	{ .op = IBV_WR_SEND, .len = LOSS_LEN },
	{ .op = IBV_WR_RDMA_READ, .len = LOSS_LEN },
};

/* The requests of all_reqs that UC has. */
static bool uc_runs(enum ibv_wr_opcode op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
	       op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

/* One UD SEND, to the receiving QP with Q_Key QKEY_NAMED (named in the WR)
 * or to the one with QKEY_OWN (through QKEY_USE_OWN). */
struct ud_req {
	enum ibv_wr_opcode op;
	uint32_t len;
	bool mtu;			/* len is the port's MTU */
	uint32_t imm;			/* host order */
	bool own_qkey;
};

static const struct ud_req ud_reqs[] = {
	{ .op = IBV_WR_SEND, .len = 0 },
	{ .op = IBV_WR_SEND_WITH_IMM, .len = 0, .imm = 0x0D0E0A0D,
	  .own_qkey = true },
	{ .op = IBV_WR_SEND, .len = 1, .own_qkey = true },
	{ .op = IBV_WR_SEND_WITH_IMM, .len = 1, .imm = 0x01020304 },
	{ .op = IBV_WR_SEND, .len = SMALL },
	{ .op = IBV_WR_SEND_WITH_IMM, .len = SMALL, .imm = 0xA0B0C0D0,
	  .own_qkey = true },
	{ .op = IBV_WR_SEND, .mtu = true, .own_qkey = true },
	{ .op = IBV_WR_SEND_WITH_IMM, .mtu = true, .imm = 0xFFEEDDCC },
};

/* The largest UD message: one packet at the port's active MTU. */
static unsigned ud_mtu(struct h_proc *p)
{
	struct ibv_port_attr pa;

	H_OK(ibv_query_port(p->ctx, H_PORT, &pa));
	return h_mtu_bytes(pa.active_mtu);
}

/* The receiving side's two UD QPs, indexed by ud_req.own_qkey. */
struct ud_peers {
	uint32_t qpn[2];
	union ibv_gid gid;
};

static void ud_requester(struct h_proc *p, int sock)
{
	const unsigned mtu = ud_mtu(p);
	struct h_qp_cfg c = h_qp_defaults(p);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = H_PORT };
	struct ud_peers peers;
	struct h_ep ep;
	struct h_buf buf;
	struct ibv_ah *ah;

	c.psn = UD_PSN;
	c.sq_sig_all = 1;
	ep_create(p, &ep, &c, IBV_QPT_UD, QKEY_OWN);
	ep_ready(&ep, NULL);
	h_buf_alloc(p, &buf, mtu, IBV_ACCESS_LOCAL_WRITE);
	/* the receiver's QPs are ready for everything when its QPNs come */
	h_send(sock, &ep.qp->qp_num, sizeof(ep.qp->qp_num));
	h_recv(sock, &peers, sizeof(peers));
	aa.grh.dgid = peers.gid;
	aa.grh.sgid_index = H_GID_INDEX;
	aa.grh.hop_limit = HOP_LIMIT;
	ah = ibv_create_ah(p->pd, &aa);
	if (!ah)
		h_fail("ibv_create_ah: %s", strerror(errno));
	ep.peer_qpn = peers.qpn[0];	/* for the record; WRs name theirs */
	print_pair("D", &ep, mtu, QKEY_OWN);
	for (unsigned i = 0; i < ARRAY_LEN(ud_reqs); i++) {
		const struct ud_req *r = &ud_reqs[i];
		uint32_t len = r->mtu ? mtu : r->len;
		struct ibv_sge sge = { .addr = (uintptr_t)buf.mem,
				       .length = len, .lkey = buf.mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = i, .sg_list = &sge, .num_sge = len ? 1 : 0,
			.opcode = r->op, .imm_data = htonl(r->imm),
			.wr.ud = {
				.ah = ah, .remote_qpn = peers.qpn[r->own_qkey],
				.remote_qkey = r->own_qkey ? QKEY_USE_OWN
							   : QKEY_NAMED,
			},
		}, *bad;

		H_OK(ibv_post_send(ep.qp, &wr, &bad));
		H_EXPECT_SEND(&ep, .wr_id = i, .opcode = IBV_WC_SEND);
		printf("{\"kind\": \"wr\", \"pair\": \"D\", \"op\": \"%s\", "
		       "\"len\": %u, \"imm\": %u, \"dest_qpn\": %u, "
		       "\"remote_qkey\": %u, \"status\": \"success\", "
		       "\"rnr\": false}\n", op_name(r->op), len, r->imm,
		       wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey);
		fflush(stdout);
	}
	h_sync(sock);
	H_OK(ibv_destroy_ah(ah));
	h_ep_destroy(&ep);
	h_buf_free(&buf);
}

static void ud_responder(struct h_proc *p, int sock)
{
	const unsigned mtu = ud_mtu(p);
	const size_t slot = GRH + mtu;
	struct h_qp_cfg c = h_qp_defaults(p);
	struct ud_peers me = { .gid = p->gid };
	struct h_ep ep[2];
	struct h_buf buf;
	uint32_t sender;

	h_buf_alloc(p, &buf, ARRAY_LEN(ud_reqs) * slot, IBV_ACCESS_LOCAL_WRITE);
	for (int k = 0; k < 2; k++) {
		ep_create(p, &ep[k], &c, IBV_QPT_UD, k ? QKEY_OWN : QKEY_NAMED);
		ep_ready(&ep[k], NULL);
		me.qpn[k] = ep[k].qp->qp_num;
	}
	/* receive i, for ud_reqs[i], has room for the GRH and the MTU */
	for (unsigned i = 0; i < ARRAY_LEN(ud_reqs); i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf.mem + i * slot,
				       .length = slot, .lkey = buf.mr->lkey };

		h_post_recv(&ep[ud_reqs[i].own_qkey], i, &sge, 1);
	}
	h_recv(sock, &sender, sizeof(sender));
	h_send(sock, &me, sizeof(me));
	ep[0].peer_qpn = ep[1].peer_qpn = sender;	/* the src_qp */
	for (unsigned i = 0; i < ARRAY_LEN(ud_reqs); i++) {
		const struct ud_req *r = &ud_reqs[i];

		H_EXPECT_RECV(&ep[r->own_qkey], .wr_id = i,
			      .opcode = IBV_WC_RECV,
			      .byte_len = GRH + (r->mtu ? mtu : r->len),
			      .with_imm = r->op == IBV_WR_SEND_WITH_IMM,
			      .imm = htonl(r->imm));
	}
	h_sync(sock);
	for (int k = 0; k < 2; k++)
		h_ep_destroy(&ep[k]);
	h_buf_free(&buf);
}

static void requester(struct h_proc *p, int sock, bool loss)
{
	struct pair a, b, c;

	pair_open(p, &a, sock, IBV_QPT_RC, REQ_PSN, loss ? LOSS_TIMEOUT : 14,
		  0);
	print_pair("A", &a.ep, MTU, 0);
	if (loss) {
		for (unsigned k = 0; k < LOSS_ROUNDS; k++)
			for (unsigned i = 0; i < ARRAY_LEN(loss_reqs); i++)
				run_req("A", &a, &loss_reqs[i], sock);
		h_sync(sock);
		pair_close(&a);
		return;
	}
	for (unsigned i = 0; i < ARRAY_LEN(all_reqs); i++)
		run_req("A", &a, &all_reqs[i], sock);
	run_req("A", &a, &rnr_req, sock);
	h_sync(sock);

	/* a remote access error ends pair B, so it comes last */
	pair_open(p, &b, sock, IBV_QPT_RC, REQ_PSN - 0x100, 14, 0);
	print_pair("B", &b.ep, MTU, 0);
	run_req("B", &b, &bad_rkey_req, sock);
	h_sync(sock);
	pair_close(&b);
	pair_close(&a);

	pair_open(p, &c, sock, IBV_QPT_UC, UC_PSN, 0, 0);
	print_pair("C", &c.ep, MTU, 0);
	for (unsigned i = 0; i < ARRAY_LEN(all_reqs); i++)
		if (uc_runs(all_reqs[i].op))
			run_req("C", &c, &all_reqs[i], sock);
	h_sync(sock);
	pair_close(&c);

	ud_requester(p, sock);
}

static void expect_recvs(struct pair *x, unsigned n)
{
	struct ibv_wc wc;

	for (unsigned i = 0; i < n; i++) {
		if (!h_poll(x->ep.rcq, &wc, H_WC_TIMEOUT_MS))
			h_fail("receive %u of %u did not complete", i + 1, n);
		H_EQ(wc.status, IBV_WC_SUCCESS);
	}
}

static void responder(struct h_proc *p, int sock, bool loss)
{
	const unsigned nloss = LOSS_ROUNDS * recvs_needed(loss_reqs,
							  ARRAY_LEN(loss_reqs));
	const unsigned nall = recvs_needed(all_reqs, ARRAY_LEN(all_reqs));
	struct pair a, b, c;

	pair_open(p, &a, sock, IBV_QPT_RC, RESP_PSN, 14, loss ? nloss : nall);
	if (loss) {
		expect_recvs(&a, nloss);
		h_sync(sock);
		pair_close(&a);
		return;
	}
	expect_recvs(&a, nall);
	/* RNR: the SEND arrives before its receive */
	h_sync(sock);
	h_sleep_ms(RNR_DELAY_MS);
	post_recvs(&a, 1);
	expect_recvs(&a, 1);
	h_sync(sock);

	pair_open(p, &b, sock, IBV_QPT_RC, RESP_PSN + 0x100, 14, 0);
	h_sync(sock);
	pair_close(&b);
	pair_close(&a);

	/* every receive all_reqs needs is for a SEND or WRITE, which UC runs */
	pair_open(p, &c, sock, IBV_QPT_UC, RESP_PSN, 0, nall);
	expect_recvs(&c, nall);
	h_sync(sock);
	pair_close(&c);

	ud_responder(p, sock);
}

int main(int argc, char **argv)
{
	struct h_proc p = { .role = 0 };
	bool is_req, loss;
	int sock;

	if (argc != 4 ||
	    (strcmp(argv[1], "requester") && strcmp(argv[1], "responder")) ||
	    (strcmp(argv[3], "all") && strcmp(argv[3], "loss"))) {
		fprintf(stderr, "usage: %s requester|responder <socket> all|loss\n",
			argv[0]);
		return 2;
	}
	is_req = !strcmp(argv[1], "requester");
	loss = !strcmp(argv[3], "loss");
	p.role = is_req ? 0 : 1;
	alarm(DEADLINE_S);
	sock = control_socket(!is_req, argv[2]);
	open_device(&p);
	if (is_req)
		requester(&p, sock, loss);
	else
		responder(&p, sock, loss);
	H_OK(ibv_dealloc_pd(p.pd));
	H_OK(ibv_close_device(p.ctx));
	close(sock);
	return 0;
}
