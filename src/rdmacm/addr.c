/*
 * Addresses: binding (a port is a service ID claimed host-wide), address
 * and route resolution as the kernel's rdma_cm does it on RoCE (the route
 * is the host's IP route; the path record is built locally), the rdma_cm
 * header of requests, options and rdma_getaddrinfo.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm/cma.h"

int cma_family(const struct cma_id *id)
{
	return id->id.route.addr.src_addr.sa_family;
}

uint16_t cma_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

void cma_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

socklen_t cma_addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
		: sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					     : 0;
}

static bool is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
		       htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(
		&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

void cma_addr_gid(const struct sockaddr *sa, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa_family == AF_INET) {
		gid->raw[10] = gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

int cma_gid_index_type(struct cma_id *id, const struct sockaddr *sa,
		       enum ibv_gid_type type)
{
	struct ibv_port_attr port;
	struct ibv_gid_entry e;
	union ibv_gid want;
	int other = -1;

	cma_addr_gid(sa, &want);
	if (ibv_query_port(id->dev->verbs, 1, &port))
		return -1;
	for (int i = 0; i < port.gid_tbl_len; i++) {
		if (ibv_query_gid_ex(id->dev->verbs, 1, i, &e, 0) ||
		    memcmp(&e.gid, &want, sizeof(want)))
			continue;
		if (e.gid_type == type)
			return i;
		if (other < 0)
			other = i;
	}
	/* v1 asked for and absent (the device said why): v2 */
	return other;
}

int cma_gid_index(struct cma_id *id, const struct sockaddr *sa)
{
	return cma_gid_index_type(id, sa, uroce_cm_gid_type());
}

/* Is the address one of this host's?  (A bind to it succeeds.) */
static bool is_local(const struct sockaddr *sa)
{
	struct sockaddr_storage ss;
	int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool local;

	if (fd < 0)
		return false;
	memcpy(&ss, sa, cma_addr_len(sa));
	cma_set_port((struct sockaddr *)&ss, 0);
	local = !bind(fd, (struct sockaddr *)&ss, cma_addr_len(sa));
	close(fd);
	return local;
}

/* ---- ports ----------------------------------------------------------------
 * The process's ids that hold ports, as the kernel's bind lists: ids share a
 * port when their families are apart (both AFONLY), when their addresses
 * differ (neither a wildcard) or when both asked for REUSEADDR.  Across
 * processes a port is one process's: the CM claims it host-wide. */

static pthread_mutex_t ports_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cma_id *bound_ids;

static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	union ibv_gid ga, gb;

	cma_addr_gid(a, &ga);
	cma_addr_gid(b, &gb);
	return !memcmp(&ga, &gb, sizeof(ga));
}

/* An IPv6 id without the option holds IPv4 too unless the host says
 * otherwise, as a socket does (net.ipv6.bindv6only). */
static int default_afonly(int family)
{
	char c = '0';
	int fd;

	if (family == AF_INET)
		return 1;
	fd = open("/proc/sys/net/ipv6/bindv6only", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, &c, 1) != 1)
			c = '0';
		close(fd);
	}
	return c == '1';
}

/* The kernel's cma_check_port: 0, or why the id cannot have the port. */
static int port_conflict(const struct cma_id *id, uint64_t sid, int reuseaddr)
{
	const struct sockaddr *addr = &id->id.route.addr.src_addr;

	for (const struct cma_id *c = bound_ids; c; c = c->bound_next) {
		const struct sockaddr *cur = &c->id.route.addr.src_addr;

		if (c == id || c->service_id != sid)
			continue;
		if (reuseaddr && c->reuseaddr)
			continue;
		if (id->afonly && c->afonly && addr->sa_family != cur->sa_family)
			continue;
		if (is_any(addr) || is_any(cur))
			return EADDRNOTAVAIL;
		if (addr->sa_family == cur->sa_family && same_ip(addr, cur))
			return EADDRINUSE;
	}
	return 0;
}

