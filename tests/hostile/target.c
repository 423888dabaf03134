/*
 * The two uroce processes of a hostile test: the target, which does what
 * the attacker's commands say through the public verbs API, and the
 * legitimate peer, which passes traffic to the target at the end.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <rdma/rdma_cma.h>

#include "harness.h"
#include "hostile.h"
#include "target.h"

enum {
	LEGIT_LEN = 4096,
	LEGIT_SEED = 0x1e617,
	RECV_LEN = 256,
	CQ_DEPTH = 64,
	QPN_INDICES = 1 << 14,	/* QPNs a process cycles through (README) */
	CM_DRAIN_MAX = 100000,
	CM_WAIT_MS = 10000,
};

struct t_mr {
	uint8_t *area;		/* guard, region, guard */
	size_t len;
	struct ibv_mr *mr;	/* NULL once deregistered */
};

struct t_qp {
	struct ibv_qp *qp;
	struct ibv_cq *cq;	/* sends and receives */
};

static struct h_proc *tp;
static struct ibv_pd *pd2;	/* a second protection domain */
static struct t_mr mrs[MAX_MRS];
static unsigned nmrs;
static struct t_qp qps[MAX_QPS];
static unsigned nqps;
static struct ibv_mw *mws[MAX_MWS];
static unsigned nmws;
static struct h_buf recv_buf;
static struct rdma_event_channel *cm_chan;
static struct rdma_cm_id *cm_listener;
static uint16_t cm_port;

/* ---- memory ------------------------------------------------------------- */

static uint8_t *guarded_area(size_t len, uint64_t seed)
{
	uint8_t *a = NULL;

	if (posix_memalign((void **)&a, 4096, len + 2 * GUARD_LEN))
		h_fail("posix_memalign: out of memory");
	memset(a, GUARD_BYTE, len + 2 * GUARD_LEN);
	h_fill(a + GUARD_LEN, len, seed);
	return a;
}

static uint32_t new_mr(const struct cmd *c, struct reply *r)
{
	struct t_mr *m = &mrs[nmrs];

	H_CHECK(nmrs < MAX_MRS);
	m->len = c->a;
	m->area = guarded_area(m->len, c->x);
	m->mr = ibv_reg_mr(c->c ? pd2 : tp->pd, m->area + GUARD_LEN, m->len,
			   (int)c->b);
	if (!m->mr)
		h_fail("ibv_reg_mr(access 0x%x): %s", c->b, strerror(errno));
	r->rkey = m->mr->rkey;
	r->va = (uintptr_t)m->area + GUARD_LEN;
	return nmrs++;
}

/* ibv_rereg_mr; a new translation leaves the old area behind as an MR
 * entry of its own (without registration), for the attacker to dump. */
static void rereg_mr(const struct cmd *c, struct reply *r)
{
	struct t_mr *m = &mrs[c->a];
	uint8_t *area = m->area;

	if (c->b & IBV_REREG_MR_CHANGE_TRANSLATION) {
		H_CHECK(nmrs < MAX_MRS);
		mrs[nmrs] = (struct t_mr){ .area = m->area, .len = m->len };
		r->id = nmrs++;
		area = m->area = guarded_area(m->len, 0);
	}
	H_EQ(ibv_rereg_mr(m->mr, (int)c->b, tp->pd, area + GUARD_LEN, m->len,
			  (int)c->c), 0);
	r->rkey = m->mr->rkey;
	r->va = (uintptr_t)m->area + GUARD_LEN;
}

/* ---- QPs ---------------------------------------------------------------- */

/* RESET to RTS, connected to the attacker's made-up QP at ATK_IP. */
static void connect_to_attacker(struct ibv_qp *qp, const struct cmd *c)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = H_PORT,
		.qp_access_flags = c->a,
	};

	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = ATK_QPN;
	a.rq_psn = c->d;
	a.max_dest_rd_atomic = (uint8_t)c->b;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = H_PORT;
	a.ah_attr.grh.sgid_index = H_GID_INDEX;
	a.ah_attr.grh.hop_limit = 1;
	/* ::ffff:ATK_IP */
	a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xFF;
	if (inet_pton(AF_INET, ATK_IP, &a.ah_attr.grh.dgid.raw[12]) != 1)
		h_fail("inet_pton");
	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			   IBV_QP_MAX_QP_RD_ATOMIC));
}

static struct ibv_qp *create_rc(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		h_fail("ibv_create_qp: %s", strerror(errno));
	return qp;
}

