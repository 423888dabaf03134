/*
 * `uroce`'s view into a running process (control.h): a thread that answers
 * the owner of the process, or root, on "\0uroce-ctl.<pid>" with the
 * process's QPs and counters, and starts or stops a capture or fault
 * injection.  It runs apart from the engine, so a slow reader never holds
 * up traffic.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "samehost/samehost.h"
#include "transport/transport.h"

static socklen_t ctl_name(struct sockaddr_un *un, pid_t pid)
{
	int len;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	len = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		       UROCE_CTL_PREFIX "%d", (int)pid);
	return offsetof(struct sockaddr_un, sun_path) + 1 + len;
}

static const char *qp_type_name(enum ibv_qp_type t)
{
	switch (t) {
	case IBV_QPT_RC: return "RC";
	case IBV_QPT_UC: return "UC";
	case IBV_QPT_UD: return "UD";
	case IBV_QPT_XRC_SEND: return "XRC_INI";
	case IBV_QPT_XRC_RECV: return "XRC_TGT";
	default: return "?";
	}
}

static const char *qp_state_name(enum ibv_qp_state s)
{
	static const char *const names[] = {
		[IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT",
		[IBV_QPS_RTR] = "RTR",	   [IBV_QPS_RTS] = "RTS",
		[IBV_QPS_SQD] = "SQD",	   [IBV_QPS_SQE] = "SQE",
		[IBV_QPS_ERR] = "ERR",
	};

	return (unsigned)s < ARRAY_SIZE(names) && names[s] ? names[s] : "?";
}

/* What a QP shows, copied out under its locks. */
struct qp_view {
	uint32_t qpn, dest_qpn;
	enum ibv_qp_type type;
	enum ibv_qp_state state;
	union uroce_sockaddr peer;
	uint32_t sq_psn, unacked_psn, rq_psn, outstanding;
	bool same_host;
};

struct qp_list {
	struct qp_view *v;
	int n;
};

/* In an engine section (uroce_engine_call): no QP is freed meanwhile, and
 * the responder's state is ours to read (rx_lock). */
static void snapshot_qps(struct uroce_nic *nic, void *arg)
{
	struct qp_list *l = arg;
	int n = atomic_load(&nic->num_live_qps);

	l->v = calloc(n ? n : 1, sizeof(*l->v));
	if (!l->v)
		return;
	for (int i = 0; i < n; i++) {
		struct uroce_qp *qp = atomic_load(&nic->live_qps[i]);
		struct qp_view *v = &l->v[l->n];

		if (!qp)
			continue;
		pthread_mutex_lock(&qp->sq_lock);
		v->qpn = qp->ibqpx.qp_base.qp_num;
		v->type = qp->ibqpx.qp_base.qp_type;
		v->state = atomic_load(&qp->state);
		v->dest_qpn = qp->attr.dest_qp_num;
		v->peer = qp->peer;
		v->sq_psn = qp->req.psn;
		v->unacked_psn = qp->comp.psn;
		v->outstanding = qp->sq_head - qp->sq_tail;
		v->rq_psn = qp->resp.psn;
		v->same_host = qp->sh_peer != NULL;
		pthread_mutex_unlock(&qp->sq_lock);
		l->n++;
	}
}

