#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
	RD_ATOMIC = 16,		/* initiator depth and responder resources */
	HOP_LIMIT = 1,		/* loopback never crosses a router */
	GRACE_S = 3,		/* supervisor waits this much past the deadline */
};

/* Identifies the reporting process in failure messages. */
static const char *cur_test = "?";
static int cur_role = -1;
static unsigned sock_timeout_ms = 60000;

/* ---- checks ------------------------------------------------------------ */

void h_fail_at(const char *file, int line, const char *fmt, ...)
{
	char msg[1024];
	int n;
	va_list ap;

	n = snprintf(msg, sizeof(msg), "[%s role %d pid %d] %s:%d: ", cur_test,
		     cur_role, (int)getpid(), file, line);
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	strcat(msg, "\n");
	/* One write, so that lines from concurrent roles do not interleave. */
	if (write(STDERR_FILENO, msg, strlen(msg)) < 0)
		abort();
	/* _exit: a failing role's leaked verbs objects are not the news. */
	_exit(1);
}

const char *h_strerror(int err)
{
	return strerror(err);
}

/* ---- time ------------------------------------------------------------- */

uint64_t h_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void h_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000 };

	/* A signal may cut the sleep short; a few restarts are plenty. */
	for (int i = 0; i < 100 && nanosleep(&ts, &ts) && errno == EINTR; i++)
		;
}

/* ---- supervisor --------------------------------------------------------- */

static void enter_netns(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || setns(fd, CLONE_NEWNET))
		h_fail("network namespace %s: %s", path, strerror(errno));
	close(fd);
}

static _Noreturn void run_role(const struct h_test *t, int role,
			       int pairs[][2])
{
	struct h_proc p = { .t = t, .role = role };

	cur_test = t->name;
	cur_role = role;
	for (int i = 0; i < H_MAX_ROLES; i++)
		p.sock[i] = -1;
	for (int i = 1; i < t->nroles; i++) {
		if (role == 0) {
			p.sock[i - 1] = pairs[i - 1][0];
			close(pairs[i - 1][1]);
		} else if (role == i) {
			p.sock[0] = pairs[i - 1][1];
			close(pairs[i - 1][0]);
		} else {
			close(pairs[i - 1][0]);
			close(pairs[i - 1][1]);
		}
	}
	/* Fault injection and addresses are read when the device is first
	 * opened; the namespace holds the sockets it opens. */
	if (t->faults && setenv("UROCE_FAULTS", t->faults, 1))
		h_fail("setenv: %s", strerror(errno));
	if (t->addrs[role] && setenv("UROCE_ADDRS", t->addrs[role], 1))
		h_fail("setenv: %s", strerror(errno));
	if (t->netns[role])
		enter_netns(t->netns[role]);
	alarm(t->deadline_s);
	if (!t->opens_late[role])
		h_open(&p);
	t->role[role](&p);
	h_close(&p);
	for (int i = 0; i < H_MAX_ROLES; i++)
		if (p.sock[i] >= 0)
			close(p.sock[i]);
	exit(0);
}

static void describe_exit(const struct h_test *t, int role, pid_t pid,
			  int status)
{
	if (WIFEXITED(status))
		fprintf(stderr, "%s: role %d (pid %d) exited with status %d\n",
			t->name, role, (int)pid, WEXITSTATUS(status));
	else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
		fprintf(stderr, "%s: role %d (pid %d) hit the %u s deadline\n",
			t->name, role, (int)pid, t->deadline_s);
	else if (WIFSIGNALED(status))
		fprintf(stderr, "%s: role %d (pid %d) killed by signal %d (%s)\n",
			t->name, role, (int)pid, WTERMSIG(status),
			strsignal(WTERMSIG(status)));
}

