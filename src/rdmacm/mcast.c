/*
 * Multicast on ids of the UDP port space, as the kernel's rdma_cm does it
 * for RoCE v2 (cma_iboe_join_multicast): the group's MGID is its IPv6
 * address, or an IPv4 one mapped (::ffff:a.b.c.d); the Q_Key is the id's
 * (RDMA_UDP_QKEY); the join completes at once with
 * RDMA_CM_EVENT_MULTICAST_JOIN, whose address handle reaches the group with
 * hop limit 64 and DestQP 0xFFFFFF; and the id's QP, if it has one, is
 * attached then, unless the join is send-only, as librdmacm does.  The
 * kernel refuses IPv6 groups on RoCE v2 (ENOTSUPP); uroce serves them.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cma.h"

struct cma_mc {
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	bool send_only;
	struct cma_mc *next;
};

/* The group's MGID; false if the address is no multicast group. */
static bool mgid_of(const struct sockaddr *sa, union ibv_gid *mgid)
{
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return false;
	cma_addr_gid(sa, mgid);
	if (sa->sa_family == AF_INET)
		return IN_MULTICAST(
			ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
	return mgid->raw[0] == 0xff;	/* ff00::/8 */
}

static bool same_addr(const struct cma_mc *mc, const struct sockaddr *sa)
{
	socklen_t len = cma_addr_len(sa);

	return len && mc->addr.ss_family == sa->sa_family &&
	       !memcmp(&mc->addr, sa, len);
}

static int join(struct cma_id *id, struct sockaddr *addr, bool send_only,
		void *context)
{
	struct rdma_cm_id *cm_id = &id->id;
	struct rdma_ud_param *ud;
	struct cma_event *ev;
	struct cma_mc *mc;
	int sgid, err = 0;
	enum cma_state state;

	pthread_mutex_lock(&cma_lock);
	state = id->state;
	pthread_mutex_unlock(&cma_lock);
	/* the kernel's: a device, an address, a datagram id */
	if ((state != CMA_ADDR_BOUND && state != CMA_ADDR_RESOLVED) ||
	    !cm_id->verbs || cm_id->qp_type != IBV_QPT_UD ||
	    !cma_addr_len(addr))
		return cma_errno(EINVAL);
	/* multicast is RoCE v2's alone */
	sgid = cma_gid_index_type(id, &cm_id->route.addr.src_addr,
				  IBV_GID_TYPE_ROCE_V2);
	if (sgid < 0)
		return cma_errno(ENODEV);
	mc = calloc(1, sizeof(*mc));
	ev = mc ? cma_event_new(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0) : NULL;
	if (!ev) {
		free(mc);
		return cma_errno(ENOMEM);
	}
	memcpy(&mc->addr, addr, cma_addr_len(addr));
	mc->send_only = send_only;
	if (!mgid_of(addr, &mc->mgid)) {
		free(mc);
		free(ev);
		return cma_errno(EINVAL);
	}
	if (cm_id->qp && !send_only)
		err = ibv_attach_mcast(cm_id->qp, &mc->mgid, 0);
	ud = &ev->event.param.ud;
	ud->private_data = context;
	if (err) {
		ev->event.event = RDMA_CM_EVENT_MULTICAST_ERROR;
		ev->event.status = -err;
		free(mc);
	} else {
		ud->ah_attr.is_global = 1;
		ud->ah_attr.grh.dgid = mc->mgid;
		ud->ah_attr.grh.sgid_index = (uint8_t)sgid;
		ud->ah_attr.grh.hop_limit = CMA_HOP_LIMIT;
		ud->ah_attr.grh.traffic_class = id->tos;
		ud->ah_attr.port_num = cm_id->port_num;
		ud->qp_num = 0xFFFFFF;
		ud->qkey = id->qkey;
	}
	pthread_mutex_lock(&cma_lock);
	if (!err) {
		mc->next = id->mc_list;
		id->mc_list = mc;
	}
	cma_queue(ev);
	pthread_mutex_unlock(&cma_lock);
	return cma_complete(id);
}

CMA_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr,
				   void *context)
{
	if (!id || !addr)
		return cma_errno(EINVAL);
	return join(to_cma(id), addr, false, context);
}

CMA_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
				      struct rdma_cm_join_mc_attr_ex *attr,
				      void *context)
{
	if (!id || !attr ||
	    !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr ||
	    !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
	     attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER))
		return cma_errno(EINVAL);
	return join(to_cma(id), attr->addr,
		    attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
		    context);
}

/* Takes mc off the id's QP and frees it. */
static void leave(struct cma_id *id, struct cma_mc *mc)
{
	if (id->id.qp && !mc->send_only)
		ibv_detach_mcast(id->id.qp, &mc->mgid, 0);
	free(mc);
}

CMA_EXPORT int rdma_leave_multicast(struct rdma_cm_id *cm_id,
				    struct sockaddr *addr)
{
	struct cma_id *id = to_cma(cm_id);
	struct cma_mc **pos, *mc = NULL;

	if (!cm_id || !addr)
		return cma_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	for (pos = &id->mc_list; *pos; pos = &(*pos)->next) {
		if (same_addr(*pos, addr)) {
			mc = *pos;
			*pos = mc->next;
			break;
		}
	}
	pthread_mutex_unlock(&cma_lock);
	if (!mc)
		return cma_errno(EADDRNOTAVAIL);
	leave(id, mc);
	return 0;
}

/* As with the kernel's rdma_cm, the joins end with the id, while its QP,
 * which the id may no longer know, stays attached until destroyed. */
void cma_forget_groups(struct cma_id *id)
{
	struct cma_mc *mc;

	pthread_mutex_lock(&cma_lock);
	mc = id->mc_list;
	id->mc_list = NULL;
	pthread_mutex_unlock(&cma_lock);
	while (mc) {
		struct cma_mc *next = mc->next;

		free(mc);
		mc = next;
	}
}
