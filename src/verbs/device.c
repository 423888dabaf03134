/*
 * The device, its contexts, and the device / port / GID / P_Key queries.
 *
 * There is exactly one device, "uroce0": one software RNIC per process that
 * serves every context opened on it (see nic.c).  Nothing here touches the
 * kernel's RDMA stack, which is usually absent where uroce is used.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/gid.h"
#include "verbs/ops.h"

/* verbs.h turns ibv_query_port into a macro over an inline; the exported
 * symbol is the compat entry point that inline falls back to. */
#undef ibv_query_port

static struct uroce_device the_device = {
	.ibdev = {
		.node_type = IBV_NODE_CA,
		/* RoCE devices report the IB transport; the link layer
		 * (Ethernet) is a port attribute. */
		.transport_type = IBV_TRANSPORT_IB,
		.name = "uroce0",
		/* UCX takes an RDMA device only if /dev/infiniband/<dev_name>
		 * is a character device it may open; uroce has none, so
		 * scripts/setup.sh links /dev/infiniband/uroce0 to /dev/null.
		 * Not a kernel name: the link never hides a real node. */
		.dev_name = "uroce0",
		/* Paths that name no real sysfs node, so that tools reading
		 * attribute files there (ibv_devinfo reads board_id through
		 * ibdev_path) get a clean ENOENT rather than some kernel
		 * device's data. */
		.dev_path = "/sys/class/infiniband_verbs/uroce0",
		.ibdev_path = "/sys/class/infiniband/uroce0",
	},
};

static bool is_our_device(const struct ibv_device *dev)
{
	return dev == &the_device.ibdev;
}

/* ---- device list ---------------------------------------------------------- */

UROCE_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	struct ibv_device **list = calloc(2, sizeof(*list));

	if (num_devices)
		*num_devices = 0;
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = &the_device.ibdev;
	if (num_devices)
		*num_devices = 1;
	return list;
}

UROCE_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	/* Only the array is ours to free: the device is static and stays
	 * valid for contexts opened from it, as rdma-core guarantees. */
	free(list);
}

UROCE_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	return device->name;
}

UROCE_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	/* rdma-core reports 0 when it cannot read a device's GUID */
	if (!is_our_device(device))
		return 0;
	return uroce_node_guid();
}

UROCE_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return is_our_device(device) ? 0 : -1;
}

/* ---- contexts ------------------------------------------------------------- */

