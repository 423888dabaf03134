/*
 * RC traffic for the wire tests: one side of a requester/responder pair that
 * makes uroce send every opcode it emits, and, on the requester side, prints
 * what it posted as JSON lines on stdout for wire_check.py to compare with
 * the decoded capture.
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
 * with a bad R_Key (remote access NAK).
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
	RESP_PSN = 0x123456,
	RNR_TIMER = 18,		/* 5.12 ms: a handful of RNR NAKs */
	RNR_DELAY_MS = 30,
	LOSS_TIMEOUT = 10,	/* 4 ms local ACK timeout */
	CONNECT_MS = 30000,
	DEADLINE_S = 60,
};

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

/* nrecv receives are posted before the requester can send anything. */
static void pair_open(struct h_proc *p, struct pair *x, int sock,
		      uint32_t psn, uint8_t timeout, unsigned nrecv)
{
	struct h_qp_cfg c = h_qp_defaults(p);

	c.mtu = h_mtu_enum(MTU);
	c.psn = psn;
	c.min_rnr_timer = RNR_TIMER;
	c.timeout = timeout;
	c.sq_sig_all = 1;
	h_ep_create(p, &x->ep, &c);
	h_buf_alloc(p, &x->buf, BUF, c.access);
	*(uint64_t *)(x->buf.mem + ATOMIC_OFF) = ATOMIC_INIT;
	post_recvs(x, nrecv);
	h_send_rbuf(sock, &x->buf);
	x->peer = h_recv_rbuf(sock);
	h_ep_connect(p, &x->ep, sock);
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

static void print_pair(const char *name, const struct pair *x)
{
	printf("{\"kind\": \"pair\", \"pair\": \"%s\", \"req_qpn\": %u, "
	       "\"resp_qpn\": %u, \"psn\": %u, \"mtu\": %u, "
	       "\"min_rnr_timer\": %u}\n", name, x->ep.qp->qp_num,
	       x->ep.peer_qpn, x->ep.cfg.psn, MTU, RNR_TIMER);
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

static void requester(struct h_proc *p, int sock, bool loss)
{
	struct pair a, b;

	pair_open(p, &a, sock, REQ_PSN, loss ? LOSS_TIMEOUT : 14, 0);
	print_pair("A", &a);
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
	pair_open(p, &b, sock, REQ_PSN - 0x100, 14, 0);
	print_pair("B", &b);
	run_req("B", &b, &bad_rkey_req, sock);
	h_sync(sock);
	pair_close(&b);
	pair_close(&a);
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
	struct pair a, b;

	pair_open(p, &a, sock, RESP_PSN, 14, loss ? nloss : nall);
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

	pair_open(p, &b, sock, RESP_PSN + 0x100, 14, 0);
	h_sync(sock);
	pair_close(&b);
	pair_close(&a);
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