int h_main(const struct h_test *t)
{
	int pairs[H_MAX_ROLES][2];
	pid_t pid[H_MAX_ROLES];
	bool done[H_MAX_ROLES] = { false }, killed[H_MAX_ROLES] = { false };
	bool failed = false;
	int left = t->nroles;
	uint64_t start = h_now_ns();
	uint64_t end = start + (uint64_t)(t->deadline_s + GRACE_S) * 1000000000ull;
	/* 5 ms per idle round: the count bound sits just past the deadline */
	uint64_t rounds = (uint64_t)(t->deadline_s + GRACE_S) * 200 + 100;

	if (t->nroles < 1 || t->nroles > H_MAX_ROLES)
		return 2;
	cur_test = t->name;
	sock_timeout_ms = t->deadline_s * 1000;
	/* Children inherit unflushed stdio buffers; keep them empty. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < t->nroles; i++) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[i - 1])) {
			perror("socketpair");
			return 1;
		}
	}
	for (int r = 0; r < t->nroles; r++) {
		fflush(stdout);
		fflush(stderr);
		pid[r] = fork();
		if (pid[r] < 0) {
			perror("fork");
			for (int k = 0; k < r; k++)
				kill(pid[k], SIGKILL);
			return 1;
		}
		if (pid[r] == 0)
			run_role(t, r, pairs);
	}
	for (int i = 1; i < t->nroles; i++) {
		close(pairs[i - 1][0]);
		close(pairs[i - 1][1]);
	}

	for (uint64_t i = 0; left > 0 && i < rounds && h_now_ns() < end; i++) {
		int status;
		pid_t w = waitpid(-1, &status, WNOHANG);
		int r;

		if (w <= 0) {
			h_sleep_ms(5);
			continue;
		}
		for (r = 0; r < t->nroles && pid[r] != w; r++)
			;
		if (r == t->nroles)
			continue;
		done[r] = true;
		left--;
		if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || killed[r] ||
		    (t->sigkilled[r] && WIFSIGNALED(status) &&
		     WTERMSIG(status) == SIGKILL))
			continue;
		describe_exit(t, r, w, status);
		/* The others are most likely waiting for the one that failed. */
		for (int k = 0; k < t->nroles; k++) {
			if (!done[k] && !killed[k]) {
				kill(pid[k], SIGKILL);
				killed[k] = true;
			}
		}
		failed = true;
	}
	if (left > 0) {
		fprintf(stderr, "%s: supervisor deadline passed, killing %d role(s)\n",
			t->name, left);
		failed = true;
		for (int k = 0; k < t->nroles; k++) {
			if (done[k])
				continue;
			kill(pid[k], SIGKILL);
			waitpid(pid[k], NULL, 0);
		}
	}
	printf("%s %s in %.1f ms\n", failed ? "FAIL" : "PASS", t->name,
	       (double)(h_now_ns() - start) / 1e6);
	return failed ? 1 : 0;
}

/* ---- device ------------------------------------------------------------- */

/* Where the loader found libibverbs.so.1: the first thing to know when the
 * device is missing. */
static const char *verbs_library(void)
{
	Dl_info dl;

	if (dladdr((void *)ibv_get_device_list, &dl) && dl.dli_fname)
		return dl.dli_fname;
	return "?";
}

/* ::1 or an IPv4-mapped 127.0.0.0/8 address */
static bool gid_is_loopback(const union ibv_gid *gid)
{
	const struct in6_addr *a = (const struct in6_addr *)gid->raw;

	return IN6_IS_ADDR_LOOPBACK(a) ||
	       (IN6_IS_ADDR_V4MAPPED(a) && gid->raw[12] == 127);
}

void h_open(struct h_proc *p)
{
	struct ibv_device **list, *dev = NULL;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list)
		h_fail("ibv_get_device_list: %s (libibverbs.so.1 loaded from %s)",
		       strerror(errno), verbs_library());
	for (int i = 0; i < n && !dev; i++)
		if (!strcmp(ibv_get_device_name(list[i]), H_DEVICE_NAME))
			dev = list[i];
	if (!dev)
		h_fail("no device \"%s\" among %d device(s) (libibverbs.so.1 "
		       "loaded from %s; LD_LIBRARY_PATH=%s)", H_DEVICE_NAME, n,
		       verbs_library(), getenv("LD_LIBRARY_PATH") ?: "");
	p->ctx = ibv_open_device(dev);
	if (!p->ctx)
		h_fail("ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	H_OK(ibv_query_device(p->ctx, &p->dev));
	H_OK(ibv_query_port(p->ctx, H_PORT, &p->port));
	H_OK(ibv_query_gid(p->ctx, H_PORT, H_GID_INDEX, &p->gid));
	/* The tests talk to themselves only (it is GID 0 unless UROCE_ADDRS
	 * says otherwise), or across namespaces of their own. */
	if (!p->t->addrs[p->role] && !gid_is_loopback(&p->gid))
		h_fail("GID %d is not a loopback address; unset UROCE_ADDRS",
		       H_GID_INDEX);
	p->pd = ibv_alloc_pd(p->ctx);
	if (!p->pd)
		h_fail("ibv_alloc_pd: %s", strerror(errno));
}