static bool port_shared(uint64_t sid)
{
	for (const struct cma_id *c = bound_ids; c; c = c->bound_next)
		if (c->service_id == sid)
			return true;
	return false;
}

int cma_bind_port(struct cma_id *id, struct sockaddr *addr)
{
	uint16_t port = cma_port(addr);
	uint64_t sid = (uint64_t)id->id.ps << 16 | port;
	int err;

	/* the kernel's rule for the well-known ports */
	if (port && port < 1024 && geteuid() != 0)
		return EACCES;
	if (!id->afonly_set)
		id->afonly = default_afonly(addr->sa_family);
	pthread_mutex_lock(&ports_lock);
	if (!port)
		err = -uroce_cm_bind(id->cm, &sid, 1);
	else if (port_shared(sid))
		err = port_conflict(id, sid, id->reuseaddr) ?:
		      -uroce_cm_bind_shared(id->cm, sid);
	else
		err = -uroce_cm_bind(id->cm, &sid, 0);
	if (!err) {
		id->bound = true;
		id->service_id = sid;
		id->bound_next = bound_ids;
		bound_ids = id;
		cma_set_port(addr, sid & 0xFFFF);
	}
	pthread_mutex_unlock(&ports_lock);
	return err;
}

void cma_unbind_port(struct cma_id *id)
{
	pthread_mutex_lock(&ports_lock);
	for (struct cma_id **p = &bound_ids; *p; p = &(*p)->bound_next) {
		if (*p == id) {
			*p = id->bound_next;
			break;
		}
	}
	pthread_mutex_unlock(&ports_lock);
}

int cma_listen_port(struct cma_id *id, int backlog)
{
	int err = 0;

	pthread_mutex_lock(&ports_lock);
	if (id->reuseaddr)
		err = port_conflict(id, id->service_id, 0);
	if (!err)
		err = -uroce_cm_listen(id->cm, backlog);
	if (!err)
		id->listening = true;
	pthread_mutex_unlock(&ports_lock);
	return err;
}

/* Makes the id the device's, with the address as its source GID. */
static int attach(struct cma_id *id, const struct sockaddr *src)
{
	int index = cma_gid_index(id, src);

	if (index < 0)
		return is_local(src) ? ENODEV : EADDRNOTAVAIL;
	cma_set_verbs(id);
	id->path.sgid_index = index;
	cma_addr_gid(src, &id->path.sgid);
	id->id.route.addr.addr.ibaddr.sgid = id->path.sgid;
	return 0;
}

CMA_EXPORT int rdma_bind_addr(struct rdma_cm_id *cm_id, struct sockaddr *addr)
{
	struct cma_id *id = to_cma(cm_id);
	struct sockaddr *src;
	int err;

	if (!cm_id || !addr)
		return cma_errno(EINVAL);
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return cma_errno(EAFNOSUPPORT);
	if (id->state != CMA_IDLE)
		return cma_errno(EINVAL);
	if (addr->sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)addr)->sin6_addr) &&
	    !((struct sockaddr_in6 *)addr)->sin6_scope_id)
		return cma_errno(EINVAL);
	src = &cm_id->route.addr.src_addr;
	memset(&cm_id->route.addr.src_storage, 0,
	       sizeof(cm_id->route.addr.src_storage));
	memcpy(src, addr, cma_addr_len(addr));
	if (!is_any(addr)) {
		err = attach(id, addr);
		if (err)
			goto fail;
	}
	err = cma_bind_port(id, src);
	if (err)
		goto fail;
	id->state = CMA_ADDR_BOUND;
	return 0;
fail:
	memset(&cm_id->route.addr.src_storage, 0,
	       sizeof(cm_id->route.addr.src_storage));
	cm_id->verbs = NULL;
	return cma_errno(err);
}

