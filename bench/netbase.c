/*
 * netbase: the kernel-socket baselines that bench/run.sh sets next to
 * perftest over uroce.  One process, two sides on 127.0.0.1: the connection
 * is made first, then the process forks; the child serves, the parent
 * measures and prints one line.
 *
 *   netbase udp-pingpong|tcp-pingpong [-s bytes] [-n round trips] [-b]
 *		[-t seconds]
 *	A message of -s bytes goes to the child and back, -n times (after
 *	warm-up round trips that are not counted), or fewer if that takes
 *	longer than -t seconds (default 5).  Prints how many round trips were
 *	measured, their median and 99th percentile, and half the median,
 *	which is what perftest's ib_write_lat and ib_send_lat report.
 *
 *   netbase tcp-stream [-s bytes] [-n writes]
 *	-n writes of -s bytes each, then the child, having read them all,
 *	answers with one byte; the time from the first write to that answer
 *	gives the bandwidth, measured at the sender like perftest's "BW
 *	average".  Prints it in MiB/s (perftest's "MB/sec" is 2^20 bytes per
 *	second).
 *
 *   netbase udp-rate [-s bytes] [-n datagrams]
 *	The parent sends -n datagrams of -s bytes as fast as sendmmsg takes
 *	them; the child receives with recvmmsg until none has come for 200 ms
 *	and reports how many arrived and over how long: the datagram rate one
 *	UDP socket receives, the floor for a message rate.
 *
 *   netbase shm-pingpong [-s bytes] [-n round trips] [-b] [-t seconds]
 *	The same ping-pong through shared memory: the message is copied into a
 *	buffer both processes map, and the receiver, asleep in a blocking
 *	read of an eventfd, is woken by a write to it (-b: spins on the
 *	buffer's sequence number instead).  The floor of a same-host round
 *	trip between two processes that sleep: a copy and a wake-up each way,
 *	what uroce's same-host path does at the least.
 *
 *   netbase memcpy [-s bytes] [-n copies]
 *	Copies a buffer of -s bytes (touched first) -n times in one process;
 *	prints MiB/s: the floor of a same-host copy.
 *
 * -b busy-polls the ping-pong sockets (non-blocking receives in a loop), as
 * perftest polls its completion queues and uroce its UDP socket; without it
 * a receiver sleeps in the kernel until its message arrives.  Two spinning
 * processes that share one CPU pass the message on only as often as the
 * scheduler switches between them, every few milliseconds; -t keeps such a
 * run short.
 *
 * Both sides run under alarm(-l seconds, default 30), and the child dies
 * with the parent, so a lost datagram or a stuck peer cannot hang a
 * benchmark run.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mode {
	UDP_PINGPONG, TCP_PINGPONG, SHM_PINGPONG, TCP_STREAM, UDP_RATE, MEMCPY
};

static const char *const mode_names[] = {
	[UDP_PINGPONG] = "udp-pingpong",
	[TCP_PINGPONG] = "tcp-pingpong",
	[SHM_PINGPONG] = "shm-pingpong",
	[TCP_STREAM] = "tcp-stream",
	[UDP_RATE] = "udp-rate",
	[MEMCPY] = "memcpy",
};

/* udp-rate: datagrams per sendmmsg / recvmmsg call, and the quiet time
 * that ends the receiving. */
enum { RATE_BATCH = 64, RATE_IDLE_MS = 200 };

/* Round trips before the measured ones: caches, TCP's window, the scheduler. */
enum { WARMUP = 100 };

/* A UDP datagram on IPv4 carries at most this much. */
enum { UDP_MAX = 65507 };

struct opts {
	enum mode mode;
	size_t size;
	unsigned long iters;
	bool busy;
	unsigned seconds;
	unsigned limit_s;
};

static const char *role = "netbase";

static _Noreturn void die(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", role);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static _Noreturn void usage(void)
{
	fprintf(stderr,
		"usage: netbase udp-pingpong|tcp-pingpong|shm-pingpong [-s bytes] [-n iters] [-b] [-t seconds] [-l seconds]\n"
		"       netbase tcp-stream [-s bytes] [-n writes] [-l seconds]\n"
		"       netbase udp-rate [-s bytes] [-n datagrams] [-l seconds]\n"
		"       netbase memcpy [-s bytes] [-n copies]\n");
	exit(2);
}

static unsigned long number(const char *s, unsigned long min, unsigned long max)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || end == s || *end || v < min || v > max)
		die("bad number %s (%lu..%lu)", s, min, max);
	return v;
}

