/*
 * rc.samehost.<case>: the same-host path (two uroce processes of one user on
 * one host, RDMA WRITE and READ moved by the requester itself).
 *
 *   stopped   the target process is stopped (SIGSTOP: none of its threads
 *             runs) while 1 MiB is written into it and read back, both
 *             scattered over three SGEs; every byte arrives
 *   shm_off   the same with UROCE_SHM=0 in both: now the wire carries it,
 *             and a stopped target answers nothing (IBV_WC_RETRY_EXC_ERR)
 *   dereg     the requester keeps writing while the target deregisters the
 *             MR: once ibv_dereg_mr returns, no write lands (the target
 *             refills the buffer and watches it), and the requester's
 *             writes end with IBV_WC_REM_ACCESS_ERR
 *   rereg     the same with ibv_rereg_mr taking REMOTE_WRITE away
 *   qp_error  the same with the target's QP moved to ERR: writes end with
 *             IBV_WC_RETRY_EXC_ERR (nothing answers), and none lands
 *   stale     segments left in /dev/shm by processes that died without
 *             closing (one whose pid is gone, one whose pid now belongs to
 *             another process) are removed when a process opens the
 *             device; then as "stopped"
 *   killed    the target, its segment mapped by the requester after a
 *             WRITE, is killed with SIGKILL: once the requester has closed
 *             its device, nothing of the target is left in /dev/shm
 *
 * Role 0 is the requester, role 1 the target.  Timeout 10 (4.2 ms) and
 * retry_cnt 1 keep a request the wire has to time out short.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

enum {
	BIG = 1 << 20,
	CHUNK = 64 << 10,
	RACE_MS = 30,		/* writes flying before the target acts */
	WATCH_MS = 100,		/* the target watches its buffer this long */
	MAX_WRITES = 200000,	/* bounds the requester's loop */
	FILL = 0x5A,
};

enum scenario { STOPPED, SHM_OFF, DEREG, REREG, QP_ERROR, STALE, KILLED };
static enum scenario scenario;

static struct h_qp_cfg cfg(struct h_proc *p)
{
	struct h_qp_cfg c = h_qp_defaults(p);

	/* 2 x 16.8 ms before a request the target never answers fails: short,
	 * and long enough for a loaded (sanitized) target's engine to NAK */
	c.timeout = 12;
	c.retry_cnt = 1;
	return c;
}

/* The process state letter in /proc/<pid>/stat ('T' when stopped). */
static char proc_state(pid_t pid)
{
	char path[64], buf[512], *close_paren;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] ? close_paren[2] : '?';
}

static void wait_stopped(pid_t pid)
{
	for (int i = 0; i < 2000 && proc_state(pid) != 'T'; i++)
		h_sleep_ms(1);
	H_EQ(proc_state(pid), 'T');
}

/* ---- stopped / shm_off ---------------------------------------------------- */

static void stopped_target(struct h_proc *p, struct h_ep *ep, int sock)
{
	struct h_buf b;
	uint8_t *want = malloc(BIG);
	pid_t me = getpid();

	(void)ep;
	H_CHECK(want);
	h_buf_alloc(p, &b, BIG, IBV_ACCESS_LOCAL_WRITE |
				IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ);
	h_fill(b.mem, BIG, 7);
	h_send_rbuf(sock, &b);
	h_send(sock, &me, sizeof(me));
	h_sync(sock);
	raise(SIGSTOP);		/* the requester continues us */
	h_sync(sock);
	if (scenario == STOPPED) {
		h_fill(want, BIG, 8);
		h_expect_mem(b.mem, want, BIG, "target after WRITE");
	}
	h_buf_free(&b);
	free(want);
}