/* The source address the host's routing picks for a destination. */
static int route_source(const struct sockaddr *dst, struct sockaddr *src)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err = 0;

	if (fd < 0)
		return errno;
	memcpy(&ss, dst, cma_addr_len(dst));
	if (!cma_port((struct sockaddr *)&ss))
		cma_set_port((struct sockaddr *)&ss, 9);
	/* connecting a UDP socket sends nothing: it only routes */
	if (connect(fd, (struct sockaddr *)&ss, cma_addr_len(dst)) ||
	    getsockname(fd, (struct sockaddr *)&ss, &len))
		err = errno;
	close(fd);
	if (err)
		return err;
	/* keep the bound port */
	cma_set_port((struct sockaddr *)&ss, cma_port(src));
	memcpy(src, &ss, cma_addr_len(dst));
	return 0;
}

CMA_EXPORT int rdma_resolve_addr(struct rdma_cm_id *cm_id,
				 struct sockaddr *src_addr,
				 struct sockaddr *dst_addr, int timeout_ms)
{
	struct cma_id *id = to_cma(cm_id);
	struct sockaddr *src, *dst;
	int err;

	(void)timeout_ms;	/* resolution is immediate here */
	if (!cm_id || !dst_addr)
		return cma_errno(EINVAL);
	if (dst_addr->sa_family != AF_INET && dst_addr->sa_family != AF_INET6)
		return cma_errno(EAFNOSUPPORT);
	if (src_addr && src_addr->sa_family != dst_addr->sa_family)
		return cma_errno(EINVAL);
	if (id->state == CMA_IDLE) {
		struct sockaddr_storage any;

		if (!src_addr) {
			memset(&any, 0, sizeof(any));
			any.ss_family = dst_addr->sa_family;
			/* a link-local peer is reached on its own link */
			if (any.ss_family == AF_INET6)
				((struct sockaddr_in6 *)&any)->sin6_scope_id =
					((struct sockaddr_in6 *)dst_addr)->sin6_scope_id;
			src_addr = (struct sockaddr *)&any;
		}
		if (rdma_bind_addr(cm_id, src_addr))
			return -1;
	} else if (id->state != CMA_ADDR_BOUND ||
		   cma_family(id) != dst_addr->sa_family) {
		return cma_errno(EINVAL);
	}
	src = &cm_id->route.addr.src_addr;
	dst = &cm_id->route.addr.dst_addr;
	memset(&cm_id->route.addr.dst_storage, 0,
	       sizeof(cm_id->route.addr.dst_storage));
	memcpy(dst, dst_addr, cma_addr_len(dst_addr));

