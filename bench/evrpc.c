/*
 * evrpc: an RPC in which both sides sleep until their message arrives, as
 * storage targets, QEMU and Ceph use RDMA, next to the same RPC over a TCP
 * socket with blocking reads.  One process, two sides on one host: it
 * forks, the child serves, the parent measures and prints one line.
 *
 *   evrpc verbs|tcp [-s bytes] [-q outstanding] [-n requests] [-t seconds]
 *		[-c wait] [-S wait]
 *
 * verbs: one RC QP per side through libibverbs (run it with uroce's
 * libraries on LD_LIBRARY_PATH), one CQ with a completion channel for sends
 * and receives; a request is a SEND of -s bytes, answered by a SEND of as
 * many.  The QPs are connected through a socketpair made before the fork,
 * over GID index 0 (uroce's ::ffff:127.0.0.1).
 * tcp: a TCP connection over 127.0.0.1 with TCP_NODELAY; a request is -s
 * bytes written, answered by -s bytes, read with blocking reads.
 *
 * The client keeps -q requests outstanding, -n of them in all (after 100
 * uncounted ones), or fewer if that takes longer than -t seconds (default
 * 5).  How each side waits for a completion (verbs only):
 *   block  ibv_req_notify_cq, then ibv_get_cq_event (the default)
 *   epoll  the channel's fd made non-blocking, in epoll_wait, then
 *          ibv_get_cq_event
 *   poll   ibv_poll_cq in a loop (busy-polling)
 * -c sets the client's, -S the server's.
 *
 * Prints the number of requests measured, the median and 99th percentile of
 * their round trips (post to the answer's completion), requests per second,
 * and the CPU time (user + system, every thread of both processes) per
 * request.  Both sides run under alarm(30), and the child dies with the
 * parent.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

enum { WARMUP = 100, MAX_Q = 64, LIMIT_S = 30 };
enum wait_kind { WAIT_BLOCK, WAIT_EPOLL, WAIT_POLL };

static struct {
	bool tcp;
	size_t size;
	unsigned q, n, seconds;
	enum wait_kind client_wait, server_wait;
} opt = { .size = 64, .q = 1, .n = 20000, .seconds = 5 };

static const char *const wait_names[] = { "block", "epoll", "poll" };

static _Noreturn void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "evrpc: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void xwrite(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("write: %s", n < 0 ? strerror(errno) : "short");
		p += n;
		len -= (size_t)n;
	}
}

/* false at EOF before the first byte */
static bool xread(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, p + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && got == 0)
			return false;
		if (n <= 0)
			die("read: %s", n < 0 ? strerror(errno) : "short");
		got += (size_t)n;
	}
	return true;
}

static double cpu_s(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* ---- the client's bookkeeping ---------------------------------------------- */

static uint64_t *rtt;		/* measured round trips, ns */
static unsigned measured;

/* Records request i's round trip: warm-up ones are not counted. */
static void record(unsigned seq, uint64_t sent_at)
{
	if (seq >= WARMUP && measured < opt.n)
		rtt[measured++] = now_ns() - sent_at;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t elapsed_ns, double cpu)
{
	if (!measured)
		die("no request measured");
	qsort(rtt, measured, sizeof(*rtt), cmp_u64);
	printf("%s s=%zu q=%u: n=%u median_us=%.1f p99_us=%.1f rps=%.0f "
	       "cpu_us_per_req=%.2f\n",
	       what, opt.size, opt.q, measured, rtt[measured / 2] / 1e3,
	       rtt[(size_t)measured * 99 / 100] / 1e3,
	       measured / (elapsed_ns / 1e9), cpu * 1e6 / measured);
}

/* ---- TCP ------------------------------------------------------------------- */

static void tcp_server(int fd)
{
	char *buf = malloc(opt.size);

	if (!buf)
		die("out of memory");
	while (xread(fd, buf, opt.size))
		xwrite(fd, buf, opt.size);
	free(buf);
}

static void tcp_client(int fd, uint64_t *elapsed)
{
	char *buf = calloc(1, opt.size);
	uint64_t sent_at[MAX_Q], deadline = now_ns() + opt.seconds * 1000000000ull;
	uint64_t start = 0;
	unsigned seq = 0, done = 0;

	if (!buf)
		die("out of memory");
	for (; seq < opt.q; seq++) {
		sent_at[seq % opt.q] = now_ns();
		xwrite(fd, buf, opt.size);
	}
	/* the answers come in order */
	while (measured < opt.n && now_ns() < deadline) {
		if (!xread(fd, buf, opt.size))
			die("the server hung up");
		if (done == WARMUP)
			start = now_ns();
		record(done, sent_at[done % opt.q]);
		done++;
		sent_at[seq % opt.q] = now_ns();
		xwrite(fd, buf, opt.size);
		seq++;
	}
	*elapsed = now_ns() - start;
	shutdown(fd, SHUT_WR);
	while (xread(fd, buf, opt.size))
		;
	free(buf);
}

static void tcp_pair(int *client, int *server)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(lfd, 1) || getsockname(lfd, (struct sockaddr *)&a, &len))
		die("listen: %s", strerror(errno));
	*client = socket(AF_INET, SOCK_STREAM, 0);
	if (*client < 0 || connect(*client, (struct sockaddr *)&a, sizeof(a)))
		die("connect: %s", strerror(errno));
	*server = accept(lfd, NULL, NULL);
	if (*server < 0)
		die("accept: %s", strerror(errno));
	close(lfd);
	setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- verbs ----------------------------------------------------------------- */

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *mem;		/* q receive buffers, then q send buffers */
	enum wait_kind wait;
	int epfd;
	unsigned unacked;	/* CQ events to acknowledge */
};