static void stopped_requester(struct h_proc *p, struct h_ep *ep, int sock)
{
	struct h_buf out, in;
	struct ibv_sge sge[3];
	struct h_layout l = h_split(0, BIG, 0, 1, 0);
	struct h_rbuf r;
	uint8_t *want = malloc(BIG);
	pid_t target;
	int n;

	H_CHECK(want);
	h_buf_alloc(p, &out, BIG, IBV_ACCESS_LOCAL_WRITE);
	h_buf_alloc(p, &in, BIG, IBV_ACCESS_LOCAL_WRITE);
	h_fill(out.mem, BIG, 8);
	r = h_recv_rbuf(sock);
	h_recv(sock, &target, sizeof(target));
	h_sync(sock);
	wait_stopped(target);

	n = h_sges(&l, &out, sge);
	h_post_rdma(ep, 1, IBV_WR_RDMA_WRITE, sge, n, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	if (scenario == SHM_OFF) {
		H_EXPECT_STATUS(ep, 1, IBV_WC_RETRY_EXC_ERR,
				"WRITE to a stopped process over UDP");
	} else {
		H_EXPECT_SEND(ep, .wr_id = 1, .opcode = IBV_WC_RDMA_WRITE);
		n = h_sges(&l, &in, sge);
		h_post_rdma(ep, 2, IBV_WR_RDMA_READ, sge, n,
			    IBV_SEND_SIGNALED, r.addr, r.rkey, 0);
		H_EXPECT_SEND(ep, .wr_id = 2, .opcode = IBV_WC_RDMA_READ,
			      .byte_len = BIG);
		h_expect_mem(in.mem, out.mem, BIG, "READ from a stopped process");
	}
	H_EQ(proc_state(target), 'T');
	H_CHECK(kill(target, SIGCONT) == 0);
	h_sync(sock);
	h_buf_free(&out);
	h_buf_free(&in);
	free(want);
}

/* ---- dereg / rereg / qp_error --------------------------------------------- */

static void race_target(struct h_proc *p, struct h_ep *ep, int sock)
{
	struct h_buf b;
	uint8_t *want = malloc(BIG);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	H_CHECK(want);
	h_buf_alloc(p, &b, BIG, IBV_ACCESS_LOCAL_WRITE |
				IBV_ACCESS_REMOTE_WRITE);
	h_send_rbuf(sock, &b);
	h_sync(sock);			/* the requester writes */
	h_sleep_ms(RACE_MS);
	switch (scenario) {
	case DEREG:
		H_OK(ibv_dereg_mr(b.mr));
		b.mr = NULL;
		break;
	case REREG:
		H_EQ(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL,
				  0, IBV_ACCESS_LOCAL_WRITE), 0);
		break;
	default:
		H_OK(ibv_modify_qp(ep->qp, &a, IBV_QP_STATE));
		break;
	}
	/* from here on no write may land */
	memset(b.mem, FILL, BIG);
	memset(want, FILL, BIG);
	h_sleep_ms(WATCH_MS);
	h_expect_mem(b.mem, want, BIG, "buffer after the target withdrew it");
	h_sync(sock);			/* the requester saw its error */
	if (b.mr)
		h_buf_free(&b);
	else
		free(b.mem);
	free(want);
}

static void race_requester(struct h_proc *p, struct h_ep *ep, int sock)
{
	enum ibv_wc_status want = scenario == QP_ERROR ? IBV_WC_RETRY_EXC_ERR
						       : IBV_WC_REM_ACCESS_ERR;
	struct h_buf out;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct h_rbuf r;
	unsigned i;

	h_buf_alloc(p, &out, CHUNK, IBV_ACCESS_LOCAL_WRITE);
	memset(out.mem, 0xC3, CHUNK);
	r = h_recv_rbuf(sock);
	h_sync(sock);
	sge = (struct ibv_sge){ (uintptr_t)out.mem, CHUNK, out.mr->lkey };
	for (i = 0; i < MAX_WRITES; i++) {
		h_post_rdma(ep, i, IBV_WR_RDMA_WRITE, &sge, 1,
			    IBV_SEND_SIGNALED,
			    r.addr + (i * CHUNK) % BIG, r.rkey, 0);
		H_CHECK(h_poll(ep->scq, &wc, H_WC_TIMEOUT_MS));
		if (wc.status != IBV_WC_SUCCESS)
			break;
	}
	if (i == MAX_WRITES)
		h_fail("%u writes, and none failed", i);
	printf("%u writes landed, then status %s\n", i,
	       ibv_wc_status_str(wc.status));
	H_EQ(wc.status, want);
	H_EQ(h_qp_state(ep->qp), IBV_QPS_ERR);
	h_sync(sock);
	h_buf_free(&out);
}