UROCE_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct uroce_context *ctx;
	struct ibv_context *c;
	int pipefd[2], err;

	if (!is_our_device(device)) {
		errno = EINVAL;
		return NULL;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	c = &ctx->vctx.context;
	c->cmd_fd = c->async_fd = ctx->async_wfd = -1;

	ctx->nic = uroce_nic_get(&uroce_verbs_objects);
	if (!ctx->nic) {
		err = errno;
		goto fail;
	}
	/* No uverbs device stands behind the context, but applications and
	 * librdmacm treat cmd_fd as an open descriptor (fcntl, close-on-exec
	 * bookkeeping, ibv_import_device); /dev/null keeps those harmless. */
	c->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (c->cmd_fd < 0 || pipe2(pipefd, O_CLOEXEC)) {
		err = errno;
		goto fail;
	}
	/* Async events travel through a pipe so that async_fd works with
	 * poll() and with O_NONBLOCK set by the application, like the kernel's
	 * event file.  Only the producer's end is non-blocking: an event is
	 * dropped rather than stall the engine when nobody reads them. */
	c->async_fd = pipefd[0];
	ctx->async_wfd = pipefd[1];
	if (fcntl(ctx->async_wfd, F_SETFL, O_NONBLOCK)) {
		err = errno;
		goto fail;
	}
	pthread_mutex_init(&c->mutex, NULL);
	pthread_mutex_init(&ctx->async_lock, NULL);

	c->device = device;
	c->num_comp_vectors = 1;
	/* The verbs.h inlines use the extended ops only when these two say
	 * the context is a whole verbs_context of this size. */
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->vctx.sz = sizeof(struct verbs_context);

	c->ops.post_send = uroce_post_send;
	c->ops.post_recv = uroce_post_recv;
	c->ops.poll_cq = uroce_poll_cq;
	c->ops.req_notify_cq = uroce_req_notify_cq;
	c->ops.post_srq_recv = uroce_post_srq_recv;
	/* Every other op stays NULL: the inline wrappers then report
	 * EOPNOTSUPP (or fall back to an exported verb) on their own. */
	ctx->vctx.advise_mr = uroce_advise_mr;
	c->ops.alloc_mw = uroce_alloc_mw;
	c->ops.dealloc_mw = uroce_dealloc_mw;
	c->ops.bind_mw = uroce_bind_mw;
	ctx->vctx.query_port = uroce_query_port_ex;
	ctx->vctx.query_device_ex = uroce_query_device_ex;
	ctx->vctx.create_qp_ex = uroce_create_qp_ex;
	ctx->vctx.create_cq_ex = uroce_create_cq_ex;
	ctx->vctx.query_rt_values = uroce_query_rt_values;
	ctx->vctx.alloc_parent_domain = uroce_alloc_parent_domain;
	ctx->vctx.alloc_td = uroce_alloc_td;
	ctx->vctx.dealloc_td = uroce_dealloc_td;
	ctx->vctx.open_xrcd = uroce_open_xrcd;
	ctx->vctx.close_xrcd = uroce_close_xrcd;
	ctx->vctx.create_srq_ex = uroce_create_srq_ex;
	ctx->vctx.get_srq_num = uroce_get_srq_num;
	ctx->vctx.alloc_dm = uroce_alloc_dm;
	ctx->vctx.free_dm = uroce_free_dm;
	ctx->vctx.reg_dm_mr = uroce_reg_dm_mr;
	return c;

fail:
	if (ctx->async_wfd >= 0)
		close(ctx->async_wfd);
	if (c->async_fd >= 0)
		close(c->async_fd);
	if (c->cmd_fd >= 0)
		close(c->cmd_fd);
	if (ctx->nic)
		uroce_nic_put(ctx->nic);
	free(ctx);
	errno = err;
	return NULL;
}

UROCE_EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct uroce_context *ctx;

	if (!context)
		return EINVAL;
	ctx = to_uctx(context);
	/* Under async_lock so that an event being posted right now either
	 * completes or sees the context gone. */
	pthread_mutex_lock(&ctx->async_lock);
	close(ctx->async_wfd);
	ctx->async_wfd = -1;
	pthread_mutex_unlock(&ctx->async_lock);
	close(context->async_fd);
	close(context->cmd_fd);
	uroce_nic_put(ctx->nic);
	pthread_mutex_destroy(&ctx->async_lock);
	pthread_mutex_destroy(&context->mutex);
	free(ctx);
	return 0;
}

/* ---- device attributes ---------------------------------------------------- */