static void parse(int argc, char **argv, struct opts *o)
{
	int c;
	size_t m;

	if (argc < 2)
		usage();
	for (m = 0; m < sizeof(mode_names) / sizeof(mode_names[0]); m++)
		if (!strcmp(argv[1], mode_names[m]))
			break;
	if (m == sizeof(mode_names) / sizeof(mode_names[0]))
		usage();
	*o = (struct opts){ .mode = m, .size = 64, .iters = 10000,
			    .seconds = 5, .limit_s = 30 };
	optind = 2;
	while ((c = getopt(argc, argv, "s:n:bt:l:")) != -1) {
		switch (c) {
		case 's':
			o->size = number(optarg, 1, 1ul << 30);
			break;
		case 'n':
			o->iters = number(optarg, 1, 1ul << 30);
			break;
		case 'b':
			o->busy = true;
			break;
		case 't':
			o->seconds = number(optarg, 1, 3600);
			break;
		case 'l':
			o->limit_s = number(optarg, 1, 3600);
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	if ((o->mode == UDP_PINGPONG || o->mode == UDP_RATE) &&
	    o->size > UDP_MAX)
		die("a UDP message holds at most %d bytes", UDP_MAX);
}

/* ---- connection ------------------------------------------------------------ */

static struct sockaddr_in loopback(void)
{
	return (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
}

static int bound_socket(int type, struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);
	int fd = socket(AF_INET, type, 0);

	/* port 0: the kernel picks a free one, so runs never collide */
	*sa = loopback();
	if (fd < 0 || bind(fd, (struct sockaddr *)sa, sizeof(*sa)) ||
	    getsockname(fd, (struct sockaddr *)sa, &len))
		die("socket: %s", strerror(errno));
	return fd;
}

/*
 * shm-pingpong's link: one buffer and one eventfd per direction (0: parent
 * to child, 1: back), in memory both processes share after the fork.  The
 * "fd" of a side is the direction it sends in.
 */
static struct {
	uint8_t *buf[2];
	_Atomic uint64_t *seq;	/* messages sent, per direction */
	_Atomic bool *closed;	/* the parent is done */
	int efd[2];
	uint64_t seen[2];	/* messages received, per direction */
} shm;

static void shm_link(const struct opts *o, int fd[2])
{
	size_t head = 64;
	uint8_t *m = mmap(NULL, head + 2 * o->size, PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	memset(m, 0, head + 2 * o->size);
	shm.seq = (_Atomic uint64_t *)m;
	shm.closed = (_Atomic bool *)(m + 2 * sizeof(uint64_t));
	for (int d = 0; d < 2; d++) {
		shm.buf[d] = m + head + d * o->size;
		shm.efd[d] = eventfd(0, 0);
		if (shm.efd[d] < 0)
			die("eventfd: %s", strerror(errno));
	}
	fd[0] = 0;
	fd[1] = 1;
}

static void shm_send(const struct opts *o, int dir, const uint8_t *buf,
		     size_t len)
{
	uint64_t one = 1;

	memcpy(shm.buf[dir], buf, len);
	atomic_fetch_add_explicit(&shm.seq[dir], 1, memory_order_release);
	if (!o->busy && write(shm.efd[dir], &one, sizeof(one)) != sizeof(one))
		die("eventfd write: %s", strerror(errno));
}

/* Waits for the next message towards the side that sends in dir's
 * opposite; false once the parent has closed. */
static bool shm_recv(const struct opts *o, int dir, uint8_t *buf, size_t len)
{
	int from = !dir;
	uint64_t v;

	while (atomic_load_explicit(&shm.seq[from], memory_order_acquire) ==
	       shm.seen[from]) {
		if (atomic_load(shm.closed))
			return false;
		if (!o->busy && read(shm.efd[from], &v, sizeof(v)) < 0 &&
		    errno != EINTR)
			die("eventfd read: %s", strerror(errno));
	}
	shm.seen[from]++;
	memcpy(buf, shm.buf[from], len);
	return true;
}

static void shm_close(void)
{
	uint64_t one = 1;

	atomic_store(shm.closed, true);
	if (write(shm.efd[0], &one, sizeof(one)) != sizeof(one))
		die("eventfd write: %s", strerror(errno));
}

/* Two UDP sockets connected to each other, the two ends of a TCP
 * connection, or shm-pingpong's link. */
static void connect_pair(const struct opts *o, int fd[2])
{
	struct sockaddr_in a, b;
	int lfd, one = 1;

	if (o->mode == SHM_PINGPONG) {
		shm_link(o, fd);
		return;
	}

	if (o->mode == UDP_PINGPONG || o->mode == UDP_RATE) {
		fd[0] = bound_socket(SOCK_DGRAM, &a);
		fd[1] = bound_socket(SOCK_DGRAM, &b);
		if (connect(fd[0], (struct sockaddr *)&b, sizeof(b)) ||
		    connect(fd[1], (struct sockaddr *)&a, sizeof(a)))
			die("connect: %s", strerror(errno));
		return;
	}

	/* The kernel completes a loopback connect from the listen backlog. */
	lfd = bound_socket(SOCK_STREAM, &a);
	fd[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fd[0] < 0 || listen(lfd, 1) ||
	    connect(fd[0], (struct sockaddr *)&a, sizeof(a)))
		die("connect: %s", strerror(errno));
	fd[1] = accept(lfd, NULL, NULL);
	if (fd[1] < 0)
		die("accept: %s", strerror(errno));
	close(lfd);
	/* Ping-pong messages must leave at once, not wait for Nagle. */
	for (int i = 0; i < 2; i++)
		if (setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
			die("TCP_NODELAY: %s", strerror(errno));
}

/* ---- data path ------------------------------------------------------------ */

static void send_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("send: %s", n ? strerror(errno) : "nothing sent");
		buf += n;
		len -= (size_t)n;
	}
}

/*
 * Receives exactly len bytes: one datagram, or as many stream segments as it
 * takes.  Returns false at the end: an empty datagram, or the peer's close()
 * before the first byte.
 */
static bool recv_all(const struct opts *o, int fd, uint8_t *buf, size_t len)
{
	int flags = o->busy ? MSG_DONTWAIT : 0;
	size_t got = 0;

	while (got < len) {
		ssize_t n = recv(fd, buf + got, len - got, flags);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n == 0 && got == 0)
			return false;
		if (n <= 0)
			die("recv: %s", n ? strerror(errno) : "peer closed mid-message");
		if (o->mode == UDP_PINGPONG && (size_t)n != len)
			die("datagram of %zd bytes, expected %zu", n, len);
		got += (size_t)n;
	}
	return true;
}

/* udp-rate's child: counts datagrams until RATE_IDLE_MS pass without one,
 * then answers with the count and the time from the first to the last. */
static _Noreturn void rate_sink(const struct opts *o, int fd, uint8_t *buf)
{
	struct mmsghdr msg[RATE_BATCH];
	struct iovec iov = { buf, o->size };
	struct timeval idle = { 0, RATE_IDLE_MS * 1000 };
	int rcvbuf = 16 << 20;
	uint64_t got = 0, first = 0, last = 0, report[2];

	for (int i = 0; i < RATE_BATCH; i++)
		msg[i].msg_hdr = (struct msghdr){ .msg_iov = &iov,
						  .msg_iovlen = 1 };
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle)))
		die("SO_RCVTIMEO: %s", strerror(errno));
	for (;;) {
		/* the first datagram may take the sender's start-up to come */
		int n = recvmmsg(fd, msg, RATE_BATCH, 0, NULL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && got)
			break;
		if (n < 0 && errno != EAGAIN)
			die("recvmmsg: %s", strerror(errno));
		if (n <= 0)
			continue;
		last = now_ns();
		if (!got)
			first = last;
		got += (uint64_t)n;
	}
	report[0] = got;
	report[1] = last - first;
	send_all(fd, (uint8_t *)report, sizeof(report));
	exit(0);
}