void h_close(struct h_proc *p)
{
	if (!p->ctx)
		return;
	H_OK(ibv_dealloc_pd(p->pd));
	H_OK(ibv_close_device(p->ctx));
}

bool h_over_udp(void)
{
	const char *shm = getenv("UROCE_SHM");

	return shm && !strcmp(shm, "0");
}

void h_close_counting(struct h_proc *p, const char *const *names,
		      uint64_t *vals, size_t n)
{
	int fd = memfd_create("uroce-counters", MFD_CLOEXEC);
	int saved = dup(STDERR_FILENO);
	FILE *log;
	char line[512];

	if (fd < 0 || saved < 0 || fflush(stderr) ||
	    dup2(fd, STDERR_FILENO) < 0)
		h_fail("capturing stderr: %s", strerror(errno));
	h_close(p);
	p->ctx = NULL;
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	memset(vals, 0, n * sizeof(*vals));
	log = fdopen(fd, "r");
	H_CHECK(log);
	rewind(log);
	for (int i = 0; i < 100000 && fgets(line, sizeof(line), log); i++) {
		char name[64];
		unsigned long long v;

		if (sscanf(line, "uroce: slot %*u: %63s %llu", name, &v) != 2)
			continue;
		fputs(line, stdout);
		for (size_t k = 0; k < n; k++)
			if (!strcmp(name, names[k]))
				vals[k] += v;
	}
	fclose(log);
}

/* ---- sockets ------------------------------------------------------------ */

void h_send(int sock, const void *buf, size_t len)
{
	/* MSG_NOSIGNAL: a vanished peer is a failure to report, not SIGPIPE. */
	ssize_t n = send(sock, buf, len, MSG_NOSIGNAL);

	if (n != (ssize_t)len)
		h_fail("send to peer: %s", n < 0 ? strerror(errno) : "short write");
}

void h_recv(int sock, void *buf, size_t len)
{
	uint8_t *b = buf;
	size_t got = 0;
	uint64_t end = h_now_ns() + (uint64_t)sock_timeout_ms * 1000000ull;

	/* Every pass reads at least one byte or fails: len + 1 passes. */
	for (size_t i = 0; got < len && i <= len; i++) {
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		uint64_t now = h_now_ns();
		ssize_t n;

		if (now >= end ||
		    poll(&pfd, 1, (int)((end - now) / 1000000 + 1)) <= 0)
			h_fail("no message from peer within %u ms", sock_timeout_ms);
		n = recv(sock, b + got, len - got, 0);
		if (n <= 0)
			h_fail("peer closed the control socket (%s)",
			       n < 0 ? strerror(errno) : "EOF");
		got += (size_t)n;
	}
	if (got != len)
		h_fail("short message from peer");
}

bool h_peer_closed(int sock, unsigned timeout_ms)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	char c;

	if (poll(&pfd, 1, (int)timeout_ms) <= 0)
		return false;
	return recv(sock, &c, 1, MSG_PEEK) == 0;
}

void h_sync(int sock)
{
	char c = 'S';

	h_send(sock, &c, 1);
	h_recv(sock, &c, 1);
	if (c != 'S')
		h_fail("control stream out of step: got 0x%02x", (unsigned char)c);
}

void h_send_rbuf(int sock, const struct h_buf *b)
{
	struct h_rbuf r = { .addr = (uintptr_t)b->mem,
			    .rkey = b->mr->rkey,
			    .len = (uint32_t)b->len };

	h_send(sock, &r, sizeof(r));
}