struct qp_info {
	uint32_t qpn;
	union ibv_gid gid;
};

static char *recv_buf(struct side *s, unsigned i)
{
	return s->mem + (size_t)i * opt.size;
}

static char *send_buf(struct side *s, unsigned i)
{
	return s->mem + (size_t)(opt.q + i) * opt.size;
}

static void side_open(struct side *s, enum wait_kind wait)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	unsigned depth = 2 * opt.q + 2;

	if (!list || !list[0])
		die("no RDMA device (is uroce's libibverbs on LD_LIBRARY_PATH?)");
	s->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!s->ctx)
		die("ibv_open_device: %s", strerror(errno));
	s->wait = wait;
	s->pd = ibv_alloc_pd(s->ctx);
	s->ch = ibv_create_comp_channel(s->ctx);
	if (!s->pd || !s->ch)
		die("pd/channel: %s", strerror(errno));
	s->cq = ibv_create_cq(s->ctx, (int)(2 * depth), NULL, s->ch, 0);
	s->mem = aligned_alloc(4096, ((2 * opt.q * opt.size) + 4095) & ~4095ul);
	if (!s->cq || !s->mem)
		die("cq/memory: %s", strerror(errno));
	memset(s->mem, 0, 2 * opt.q * opt.size);
	s->mr = ibv_reg_mr(s->pd, s->mem, 2 * opt.q * opt.size,
			   IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	s->qp = s->mr ? ibv_create_qp(s->pd, &ia) : NULL;
	if (!s->qp)
		die("mr/qp: %s", strerror(errno));
	s->epfd = -1;
	if (wait == WAIT_EPOLL) {
		struct epoll_event ev = { .events = EPOLLIN };
		int fl = fcntl(s->ch->fd, F_GETFL);

		s->epfd = epoll_create1(0);
		if (s->epfd < 0 ||
		    fcntl(s->ch->fd, F_SETFL, fl | O_NONBLOCK) ||
		    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->ch->fd, &ev))
			die("epoll: %s", strerror(errno));
	}
	if (wait != WAIT_POLL && ibv_req_notify_cq(s->cq, 0))
		die("ibv_req_notify_cq: %s", strerror(errno));
}

static void side_connect(struct side *s, int sock)
{
	struct qp_info me = { .qpn = s->qp->qp_num }, peer;
	struct ibv_port_attr port;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	if (ibv_query_gid(s->ctx, 1, 0, &me.gid) ||
	    ibv_query_port(s->ctx, 1, &port))
		die("query: %s", strerror(errno));
	xwrite(sock, &me, sizeof(me));
	if (!xread(sock, &peer, sizeof(peer)))
		die("the peer went away");
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = port.active_mtu;
	a.dest_qp_num = peer.qpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV |
					     IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER))
		die("RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS: %s", strerror(errno));
}

static void post_recv(struct side *s, unsigned i)
{
	struct ibv_sge sge = { (uintptr_t)recv_buf(s, i), (uint32_t)opt.size,
			       s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 },
			   *bad;

	if (ibv_post_recv(s->qp, &wr, &bad))
		die("ibv_post_recv: %s", strerror(errno));
}