static void killed_target(struct h_proc *p, int sock);
static void killed_requester(struct h_proc *p, struct h_ep *ep, int sock);

static void run(struct h_proc *p)
{
	struct h_qp_cfg c = cfg(p);
	int sock = p->sock[0];
	struct h_ep ep;

	h_ep_create(p, &ep, &c);
	h_ep_connect(p, &ep, sock);
	if (scenario == KILLED) {
		if (p->role)
			killed_target(p, sock);
		else
			killed_requester(p, &ep, sock);
		return;
	}
	if (scenario == STOPPED || scenario == SHM_OFF || scenario == STALE) {
		if (p->role)
			stopped_target(p, &ep, sock);
		else
			stopped_requester(p, &ep, sock);
	} else {
		if (p->role)
			race_target(p, &ep, sock);
		else
			race_requester(p, &ep, sock);
	}
	h_ep_destroy(&ep);
}

/* ---- stale ----------------------------------------------------------------- */

/* The first bytes of a segment (src/samehost/segment.h): magic, nonce,
 * where the header is in its owner, the owner's pid. */
struct seg_head {
	uint64_t magic, nonce, self;
	int32_t pid;
};
#define SEG_MAGIC 0x31687365636f7275ull

/* Makes a segment, under a free slot's name, that says pid owns it. */
static void make_stale(char *name, size_t size, pid_t pid, uint64_t nonce)
{
	struct stat ns;
	const char *port = getenv("UROCE_PORT");
	struct seg_head h = { SEG_MAGIC, nonce, 0x1000, pid };

	if (stat("/proc/self/ns/net", &ns))
		ns.st_ino = 0;
	for (unsigned slot = 1023; slot > 900; slot--) {
		int fd;

		snprintf(name, size, "/uroce.%llu.%s.%u.%u",
			 (unsigned long long)ns.st_ino,
			 port && *port ? port : "4791", (unsigned)getuid(), slot);
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0)
			continue;
		if (write(fd, &h, sizeof(h)) != (ssize_t)sizeof(h))
			h_fail("writing %s: %s", name, strerror(errno));
		close(fd);
		return;
	}
	h_fail("no free slot for a stale segment");
}