static uint32_t new_qp(const struct cmd *c, struct reply *r)
{
	struct t_qp *q = &qps[nqps];

	H_CHECK(nqps < MAX_QPS);
	q->cq = ibv_create_cq(tp->ctx, CQ_DEPTH, NULL, NULL, 0);
	if (!q->cq)
		h_fail("ibv_create_cq: %s", strerror(errno));
	q->qp = create_rc(c->c ? pd2 : tp->pd, q->cq);
	connect_to_attacker(q->qp, &(struct cmd){ .a = c->a, .b = c->b,
						  .d = c->d });
	r->qpn = q->qp->qp_num;
	return nqps++;
}

static void destroy_qp(struct t_qp *q)
{
	H_OK(ibv_destroy_qp(q->qp));
	H_OK(ibv_destroy_cq(q->cq));
	q->qp = NULL;
}

/* Destroys QP a and creates QPs until one gets its number again, which
 * uroce hands out only after every other index of the process was used. */
static void reuse_qpn(const struct cmd *c, struct reply *r)
{
	struct t_qp *q = &qps[c->a];
	uint32_t want = q->qp->qp_num;
	struct ibv_qp *qp = NULL;
	unsigned tries;

	H_OK(ibv_destroy_qp(q->qp));
	for (tries = 1; tries <= 2 * QPN_INDICES; tries++) {
		qp = create_rc(tp->pd, q->cq);
		if (qp->qp_num == want)
			break;
		H_OK(ibv_destroy_qp(qp));
		qp = NULL;
	}
	if (!qp)
		h_fail("QPN 0x%x not handed out again in %u creations", want,
		       2 * QPN_INDICES);
	q->qp = qp;
	connect_to_attacker(qp, &(struct cmd){ .a = (uint32_t)c->x, .b = c->b,
					       .d = c->d });
	r->qpn = qp->qp_num;
	r->n = tries;
}

static struct ibv_wc wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;

	if (!h_poll(cq, &wc, H_WC_TIMEOUT_MS))
		h_fail("%s: no completion", what);
	return wc;
}

/* ---- memory windows ---------------------------------------------------- */

static uint32_t bind_mw(const struct cmd *c, struct reply *r)
{
	struct t_qp *q = &qps[c->b];
	struct t_mr *m = &mrs[c->a];
	struct ibv_mw *mw = ibv_alloc_mw(tp->pd, (enum ibv_mw_type)c->c);
	struct ibv_mw_bind_info info = {
		.mr = m->mr,
		.addr = (uintptr_t)m->mr->addr + c->d,
		.length = c->x,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ,
	};
	struct ibv_wc wc;

	H_CHECK(nmws < MAX_MWS);
	if (!mw)
		h_fail("ibv_alloc_mw: %s", strerror(errno));
	if (c->c == IBV_MW_TYPE_1) {
		struct ibv_mw_bind b = { .wr_id = 1, .bind_info = info,
					 .send_flags = IBV_SEND_SIGNALED };

		H_OK(ibv_bind_mw(q->qp, mw, &b));
	} else {
		struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_BIND_MW,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
		wr.bind_mw.bind_info = info;
		H_OK(ibv_post_send(q->qp, &wr, &bad));
		mw->rkey = wr.bind_mw.rkey;
	}
	wc = wait_wc(q->cq, "bind");
	H_EQ(wc.status, IBV_WC_SUCCESS);
	mws[nmws] = mw;
	r->rkey = mw->rkey;
	return nmws++;
}

static void local_inv(const struct cmd *c)
{
	struct t_qp *q = &qps[c->b];
	struct ibv_send_wr wr = { .wr_id = 2, .opcode = IBV_WR_LOCAL_INV,
				  .send_flags = IBV_SEND_SIGNALED,
				  .invalidate_rkey = mws[c->a]->rkey }, *bad;

	H_OK(ibv_post_send(q->qp, &wr, &bad));
	H_EQ(wait_wc(q->cq, "LOCAL_INV").status, IBV_WC_SUCCESS);
}

/* ---- receives ------------------------------------------------------------ */

static void post_recv(struct t_qp *q)
{
	struct ibv_sge sge = { (uintptr_t)recv_buf.mem, RECV_LEN,
			       recv_buf.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 3, .sg_list = &sge, .num_sge = 1 },
			   *bad;

	H_OK(ibv_post_recv(q->qp, &wr, &bad));
}