/* A SEND of send buffer i, its first 4 bytes the request's number. */
static void post_send(struct side *s, unsigned i, uint32_t seq)
{
	struct ibv_sge sge = { (uintptr_t)send_buf(s, i), (uint32_t)opt.size,
			       s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = opt.q + i, .sg_list = &sge,
				  .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	if (opt.size >= sizeof(seq))
		memcpy(send_buf(s, i), &seq, sizeof(seq));
	if (ibv_post_send(s->qp, &wr, &bad))
		die("ibv_post_send: %s", strerror(errno));
}

/* Completions, after waiting for them the side's way; 0 at the deadline. */
static int next_completions(struct side *s, struct ibv_wc *wc, int max,
			    uint64_t deadline)
{
	for (;;) {
		int n = ibv_poll_cq(s->cq, max, wc);
		struct ibv_cq *cq;
		void *ctx;

		if (n)
			return n < 0 ? (die("ibv_poll_cq"), 0) : n;
		if (now_ns() >= deadline)
			return 0;
		if (s->wait == WAIT_POLL)
			continue;
		if (s->wait == WAIT_EPOLL) {
			struct epoll_event ev;

			if (epoll_wait(s->epfd, &ev, 1, 1000) <= 0)
				continue;
			if (ibv_get_cq_event(s->ch, &cq, &ctx)) {
				if (errno == EAGAIN)
					continue;
				die("ibv_get_cq_event: %s", strerror(errno));
			}
		} else if (ibv_get_cq_event(s->ch, &cq, &ctx)) {
			die("ibv_get_cq_event: %s", strerror(errno));
		}
		if (++s->unacked >= 16) {
			ibv_ack_cq_events(s->cq, s->unacked);
			s->unacked = 0;
		}
		/* armed again before the CQ is read: nothing slips between */
		if (ibv_req_notify_cq(s->cq, 0))
			die("ibv_req_notify_cq: %s", strerror(errno));
	}
}

static void side_close(struct side *s)
{
	if (s->unacked)
		ibv_ack_cq_events(s->cq, s->unacked);
	ibv_destroy_qp(s->qp);
	ibv_dereg_mr(s->mr);
	ibv_destroy_cq(s->cq);
	ibv_destroy_comp_channel(s->ch);
	ibv_dealloc_pd(s->pd);
	ibv_close_device(s->ctx);
	free(s->mem);
}

/* A request with the number UINT32_MAX asks the server to stop. */
static void verbs_server(int sock)
{
	struct side s;
	struct ibv_wc wc[2 * MAX_Q];
	bool stop = false;
	unsigned free_send[MAX_Q], nfree = opt.q;

	side_open(&s, opt.server_wait);
	side_connect(&s, sock);
	for (unsigned i = 0; i < opt.q; i++) {
		post_recv(&s, i);
		free_send[i] = i;
	}
	xwrite(sock, "R", 1);
	while (!stop) {
		int n = next_completions(&s, wc, 2 * MAX_Q, UINT64_MAX);

		for (int i = 0; i < n; i++) {
			uint32_t seq = 0;

			if (wc[i].status != IBV_WC_SUCCESS)
				die("server: completion status %s",
				    ibv_wc_status_str(wc[i].status));
			if (wc[i].opcode == IBV_WC_SEND) {
				free_send[nfree++] = (unsigned)(wc[i].wr_id - opt.q);
				continue;
			}
			if (opt.size >= sizeof(seq))
				memcpy(&seq, recv_buf(&s, (unsigned)wc[i].wr_id),
				       sizeof(seq));
			post_recv(&s, (unsigned)wc[i].wr_id);
			if (seq == UINT32_MAX) {
				stop = true;
				continue;
			}
			if (!nfree)
				die("server: more requests than -q");
			post_send(&s, free_send[--nfree], seq);
		}
	}
	side_close(&s);
}

static void verbs_client(int sock, uint64_t *elapsed)
{
	struct side s;
	struct ibv_wc wc[2 * MAX_Q];
	uint64_t sent_at[MAX_Q], start = 0;
	uint64_t deadline = now_ns() + opt.seconds * 1000000000ull;
	unsigned seq = 0, answered = 0, free_send[MAX_Q], nfree = 0;
	char ready;

	side_open(&s, opt.client_wait);
	side_connect(&s, sock);
	for (unsigned i = 0; i < opt.q; i++)
		post_recv(&s, i);
	if (!xread(sock, &ready, 1))
		die("the server went away");
	for (; seq < opt.q; seq++) {
		sent_at[seq % opt.q] = now_ns();
		post_send(&s, seq, seq);
	}
	while (measured < opt.n) {
		int n = next_completions(&s, wc, 2 * MAX_Q, deadline);

		if (!n)
			break;
		for (int i = 0; i < n; i++) {
			uint32_t got = 0;

			if (wc[i].status != IBV_WC_SUCCESS)
				die("client: completion status %s",
				    ibv_wc_status_str(wc[i].status));
			if (wc[i].opcode == IBV_WC_SEND) {
				free_send[nfree++] = (unsigned)(wc[i].wr_id - opt.q);
				continue;
			}
			if (opt.size >= sizeof(got))
				memcpy(&got, recv_buf(&s, (unsigned)wc[i].wr_id),
				       sizeof(got));
			post_recv(&s, (unsigned)wc[i].wr_id);
			if (answered == WARMUP)
				start = now_ns();
			record(answered, sent_at[got % opt.q]);
			answered++;
			/* the freed request slot's send buffer may still be
			 * in flight: wait for a free one */
			while (!nfree) {
				struct ibv_wc w;
				int m = ibv_poll_cq(s.cq, 1, &w);

				if (m < 0 || (m && w.status != IBV_WC_SUCCESS))
					die("client: send completion");
				if (m && w.opcode == IBV_WC_SEND)
					free_send[nfree++] =
						(unsigned)(w.wr_id - opt.q);
				else if (m)
					die("client: an answer nobody asked for");
			}
			sent_at[seq % opt.q] = now_ns();
			post_send(&s, free_send[--nfree], seq);
			seq++;
		}
	}
	*elapsed = now_ns() - start;
	/* the last answers, then the stop request */
	while (answered < seq) {
		int n = next_completions(&s, wc, 2 * MAX_Q, now_ns() + 2000000000ull);

		if (!n)
			die("client: answers missing at the end");
		for (int i = 0; i < n; i++) {
			if (wc[i].opcode == IBV_WC_SEND)
				free_send[nfree++] = (unsigned)(wc[i].wr_id - opt.q);
			else
				answered++;
		}
	}
	while (!nfree) {
		int n = next_completions(&s, wc, 1, now_ns() + 2000000000ull);

		if (!n || wc[0].opcode != IBV_WC_SEND)
			die("client: no send completion at the end");
		free_send[nfree++] = (unsigned)(wc[0].wr_id - opt.q);
	}
	post_send(&s, free_send[--nfree], UINT32_MAX);
	next_completions(&s, wc, 1, now_ns() + 2000000000ull);
	side_close(&s);
}

/* ---- main ------------------------------------------------------------------ */

static enum wait_kind parse_wait(const char *s)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, wait_names[i]))
			return (enum wait_kind)i;
	die("wait: block, epoll or poll, not %s", s);
}