void uroce_fill_device_attr(const struct uroce_nic *nic,
			    struct ibv_device_attr *attr)
{
	(void)nic;	/* every capability is a build-time constant */
	memset(attr, 0, sizeof(*attr));
	strcpy(attr->fw_ver, "0.1.0");
	attr->node_guid = uroce_node_guid();
	attr->sys_image_guid = attr->node_guid;
	/* registrations are limited only by the process's address space */
	attr->max_mr_size = UINT64_MAX;
	attr->page_size_cap = 4096;
	/* A vendor perftest does not know: it then uses the plain
	 * ibv_post_send path that every verbs device supports. */
	attr->vendor_id = UROCE_VENDOR_ID;
	attr->vendor_part_id = UROCE_VENDOR_PART_ID;
	attr->hw_ver = UROCE_HW_VER;
	attr->max_qp = UROCE_MAX_QP;
	attr->max_qp_wr = UROCE_MAX_QP_WR;
	/* Only what the transport does: the responder answers a SEND with no
	 * receive posted by an RNR NAK, XRC, memory windows of type 1 and 2B.
	 * No resize, no port management events, no multicast. */
	attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN |
				 IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_XRC |
				 IBV_DEVICE_MEM_WINDOW |
				 IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	attr->max_sge = UROCE_MAX_SGE;
	attr->max_sge_rd = UROCE_MAX_SGE;
	attr->max_cq = UROCE_MAX_CQ;
	attr->max_cqe = UROCE_MAX_CQE;
	attr->max_mr = UROCE_MAX_MR;
	attr->max_mw = UROCE_MAX_MR;	/* windows share the MRs' key table */
	attr->max_pd = UROCE_MAX_PD;
	attr->max_qp_rd_atom = UROCE_MAX_RD_ATOMIC;
	attr->max_qp_init_rd_atom = UROCE_MAX_INIT_RD_ATOMIC;
	attr->max_res_rd_atom = UROCE_MAX_RD_ATOMIC;
	/* The responder executes remote atomics as CPU atomic instructions,
	 * so they are at least atomic among this device's atomics. */
	attr->atomic_cap = IBV_ATOMIC_HCA;
	attr->max_ah = UROCE_MAX_AH;
	attr->max_mcast_grp = UROCE_MAX_MCAST_GRP;
	attr->max_mcast_qp_attach = UROCE_MAX_MCAST_QP_ATTACH;
	attr->max_total_mcast_qp_attach = UROCE_MAX_TOTAL_MCAST_QP_ATTACH;
	attr->max_srq = UROCE_MAX_SRQ;
	attr->max_srq_wr = UROCE_MAX_SRQ_WR;
	attr->max_srq_sge = UROCE_MAX_SRQ_SGE;
	attr->max_pkeys = UROCE_PKEY_TBL_LEN;
	/* 4.096 us * 2^15 = 134 ms: a software responder acknowledges from a
	 * thread that the scheduler may hold back; promise no less. */
	attr->local_ca_ack_delay = 15;
	attr->phys_port_cnt = 1;
}

UROCE_EXPORT int ibv_query_device(struct ibv_context *context,
				  struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return EINVAL;
	uroce_fill_device_attr(to_uctx(context)->nic, device_attr);
	return 0;
}