static void wait_recv(struct t_qp *q, struct reply *r)
{
	struct ibv_wc wc = wait_wc(q->cq, "receive");

	r->state = wc.status;
	r->n = wc.wc_flags;
	r->rkey = wc.invalidated_rkey;
}

/* ---- resources ---------------------------------------------------------- */

static void usage(struct reply *r)
{
	struct rusage ru;
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		h_fail("/proc/self/status: %s", strerror(errno));
	for (int i = 0; i < 100 && fgets(line, sizeof(line), f); i++)
		if (sscanf(line, "VmRSS: %u", &r->n) == 1)
			break;
	fclose(f);
	H_OK(getrusage(RUSAGE_SELF, &ru) ? errno : 0);
	r->x = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static void fresh_keys(const struct cmd *c, struct reply *r)
{
	static uint8_t page[4096];

	H_CHECK(c->a <= MAX_KEYS);
	for (uint32_t i = 0; i < c->a; i++) {
		struct ibv_mr *mr = ibv_reg_mr(tp->pd, page, sizeof(page),
					       IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_LOCAL_WRITE);

		if (!mr)
			h_fail("ibv_reg_mr: %s", strerror(errno));
		r->keys[i] = mr->rkey;
		H_OK(ibv_dereg_mr(mr));
	}
	r->n = c->a;
}

/* ---- rdma_cm ------------------------------------------------------------ */

static void cm_listen(const struct cmd *c, struct reply *r)
{
	struct sockaddr_in a = { .sin_family = AF_INET };

	cm_chan = rdma_create_event_channel();
	if (!cm_chan || rdma_create_id(cm_chan, &cm_listener, NULL, RDMA_PS_TCP))
		h_fail("rdma_create_id: %s", strerror(errno));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rdma_bind_addr(cm_listener, (struct sockaddr *)&a) ||
	    rdma_listen(cm_listener, (int)c->a))
		h_fail("rdma_bind_addr/listen: %s", strerror(errno));
	cm_port = ntohs(rdma_get_src_port(cm_listener));
	r->n = cm_port;
}

/* Refuses every connection request that is waiting. */
static void cm_drain(struct reply *r)
{
	int fl = fcntl(cm_chan->fd, F_GETFL);
	struct rdma_cm_event *ev;

	H_CHECK(fl >= 0 && !fcntl(cm_chan->fd, F_SETFL, fl | O_NONBLOCK));
	r->n = 0;
	for (int i = 0; i < CM_DRAIN_MAX && !rdma_get_cm_event(cm_chan, &ev); i++) {
		struct rdma_cm_id *id = ev->id;
		bool request = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST;

		if (request && rdma_reject(id, NULL, 0))
			h_fail("rdma_reject: %s", strerror(errno));
		H_OK(rdma_ack_cm_event(ev));
		if (request) {
			H_OK(rdma_destroy_id(id));
			r->n++;
		}
	}
	H_CHECK(errno == EAGAIN);
	H_CHECK(!fcntl(cm_chan->fd, F_SETFL, fl));
}

static struct rdma_cm_event *cm_expect(struct rdma_event_channel *ch,
				       enum rdma_cm_event_type type)
{
	struct rdma_cm_event *ev;
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };

	if (poll(&pfd, 1, CM_WAIT_MS) != 1 || rdma_get_cm_event(ch, &ev))
		h_fail("no rdma_cm event (want %s)", rdma_event_str(type));
	if (ev->event != type)
		h_fail("rdma_cm event %s, want %s", rdma_event_str(ev->event),
		       rdma_event_str(type));
	return ev;
}

