/*
 * rsockets: names (rgetpeername, rgetsockname), options (rsetsockopt,
 * rgetsockopt) and rfcntl.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "rsocket.h"

/* ---- names --------------------------------------------------------------- */

RS_EXPORT int rgetpeername(int socket, struct sockaddr *addr,
			   socklen_t *addrlen)
{
	struct rsocket *rs = rs_get(socket);
	int ret = 0;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED))) {
		errno = ENOTCONN;
		ret = -1;
	} else if (!addr || !addrlen) {
		errno = EFAULT;
		ret = -1;
	} else {
		rs_copy_addr(addr, addrlen, rdma_get_peer_addr(rs->cm_id));
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

RS_EXPORT int rgetsockname(int socket, struct sockaddr *addr,
			   socklen_t *addrlen)
{
	struct rsocket *rs = rs_get(socket);
	struct sockaddr *local;
	struct sockaddr_in6 any = { .sin6_family = AF_INET6 };

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	if (!addr || !addrlen) {
		rs_put(rs);
		errno = EFAULT;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	local = rdma_get_local_addr(rs->cm_id);
	if (local->sa_family == AF_UNSPEC) {
		/* unbound: the wildcard of the socket's family */
		any.sin6_family = rs->domain;
		local = (struct sockaddr *)&any;
	}
	rs_copy_addr(addr, addrlen, local);
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return 0;
}

/* ---- options ------------------------------------------------------------- */

static uint32_t clamp_mem(int v)
{
	/* Linux doubles SO_SNDBUF / SO_RCVBUF for its bookkeeping; so does
	 * rdma-core, and each of our rings holds two halves */
	long long m = (long long)v * 2;

	if (m < RS_MIN_MEM)
		m = RS_MIN_MEM;
	if (m > RS_MAX_MEM)
		m = RS_MAX_MEM;
	return (uint32_t)m & ~7u;
}

static uint16_t clamp_qp(int v)
{
	return v < RS_QP_MIN_SIZE ? RS_QP_MIN_SIZE
	       : v > RS_QP_MAX_SIZE ? RS_QP_MAX_SIZE
				    : (uint16_t)v;
}

static int set_rdma_opt(struct rsocket *rs, int optname, const void *optval,
			socklen_t optlen)
{
	int v;

	if (optname == RDMA_ROUTE) {
		void *route;

		if (optlen < sizeof(struct ibv_path_data) ||
		    optlen % sizeof(struct ibv_path_data)) {
			errno = EINVAL;
			return -1;
		}
		route = malloc(optlen);
		if (!route) {
			errno = ENOMEM;
			return -1;
		}
		memcpy(route, optval, optlen);
		free(rs->route);
		rs->route = route;
		rs->route_len = optlen;
		return 0;
	}
	if (optlen < sizeof(int)) {
		errno = EINVAL;
		return -1;
	}
	v = *(const int *)optval;
	if (rs->cq) {
		/* the QP and rings exist: sizes are fixed */
		errno = EINVAL;
		return -1;
	}
	switch (optname) {
	case RDMA_SQSIZE:
		rs->sq_size = clamp_qp(v);
		return 0;
	case RDMA_RQSIZE:
		rs->rq_size = clamp_qp(v);
		return 0;
	case RDMA_INLINE:
		rs->sq_inline = v < 0 ? 0 : v > 1024 ? 1024 : (uint32_t)v;
		return 0;
	case RDMA_IOMAPSIZE:
		rs->iomap_size = v < 0 ? 0 : rs_iomap_unscale(rs_iomap_scale(v));
		return 0;
	default:
		errno = ENOPROTOOPT;
		return -1;
	}
}

RS_EXPORT int rsetsockopt(int socket, int level, int optname,
			  const void *optval, socklen_t optlen)
{
	struct rsocket *rs = rs_get(socket);
	int ret = 0, v = 0;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	if (!optval) {
		rs_put(rs);
		errno = EFAULT;
		return -1;
	}
	if (level != SOL_RDMA && optname != SO_LINGER) {
		if (optlen < sizeof(int)) {
			rs_put(rs);
			errno = EINVAL;
			return -1;
		}
		v = *(const int *)optval;
	}
	pthread_mutex_lock(&rs->lock);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
			/* the port is held by the rdma_cm id */
			ret = rdma_set_option(rs->cm_id, RDMA_OPTION_ID,
					      RDMA_OPTION_ID_REUSEADDR, &v,
					      sizeof(v));
			if (ret && errno == EINVAL && !(rs->state & ~RS_BOUND))
				ret = 0;	/* bound already: as Linux */
			if (!ret)
				rs->so_reuseaddr = !!v;
			break;
		case SO_RCVBUF:
			if (!rs->cq)
				rs->rbuf_size = clamp_mem(v);
			break;
		case SO_SNDBUF:
			if (!rs->cq)
				rs->sbuf_size = clamp_mem(v);
			break;
		case SO_KEEPALIVE:
			rs->so_keepalive = !!v;
			break;
		case SO_OOBINLINE:
			rs->so_oobinline = !!v;
			break;
		case SO_LINGER:
			if (optlen < sizeof(struct linger)) {
				errno = EINVAL;
				ret = -1;
			} else {
				memcpy(&rs->linger, optval, sizeof(rs->linger));
			}
			break;
		default:
			errno = ENOPROTOOPT;
			ret = -1;
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_NODELAY:
			/* every write goes out at once anyway */
			rs->tcp_nodelay = !!v;
			break;
		case TCP_MAXSEG:
			break;
		case TCP_KEEPIDLE:
			if (v < 1) {
				errno = EINVAL;
				ret = -1;
			} else {
				rs->keepidle = v;
			}
			break;
		default:
			errno = ENOPROTOOPT;
			ret = -1;
		}
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY && rs->domain == AF_INET6) {
			v = !!v;
			ret = rdma_set_option(rs->cm_id, RDMA_OPTION_ID,
					      RDMA_OPTION_ID_AFONLY, &v,
					      sizeof(v));
			if (!ret)
				rs->v6only = v;
		} else {
			errno = ENOPROTOOPT;
			ret = -1;
		}
		break;
	case SOL_RDMA:
		ret = set_rdma_opt(rs, optname, optval, optlen);
		break;
	default:
		errno = ENOPROTOOPT;
		ret = -1;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

static int put_int(void *optval, socklen_t *optlen, int v)
{
	if (*optlen < sizeof(int)) {
		errno = EINVAL;
		return -1;
	}
	*(int *)optval = v;
	*optlen = sizeof(int);
	return 0;
}

RS_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval,
			  socklen_t *optlen)
{
	struct rsocket *rs = rs_get(socket);
	int ret = -1;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	if (!optval || !optlen) {
		rs_put(rs);
		errno = EFAULT;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	errno = ENOPROTOOPT;
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
		case SO_RCVBUF:
		case SO_SNDBUF:
		case SO_TYPE:
		case SO_DOMAIN:
		case SO_PROTOCOL:
		case SO_ACCEPTCONN:
			ret = put_int(optval, optlen,
				      optname == SO_REUSEADDR ? rs->so_reuseaddr
				      : optname == SO_KEEPALIVE ? rs->so_keepalive
				      : optname == SO_OOBINLINE ? rs->so_oobinline
				      : optname == SO_RCVBUF  ? (int)rs->rbuf_size
				      : optname == SO_SNDBUF  ? (int)rs->sbuf_size
				      : optname == SO_TYPE    ? rs->type
				      : optname == SO_DOMAIN  ? rs->domain
				      : optname == SO_PROTOCOL ? IPPROTO_TCP
				      : !!(rs->state & RS_LISTENING));
			break;
		case SO_ERROR:
			ret = put_int(optval, optlen, rs->err);
			if (!ret)
				rs->err = 0;
			break;
		case SO_LINGER:
			if (*optlen < sizeof(struct linger)) {
				errno = EINVAL;
				break;
			}
			memcpy(optval, &rs->linger, sizeof(rs->linger));
			*optlen = sizeof(rs->linger);
			ret = 0;
			break;
		}
		break;
	case IPPROTO_TCP:
		if (optname == TCP_NODELAY)
			ret = put_int(optval, optlen, rs->tcp_nodelay);
		else if (optname == TCP_MAXSEG)
			ret = put_int(optval, optlen,
				      rs->cm_id->route.path_rec
					      ? 128 << rs->cm_id->route.path_rec->mtu
					      : 2048);
		else if (optname == TCP_KEEPIDLE)
			ret = put_int(optval, optlen, rs->keepidle);
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY && rs->domain == AF_INET6)
			ret = put_int(optval, optlen, rs->v6only);
		break;
	case SOL_RDMA:
		switch (optname) {
		case RDMA_SQSIZE:
			ret = put_int(optval, optlen, rs->sq_size);
			break;
		case RDMA_RQSIZE:
			ret = put_int(optval, optlen, rs->rq_size);
			break;
		case RDMA_INLINE:
			ret = put_int(optval, optlen, (int)rs->sq_inline);
			break;
		case RDMA_IOMAPSIZE:
			ret = put_int(optval, optlen, rs->iomap_size);
			break;
		}
		break;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

/* ---- rfcntl -------------------------------------------------------------- */

RS_EXPORT int rfcntl(int socket, int cmd, ...)
{
	struct rsocket *rs;
	va_list ap;
	void *arg;
	int ret;

	/* glibc's fcntl reads its one argument as a pointer-sized value
	 * too: ints and pointers both pass through */
	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	rs = rs_get(socket);
	if (!rs)
		return fcntl(socket, cmd, arg);
	pthread_mutex_lock(&rs->lock);
	switch (cmd) {
	case F_GETFL:
		ret = O_RDWR | rs->fd_flags;
		break;
	case F_SETFL:
		rs->fd_flags = (int)(intptr_t)arg & O_NONBLOCK;
		ret = 0;
		break;
	case F_GETFD:
	case F_SETFD:
		/* close-on-exec is the event channel's own */
		ret = fcntl(socket, cmd, arg);
		break;
	default:
		errno = EINVAL;
		ret = -1;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}
