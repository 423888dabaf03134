/*
 * The rest of libibverbs' exported surface that is not an object verb:
 * enum-to-string and rate helpers, fork support, sysfs helpers, the kernel
 * ABI copy helpers librdmacm uses, asynchronous events, and the verbs uroce
 * does not implement (each reports EOPNOTSUPP, never a silent success).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include "transport/transport.h"
#include "uroce.h"

/* Public symbols whose prototypes live in rdma-core's private driver.h and
 * marshall.h, which libibverbs-dev does not ship. */
UROCE_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file,
				     char *buf, size_t size);
UROCE_EXPORT const char *ibv_get_sysfs_path(void);
UROCE_EXPORT int ibv_dontfork_range(void *base, size_t size);
UROCE_EXPORT int ibv_dofork_range(void *base, size_t size);
UROCE_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
					     struct ib_uverbs_ah_attr *src);
UROCE_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
					     struct ib_uverbs_qp_attr *src);
UROCE_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
					      struct ib_user_path_rec *src);
UROCE_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
					    struct ibv_sa_path_rec *src);

/* ---- enum strings ----------------------------------------------------------
 * The texts are rdma-core's: tools print them and users search for them. */

static const char *enum_str(const char *const *tbl, size_t n, long v)
{
	return v >= 0 && (size_t)v < n && tbl[v] ? tbl[v] : "unknown";
}

UROCE_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const str[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};

	return enum_str(str, ARRAY_SIZE(str), status);
}

UROCE_EXPORT const char *ibv_node_type_str(enum ibv_node_type node_type)
{
	static const char *const str[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
	};

	return enum_str(str, ARRAY_SIZE(str), node_type);
}

UROCE_EXPORT const char *ibv_port_state_str(enum ibv_port_state port_state)
{
	static const char *const str[] = {
		[IBV_PORT_NOP] = "no state change (NOP)",
		[IBV_PORT_DOWN] = "down",
		[IBV_PORT_INIT] = "init",
		[IBV_PORT_ARMED] = "armed",
		[IBV_PORT_ACTIVE] = "active",
		[IBV_PORT_ACTIVE_DEFER] = "active defer",
	};

	return enum_str(str, ARRAY_SIZE(str), port_state);
}

UROCE_EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
	static const char *const str[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};

	return enum_str(str, ARRAY_SIZE(str), event);
}

/* ---- static rates ----------------------------------------------------------
 * mult is the rate in units of 2.5 Gb/s where IBTA defines one (-1 where
 * the rate is no such multiple); mbps is the actual data rate, which for
 * the 64b/66b-encoded speeds is not a round number. */

static const struct {
	enum ibv_rate rate;
	int mult;
	int mbps;
} rates[] = {
	{ IBV_RATE_2_5_GBPS, 1, 2500 },
	{ IBV_RATE_5_GBPS, 2, 5000 },
	{ IBV_RATE_10_GBPS, 4, 10000 },
	{ IBV_RATE_20_GBPS, 8, 20000 },
	{ IBV_RATE_30_GBPS, 12, 30000 },
	{ IBV_RATE_40_GBPS, 16, 40000 },
	{ IBV_RATE_60_GBPS, 24, 60000 },
	{ IBV_RATE_80_GBPS, 32, 80000 },
	{ IBV_RATE_120_GBPS, 48, 120000 },
	{ IBV_RATE_14_GBPS, -1, 14062 },
	{ IBV_RATE_56_GBPS, -1, 56250 },
	{ IBV_RATE_112_GBPS, -1, 112500 },
	{ IBV_RATE_168_GBPS, -1, 168750 },
	{ IBV_RATE_25_GBPS, -1, 25781 },
	{ IBV_RATE_100_GBPS, -1, 103125 },
	{ IBV_RATE_200_GBPS, -1, 206250 },
	{ IBV_RATE_300_GBPS, -1, 309375 },
	{ IBV_RATE_28_GBPS, 11, 28125 },
	{ IBV_RATE_50_GBPS, 20, 53125 },
	{ IBV_RATE_400_GBPS, 160, 425000 },
	{ IBV_RATE_600_GBPS, 240, 637500 },
	{ IBV_RATE_800_GBPS, 320, 850000 },
	{ IBV_RATE_1200_GBPS, 480, 1275000 },
};

