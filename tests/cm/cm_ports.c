/*
 * cm.shared_ports: rdma_cm ports shared as the Linux kernel shares them
 * (cma_check_port), so that a server that binds an IPv6 and an IPv4
 * wildcard on one port (an iSER target does) starts:
 * - with RDMA_OPTION_ID_AFONLY 1 on the IPv6 id, an IPv4 wildcard binds
 *   the same port, and each listener gets the requests of its family;
 * - without it (net.ipv6.bindv6only 0), the IPv6 wildcard holds IPv4 too:
 *   an IPv4 bind of the port fails with EADDRNOTAVAIL, and an IPv4 client
 *   reaches the IPv6 listener, its new id with IPv4 addresses;
 * - a wildcard and an address of its family exclude each other
 *   (EADDRNOTAVAIL); one address twice is EADDRINUSE unless both ids ask
 *   for REUSEADDR, and a listener's port is its own even then.
 *
 * Role 0 is the server, role 1 the client, which connects when the server
 * says where: 4 or 6 and the port, over the harness's socketpair.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "harness.h"

enum { EVENT_TIMEOUT_MS = 10000, PORT_AFONLY = 7072, PORT_V6_HOLDS_V4 = 7073,
       PORT_REUSE = 7074 };

struct where {
	char family;	/* '4' or '6'; 'Q' ends the client */
	uint16_t port;
};

static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
					  enum rdma_cm_event_type want)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, EVENT_TIMEOUT_MS) != 1)
		h_fail("no rdma_cm event in %d ms, want %s", EVENT_TIMEOUT_MS,
		       rdma_event_str(want));
	H_OK(rdma_get_cm_event(ch, &ev) ? errno : 0);
	if (ev->event != want)
		h_fail("rdma_cm event %s (status %d), want %s",
		       rdma_event_str(ev->event), ev->status,
		       rdma_event_str(want));
	return ev;
}

static void ack(struct rdma_cm_event *ev)
{
	H_OK(rdma_ack_cm_event(ev) ? errno : 0);
}

/* A wildcard (any) or loopback address of the family, with the port. */
static struct sockaddr_storage addr_of(char family, bool any, uint16_t port)
{
	struct sockaddr_storage ss = { 0 };

	if (family == '4') {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		a->sin_addr.s_addr = htonl(any ? INADDR_ANY : INADDR_LOOPBACK);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		a->sin6_addr = any ? in6addr_any : in6addr_loopback;
	}
	return ss;
}

static struct rdma_cm_id *new_id(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;

	H_OK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ? errno : 0);
	return id;
}

static void set_int(struct rdma_cm_id *id, int opt, int v)
{
	H_OK(rdma_set_option(id, RDMA_OPTION_ID, opt, &v, sizeof(v)) ? errno
								      : 0);
}

/* rdma_bind_addr's errno (0 when it binds). */
static int bind_to(struct rdma_cm_id *id, char family, bool any, uint16_t port)
{
	struct sockaddr_storage ss = addr_of(family, any, port);

	return rdma_bind_addr(id, (struct sockaddr *)&ss) ? errno : 0;
}

static void create_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	H_OK(rdma_create_qp(id, NULL, &attr) ? errno : 0);
}

/* Has the client connect to family/port; the request must reach want,
 * and the new id's addresses be of family got_family. */
static void serve_one(int sock, struct rdma_event_channel *ch,
		      struct rdma_cm_id *want, char family, uint16_t port,
		      int got_family)
{
	struct where w = { family, port };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	h_send(sock, &w, sizeof(w));
	ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	if (ev->listen_id != want)
		h_fail("IPv%c request on port %u reached the wrong listener",
		       family, port);
	id = ev->id;
	ack(ev);
	H_EQ(rdma_get_local_addr(id)->sa_family, got_family);
	H_EQ(rdma_get_peer_addr(id)->sa_family, got_family);
	create_qp(id);
	H_OK(rdma_accept(id, NULL) ? errno : 0);
	ack(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED));
	ack(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED));
	H_OK(rdma_disconnect(id) ? errno : 0);
	h_sync(sock);
	rdma_destroy_qp(id);
	H_OK(rdma_destroy_id(id) ? errno : 0);
}

