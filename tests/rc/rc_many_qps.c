/*
 * rc.many_qps: 10,000 RC QPs in one process under a soft limit of 1024 file
 * descriptors (as `ulimit -n 1024`), connected in pairs over 127.0.0.1, each
 * pair passing an RDMA WRITE one way and a SEND the other, data checked.
 * Prints the memory the QPs took (resident set growth per QP) and how many
 * descriptors the process ended with.
 *
 * With a message size past a packet, the QPs that WRITE (half of them) want
 * more packets in flight together than the process's budget: some must
 * wait their turn (the budget_waits counter), and all still complete.
 *
 *   rc_many_qps [number of QPs, even; default 10000] [message bytes; 64]
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "harness.h"

enum { WRS = 4 };
/* Each QP retries for 4.096 us * 2^timeout * 8: 0.54 s, which ten
 * thousand QPs' first packets at ThreadSanitizer's tenfold slowdown can
 * outlast on a loaded machine (4.3 s there). */
#ifdef UROCE_TSAN
#define ACK_TIMEOUT 17
#else
#define ACK_TIMEOUT 14
#endif

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n - 3;	/* ".", ".." and the directory itself */
}

static struct ibv_qp *make_qp(struct h_proc *p, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = WRS, .max_recv_wr = WRS,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = H_PORT,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	struct ibv_qp *qp = ibv_create_qp(p->pd, &ia);

	if (!qp)
		h_fail("ibv_create_qp: %s", strerror(errno));
	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	return qp;
}

static void connect_to(struct h_proc *p, struct ibv_qp *qp, uint32_t dqpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
		.dest_qp_num = dqpn, .rq_psn = 1, .max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = H_PORT,
			     .grh = { .dgid = p->gid, .hop_limit = 64,
				      .sgid_index = H_GID_INDEX } },
	};

	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
					   IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC |
					   IBV_QP_MIN_RNR_TIMER));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS,
				  .timeout = ACK_TIMEOUT,
				  .retry_cnt = 7, .rnr_retry = 7, .sq_psn = 1,
				  .max_rd_atomic = 1 };
	H_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

static long nqps = 10000;
static size_t msg = 64;
static bool budget;	/* messages past a packet: the budget's test */

/* Polls cq once; every completion must be a success.  Returns how many. */
static int reap(struct ibv_cq *cq)
{
	struct ibv_wc wc[64];
	int n = ibv_poll_cq(cq, 64, wc);

	H_CHECK(n >= 0);
	for (int i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS)
			h_fail("wr %llu: %s", (unsigned long long)wc[i].wr_id,
			       ibv_wc_status_str(wc[i].status));
	return n;
}

static void run(struct h_proc *p)
{
	struct rlimit rl;
	long pairs = nqps / 2, before;
	struct ibv_qp **qp = calloc((size_t)nqps, sizeof(*qp));
	struct ibv_cq *cq;
	struct h_buf b;
	long done = 0;

	H_CHECK(qp);
	H_OK(getrlimit(RLIMIT_NOFILE, &rl) ? errno : 0);
	/* ulimit -n 1024, or less where the hard limit is lower */
	rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
	H_OK(setrlimit(RLIMIT_NOFILE, &rl) ? errno : 0);
	H_CHECK(p->dev.max_qp >= nqps);
	cq = ibv_create_cq(p->ctx, 4096, NULL, NULL, 0);
	H_CHECK(cq);
	/* per pair: the WRITE's target, the SEND's source and its receive */
	h_buf_alloc(p, &b, (size_t)pairs * 3 * msg,
		    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	h_fill(b.mem, (size_t)pairs * 3 * msg, 1);

	before = rss_kib();
	for (long i = 0; i < nqps; i++)
		qp[i] = make_qp(p, cq);
	for (long i = 0; i < nqps; i += 2) {
		connect_to(p, qp[i], qp[i + 1]->qp_num);
		connect_to(p, qp[i + 1], qp[i]->qp_num);
	}
	printf("rc.many_qps: %ld QPs connected, %ld KiB resident for them "
	       "(%.1f KiB per QP), %d file descriptors open\n", nqps,
	       rss_kib() - before, (double)(rss_kib() - before) / (double)nqps,
	       open_fds());

	for (long k = 0; k < pairs; k++) {
		uint8_t *w = b.mem + k * 3 * msg, *src = w + msg, *dst = w + 2 * msg;
		struct ibv_sge s = { (uintptr_t)src, (uint32_t)msg, b.mr->lkey };
		struct ibv_sge r = { (uintptr_t)dst, (uint32_t)msg, b.mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = (uint64_t)k, .sg_list = &r,
					  .num_sge = 1 }, *rbad;
		struct ibv_send_wr sw = { .wr_id = (uint64_t)k, .sg_list = &s,
					  .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED },
				   *sbad;
		struct ibv_send_wr ww = sw;

		/* qp[2k] WRITEs its pair's source bytes into w; qp[2k+1]
		 * SENDs them to qp[2k]'s receive at dst */
		ww.opcode = IBV_WR_RDMA_WRITE;
		ww.wr.rdma.remote_addr = (uintptr_t)w;
		ww.wr.rdma.rkey = b.mr->rkey;
		H_OK(ibv_post_recv(qp[2 * k], &rw, &rbad));
		H_OK(ibv_post_send(qp[2 * k], &ww, &sbad));
		H_OK(ibv_post_send(qp[2 * k + 1], &sw, &sbad));
		/* keep the CQ from overflowing: at most ~3 * 1000 pending */
		while (done < 3 * (k + 1) - 3000)
			done += reap(cq);
	}
	for (uint64_t t0 = h_now_ns(); done < 3 * pairs;) {
		done += reap(cq);
		if (h_now_ns() - t0 > 60ull * 1000 * 1000 * 1000)
			h_fail("%ld of %ld completions", done, 3 * pairs);
	}
	for (long k = 0; k < pairs; k++) {
		uint8_t *w = b.mem + k * 3 * msg;

		h_expect_mem(w, w + msg, msg, "WRITE target");
		h_expect_mem(w + 2 * msg, w + msg, msg, "SEND target");
	}
	for (long i = 0; i < nqps; i++)
		H_OK(ibv_destroy_qp(qp[i]));
	H_OK(ibv_destroy_cq(cq));
	h_buf_free(&b);
	free(qp);
	if (budget) {
		static const char *const names[] = { "budget_waits" };
		uint64_t waits;

		h_close_counting(p, names, &waits, 1);
		printf("rc.many_qps: %" PRIu64 " waits for the in-flight "
		       "budget\n", waits);
		if (!waits)
			h_fail("%ld QPs WRITing %zu bytes each never waited "
			       "for the budget", pairs, msg);
	}
}

int main(int argc, char **argv)
{
	struct h_test t = { .name = "rc.many_qps", .nroles = 1,
			    .role = { run }, .deadline_s = 240 };

	if (argc > 1)
		nqps = strtol(argv[1], NULL, 0) & ~1L;
	if (argc > 2) {
		msg = strtoul(argv[2], NULL, 0);
		budget = true;
		t.name = "rc.many_qps.budget";
		/* counters printed as the device closes */
		if (setenv("UROCE_DEBUG", "1", 1))
			return 1;
	}
	return h_main(&t);
}