	err = 0;
	if (is_any(src))
		err = route_source(dst, src);
	if (!err && !cm_id->verbs)
		err = attach(id, src);
	else if (!err && cma_gid_index(id, src) < 0)
		err = ENODEV;
	if (err == EADDRNOTAVAIL)
		err = ENODEV;	/* no RDMA device owns the source */
	if (err) {
		cma_queue_event(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
		return cma_complete(id);
	}
	cma_addr_gid(dst, &id->path.dgid);
	cm_id->route.addr.addr.ibaddr.dgid = id->path.dgid;
	id->state = CMA_ADDR_RESOLVED;
	cma_queue_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	return cma_complete(id);
}

int cma_build_path(struct cma_id *id)
{
	struct ibv_sa_path_rec *rec = &id->path_rec;
	struct rdma_cm_id *cm_id = &id->id;

	memset(rec, 0, sizeof(*rec));
	rec->dgid = id->path.dgid;
	rec->sgid = id->path.sgid;
	rec->dlid = rec->slid = htobe16(0xFFFF);
	rec->reversible = htobe32(1);
	rec->numb_path = 1;
	rec->pkey = htobe16(0xFFFF);
	rec->sl = id->path.sl;
	rec->mtu_selector = rec->rate_selector = rec->packet_life_time_selector = 2;
	rec->mtu = id->path.mtu;
	rec->packet_life_time = id->path.packet_life_time;
	rec->hop_limit = id->path.hop_limit;
	rec->traffic_class = id->path.traffic_class;
	rec->flow_label = htobe32(id->path.flow_label);
	cm_id->route.path_rec = rec;
	cm_id->route.num_paths = 1;
	return 0;
}

CMA_EXPORT int rdma_resolve_route(struct rdma_cm_id *cm_id, int timeout_ms)
{
	struct cma_id *id = to_cma(cm_id);
	struct ibv_port_attr port;
	uint16_t sport, dport;

	(void)timeout_ms;	/* RoCE has no SA to ask */
	if (!cm_id || id->state != CMA_ADDR_RESOLVED)
		return cma_errno(EINVAL);
	if (ibv_query_port(cm_id->verbs, cm_id->port_num, &port)) {
		cma_queue_event(id, RDMA_CM_EVENT_ROUTE_ERROR, -ENODEV);
		return cma_complete(id);
	}
	sport = cma_port(&cm_id->route.addr.src_addr);
	dport = cma_port(&cm_id->route.addr.dst_addr);
	id->path.mtu = port.active_mtu;
	id->path.hop_limit = CMA_HOP_LIMIT;
	id->path.traffic_class = id->tos;
	id->path.sl = 0;
	id->path.packet_life_time = id->ack_timeout ? id->ack_timeout - 1
						    : CMA_PACKET_LIFE_TIME;
	/* Linux's RoCEv2 flow label, from the two ports */
	id->path.flow_label = (sport * 31u + dport) & 0xFFFFF;
	cma_build_path(id);
	id->state = CMA_ROUTE_RESOLVED;
	cma_queue_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	return cma_complete(id);
}

CMA_EXPORT int rdma_listen(struct rdma_cm_id *cm_id, int backlog)
{
	struct cma_id *id = to_cma(cm_id);
	int err;

	if (!cm_id)
		return cma_errno(EINVAL);
	if (id->state == CMA_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };

		if (rdma_bind_addr(cm_id, (struct sockaddr *)&any))
			return -1;
	}
	if (id->state != CMA_ADDR_BOUND && id->state != CMA_LISTEN)
		return cma_errno(EINVAL);
	if (backlog <= 0 || backlog > CMA_DEFAULT_BACKLOG)
		backlog = CMA_DEFAULT_BACKLOG;
	err = cma_listen_port(id, backlog);
	if (!err)
		cma_set_state(id, CMA_LISTEN);
	return cma_errno(err);
}

CMA_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? htons(cma_port(&id->route.addr.src_addr)) : 0;
}

CMA_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? htons(cma_port(&id->route.addr.dst_addr)) : 0;
}

/* ---- the rdma_cm header -------------------------------------------------- */