struct h_rbuf h_recv_rbuf(int sock)
{
	struct h_rbuf r;

	h_recv(sock, &r, sizeof(r));
	return r;
}

/* ---- QPs ---------------------------------------------------------------- */

unsigned h_mtu_bytes(enum ibv_mtu mtu)
{
	return 128u << mtu;	/* IBV_MTU_256 == 1 */
}

enum ibv_mtu h_mtu_enum(long bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	h_fail("no path MTU of %ld bytes", bytes);
}

struct h_qp_cfg h_qp_defaults(const struct h_proc *p)
{
	return (struct h_qp_cfg){
		.mtu = IBV_MTU_4096,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.min_rnr_timer = 12,
		/* fixed, role-dependent PSNs keep failures reproducible */
		.psn = (0x5a3c96u + (uint32_t)p->role * 0x10101u) & 0xffffff,
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		.cap = { .max_send_wr = 256, .max_recv_wr = 256,
			 .max_send_sge = 4, .max_recv_sge = 4 },
	};
}

void h_ep_create(struct h_proc *p, struct h_ep *ep, const struct h_qp_cfg *c)
{
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_qp_attr a = { 0 };
	int scqe = c->cap.max_send_wr ? (int)c->cap.max_send_wr : 1;
	int rcqe = c->cap.max_recv_wr ? (int)c->cap.max_recv_wr : 1;

	memset(ep, 0, sizeof(*ep));
	ep->cfg = *c;
	ep->scq = ibv_create_cq(p->ctx, scqe, ep, c->channel, 0);
	ep->rcq = ibv_create_cq(p->ctx, rcqe, ep, c->channel, 0);
	if (!ep->scq || !ep->rcq)
		h_fail("ibv_create_cq: %s", strerror(errno));
	ia.qp_context = ep;
	ia.send_cq = ep->scq;
	ia.recv_cq = ep->rcq;
	ia.cap = c->cap;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = c->sq_sig_all;
	if (c->send_ops_flags) {
		struct ibv_qp_init_attr_ex iax = {
			.qp_context = ep, .send_cq = ep->scq,
			.recv_cq = ep->rcq, .cap = c->cap,
			.qp_type = IBV_QPT_RC, .sq_sig_all = c->sq_sig_all,
			.comp_mask = IBV_QP_INIT_ATTR_PD |
				     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = c->pd ? c->pd : p->pd,
			.send_ops_flags = c->send_ops_flags,
		};

		ep->qp = ibv_create_qp_ex(p->ctx, &iax);
	} else {
		ep->qp = ibv_create_qp(c->pd ? c->pd : p->pd, &ia);
	}
	if (!ep->qp)
		h_fail("ibv_create_qp: %s", strerror(errno));

	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = H_PORT;
	a.qp_access_flags = c->access;
	H_OK(ibv_modify_qp(ep->qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				   IBV_QP_ACCESS_FLAGS));
}

struct qp_info {
	uint32_t qpn, psn;
	union ibv_gid gid;
};

void h_ep_connect(struct h_proc *p, struct h_ep *ep, int sock)
{
	struct qp_info me = { .qpn = ep->qp->qp_num, .psn = ep->cfg.psn,
			      .gid = p->gid }, peer;
	struct ibv_qp_attr a = { 0 };

	h_send(sock, &me, sizeof(me));
	h_recv(sock, &peer, sizeof(peer));
	ep->peer_qpn = peer.qpn;

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = ep->cfg.mtu;
	a.dest_qp_num = peer.qpn;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic = RD_ATOMIC;
	a.min_rnr_timer = ep->cfg.min_rnr_timer;
	/* RoCE: no LIDs, the peer is its GID (README §9) */
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.grh.sgid_index = H_GID_INDEX;
	a.ah_attr.grh.hop_limit = HOP_LIMIT;
	a.ah_attr.port_num = H_PORT;
	H_OK(ibv_modify_qp(ep->qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = ep->cfg.timeout;
	a.retry_cnt = ep->cfg.retry_cnt;
	a.rnr_retry = ep->cfg.rnr_retry;
	a.sq_psn = ep->cfg.psn;
	a.max_rd_atomic = RD_ATOMIC;
	H_OK(ibv_modify_qp(ep->qp, &a,
			   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				   IBV_QP_MAX_QP_RD_ATOMIC));
	h_sync(sock);
}

void h_ep_destroy(struct h_ep *ep)
{
	H_OK(ibv_destroy_qp(ep->qp));
	H_OK(ibv_destroy_cq(ep->scq));
	H_OK(ibv_destroy_cq(ep->rcq));
}

enum ibv_qp_state h_qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	H_OK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia));
	return a.qp_state;
}