static void json_qp(FILE *f, const struct qp_view *v, bool first)
{
	char addr[INET6_ADDRSTRLEN] = "";
	bool connected = v->type == IBV_QPT_RC || v->type == IBV_QPT_UC ||
			 v->type == IBV_QPT_XRC_SEND ||
			 v->type == IBV_QPT_XRC_RECV;

	if (connected && v->peer.sa.sa_family == AF_INET)
		inet_ntop(AF_INET, &v->peer.in4.sin_addr, addr, sizeof(addr));
	else if (connected && v->peer.sa.sa_family == AF_INET6)
		inet_ntop(AF_INET6, &v->peer.in6.sin6_addr, addr, sizeof(addr));
	fprintf(f, "%s\n  {\"qpn\": %u, \"type\": \"%s\", \"state\": \"%s\"",
		first ? "" : ",", v->qpn, qp_type_name(v->type),
		qp_state_name(v->state));
	if (addr[0])
		fprintf(f, ", \"peer\": \"%s\", \"dest_qpn\": %u", addr,
			v->dest_qpn);
	fprintf(f, ", \"sq_psn\": %u, \"unacked_psn\": %u, \"rq_psn\": %u, "
		   "\"outstanding_wqes\": %u, \"same_host\": %s}",
		v->sq_psn, v->unacked_psn, v->rq_psn, v->outstanding,
		v->same_host ? "true" : "false");
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static char *stat_json(struct uroce_nic *nic, size_t *len)
{
	struct qp_list qps = { 0 };
	char comm[64] = "", *buf = NULL;
	const char *capture = nic->net->capture_path(nic);
	bool first = true;
	FILE *f, *c;

	c = fopen("/proc/self/comm", "re");
	if (c) {
		if (!fgets(comm, sizeof(comm), c))
			comm[0] = '\0';
		comm[strcspn(comm, "\n")] = '\0';
		fclose(c);
	}
	uroce_engine_call(nic, snapshot_qps, &qps);
	f = open_memstream(&buf, len);
	if (!f) {
		free(qps.v);
		return NULL;
	}
	fprintf(f, "{\"pid\": %d, \"uid\": %u, \"program\": ", (int)getpid(),
		(unsigned)getuid());
	json_string(f, comm);
	fprintf(f, ", \"port\": %u, \"slot\": %u, \"mode\": \"%s\", "
		   "\"capture\": ", nic->cfg->udp_port, nic->slot,
		nic->service  ? "the per-host service"
		: nic->served ? "served by uroced"
			      : "single-user");
	if (capture)
		json_string(f, capture);
	else
		fputs("null", f);
	fputs(", \"roce_v1\": ", f);
	json_string(f, nic->roce1 ? "on"
		       : nic->roce1_absent[0] ? nic->roce1_absent : "off");
	fputs(", \"faults\": ", f);
	pthread_mutex_lock(&nic->lock);
	json_string(f, nic->faults_spec);
	pthread_mutex_unlock(&nic->lock);
	fputs(",\n \"counters\": {", f);
#define UROCE_STAT_JSON(n)                                                     \
	fprintf(f, "%s\"" #n "\": %lu", first ? "" : ", ",                    \
		atomic_load(&nic->stats.n));                                   \
	first = false;
	UROCE_STATS(UROCE_STAT_JSON)
#undef UROCE_STAT_JSON
	fputs("},\n \"qps\": [", f);
	for (int i = 0; i < qps.n; i++)
		json_qp(f, &qps.v[i], i == 0);
	fputs("]}\n", f);
	free(qps.v);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* The process's capture, or none (path NULL). */
static const char *do_capture(struct uroce_nic *nic, const char *path)
{
	int err = nic->net->capture(nic, path);

	if (err)
		return strerror(-err);
	/* the rest of the way on the wire, where it is captured; a stop
	 * leaves the path aside while faults are injected */
	pthread_mutex_lock(&nic->lock);
	uroce_sh_set_wire_only(nic, path || nic->faults_spec[0]);
	pthread_mutex_unlock(&nic->lock);
	return NULL;
}

static const char *do_faults(struct uroce_nic *nic, const char *spec)
{
	struct uroce_faults_cfg cfg = { 0 };
	const char *why;
	bool off = !strcmp(spec, "off");

	if (strlen(spec) >= sizeof(nic->faults_spec))
		return "too long";
	if (!off && (why = uroce_faults_parse(spec, &cfg)))
		return why;
	pthread_mutex_lock(&nic->rx_lock);
	uroce_faults_init(&nic->faults, &cfg);
	pthread_mutex_unlock(&nic->rx_lock);
	pthread_mutex_lock(&nic->lock);
	strcpy(nic->faults_spec, off ? "" : spec);
	uroce_sh_set_wire_only(nic, !off || nic->net->capture_path(nic));
	pthread_mutex_unlock(&nic->lock);
	return NULL;
}

static void reply(int fd, const char *err, const char *body, size_t len)
{
	char head[256];
	int n = err ? snprintf(head, sizeof(head), "error: %s\n", err)
		    : snprintf(head, sizeof(head), "ok\n");

	/* the peer's timeout bounds these; a short write only loses the
	 * answer */
	if (send(fd, head, n, MSG_NOSIGNAL) != n)
		return;
	while (body && len) {
		ssize_t w = send(fd, body, len, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		body += w;
		len -= w;
	}
}

static void serve(struct uroce_nic *nic, int fd)
{
	const struct timeval timeout = { UROCE_CTL_TIMEOUT_MS / 1000,
					 UROCE_CTL_TIMEOUT_MS % 1000 * 1000 };
	char req[UROCE_CTL_REQ_MAX + 1];
	struct ucred uc;
	socklen_t ulen = sizeof(uc);
	size_t got = 0;
	char *nl = NULL;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
	while (!nl && got < UROCE_CTL_REQ_MAX) {
		ssize_t r = read(fd, req + got, UROCE_CTL_REQ_MAX - got);

		if (r <= 0)
			return;
		got += r;
		req[got] = '\0';
		nl = strchr(req, '\n');
	}
	if (!nl) {
		reply(fd, "request too long", NULL, 0);
		return;
	}
	/* refused only once read: closing on an unread request would reset
	 * the connection before the reader sees why */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ulen) ||
	    (uc.uid != getuid() && uc.uid != 0)) {
		reply(fd, "permission denied: not the process's owner", NULL,
		      0);
		return;
	}
	*nl = '\0';
	if (!strcmp(req, "stat")) {
		size_t len;
		char *json = stat_json(nic, &len);

		reply(fd, json ? NULL : strerror(ENOMEM), json, json ? len : 0);
		free(json);
	} else if (!strcmp(req, "capture stop")) {
		reply(fd, do_capture(nic, NULL), NULL, 0);
	} else if (!strncmp(req, "capture ", 8) && req[8]) {
		reply(fd, do_capture(nic, req + 8), NULL, 0);
	} else if (!strncmp(req, "faults ", 7) && req[7]) {
		reply(fd, do_faults(nic, req + 7), NULL, 0);
	} else {
		reply(fd, "unknown request", NULL, 0);
	}
}

static void *ctl_main(void *arg)
{
	struct uroce_nic *nic = arg;
	sigset_t all;
	struct pollfd pfd[2] = {
		{ .fd = nic->ctl_fd, .events = POLLIN },
		{ .fd = nic->ctl_wake, .events = POLLIN },
	};

	/* the application's signal handlers run in its own threads */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		int fd;

		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & POLLIN))
			continue;
		fd = accept4(nic->ctl_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve(nic, fd);
		close(fd);
	}
	return NULL;
}