static void put_ip(uint8_t *p, const struct sockaddr *sa)
{
	memset(p, 0, 16);
	if (sa->sa_family == AF_INET)
		memcpy(p + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	else
		memcpy(p, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

void cma_format_hdr(const struct cma_id *id, uint8_t *hdr)
{
	const struct sockaddr *src = &id->id.route.addr.src_addr;
	uint16_t port = cma_port(src);

	hdr[0] = 0;	/* version */
	hdr[1] = (src->sa_family == AF_INET ? 4 : 6) << 4;
	hdr[2] = port >> 8;
	hdr[3] = port;
	put_ip(hdr + 4, src);
	put_ip(hdr + 20, &id->id.route.addr.dst_addr);
}

/* An address from the header's encoding of it. */
static void get_ip(const uint8_t *p, int ipver, uint16_t port,
		   struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (ipver == 4) {
		struct sockaddr_in *in4 = (struct sockaddr_in *)ss;

		in4->sin_family = AF_INET;
		in4->sin_port = htons(port);
		memcpy(&in4->sin_addr, p + 12, 4);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		memcpy(&in6->sin6_addr, p, 16);
	}
}

/* Does the listener take a request with this header?  What the kernel's
 * rdma_cm refuses is answered with REJ consumer defined. */
static bool hdr_fits(const struct cma_id *listener, const uint8_t *hdr,
		     uint64_t sid)
{
	const struct sockaddr *bound = &listener->id.route.addr.src_addr;
	int ipver = hdr[1] >> 4;
	struct sockaddr_storage dst;

	if (hdr[0] != 0 || (ipver != 4 && ipver != 6))
		return false;
	if ((bound->sa_family == AF_INET && ipver != 4) ||
	    (bound->sa_family == AF_INET6 && ipver == 4 && listener->afonly))
		return false;
	get_ip(hdr + 20, ipver, sid & 0xFFFF, &dst);
	return is_any(bound) || same_ip(bound, (struct sockaddr *)&dst);
}

struct cma_id *cma_listener_for(struct cma_id *listener, const uint8_t *hdr,
				uint64_t sid)
{
	pthread_mutex_lock(&ports_lock);
	if (hdr_fits(listener, hdr, sid))
		return listener;
	for (struct cma_id *c = bound_ids; c; c = c->bound_next)
		if (c != listener && c->service_id == sid &&
		    c->listening && hdr_fits(c, hdr, sid))
			return c;
	pthread_mutex_unlock(&ports_lock);
	return NULL;
}

void cma_listener_done(void)
{
	pthread_mutex_unlock(&ports_lock);
}

bool cma_parse_hdr(struct cma_id *listener, struct cma_id *id,
		   const uint8_t *hdr, uint64_t sid)
{
	int ipver = hdr[1] >> 4;
	struct sockaddr_storage src, dst;

	if (!hdr_fits(listener, hdr, sid))
		return false;
	get_ip(hdr + 20, ipver, sid & 0xFFFF, &dst);
	get_ip(hdr + 4, ipver, hdr[2] << 8 | hdr[3], &src);
	memcpy(&id->id.route.addr.src_storage, &dst, sizeof(dst));
	memcpy(&id->id.route.addr.dst_storage, &src, sizeof(src));
	return true;
}

/* ---- options ------------------------------------------------------------- */

static bool is_connected_type(const struct rdma_cm_id *id)
{
	return id->qp_type == IBV_QPT_RC || id->qp_type == IBV_QPT_UC;
}

CMA_EXPORT int rdma_set_option(struct rdma_cm_id *cm_id, int level,
			       int optname, void *optval, size_t optlen)
{
	struct cma_id *id = to_cma(cm_id);

	if (!cm_id || !optval)
		return cma_errno(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return cma_errno(EINVAL);
			id->tos = *(uint8_t *)optval;
			id->tos_set = true;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				return cma_errno(EINVAL);
			if (id->state != CMA_IDLE &&
			    (id->state != CMA_ADDR_BOUND || *(int *)optval))
				return cma_errno(EINVAL);
			id->reuseaddr = *(int *)optval;
			return 0;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return cma_errno(EINVAL);
			if (id->state != CMA_IDLE && id->state != CMA_ADDR_BOUND)
				return cma_errno(EINVAL);
			id->afonly = *(int *)optval;
			id->afonly_set = true;
			return 0;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t) || !is_connected_type(cm_id))
				return cma_errno(EINVAL);
			id->ack_timeout = *(uint8_t *)optval;
			if (id->ack_timeout > 31)
				id->ack_timeout = 31;
			return 0;
		default:
			return cma_errno(ENOSYS);
		}
	}
	if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
		struct ibv_path_data *pd = optval;

		if (optlen < sizeof(*pd) || optlen % sizeof(*pd) ||
		    id->state != CMA_ADDR_RESOLVED)
			return cma_errno(EINVAL);
		/* a route given whole: take its path record's fields */
		uint32_t fl_hl = be32toh(pd->path.flowlabel_hoplimit);

		id->path.mtu = pd->path.mtu & 0x3F;
		id->path.hop_limit = fl_hl & 0xFF;
		id->path.flow_label = (fl_hl >> 8) & 0xFFFFF;
		id->path.traffic_class = pd->path.tclass;
		id->path.sl = be16toh(pd->path.qosclass_sl) & 0xF;
		id->path.packet_life_time = pd->path.packetlifetime & 0x3F;
		cma_build_path(id);
		id->state = CMA_ROUTE_RESOLVED;
		cma_queue_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
		return cma_complete(id);
	}
	return cma_errno(ENOSYS);
}

