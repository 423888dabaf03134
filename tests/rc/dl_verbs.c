/*
 * The library rc_dlclose loads and unloads: like libfabric under Open MPI's
 * ofi MTL, it is linked against libibverbs and librdmacm, and leaves what it
 * made (two connected RC QPs, a listening rdma_cm id) behind when the
 * program dlcloses it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

enum { DEPTH = 4, MSG = 64, POLL_MS = 5000 };

static int to_rts(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits for n completions, all successful; -1 on an error or timeout. */
static int reap(struct ibv_cq *cq, int n)
{
	uint64_t end = now_ms() + POLL_MS;
	struct ibv_wc wc;

	while (n > 0 && now_ms() < end) {
		int got = ibv_poll_cq(cq, 1, &wc);

		if (got < 0 || (got == 1 && wc.status != IBV_WC_SUCCESS))
			return -1;
		n -= got;
	}
	return n ? -1 : 0;
}

/* A SEND from one QP to the other and a listening rdma_cm id; 0 when all
 * worked.  Everything stays allocated. */
int dl_verbs_use(void)
{
	static char buf[2][MSG];
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0])
						  : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, DEPTH, NULL, NULL, 0) : NULL;
	struct ibv_mr *mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf),
					     IBV_ACCESS_LOCAL_WRITE)
			       : NULL;
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = DEPTH, .max_recv_wr = DEPTH,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp[2] = { mr ? ibv_create_qp(pd, &ia) : NULL,
				 mr ? ibv_create_qp(pd, &ia) : NULL };
	union ibv_gid gid;

	if (list)
		ibv_free_device_list(list);
	if (!qp[0] || !qp[1] || ibv_query_gid(ctx, 1, 0, &gid) ||
	    to_rts(qp[0], qp[1]->qp_num, &gid) ||
	    to_rts(qp[1], qp[0]->qp_num, &gid))
		return -1;

	struct ibv_sge rs = { (uintptr_t)buf[1], MSG, mr->lkey };
	struct ibv_sge ss = { (uintptr_t)buf[0], MSG, mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 },
			   *rbad;
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ss, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED },
			   *sbad;

	memset(buf[0], 'x', MSG);
	if (ibv_post_recv(qp[1], &rwr, &rbad) ||
	    ibv_post_send(qp[0], &swr, &sbad) || reap(cq, 2) ||
	    memcmp(buf[0], buf[1], MSG))
		return -1;

	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in any = { .sin_family = AF_INET };

	any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(id, (struct sockaddr *)&any) || rdma_listen(id, 1))
		return -1;
	return 0;
}
