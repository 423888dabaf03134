/*
 * cm.too_early: a connection request that comes after the server bound its
 * port but before it listens is answered as the Linux kernel's CM answers
 * it, so that a client that retries on it (perftest, qperf) sees what it
 * would see with the kernel: a REQ gets a REJ with reason 8 (invalid
 * service ID: RDMA_CM_EVENT_REJECTED, status 8), a SIDR_REQ a SIDR_REP
 * with status 1 (RDMA_CM_EVENT_UNREACHABLE, status 1).  Once the server
 * listens, the same client connects.  For the TCP port space (RC) and the
 * UDP one (UD, SIDR).
 *
 * Role 0 is the server, role 1 the client; they take turns over the
 * harness's socketpair: 'B' bound, 'R' refused, 'L' listening.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "harness.h"

enum { EVENT_TIMEOUT_MS = 10000 };

static const struct {
	enum rdma_port_space ps;
	uint16_t port;
	enum ibv_qp_type qp_type;
	enum rdma_cm_event_type refused;
	int status;
} spaces[] = {
	{ RDMA_PS_TCP, 7070, IBV_QPT_RC, RDMA_CM_EVENT_REJECTED, 8 },
	{ RDMA_PS_UDP, 7071, IBV_QPT_UD, RDMA_CM_EVENT_UNREACHABLE, 1 },
};

/* The next event on ch, which must be of type want (and status, unless
 * any_status); it is returned unacknowledged. */
static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type want,
					  int status, bool any_status)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, EVENT_TIMEOUT_MS) != 1)
		h_fail("no rdma_cm event in %d ms, want %s", EVENT_TIMEOUT_MS,
		       rdma_event_str(want));
	H_OK(rdma_get_cm_event(ch, &ev) ? errno : 0);
	if (ev->event != want || (!any_status && ev->status != status))
		h_fail("rdma_cm event %s, status %d; want %s, status %d",
		       rdma_event_str(ev->event), ev->status,
		       rdma_event_str(want), status);
	return ev;
}

static void ack(struct rdma_cm_event *ev)
{
	H_OK(rdma_ack_cm_event(ev) ? errno : 0);
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static void create_qp(struct rdma_cm_id *id, enum ibv_qp_type type)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = type,
	};

	H_OK(rdma_create_qp(id, NULL, &attr) ? errno : 0);
}

static void server(struct h_proc *p)
{
	int sock = p->sock[0];

	for (size_t i = 0; i < sizeof(spaces) / sizeof(spaces[0]); i++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct sockaddr_in a = loopback(spaces[i].port);
		struct rdma_cm_id *listener, *id;
		struct rdma_cm_event *ev;
		char cmd = 'B';

		H_CHECK(ch);
		H_OK(rdma_create_id(ch, &listener, NULL, spaces[i].ps) ? errno
								       : 0);
		H_OK(rdma_bind_addr(listener, (struct sockaddr *)&a) ? errno
								     : 0);
		h_send(sock, &cmd, 1);
		h_recv(sock, &cmd, 1);
		H_EQ(cmd, 'R');
		H_OK(rdma_listen(listener, 1) ? errno : 0);
		cmd = 'L';
		h_send(sock, &cmd, 1);

		ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, false);
		id = ev->id;
		ack(ev);
		create_qp(id, spaces[i].qp_type);
		H_OK(rdma_accept(id, NULL) ? errno : 0);
		if (spaces[i].ps == RDMA_PS_TCP) {
			ack(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, 0,
					 false));
			/* the client disconnects; our DREP answers it */
			ack(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
					 true));
			H_OK(rdma_disconnect(id) ? errno : 0);
		}
		h_sync(sock);
		rdma_destroy_qp(id);
		H_OK(rdma_destroy_id(id) ? errno : 0);
		H_OK(rdma_destroy_id(listener) ? errno : 0);
		rdma_destroy_event_channel(ch);
	}
}

/* Resolves the server's address and route and connects; the event that
 * answers is returned unacknowledged. */
static struct rdma_cm_event *connect_to(struct rdma_event_channel *ch,
					struct rdma_cm_id *id, size_t i,
					enum rdma_cm_event_type want, int status)
{
	struct sockaddr_in a = loopback(spaces[i].port);
	struct rdma_conn_param param = { .retry_count = 7,
					 .rnr_retry_count = 7 };

	H_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) ? errno
									: 0);
	ack(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, false));
	H_OK(rdma_resolve_route(id, 2000) ? errno : 0);
	ack(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, false));
	create_qp(id, spaces[i].qp_type);
	H_OK(rdma_connect(id, &param) ? errno : 0);
	return expect_event(ch, want, status, false);
}

static void client(struct h_proc *p)
{
	int sock = p->sock[0];

	for (size_t i = 0; i < sizeof(spaces) / sizeof(spaces[0]); i++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_cm_id *id;
		char cmd;

		H_CHECK(ch);
		h_recv(sock, &cmd, 1);
		H_EQ(cmd, 'B');
		/* bound, not listening: refused as the kernel refuses */
		H_OK(rdma_create_id(ch, &id, NULL, spaces[i].ps) ? errno : 0);
		ack(connect_to(ch, id, i, spaces[i].refused, spaces[i].status));
		rdma_destroy_qp(id);
		H_OK(rdma_destroy_id(id) ? errno : 0);
		cmd = 'R';
		h_send(sock, &cmd, 1);
		h_recv(sock, &cmd, 1);
		H_EQ(cmd, 'L');
		/* listening: connected */
		H_OK(rdma_create_id(ch, &id, NULL, spaces[i].ps) ? errno : 0);
		ack(connect_to(ch, id, i, RDMA_CM_EVENT_ESTABLISHED, 0));
		if (spaces[i].ps == RDMA_PS_TCP) {
			H_OK(rdma_disconnect(id) ? errno : 0);
			ack(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED, 0,
					 true));
		}
		h_sync(sock);
		rdma_destroy_qp(id);
		H_OK(rdma_destroy_id(id) ? errno : 0);
		rdma_destroy_event_channel(ch);
	}
}

static void run(struct h_proc *p)
{
	if (p->role == 0)
		server(p);
	else
		client(p);
}

int main(void)
{
	const struct h_test t = {
		.name = "cm.too_early",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 50,
	};

	return h_main(&t);
}