/* The listener still takes a legitimate connection: one SEND across it. */
static void cm_accept_legit(void)
{
	struct rdma_cm_event *ev = cm_expect(cm_chan,
					     RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = ev->id;
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct rdma_conn_param cp = { .responder_resources = 1,
				      .initiator_depth = 1 };
	/* rdma_cm's device context is its own: a PD and memory of it */
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct h_buf b;
	struct ibv_sge sge;
	struct ibv_recv_wr wr = { .wr_id = 4, .sg_list = &sge, .num_sge = 1 },
			   *bad;
	struct ibv_wc wc;

	H_OK(rdma_ack_cm_event(ev));
	if (!pd)
		h_fail("ibv_alloc_pd: %s", strerror(errno));
	h_buf_alloc_pd(pd, &b, RECV_LEN, IBV_ACCESS_LOCAL_WRITE);
	sge = (struct ibv_sge){ (uintptr_t)b.mem, RECV_LEN, b.mr->lkey };
	if (rdma_create_qp(id, pd, &ia))
		h_fail("rdma_create_qp: %s", strerror(errno));
	H_OK(ibv_post_recv(id->qp, &wr, &bad));
	if (rdma_accept(id, &cp))
		h_fail("rdma_accept: %s", strerror(errno));
	H_OK(rdma_ack_cm_event(cm_expect(cm_chan, RDMA_CM_EVENT_ESTABLISHED)));
	wc = wait_wc(id->recv_cq, "SEND over rdma_cm");
	H_EQ(wc.status, IBV_WC_SUCCESS);
	H_EQ(wc.byte_len, RECV_LEN);
	H_OK(rdma_ack_cm_event(cm_expect(cm_chan, RDMA_CM_EVENT_DISCONNECTED)));
	rdma_destroy_qp(id);
	H_OK(rdma_destroy_id(id));
	h_buf_free(&b);
	H_OK(ibv_dealloc_pd(pd));
}

/* The peer's side of cm_accept_legit. */
static void cm_connect_legit(uint16_t port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = { .sin_family = AF_INET,
				   .sin_port = htons(port) };
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct rdma_conn_param cp = { .responder_resources = 1,
				      .initiator_depth = 1, .retry_count = 7 };
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct h_buf b;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .wr_id = 5, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED,
				  .sg_list = &sge, .num_sge = 1 }, *bad;

	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, CM_WAIT_MS))
		h_fail("rdma_resolve_addr: %s", strerror(errno));
	H_OK(rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED)));
	if (rdma_resolve_route(id, CM_WAIT_MS))
		h_fail("rdma_resolve_route: %s", strerror(errno));
	H_OK(rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)));
	pd = ibv_alloc_pd(id->verbs);
	if (!pd || rdma_create_qp(id, pd, &ia))
		h_fail("ibv_alloc_pd/rdma_create_qp: %s", strerror(errno));
	h_buf_alloc_pd(pd, &b, RECV_LEN, IBV_ACCESS_LOCAL_WRITE);
	sge = (struct ibv_sge){ (uintptr_t)b.mem, RECV_LEN, b.mr->lkey };
	if (rdma_connect(id, &cp))
		h_fail("rdma_connect: %s", strerror(errno));
	H_OK(rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_ESTABLISHED)));
	H_OK(ibv_post_send(id->qp, &wr, &bad));
	H_EQ(wait_wc(id->send_cq, "SEND over rdma_cm").status, IBV_WC_SUCCESS);
	H_OK(rdma_disconnect(id) ? errno : 0);
	H_OK(rdma_ack_cm_event(cm_expect(ch, RDMA_CM_EVENT_DISCONNECTED)));
	rdma_destroy_qp(id);
	h_buf_free(&b);
	H_OK(ibv_dealloc_pd(pd));
	H_OK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

/* ---- the two roles ------------------------------------------------------ */

static void serve(int ctl)
{
	for (;;) {
		struct cmd c;
		struct reply r = { 0 };

		h_recv(ctl, &c, sizeof(c));
		switch (c.op) {
		case C_MR: r.id = new_mr(&c, &r); break;
		case C_MR_DUMP: break;
		case C_MR_FILL:
			h_fill(mrs[c.a].area + GUARD_LEN, mrs[c.a].len, c.x);
			break;
		case C_MR_DEREG:
			H_OK(ibv_dereg_mr(mrs[c.a].mr));
			mrs[c.a].mr = NULL;
			break;
		case C_MR_REREG: rereg_mr(&c, &r); break;
		case C_QP: r.id = new_qp(&c, &r); break;
		case C_QP_STATE: r.state = h_qp_state(qps[c.a].qp); break;
		case C_QP_REUSE: reuse_qpn(&c, &r); break;
		case C_MW: r.id = bind_mw(&c, &r); break;
		case C_MW_LOCAL_INV: local_inv(&c); break;
		case C_MW_FREE:
			H_OK(ibv_dealloc_mw(mws[c.a]));
			mws[c.a] = NULL;
			break;
		case C_RECV_POST: post_recv(&qps[c.a]); break;
		case C_RECV_WAIT: wait_recv(&qps[c.a], &r); break;
		case C_USAGE: usage(&r); break;
		case C_KEYS: fresh_keys(&c, &r); break;
		case C_CM_LISTEN: cm_listen(&c, &r); break;
		case C_CM_DRAIN: cm_drain(&r); break;
		case C_DONE: return;
		default: h_fail("unknown command %u", c.op);
		}
		h_send(ctl, &r, sizeof(r));
		if (c.op == C_MR_DUMP)
			h_send(ctl, mrs[c.a].area, mrs[c.a].len + 2 * GUARD_LEN);
	}
}