int uroce_query_device_ex(struct ibv_context *context,
			  const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex ex;

	if (!context || !attr || (input && input->comp_mask) ||
	    attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	/* Everything past orig_attr stays zero (no TSO, RSS, tag matching,
	 * CQ moderation, ...) except what follows. */
	memset(&ex, 0, sizeof(ex));
	uroce_fill_device_attr(to_uctx(context)->nic, &ex.orig_attr);
	/* the memory placement extensions, as Soft-RoCE offers them */
	ex.device_cap_flags_ex = ex.orig_attr.device_cap_flags |
				 UROCE_DEVICE_FLUSH_GLOBAL |
				 UROCE_DEVICE_FLUSH_PERSISTENT |
				 UROCE_DEVICE_ATOMIC_WRITE;
	ex.phys_port_cnt_ex = ex.orig_attr.phys_port_cnt;
	/* on-demand paging, implicit too, for every operation (verbs/odp.c) */
	ex.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	ex.odp_caps.per_transport_caps.rc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
		IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	ex.odp_caps.per_transport_caps.uc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
	ex.odp_caps.per_transport_caps.ud_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		IBV_ODP_SUPPORT_SRQ_RECV;
	ex.xrc_odp_caps = ex.odp_caps.per_transport_caps.rc_odp_caps;
	/* completions can be stamped with a 64-bit ns clock (verbs/cq_ex.c) */
	ex.completion_timestamp_mask = UINT64_MAX;
	ex.hca_core_clock = 1000000;	/* kHz */
	ex.max_dm_size = UROCE_MAX_DM_SIZE;	/* see verbs/dm.c */

	/* The caller's struct may be older (shorter) or newer (longer) than
	 * ours: fill what both know and zero the rest. */
	memset(attr, 0, attr_size);
	memcpy(attr, &ex, attr_size < sizeof(ex) ? attr_size : sizeof(ex));
	return 0;
}

/* ---- port ----------------------------------------------------------------- */

/* The IB width and speed codes of the slowest link at least as fast as
 * UROCE_RATE (25 Gb/s by default: one EDR lane). */
static void port_speed(unsigned rate_mbps, struct ibv_port_attr *pa)
{
	static const struct {
		unsigned mbps;
		uint8_t width, speed;	/* 1 = 1X, 2 = 4X; 1 SDR .. 128 NDR */
	} links[] = {
		{ 2500, 1, 1 },   { 5000, 1, 2 },    { 10000, 1, 4 },
		{ 14062, 1, 16 }, { 25781, 1, 32 },  { 53125, 1, 64 },
		{ 103125, 2, 32 }, { 212500, 2, 64 }, { 425000, 2, 128 },
	};
	size_t i = 0;

	while (i + 1 < ARRAY_SIZE(links) && links[i].mbps < rate_mbps)
		i++;
	pa->active_width = links[i].width;
	pa->active_speed = links[i].speed;
}

int uroce_query_port_ex(struct ibv_context *context, uint8_t port,
			struct ibv_port_attr *attr, size_t len)
{
	const struct uroce_config *cfg;
	struct ibv_port_attr pa;

	if (!context || !attr || port != 1)
		return EINVAL;
	cfg = to_uctx(context)->nic->cfg;

	memset(&pa, 0, sizeof(pa));
	pa.state = IBV_PORT_ACTIVE;
	pa.max_mtu = cfg->max_mtu;
	/* what GID 0's link carries, as a RoCE NIC derives it from its
	 * netdev (4096 on loopback); QPs and AHs on other GIDs are held to
	 * their own links' */
	pa.active_mtu = (enum ibv_mtu)(__builtin_ctz(uroce_gid_path_mtu(
					  to_uctx(context)->nic, 0)) - 7);
	pa.gid_tbl_len = UROCE_GID_TBL_LEN;
	/* GIDs are the host's IP addresses.  IBV_PORT_CM_SUP stays clear:
	 * there is no communication manager behind this port yet. */
	pa.port_cap_flags = IBV_PORT_IP_BASED_GIDS;
	pa.max_msg_sz = UROCE_MAX_MSG_SZ;
	pa.pkey_tbl_len = UROCE_PKEY_TBL_LEN;
	/* Ethernet has no subnet manager: LID, SM LID and LMC are all 0. */
	pa.max_vl_num = 1;		/* VL0 only */
	port_speed(cfg->rate_mbps, &pa);
	pa.phys_state = 5;		/* LinkUp */
	pa.link_layer = IBV_LINK_LAYER_ETHERNET;
	/* peers are addressed by GID alone, so every AH needs a GRH */
	pa.flags = IBV_QPF_GRH_REQUIRED;

	if (len < sizeof(pa)) {
		memcpy(attr, &pa, len);
	} else {
		memset(attr, 0, len);
		*attr = pa;
	}
	return 0;
}

/* Only reached by binaries whose verbs.h predates verbs_context.query_port:
 * their struct ends before port_cap_flags2. */
UROCE_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
				struct _compat_ibv_port_attr *port_attr)
{
	return uroce_query_port_ex(context, port_num,
				   (struct ibv_port_attr *)port_attr,
				   offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* ---- GIDs ----------------------------------------------------------------- */

/* The GID entry at index, or NULL if index is in range but unused.  The
 * table is filled before the NIC is shared and never changes, so readers
 * need no lock. */
static const struct uroce_gid_entry *gid_at(struct ibv_context *context,
					    uint32_t index)
{
	struct uroce_nic *nic = to_uctx(context)->nic;

	return index < (uint32_t)nic->num_gids ? &nic->gids[index] : NULL;
}

UROCE_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num,
			       int index, union ibv_gid *gid)
{
	const struct uroce_gid_entry *e;

	if (!context || !gid || port_num != 1 || index < 0 ||
	    index >= UROCE_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	/* An unused entry reads as the zero GID, as on every RDMA device;
	 * perftest scans the whole table and stops at the first error. */
	e = gid_at(context, index);
	if (e)
		*gid = e->gid;
	else
		memset(gid, 0, sizeof(*gid));
	return 0;
}

static void fill_gid_entry(const struct uroce_gid_entry *e, uint32_t index,
			   struct ibv_gid_entry *out)
{
	memset(out, 0, sizeof(*out));
	out->gid = e->gid;
	out->gid_index = index;
	out->port_num = 1;
	out->gid_type = e->type;
	out->ndev_ifindex = e->ifindex;
}

/* Store one entry into a caller's array element of entry_size bytes (at
 * least ours, checked by the callers), zeroing fields we do not know. */
static void put_gid_entry(void *dst, const struct ibv_gid_entry *e,
			  size_t entry_size)
{
	memset(dst, 0, entry_size);
	memcpy(dst, e, sizeof(*e));
}

UROCE_EXPORT int _ibv_query_gid_ex(struct ibv_context *context,
				   uint32_t port_num, uint32_t gid_index,
				   struct ibv_gid_entry *entry, uint32_t flags,
				   size_t entry_size)
{
	const struct uroce_gid_entry *e;
	struct ibv_gid_entry tmp;

	if (flags)
		return EOPNOTSUPP;	/* no flags are defined */
	if (!context || !entry || entry_size < sizeof(*entry) ||
	    port_num != 1 || gid_index >= UROCE_GID_TBL_LEN)
		return EINVAL;
	e = gid_at(context, gid_index);
	if (!e)
		return ENODATA;
	fill_gid_entry(e, gid_index, &tmp);
	put_gid_entry(entry, &tmp, entry_size);
	return 0;
}

UROCE_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
					  struct ibv_gid_entry *entries,
					  size_t max_entries, uint32_t flags,
					  size_t entry_size)
{
	struct uroce_nic *nic;

	if (flags)
		return -EOPNOTSUPP;
	if (!context || entry_size < sizeof(*entries))
		return -EINVAL;
	nic = to_uctx(context)->nic;
	/* rdma-core fails rather than truncate the table */
	if ((size_t)nic->num_gids > max_entries || (nic->num_gids && !entries))
		return -EINVAL;
	for (int i = 0; i < nic->num_gids; i++) {
		struct ibv_gid_entry tmp;

		fill_gid_entry(&nic->gids[i], i, &tmp);
		put_gid_entry((char *)entries + (size_t)i * entry_size, &tmp,
			      entry_size);
	}
	return nic->num_gids;
}

/* rdma-core's private GID type, as its sysfs spells it ("IB/RoCE v1" or
 * "RoCE v2"); not the public enum ibv_gid_type, where RoCE v2 is 2. */
enum uroce_gid_type_sysfs {
	UROCE_GID_TYPE_SYSFS_IB_ROCE_V1 = 0,
	UROCE_GID_TYPE_SYSFS_ROCE_V2 = 1,
};

/* IBVERBS_PRIVATE_34: provider-facing (declared in rdma-core's unshipped
 * driver.h), but ibv_devinfo imports it. */
UROCE_EXPORT int ibv_query_gid_type(struct ibv_context *context,
				    uint8_t port_num, unsigned int index,
				    enum uroce_gid_type_sysfs *type);

UROCE_EXPORT int ibv_query_gid_type(struct ibv_context *context,
				    uint8_t port_num, unsigned int index,
				    enum uroce_gid_type_sysfs *type)
{
	const struct uroce_gid_entry *e;

	if (!context || !type || port_num != 1 || index >= UROCE_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	/* an unused slot is a RoCE v2 slot */
	e = gid_at(context, index);
	*type = e && e->type == IBV_GID_TYPE_ROCE_V1 ?
			UROCE_GID_TYPE_SYSFS_IB_ROCE_V1 :
			UROCE_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

/* ---- P_Keys --------------------------------------------------------------- */

UROCE_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num,
				int index, __be16 *pkey)
{
	if (!context || !pkey || port_num != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	/* RoCE carries only the default full-membership P_Key */
	*pkey = htobe16(UROCE_DEFAULT_PKEY);
	return 0;
}

UROCE_EXPORT int ibv_get_pkey_index(struct ibv_context *context,
				    uint8_t port_num, __be16 pkey)
{
	__be16 have;

	if (ibv_query_pkey(context, port_num, 0, &have))
		return -1;
	if (pkey != have) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}
