/*
 * rc.channel: completion events through a completion channel.
 *
 * Role 1 waits, role 0 sends.  Checked in order:
 *  1. armed, nothing sent: the channel fd stays unreadable (poll times out);
 *  2. ibv_get_cq_event blocks until a completion arrives (the sender waits
 *     50 ms first) and returns the CQ and its context; the event is acked;
 *  3. armed for solicited events only: an unsolicited SEND completes but
 *     raises no event;
 *  4. a SEND with IBV_SEND_SOLICITED raises it (fd readable via poll);
 *  5. one arming gives one event: the next SEND, with the CQ not re-armed,
 *     leaves the fd unreadable.
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

enum { DELAY_MS = 50, QUIET_MS = 150, BUF = 4096, MSGS = 4 };

static bool fd_readable(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int n = poll(&pfd, 1, ms);

	H_CHECK(n >= 0);
	return n == 1 && (pfd.revents & POLLIN);
}

/* Waits for the event on the armed receive CQ and acknowledges it. */
static void take_event(struct ibv_comp_channel *ch, struct h_ep *ep)
{
	struct ibv_cq *cq = NULL;
	void *ctx = NULL;

	H_OK(ibv_get_cq_event(ch, &cq, &ctx));
	H_CHECK(cq == ep->rcq);
	H_CHECK(ctx == ep);
	ibv_ack_cq_events(cq, 1);
}

static void waiter(struct h_proc *p, struct ibv_comp_channel *ch,
		   struct h_ep *ep, struct h_buf *b)
{
	int sock = p->sock[0];
	uint8_t want[BUF], sent[8 * MSGS];
	uint64_t t0, ms;
	char cmd;

	for (uint64_t i = 0; i < MSGS; i++) {
		struct ibv_sge sge = { (uintptr_t)b->mem + 64 * i, 64, b->mr->lkey };

		h_post_recv(ep, i, &sge, 1);
	}
	h_sync(sock);

	/* 1 */
	H_OK(ibv_req_notify_cq(ep->rcq, 0));
	H_CHECK(!fd_readable(ch->fd, QUIET_MS));

	/* 2 */
	t0 = h_now_ns();
	cmd = '2';
	h_send(sock, &cmd, 1);
	take_event(ch, ep);
	ms = (h_now_ns() - t0) / 1000000;
	H_CHECK(ms >= DELAY_MS);
	H_EXPECT_RECV(ep, .wr_id = 0, .opcode = IBV_WC_RECV, .byte_len = 8);

	/* 3: the sender reports when its SEND has completed, so the receive
	 * completion exists before we look at the fd */
	H_OK(ibv_req_notify_cq(ep->rcq, 1));
	cmd = '3';
	h_send(sock, &cmd, 1);
	h_recv(sock, &cmd, 1);
	H_CHECK(!fd_readable(ch->fd, QUIET_MS));
	H_EXPECT_RECV(ep, .wr_id = 1, .opcode = IBV_WC_RECV, .byte_len = 8);

	/* 4 */
	cmd = '4';
	h_send(sock, &cmd, 1);
	H_CHECK(fd_readable(ch->fd, H_WC_TIMEOUT_MS));
	take_event(ch, ep);
	H_EXPECT_RECV(ep, .wr_id = 2, .opcode = IBV_WC_RECV, .byte_len = 8);

	/* 5 */
	cmd = '5';
	h_send(sock, &cmd, 1);
	h_recv(sock, &cmd, 1);
	H_EXPECT_RECV(ep, .wr_id = 3, .opcode = IBV_WC_RECV, .byte_len = 8);
	H_CHECK(!fd_readable(ch->fd, QUIET_MS));

	h_fill(want, BUF, 121);
	h_fill(sent, sizeof(sent), 120);
	for (size_t i = 0; i < MSGS; i++)
		memcpy(want + 64 * i, sent + 8 * i, 8);
	h_expect_mem(b->mem, want, BUF, "received messages");
}

static void sender(struct h_proc *p, struct h_ep *ep, struct h_buf *b)
{
	int sock = p->sock[0];
	char cmd;

	h_sync(sock);
	for (uint64_t i = 0; i < MSGS; i++) {
		struct ibv_sge sge = { (uintptr_t)b->mem + 8 * i, 8, b->mr->lkey };
		unsigned flags = IBV_SEND_SIGNALED;

		h_recv(sock, &cmd, 1);
		H_EQ(cmd, '2' + i);
		if (cmd == '2')
			h_sleep_ms(DELAY_MS);
		if (cmd == '4')
			flags |= IBV_SEND_SOLICITED;
		h_post_rdma(ep, i, IBV_WR_SEND, &sge, 1, flags, 0, 0, 0);
		H_EXPECT_SEND(ep, .wr_id = i, .opcode = IBV_WC_SEND);
		if (cmd == '3' || cmd == '5')
			h_send(sock, &cmd, 1);
	}
}

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);
	struct ibv_comp_channel *ch = NULL;
	struct h_ep ep;
	struct h_buf b;

	if (p->role == 1) {
		ch = ibv_create_comp_channel(p->ctx);
		H_CHECK(ch);
		c.channel = ch;
	}
	h_ep_create(p, &ep, &c);
	h_buf_alloc(p, &b, BUF, IBV_ACCESS_LOCAL_WRITE);
	h_fill(b.mem, BUF, 120 + (uint64_t)p->role);
	h_ep_connect(p, &ep, p->sock[0]);
	if (p->role == 1)
		waiter(p, ch, &ep, &b);
	else
		sender(p, &ep, &b);
	h_sync(p->sock[0]);
	/* every event was acknowledged, so destroying the CQs cannot block */
	h_ep_destroy(&ep);
	h_buf_free(&b);
	if (ch)
		H_OK(ibv_destroy_comp_channel(ch));
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.channel",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 25,
	};

	return h_main(&t);
}