/* ---- memory --------------------------------------------------------------- */

void h_buf_alloc_pd(struct ibv_pd *pd, struct h_buf *b, size_t len, int access)
{
	void *mem;
	int err = posix_memalign(&mem, 4096, len);

	if (err)
		h_fail("posix_memalign(%zu): %s", len, strerror(err));
	memset(mem, 0, len);
	b->mem = mem;
	b->len = len;
	b->mr = ibv_reg_mr(pd, mem, len, access);
	if (!b->mr)
		h_fail("ibv_reg_mr(%zu bytes, access 0x%x): %s", len, access,
		       strerror(errno));
}

void h_buf_alloc(struct h_proc *p, struct h_buf *b, size_t len, int access)
{
	h_buf_alloc_pd(p->pd, b, len, access);
}

void h_buf_free(struct h_buf *b)
{
	H_OK(ibv_dereg_mr(b->mr));
	free(b->mem);
}

uint64_t h_rand64(uint64_t *state)
{
	/* splitmix64: fast, and every seed gives a full-quality stream */
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void h_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *b = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = h_rand64(&seed);

		memcpy(b + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = h_rand64(&seed);

		memcpy(b + i, &v, len - i);
	}
}

void h_expect_mem_at(const char *file, int line, const void *got,
		     const void *want, size_t len, const char *what)
{
	const uint8_t *g = got, *w = want;
	size_t first = len, last = 0, bad = 0;

	if (!memcmp(got, want, len))
		return;
	for (size_t i = 0; i < len; i++) {
		if (g[i] == w[i])
			continue;
		if (first == len)
			first = i;
		last = i;
		bad++;
	}
	h_fail_at(file, line,
		  "%s: %zu of %zu bytes differ, offsets %zu..%zu; first: got "
		  "0x%02x want 0x%02x", what, bad, len, first, last, g[first],
		  w[first]);
}

struct h_layout h_split(size_t off, size_t len, size_t gap, int uneven,
			size_t slack)
{
	size_t a = uneven ? len / 3 : len / 6;
	size_t b = uneven ? len / 4 : len / 2;
	size_t parts[3] = { a, b, len - a - b + slack };
	struct h_layout l = { 0 };
	size_t pos = off;

	for (int i = 0; i < 3; i++) {
		if (!parts[i])
			continue;
		l.pc[l.n].off = pos;
		l.pc[l.n].len = parts[i];
		l.n++;
		pos += parts[i] + gap;
	}
	return l;
}

void h_scatter(const struct h_layout *l, uint8_t *image, const uint8_t *stream,
	       size_t len)
{
	size_t done = 0;

	for (int i = 0; i < l->n && done < len; i++) {
		size_t n = l->pc[i].len < len - done ? l->pc[i].len : len - done;

		memcpy(image + l->pc[i].off, stream + done, n);
		done += n;
	}
	if (done != len)
		h_fail("layout holds fewer than %zu bytes", len);
}

int h_sges(const struct h_layout *l, const struct h_buf *b, struct ibv_sge *sge)
{
	for (int i = 0; i < l->n; i++) {
		if (l->pc[i].off + l->pc[i].len > b->len)
			h_fail("layout piece %d outside the buffer", i);
		sge[i].addr = (uintptr_t)b->mem + l->pc[i].off;
		sge[i].length = (uint32_t)l->pc[i].len;
		sge[i].lkey = b->mr->lkey;
	}
	return l->n;
}