/* The child: echo every message, or sink the stream and acknowledge it. */
static _Noreturn void serve(const struct opts *o, int fd, uint8_t *buf)
{
	uint8_t ack = 1;

	if (o->mode == UDP_RATE)
		rate_sink(o, fd, buf);
	if (o->mode == SHM_PINGPONG) {
		while (shm_recv(o, fd, buf, o->size))
			shm_send(o, fd, buf, o->size);
		exit(0);
	}
	if (o->mode != TCP_STREAM) {
		while (recv_all(o, fd, buf, o->size))
			send_all(fd, buf, o->size);
		exit(0);
	}
	for (unsigned long i = 0; i < o->iters; i++)
		if (!recv_all(o, fd, buf, o->size))
			die("peer closed mid-stream");
	send_all(fd, &ack, 1);
	exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void round_trip(const struct opts *o, int fd, uint8_t *buf)
{
	if (o->mode == SHM_PINGPONG) {
		shm_send(o, fd, buf, o->size);
		if (!shm_recv(o, fd, buf, o->size))
			die("the server closed the link");
		return;
	}
	send_all(fd, buf, o->size);
	if (!recv_all(o, fd, buf, o->size))
		die("the server closed the connection");
}

static void pingpong(const struct opts *o, int fd, uint8_t *buf)
{
	uint64_t *rtt = calloc(o->iters, sizeof(*rtt));
	uint64_t t0, end;
	unsigned long n;
	double med, p99;

	if (!rtt)
		die("out of memory");
	for (n = 0; n < WARMUP; n++)
		round_trip(o, fd, buf);
	end = now_ns() + o->seconds * 1000000000ull;
	for (n = 0; n < o->iters; n++) {
		t0 = now_ns();
		if (n && t0 > end)
			break;
		round_trip(o, fd, buf);
		rtt[n] = now_ns() - t0;
	}
	qsort(rtt, n, sizeof(*rtt), cmp_u64);
	med = rtt[n / 2] / 1e3;
	p99 = rtt[n * 99 / 100] / 1e3;
	printf("%s size=%zu iters=%lu busy=%d rtt_median_us=%.2f rtt_p99_us=%.2f oneway_median_us=%.2f\n",
	       mode_names[o->mode], o->size, n, o->busy, med, p99, med / 2);
	free(rtt);
}

static void stream(const struct opts *o, int fd, uint8_t *buf)
{
	uint64_t t0 = now_ns();
	uint8_t ack;

	for (unsigned long i = 0; i < o->iters; i++)
		send_all(fd, buf, o->size);
	if (!recv_all(o, fd, &ack, 1))
		die("the server closed the connection");
	printf("%s size=%zu writes=%lu mib_s=%.1f\n", mode_names[o->mode],
	       o->size, o->iters,
	       (double)o->size * o->iters / ((now_ns() - t0) / 1e9) / (1 << 20));
}

static void rate_blast(const struct opts *o, int fd, uint8_t *buf)
{
	struct mmsghdr msg[RATE_BATCH];
	struct iovec iov = { buf, o->size };
	uint64_t report[2];
	unsigned long sent = 0;

	for (int i = 0; i < RATE_BATCH; i++)
		msg[i].msg_hdr = (struct msghdr){ .msg_iov = &iov,
						  .msg_iovlen = 1 };
	while (sent < o->iters) {
		unsigned want = o->iters - sent < RATE_BATCH ? o->iters - sent
							     : RATE_BATCH;
		int n = sendmmsg(fd, msg, want, 0);

		if (n < 0 && (errno == EINTR || errno == ENOBUFS))
			continue;
		if (n < 0)
			die("sendmmsg: %s", strerror(errno));
		sent += (unsigned long)n;
	}
	/* the report: a datagram of its own size, which the count excludes */
	for (;;) {
		ssize_t n = recv(fd, report, sizeof(report), 0);

		if (n == sizeof(report))
			break;
		if (n < 0 && errno != EINTR)
			die("recv: %s", strerror(errno));
	}
	printf("%s size=%zu sent=%lu received=%llu dgrams_per_s=%.0f\n",
	       mode_names[o->mode], o->size, sent,
	       (unsigned long long)report[0],
	       report[1] ? report[0] / (report[1] / 1e9) : 0.0);
}

static void copy_rate(const struct opts *o)
{
	uint8_t *src = malloc(o->size), *dst = malloc(o->size);
	uint64_t t0;

	if (!src || !dst)
		die("out of memory");
	memset(src, 0x5a, o->size);
	memset(dst, 0xa5, o->size);
	t0 = now_ns();
	for (unsigned long i = 0; i < o->iters; i++) {
		memcpy(dst, src, o->size);
		/* keep the copies from being merged or dropped */
		__asm__ volatile("" : : "r"(dst) : "memory");
	}
	printf("%s size=%zu copies=%lu mib_s=%.1f\n", mode_names[o->mode],
	       o->size, o->iters,
	       (double)o->size * o->iters / ((now_ns() - t0) / 1e9) / (1 << 20));
	free(src);
	free(dst);
}

int main(int argc, char **argv)
{
	struct opts o;
	int fd[2], status;
	uint8_t *buf;
	pid_t pid, parent = getpid();

	parse(argc, argv, &o);
	if (o.mode == MEMCPY) {
		copy_rate(&o);
		return 0;
	}
	buf = malloc(o.size);
	if (!buf)
		die("out of memory");
	/* touched now, so that page faults stay out of the measurement */
	memset(buf, 0x5a, o.size);
	connect_pair(&o, fd);

	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		role = "netbase server";
		/* dies with the parent, even if the parent is killed */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			exit(1);
		if (o.mode != SHM_PINGPONG)
			close(fd[0]);
		alarm(o.limit_s);
		serve(&o, fd[1], buf);
	}
	if (o.mode != SHM_PINGPONG)
		close(fd[1]);
	alarm(o.limit_s);
	if (o.mode == TCP_STREAM)
		stream(&o, fd[0], buf);
	else if (o.mode == UDP_RATE)
		rate_blast(&o, fd[0], buf);
	else
		pingpong(&o, fd[0], buf);
	fflush(stdout);

	/* UDP has no close() the other side sees: an empty datagram ends it. */
	if (o.mode == UDP_PINGPONG && send(fd[0], buf, 0, 0))
		die("send: %s", strerror(errno));
	if (o.mode == SHM_PINGPONG)
		shm_close();
	else
		close(fd[0]);
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		die("the server failed");
	return 0;
}