UROCE_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < ARRAY_SIZE(rates); i++)
		if (rates[i].rate == rate)
			return rates[i].mult;
	return -1;
}

UROCE_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < ARRAY_SIZE(rates); i++)
		if (mult > 0 && rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

UROCE_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < ARRAY_SIZE(rates); i++)
		if (rates[i].rate == rate)
			return rates[i].mbps;
	return -1;
}

UROCE_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < ARRAY_SIZE(rates); i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* ---- fork ------------------------------------------------------------------
 * A hardware RNIC keeps DMA-ing into the physical pages it pinned; after
 * fork() copy-on-write may move the parent's data to new pages behind its
 * back, hence madvise(MADV_DONTFORK) in rdma-core.  uroce reaches registered
 * memory through the process's own virtual addresses, which fork never
 * changes for the parent, so there is nothing to protect. */

UROCE_EXPORT int ibv_fork_init(void)
{
	return 0;
}

UROCE_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

UROCE_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

UROCE_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

/* ---- sysfs helpers ---------------------------------------------------------
 * Real file readers: uroce0 has no sysfs node (its paths name none), so
 * reads about it fail with ENOENT, while other files read as usual. */

static char sysfs_path[256] = "/sys";
static pthread_once_t sysfs_once = PTHREAD_ONCE_INIT;

static void sysfs_path_init(void)
{
	/* secure_getenv: a set-uid program must not be steered elsewhere */
	const char *env = secure_getenv("SYSFS_PATH");
	size_t len;

	if (!env || !*env || strlen(env) >= sizeof(sysfs_path))
		return;
	len = strlen(env);
	while (len > 1 && env[len - 1] == '/')
		len--;
	memcpy(sysfs_path, env, len);
	sysfs_path[len] = '\0';
}

UROCE_EXPORT const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sysfs_once, sysfs_path_init);
	return sysfs_path;
}

UROCE_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file,
				     char *buf, size_t size)
{
	char path[512];
	ssize_t len;
	int fd;

	if (!dir || !file || !buf || !size) {
		errno = EINVAL;
		return -1;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >=
	    sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	len = read(fd, buf, size - 1);
	close(fd);
	if (len < 0)
		return -1;
	/* sysfs values end in a newline that no caller wants */
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	buf[len] = '\0';
	return (int)len;
}

/* ---- kernel ABI copy helpers -----------------------------------------------
 * librdmacm decodes the kernel rdma_cm's replies with these. */

UROCE_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst,
					     struct ib_uverbs_ah_attr *src)
{
	memcpy(&dst->grh.dgid, src->grh.dgid, sizeof(dst->grh.dgid));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->is_global = src->is_global;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->port_num = src->port_num;
}

UROCE_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst,
					     struct ib_uverbs_qp_attr *src)
{
	/* qp_state is the caller's input (the state it asked attributes
	 * for), so it is left alone, as rdma-core does. */
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	dst->cap = (struct ibv_qp_cap){
		.max_send_wr = src->max_send_wr,
		.max_recv_wr = src->max_recv_wr,
		.max_send_sge = src->max_send_sge,
		.max_recv_sge = src->max_recv_sge,
		.max_inline_data = src->max_inline_data,
	};
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/* The user and kernel path records hold the same fields in different
 * layouts; one field list serves both directions. */
#define PATH_REC_FIELDS(X)                                                     \
	X(dlid) X(slid) X(raw_traffic) X(flow_label) X(reversible) X(mtu)      \
	X(pkey) X(hop_limit) X(traffic_class) X(numb_path) X(sl)               \
	X(mtu_selector) X(rate_selector) X(rate)                               \
	X(packet_life_time_selector) X(packet_life_time) X(preference)

UROCE_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
					      struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
#define COPY(f) dst->f = src->f;
	PATH_REC_FIELDS(COPY)
#undef COPY
}

UROCE_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
					    struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
#define COPY(f) dst->f = src->f;
	PATH_REC_FIELDS(COPY)
#undef COPY
}

/* ---- asynchronous events ---------------------------------------------------
 * The events in the pipe are struct ibv_async_event records: 16 bytes, well
 * under PIPE_BUF, so each write is atomic and each read of that size returns
 * exactly one whole event. */