void uroce_ctl_start(struct uroce_nic *nic)
{
	struct sockaddr_un un;
	socklen_t len = ctl_name(&un, getpid());

	nic->ctl_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			     0);
	nic->ctl_wake = eventfd(0, EFD_CLOEXEC);
	if (nic->ctl_fd < 0 || nic->ctl_wake < 0 ||
	    bind(nic->ctl_fd, (struct sockaddr *)&un, len) ||
	    listen(nic->ctl_fd, 8) ||
	    pthread_create(&nic->ctl_thread, NULL, ctl_main, nic)) {
		uroce_log("no control socket for `uroce`: %s", strerror(errno));
		if (nic->ctl_fd >= 0)
			close(nic->ctl_fd);
		if (nic->ctl_wake >= 0)
			close(nic->ctl_wake);
		nic->ctl_fd = nic->ctl_wake = -1;
		return;
	}
	nic->ctl_running = true;
}

void uroce_ctl_stop(struct uroce_nic *nic)
{
	uint64_t one = 1;

	if (!nic->ctl_running)
		return;
	if (write(nic->ctl_wake, &one, sizeof(one)) != sizeof(one))
		pthread_cancel(nic->ctl_thread);
	pthread_join(nic->ctl_thread, NULL);
	close(nic->ctl_fd);
	close(nic->ctl_wake);
	nic->ctl_running = false;
}