static bool shm_exists(const char *name)
{
	int fd = shm_open(name, O_RDONLY, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Two stale segments before the roles open the device; both gone after. */
static int run_stale(const struct h_test *t)
{
	char gone[128], reused[128];
	pid_t child = fork();
	int status, rc;

	if (child == 0)
		_exit(0);
	H_CHECK(child > 0 && waitpid(child, &status, 0) == child);
	make_stale(gone, sizeof(gone), child, 1);
	/* our own pid, alive, but the nonce is not in our memory */
	make_stale(reused, sizeof(reused), getpid(), 2);
	rc = h_main(t);
	if (shm_exists(gone) || shm_exists(reused)) {
		printf("FAIL: stale segments left: %s %s\n",
		       shm_exists(gone) ? gone : "",
		       shm_exists(reused) ? reused : "");
		shm_unlink(gone);
		shm_unlink(reused);
		return 1;
	}
	return rc;
}

/* ---- killed ---------------------------------------------------------------- */

static void killed_target(struct h_proc *p, int sock)
{
	struct h_buf b;
	pid_t me = getpid();

	h_buf_alloc(p, &b, CHUNK, IBV_ACCESS_LOCAL_WRITE |
				  IBV_ACCESS_REMOTE_WRITE);
	h_send_rbuf(sock, &b);
	h_send(sock, &me, sizeof(me));
	/* the requester writes, then kills us */
	for (unsigned i = 0; i < p->t->deadline_s * 100; i++)
		h_sleep_ms(10);
	h_fail("still alive: the requester did not kill the target");
}

/* The name in /dev/shm of the segment pid owns, from its header. */
static bool segment_of(pid_t pid, char *name, size_t size)
{
	char prefix[96];
	struct stat ns;
	const char *port = getenv("UROCE_PORT");
	struct dirent *d;
	bool found = false;
	DIR *dir = opendir("/dev/shm");

	if (!dir)
		return false;
	if (stat("/proc/self/ns/net", &ns))
		ns.st_ino = 0;
	snprintf(prefix, sizeof(prefix), "uroce.%llu.%s.%u.",
		 (unsigned long long)ns.st_ino, port && *port ? port : "4791",
		 (unsigned)getuid());
	while (!found && (d = readdir(dir))) {
		struct seg_head h;
		int fd;

		if (strncmp(d->d_name, prefix, strlen(prefix)))
			continue;
		snprintf(name, size, "/%s", d->d_name);
		fd = shm_open(name, O_RDONLY, 0);
		if (fd < 0)
			continue;
		found = pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
			h.magic == SEG_MAGIC && h.pid == pid;
		close(fd);
	}
	closedir(dir);
	return found;
}

static void killed_requester(struct h_proc *p, struct h_ep *ep, int sock)
{
	struct h_buf out;
	struct ibv_sge sge = { 0 };
	struct h_rbuf r;
	pid_t target;
	char name[300];
	char state;

	h_buf_alloc(p, &out, CHUNK, IBV_ACCESS_LOCAL_WRITE);
	h_fill(out.mem, CHUNK, 9);
	r = h_recv_rbuf(sock);
	h_recv(sock, &target, sizeof(target));
	sge = (struct ibv_sge){ (uintptr_t)out.mem, CHUNK, out.mr->lkey };
	h_post_rdma(ep, 1, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
		    r.addr, r.rkey, 0);
	H_EXPECT_SEND(ep, .wr_id = 1, .opcode = IBV_WC_RDMA_WRITE);
	if (!segment_of(target, name, sizeof(name)))
		h_fail("the target (pid %d) has no segment in /dev/shm",
		       (int)target);
	H_CHECK(kill(target, SIGKILL) == 0);
	state = proc_state(target);
	for (int i = 0; i < 2000 && state != 'Z' && state != '?'; i++) {
		h_sleep_ms(1);
		state = proc_state(target);
	}
	H_CHECK(state == 'Z' || state == '?');
	h_buf_free(&out);
	h_ep_destroy(ep);
	h_close(p);
	p->ctx = NULL;
	if (shm_exists(name)) {
		shm_unlink(name);
		h_fail("the killed target's segment %s outlived its peer", name);
	}
}

int main(int argc, char **argv)
{
	static const char *const names[] = {
		[STOPPED] = "stopped", [SHM_OFF] = "shm_off", [DEREG] = "dereg",
		[REREG] = "rereg", [QP_ERROR] = "qp_error", [STALE] = "stale",
		[KILLED] = "killed",
	};
	static char name[64];
	struct h_test t = { .nroles = 2, .role = { run, run }, .deadline_s = 30 };

	for (size_t i = 0; argc > 1 && i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(argv[1], names[i]))
			continue;
		scenario = (enum scenario)i;
		snprintf(name, sizeof(name), "rc.samehost.%s", names[i]);
		t.name = name;
		/* before any verb: the configuration is read once */
		setenv("UROCE_SHM", scenario == SHM_OFF ? "0" : "1", 1);
		t.sigkilled[1] = scenario == KILLED;
		return scenario == STALE ? run_stale(&t) : h_main(&t);
	}
	fprintf(stderr,
		"usage: %s stopped|shm_off|dereg|rereg|qp_error|stale|killed\n",
		argv[0]);
	return 2;
}