void uroce_async_event(struct uroce_context *ctx,
		       const struct ibv_async_event *ev)
{
	ssize_t n = -1;

	pthread_mutex_lock(&ctx->async_lock);
	if (ctx->async_wfd >= 0)
		n = write(ctx->async_wfd, ev, sizeof(*ev));
	pthread_mutex_unlock(&ctx->async_lock);
	/* The write end is non-blocking: the engine must never stall
	 * because the application does not read its events. */
	if (n != (ssize_t)sizeof(*ev))
		uroce_log("async event \"%s\" dropped: %s",
			  ibv_event_type_str(ev->event_type),
			  n < 0 ? strerror(errno) : "short write");
}

UROCE_EXPORT int ibv_get_async_event(struct ibv_context *context,
				     struct ibv_async_event *event)
{
	ssize_t n;

	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	/* Blocks unless the application made async_fd non-blocking, in
	 * which case read() reports EAGAIN. */
	n = read(context->async_fd, event, sizeof(*event));
	if (n == (ssize_t)sizeof(*event))
		return 0;
	if (n >= 0)
		errno = EIO;	/* the context is being closed */
	return -1;
}

/* Count the acknowledgement on the event's object, where a destroy that
 * waits for its outstanding events (as the man page promises) looks. */
UROCE_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	pthread_mutex_t *mutex;
	pthread_cond_t *cond;
	uint32_t *count;

	if (!event)
		return;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		mutex = &event->element.cq->mutex;
		cond = &event->element.cq->cond;
		count = &event->element.cq->async_events_completed;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		mutex = &event->element.qp->mutex;
		cond = &event->element.qp->cond;
		count = &event->element.qp->events_completed;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		mutex = &event->element.srq->mutex;
		cond = &event->element.srq->cond;
		count = &event->element.srq->events_completed;
		break;
	default:
		/* port and device events belong to no object; there are no
		 * WQs, so IBV_EVENT_WQ_FATAL is never raised */
		return;
	}
	pthread_mutex_lock(mutex);
	++*count;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mutex);
}

/* ---- unsupported verbs ---------------------------------------------------- */

UROCE_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp,
					    enum ibv_wr_opcode op,
					    uint32_t flags)
{
	/* 1 would let a reader poll the data instead of the CQ.  The
	 * responder places packets in PSN order but copies each payload with
	 * memcpy(), whose store order is unspecified; only the last byte of
	 * an RDMA WRITE is ordered after the rest.  So: not guaranteed. */
	(void)qp;
	(void)op;
	(void)flags;
	return 0;
}

UROCE_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
					     struct ibv_ah_attr *attr,
					     uint8_t eth_mac[ETHERNET_LL_SIZE],
					     uint16_t *vid)
{
	/* Only hardware providers need the peer's MAC; uroce leaves layer 2
	 * to the kernel's UDP stack.  rdma-core reports this verb's failures
	 * as negative errno values. */
	(void)context;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	errno = EOPNOTSUPP;
	return -EOPNOTSUPP;
}

UROCE_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	if (!qp || !ece)
		return EINVAL;
	return EOPNOTSUPP;
}

UROCE_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	if (!qp || !ece)
		return EINVAL;
	return EOPNOTSUPP;
}

/* UD multicast (transport/mcast.c).  The LID means nothing on RoCE. */
UROCE_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
				  uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	return uroce_mcast_attach(to_uqp(qp), gid);
}

UROCE_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid,
				  uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	return uroce_mcast_detach(to_uqp(qp), gid);
}

/* Sharing objects between processes needs a kernel that owns them. */

UROCE_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

UROCE_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context,
					  uint32_t pd_handle)
{
	(void)context;
	(void)pd_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

UROCE_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd,
					  uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

UROCE_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context,
					  uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

/* The unimport verbs only take objects an import returned, and no import
 * ever succeeds, so there is never anything to release. */

UROCE_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

UROCE_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

UROCE_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

UROCE_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd,
					      uint64_t offset, size_t length,
					      uint64_t iova, int fd, int access)
{
	/* a dma-buf is device memory the CPU may not even map */
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	errno = EOPNOTSUPP;
	return NULL;
}