/* ---- rdma_getaddrinfo ---------------------------------------------------- */

static int copy_addr(struct sockaddr **out, socklen_t *out_len,
		     const struct sockaddr *in, socklen_t len)
{
	*out = malloc(len);
	if (!*out)
		return ENOMEM;
	memcpy(*out, in, len);
	*out_len = len;
	return 0;
}

CMA_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

CMA_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
				const struct rdma_addrinfo *hints,
				struct rdma_addrinfo **res)
{
	struct addrinfo ai_hints = { 0 }, *ai = NULL;
	struct rdma_addrinfo *rai;
	int ret, err = 0;

	if (!res || (!node && !service && !hints))
		return cma_errno(EINVAL);
	if (hints && hints->ai_family == AF_IB)
		return cma_errno(EAFNOSUPPORT);
	if (!cma_device())
		return cma_errno(ENODEV);
	if (hints) {
		if (hints->ai_flags & RAI_PASSIVE)
			ai_hints.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ai_hints.ai_flags |= AI_NUMERICHOST;
		ai_hints.ai_family = hints->ai_family;
	}
	ai_hints.ai_socktype = hints && hints->ai_qp_type == IBV_QPT_UD
				       ? SOCK_DGRAM : SOCK_STREAM;
	if (hints && hints->ai_port_space == RDMA_PS_UDP)
		ai_hints.ai_socktype = SOCK_DGRAM;
	if (node || service) {
		ret = getaddrinfo(node, service, &ai_hints, &ai);
		if (ret)
			return ret;	/* the EAI_* code, as rdma-core */
	}
	rai = calloc(1, sizeof(*rai));
	if (!rai) {
		freeaddrinfo(ai);
		return cma_errno(ENOMEM);
	}
	rai->ai_flags = hints ? hints->ai_flags : 0;
	if (hints && hints->ai_qp_type) {
		rai->ai_qp_type = hints->ai_qp_type;
	} else {
		rai->ai_qp_type = ai_hints.ai_socktype == SOCK_DGRAM ? IBV_QPT_UD
								      : IBV_QPT_RC;
	}
	if (hints && hints->ai_port_space)
		rai->ai_port_space = hints->ai_port_space;
	else
		rai->ai_port_space = rai->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP
								    : RDMA_PS_TCP;
	if (ai) {
		rai->ai_family = ai->ai_family;
		/* only the first result, as rdma-core */
		if (rai->ai_flags & RAI_PASSIVE)
			err = copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
					ai->ai_addr, ai->ai_addrlen);
		else
			err = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					ai->ai_addr, ai->ai_addrlen);
		if (!err && ai->ai_canonname) {
			rai->ai_dst_canonname = strdup(ai->ai_canonname);
			if (!rai->ai_dst_canonname)
				err = ENOMEM;
		}
	} else {
		rai->ai_family = hints->ai_family;
	}
	if (!err && hints && hints->ai_src_addr && !rai->ai_src_addr)
		err = copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
				hints->ai_src_addr, hints->ai_src_len);
	if (!err && hints && hints->ai_dst_addr && !rai->ai_dst_addr)
		err = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
				hints->ai_dst_addr, hints->ai_dst_len);
	freeaddrinfo(ai);
	if (err) {
		rdma_freeaddrinfo(rai);
		return cma_errno(err);
	}
	*res = rai;
	return 0;
}