void target_main(struct h_proc *p, int ctl, int link)
{
	struct h_ep ep;
	struct h_qp_cfg cfg = h_qp_defaults(p);
	struct h_buf legit;
	uint8_t want[LEGIT_LEN];
	bool cm_used;

	tp = p;
	pd2 = ibv_alloc_pd(p->ctx);
	if (!pd2)
		h_fail("ibv_alloc_pd: %s", strerror(errno));
	h_buf_alloc(p, &recv_buf, RECV_LEN, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &legit, LEGIT_LEN,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ);
	/* the legitimate connection exists before the attack begins */
	h_ep_create(p, &ep, &cfg);
	h_ep_connect(p, &ep, link);

	serve(ctl);
	cm_used = cm_listener != NULL;

	/* the legitimate peer WRITEs and READs the target's memory and sends
	 * a message, over UDP, after the attack */
	struct ibv_sge sge = { (uintptr_t)recv_buf.mem, RECV_LEN,
			       recv_buf.mr->lkey };
	h_post_recv(&ep, 6, &sge, 1);
	h_send_rbuf(link, &legit);
	H_EXPECT_RECV(&ep, .wr_id = 6, .opcode = IBV_WC_RECV,
		      .byte_len = RECV_LEN);
	h_fill(want, LEGIT_LEN, LEGIT_SEED);
	h_expect_mem(legit.mem, want, LEGIT_LEN, "legitimate WRITE");
	if (cm_used) {
		h_send(link, &cm_port, sizeof(cm_port));
		cm_accept_legit();
		H_OK(rdma_destroy_id(cm_listener));
		rdma_destroy_event_channel(cm_chan);
	}
	h_sync(link);
	h_ep_destroy(&ep);

	for (unsigned i = 0; i < nmws; i++)
		if (mws[i])
			H_OK(ibv_dealloc_mw(mws[i]));
	for (unsigned i = 0; i < nqps; i++)
		if (qps[i].qp)
			destroy_qp(&qps[i]);
	for (unsigned i = 0; i < nmrs; i++) {
		if (mrs[i].mr)
			H_OK(ibv_dereg_mr(mrs[i].mr));
		free(mrs[i].area);
	}
	h_buf_free(&legit);
	h_buf_free(&recv_buf);
	H_OK(ibv_dealloc_pd(pd2));
	h_send(ctl, &(struct reply){ 0 }, sizeof(struct reply));
}

void peer_main(struct h_proc *p, int link, bool cm)
{
	struct h_ep ep;
	struct h_qp_cfg cfg = h_qp_defaults(p);
	struct h_buf out, back;
	struct h_rbuf r;
	struct ibv_sge sge;

	h_ep_create(p, &ep, &cfg);
	h_ep_connect(p, &ep, link);
	h_buf_alloc(p, &out, LEGIT_LEN, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &back, LEGIT_LEN, IBV_ACCESS_LOCAL_WRITE);
	h_fill(out.mem, LEGIT_LEN, LEGIT_SEED);

	r = h_recv_rbuf(link);
	sge = (struct ibv_sge){ (uintptr_t)out.mem, LEGIT_LEN, out.mr->lkey };
	h_post_rdma(&ep, 1, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	H_EXPECT_SEND(&ep, .wr_id = 1, .opcode = IBV_WC_RDMA_WRITE);
	sge = (struct ibv_sge){ (uintptr_t)back.mem, LEGIT_LEN, back.mr->lkey };
	h_post_rdma(&ep, 2, IBV_WR_RDMA_READ, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	H_EXPECT_SEND(&ep, .wr_id = 2, .opcode = IBV_WC_RDMA_READ,
		      .byte_len = LEGIT_LEN);
	h_expect_mem(back.mem, out.mem, LEGIT_LEN, "legitimate READ");
	sge = (struct ibv_sge){ (uintptr_t)out.mem, RECV_LEN, out.mr->lkey };
	h_post_rdma(&ep, 3, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED, 0, 0, 0);
	H_EXPECT_SEND(&ep, .wr_id = 3, .opcode = IBV_WC_SEND);
	if (cm) {
		uint16_t port;

		h_recv(link, &port, sizeof(port));
		cm_connect_legit(port);
	}
	h_sync(link);
	h_ep_destroy(&ep);
	h_buf_free(&out);
	h_buf_free(&back);
}