int main(int argc, char **argv)
{
	int c, sv[2], server_fd = -1, client_fd = -1;
	uint64_t elapsed = 0;
	char what[96];
	pid_t child;
	int status;
	double cpu;

	if (argc < 2 || (strcmp(argv[1], "verbs") && strcmp(argv[1], "tcp")))
		die("usage: evrpc verbs|tcp [-s bytes] [-q outstanding] "
		    "[-n requests] [-t seconds] [-c wait] [-S wait]");
	opt.tcp = !strcmp(argv[1], "tcp");
	optind = 2;
	while ((c = getopt(argc, argv, "s:q:n:t:c:S:")) != -1) {
		switch (c) {
		case 's': opt.size = strtoul(optarg, NULL, 0); break;
		case 'q': opt.q = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'n': opt.n = (unsigned)strtoul(optarg, NULL, 0); break;
		case 't': opt.seconds = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'c': opt.client_wait = parse_wait(optarg); break;
		case 'S': opt.server_wait = parse_wait(optarg); break;
		default: return 2;
		}
	}
	if (!opt.size || !opt.q || opt.q > MAX_Q || !opt.n)
		die("-s, -q (at most %d) and -n must be positive", MAX_Q);
	rtt = calloc(opt.n, sizeof(*rtt));
	if (!rtt)
		die("out of memory");
	if (opt.tcp)
		tcp_pair(&client_fd, &server_fd);
	else if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair: %s", strerror(errno));
	alarm(LIMIT_S);
	fflush(stdout);
	child = fork();
	if (child < 0)
		die("fork: %s", strerror(errno));
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(LIMIT_S);
		if (opt.tcp) {
			close(client_fd);
			tcp_server(server_fd);
		} else {
			close(sv[0]);
			verbs_server(sv[1]);
		}
		_exit(0);
	}
	if (opt.tcp) {
		close(server_fd);
		tcp_client(client_fd, &elapsed);
		snprintf(what, sizeof(what), "tcp");
	} else {
		close(sv[1]);
		verbs_client(sv[0], &elapsed);
		snprintf(what, sizeof(what), "verbs client=%s server=%s",
			 wait_names[opt.client_wait],
			 wait_names[opt.server_wait]);
	}
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		die("the server failed");
	cpu = cpu_s(RUSAGE_SELF) + cpu_s(RUSAGE_CHILDREN);
	report(what, elapsed, cpu);
	return 0;
}