static void server(struct h_proc *p)
{
	int sock = p->sock[0];
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *v6, *v4, *other;
	struct where quit = { 'Q', 0 };

	H_CHECK(ch);
	/* AFONLY 1: the families apart share the port */
	v6 = new_id(ch);
	set_int(v6, RDMA_OPTION_ID_AFONLY, 1);
	H_EQ(bind_to(v6, '6', true, PORT_AFONLY), 0);
	v4 = new_id(ch);
	H_EQ(bind_to(v4, '4', true, PORT_AFONLY), 0);
	other = new_id(ch);
	H_EQ(bind_to(other, '4', true, PORT_AFONLY), EADDRNOTAVAIL);
	H_OK(rdma_destroy_id(other) ? errno : 0);
	other = new_id(ch);
	H_EQ(bind_to(other, '4', false, PORT_AFONLY), EADDRNOTAVAIL);
	H_OK(rdma_destroy_id(other) ? errno : 0);
	H_OK(rdma_listen(v6, 4) ? errno : 0);
	H_OK(rdma_listen(v4, 4) ? errno : 0);
	serve_one(sock, ch, v4, '4', PORT_AFONLY, AF_INET);
	serve_one(sock, ch, v6, '6', PORT_AFONLY, AF_INET6);
	/* the port lives on in the id still holding it */
	H_OK(rdma_destroy_id(v6) ? errno : 0);
	serve_one(sock, ch, v4, '4', PORT_AFONLY, AF_INET);
	H_OK(rdma_destroy_id(v4) ? errno : 0);

	/* AFONLY 0: the IPv6 wildcard is IPv4's too */
	v6 = new_id(ch);
	set_int(v6, RDMA_OPTION_ID_AFONLY, 0);
	H_EQ(bind_to(v6, '6', true, PORT_V6_HOLDS_V4), 0);
	v4 = new_id(ch);
	H_EQ(bind_to(v4, '4', true, PORT_V6_HOLDS_V4), EADDRNOTAVAIL);
	H_OK(rdma_destroy_id(v4) ? errno : 0);
	H_OK(rdma_listen(v6, 4) ? errno : 0);
	serve_one(sock, ch, v6, '4', PORT_V6_HOLDS_V4, AF_INET);
	H_OK(rdma_destroy_id(v6) ? errno : 0);

	/* one address twice: only with REUSEADDR, and not to listen */
	v4 = new_id(ch);
	H_EQ(bind_to(v4, '4', false, PORT_REUSE), 0);
	other = new_id(ch);
	H_EQ(bind_to(other, '4', false, PORT_REUSE), EADDRINUSE);
	H_OK(rdma_destroy_id(other) ? errno : 0);
	H_OK(rdma_destroy_id(v4) ? errno : 0);
	v4 = new_id(ch);
	set_int(v4, RDMA_OPTION_ID_REUSEADDR, 1);
	H_EQ(bind_to(v4, '4', false, PORT_REUSE), 0);
	other = new_id(ch);
	set_int(other, RDMA_OPTION_ID_REUSEADDR, 1);
	H_EQ(bind_to(other, '4', false, PORT_REUSE), 0);
	H_EQ(rdma_listen(v4, 4) ? errno : 0, EADDRINUSE);
	H_OK(rdma_destroy_id(other) ? errno : 0);
	H_OK(rdma_listen(v4, 4) ? errno : 0);
	serve_one(sock, ch, v4, '4', PORT_REUSE, AF_INET);
	H_OK(rdma_destroy_id(v4) ? errno : 0);

	h_send(sock, &quit, sizeof(quit));
	rdma_destroy_event_channel(ch);
}

static void client(struct h_proc *p)
{
	int sock = p->sock[0];
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param param = { .retry_count = 7,
					 .rnr_retry_count = 7 };

	H_CHECK(ch);
	for (int round = 0; round < 16; round++) {
		struct where w;
		struct sockaddr_storage to;
		struct rdma_cm_id *id;

		h_recv(sock, &w, sizeof(w));
		if (w.family == 'Q')
			break;
		to = addr_of(w.family, false, w.port);
		id = new_id(ch);
		H_OK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&to, 2000)
			     ? errno
			     : 0);
		ack(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		H_OK(rdma_resolve_route(id, 2000) ? errno : 0);
		ack(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		create_qp(id);
		H_OK(rdma_connect(id, &param) ? errno : 0);
		ack(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED));
		H_OK(rdma_disconnect(id) ? errno : 0);
		ack(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED));
		h_sync(sock);
		rdma_destroy_qp(id);
		H_OK(rdma_destroy_id(id) ? errno : 0);
	}
	rdma_destroy_event_channel(ch);
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
		.name = "cm.shared_ports",
		.nroles = 2,
		.role = { run, run },
		.deadline_s = 50,
	};

	return h_main(&t);
}
