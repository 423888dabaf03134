/*
 * rsockets: the fd table and the life of a stream rsocket (socket, bind,
 * listen, accept, connect, shutdown, close).  Names, options and rfcntl are
 * in rsocket_opt.c, the data path in rsocket_io.c, rpoll / rselect in
 * rsocket_poll.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rsocket.h"

/* ---- the fd table -------------------------------------------------------- */

/* Lookups take a reference under tbl_lock, so that rclose can take an
 * rsocket out of the table and then wait for the calls still using it. */
static pthread_mutex_t tbl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tbl_released = PTHREAD_COND_INITIALIZER;
static struct rsocket **tbl;
static int tbl_len;

static int tbl_insert(struct rsocket *rs)
{
	int err = 0;

	pthread_mutex_lock(&tbl_lock);
	if (rs->index >= tbl_len) {
		int len = tbl_len ? tbl_len : 64;
		struct rsocket **t;

		while (len <= rs->index)
			len *= 2;
		t = realloc(tbl, len * sizeof(*t));
		if (t) {
			memset(t + tbl_len, 0, (len - tbl_len) * sizeof(*t));
			tbl = t;
			tbl_len = len;
		} else {
			err = ENOMEM;
		}
	}
	if (!err)
		tbl[rs->index] = rs;
	pthread_mutex_unlock(&tbl_lock);
	errno = err ? err : errno;
	return err ? -1 : 0;
}

struct rsocket *rs_get(int index)
{
	struct rsocket *rs = NULL;

	pthread_mutex_lock(&tbl_lock);
	if (index >= 0 && index < tbl_len)
		rs = tbl[index];
	if (rs)
		rs->refs++;
	pthread_mutex_unlock(&tbl_lock);
	return rs;
}

void rs_put(struct rsocket *rs)
{
	pthread_mutex_lock(&tbl_lock);
	if (--rs->refs == 0)
		pthread_cond_broadcast(&tbl_released);
	pthread_mutex_unlock(&tbl_lock);
}

/* Takes the rsocket out of the table and waits until no call holds it but
 * the caller's. */
static void tbl_remove(struct rsocket *rs)
{
	pthread_mutex_lock(&tbl_lock);
	if (rs->index >= 0 && rs->index < tbl_len && tbl[rs->index] == rs)
		tbl[rs->index] = NULL;
	while (rs->refs > 1)
		pthread_cond_wait(&tbl_released, &tbl_lock);
	pthread_mutex_unlock(&tbl_lock);
}

bool rs_nonblocking(const struct rsocket *rs, int flags)
{
	return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

/* ---- creation and destruction -------------------------------------------- */

static struct rsocket *rs_alloc(const struct rsocket *inherit, int domain)
{
	struct rsocket *rs = calloc(1, sizeof(*rs));

	if (!rs) {
		errno = ENOMEM;
		return NULL;
	}
	rs->index = -1;
	rs->domain = domain;
	rs->type = SOCK_STREAM;
	pthread_mutex_init(&rs->lock, NULL);
	pthread_cond_init(&rs->wake, NULL);
	if (inherit) {
		/* an accepted socket has its listener's options, as in TCP */
		rs->sq_size = inherit->sq_size;
		rs->rq_size = inherit->rq_size;
		rs->sq_inline = inherit->sq_inline;
		rs->sbuf_size = inherit->sbuf_size;
		rs->rbuf_size = inherit->rbuf_size;
		rs->iomap_size = inherit->iomap_size;
		rs->so_keepalive = inherit->so_keepalive;
		rs->tcp_nodelay = inherit->tcp_nodelay;
		rs->so_oobinline = inherit->so_oobinline;
		rs->linger = inherit->linger;
		rs->keepidle = inherit->keepidle;
		rs->v6only = inherit->v6only;
	} else {
		rs->sq_size = RS_DEF_SQSIZE;
		rs->rq_size = RS_DEF_RQSIZE;
		rs->sq_inline = RS_DEF_INLINE;
		rs->sbuf_size = RS_DEF_MEM;
		rs->rbuf_size = RS_DEF_MEM;
		rs->keepidle = 7200;
	}
	return rs;
}

/* The rsocket's own event channel: its fd is the rsocket's number.  It is
 * nonblocking for good; the rsocket's own mode is in fd_flags. */
static int rs_open_channel(struct rsocket *rs)
{
	rs->chan = rdma_create_event_channel();
	if (!rs->chan)
		return -1;
	if (fcntl(rs->chan->fd, F_SETFL, O_NONBLOCK))
		return -1;
	rs->index = rs->chan->fd;
	return 0;
}

static void rs_free(struct rsocket *rs)
{
	rs_free_io(rs);
	if (rs->cm_id)
		rdma_destroy_id(rs->cm_id);
	if (rs->chan)
		rdma_destroy_event_channel(rs->chan);
	free(rs->route);
	pthread_cond_destroy(&rs->wake);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}

RS_EXPORT int rsocket(int domain, int type, int protocol)
{
	int flags = type & (SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct rsocket *rs;
	int err;

	type &= ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (domain != AF_INET && domain != AF_INET6) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (type != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP)) {
		/* datagram rsockets (UD) are not there yet */
		errno = EPROTONOSUPPORT;
		return -1;
	}
	rs = rs_alloc(NULL, domain);
	if (!rs)
		return -1;
	if (flags & SOCK_NONBLOCK)
		rs->fd_flags = O_NONBLOCK;
	if (rs_open_channel(rs) ||
	    rdma_create_id(rs->chan, &rs->cm_id, rs, RDMA_PS_TCP) ||
	    tbl_insert(rs)) {
		err = errno;
		rs_free(rs);
		errno = err;
		return -1;
	}
	return rs->index;
}

static bool addr_ok(const struct rsocket *rs, const struct sockaddr *addr,
		    socklen_t len)
{
	if (!addr)
		return false;
	if (addr->sa_family == AF_INET)
		return len >= sizeof(struct sockaddr_in);
	/* an IPv4 socket takes no IPv6 address */
	return addr->sa_family == AF_INET6 && rs->domain == AF_INET6 &&
	       len >= sizeof(struct sockaddr_in6);
}

RS_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsocket *rs = rs_get(socket);
	struct sockaddr_storage ss;
	int ret = -1;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	if (!addr_ok(rs, addr, addrlen)) {
		errno = addr ? EAFNOSUPPORT : EFAULT;
	} else if (rs->state != RS_INIT) {
		errno = EINVAL;
	} else {
		memset(&ss, 0, sizeof(ss));
		memcpy(&ss, addr, addr->sa_family == AF_INET
					  ? sizeof(struct sockaddr_in)
					  : sizeof(struct sockaddr_in6));
		ret = rdma_bind_addr(rs->cm_id, (struct sockaddr *)&ss);
		if (!ret)
			rs->state = RS_BOUND;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

RS_EXPORT int rlisten(int socket, int backlog)
{
	struct rsocket *rs = rs_get(socket);
	int ret = 0;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	if (rs->state & ~(RS_BOUND | RS_LISTENING)) {
		errno = EINVAL;
		ret = -1;
	} else if (!(rs->state & RS_LISTENING)) {
		ret = rdma_listen(rs->cm_id, backlog > 0 ? backlog : 1);
		if (!ret)
			rs->state = RS_LISTENING;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

void rs_copy_addr(struct sockaddr *to, socklen_t *to_len,
		      const struct sockaddr *from)
{
	socklen_t len = from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						    : sizeof(struct sockaddr_in);

	if (!to || !to_len)
		return;
	memcpy(to, from, *to_len < len ? *to_len : len);
	*to_len = len;
}

/* The next CONNECT_REQUEST on a listener's channel, waiting if the
 * listener blocks (lock held). */
static int next_request(struct rsocket *ls, struct rdma_cm_event **event)
{
	for (;;) {
		struct pollfd p = { .fd = ls->chan->fd, .events = POLLIN };
		int ret;

		if (!rdma_get_cm_event(ls->chan, event)) {
			if ((*event)->event == RDMA_CM_EVENT_CONNECT_REQUEST)
				return 0;
			rdma_ack_cm_event(*event);
			continue;
		}
		if (errno != EAGAIN)
			return -1;
		if (ls->fd_flags & O_NONBLOCK)
			return -1;
		pthread_mutex_unlock(&ls->lock);
		ret = poll(&p, 1, -1);
		pthread_mutex_lock(&ls->lock);
		if (ret < 0)
			return -1;
		if (!(ls->state & RS_LISTENING)) {
			errno = EINVAL;
			return -1;
		}
	}
}

static void conn_param(struct rdma_conn_param *p, const struct rs_conn_data *cd)
{
	memset(p, 0, sizeof(*p));
	p->private_data = cd;
	p->private_data_len = sizeof(*cd);
	/* riowrite is RDMA WRITE only: no READs to make room for */
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	/* a full receive queue is waited out, never an error */
	p->rnr_retry_count = 7;
	p->flow_control = 1;
}

static bool conn_data_ok(const void *data, size_t len)
{
	const struct rs_conn_data *cd = data;

	return data && len >= sizeof(*cd) && cd->version == RS_CONN_VERSION &&
	       cd->credits && cd->target_sgl.length && cd->data_buf.length;
}

RS_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsocket *ls = rs_get(socket), *rs = NULL;
	struct rdma_cm_event *event;
	struct rdma_conn_param param;
	struct rs_conn_data cd;
	int err;

	if (!ls) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&ls->lock);
	if (!(ls->state & RS_LISTENING)) {
		pthread_mutex_unlock(&ls->lock);
		rs_put(ls);
		errno = EINVAL;
		return -1;
	}
	if (next_request(ls, &event)) {
		err = errno;
		pthread_mutex_unlock(&ls->lock);
		rs_put(ls);
		errno = err;
		return -1;
	}
	rs = rs_alloc(ls, ls->domain);
	pthread_mutex_unlock(&ls->lock);
	rs_put(ls);
	if (!rs) {
		rdma_reject(event->id, NULL, 0);
		rdma_destroy_id(event->id);
		rdma_ack_cm_event(event);
		errno = ECONNABORTED;
		return -1;
	}
	rs->cm_id = event->id;
	rs->cm_id->context = rs;
	pthread_mutex_lock(&rs->lock);
	if (!conn_data_ok(event->param.conn.private_data,
			  event->param.conn.private_data_len)) {
		/* not an rsocket peer */
		rdma_reject(rs->cm_id, NULL, 0);
		err = ECONNABORTED;
		goto fail;
	}
	if (rs_open_channel(rs) || rdma_migrate_id(rs->cm_id, rs->chan) ||
	    rs_create_io(rs)) {
		rdma_reject(rs->cm_id, NULL, 0);
		err = errno;
		goto fail;
	}
	rs_save_conn_data(rs, event->param.conn.private_data);
	rs_format_conn_data(rs, &cd);
	conn_param(&param, &cd);
	if (rdma_accept(rs->cm_id, &param)) {
		err = errno;
		goto fail;
	}
	rdma_ack_cm_event(event);
	event = NULL;
	/* ready for traffic on the ESTABLISHED event (the RTU) */
	rs->state = RS_OPENING;
	rs->step = RS_STEP_ACCEPT;
	if (tbl_insert(rs)) {
		err = errno;
		goto fail;
	}
	rs_copy_addr(addr, addrlen, rdma_get_peer_addr(rs->cm_id));
	pthread_mutex_unlock(&rs->lock);
	return rs->index;
fail:
	pthread_mutex_unlock(&rs->lock);
	if (event)
		rdma_ack_cm_event(event);
	rs_free(rs);
	errno = err == ENOMEM ? ENOMEM : ECONNABORTED;
	return -1;
}

/* ---- connecting ---------------------------------------------------------- */

static void connect_failed(struct rsocket *rs, int err)
{
	rs->state = RS_CONNECT_ERROR;
	rs->step = RS_STEP_NONE;
	rs->err = err;
}

static int event_errno(const struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_REJECTED:
		return ECONNREFUSED;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return EHOSTUNREACH;
	default:
		return ev->status < 0 ? -ev->status : ETIMEDOUT;
	}
}

/* The next step of an active connect, after the one just completed. */
static void connect_step(struct rsocket *rs)
{
	struct rdma_conn_param param;
	struct rs_conn_data cd;

	switch (rs->step) {
	case RS_STEP_ADDR:
		rs->step = RS_STEP_ROUTE;
		if (rs->route) {
			/* a route given by RDMA_ROUTE: no resolution */
			if (!rdma_set_option(rs->cm_id, RDMA_OPTION_IB,
					     RDMA_OPTION_IB_PATH, rs->route,
					     rs->route_len))
				return;
		} else if (!rdma_resolve_route(rs->cm_id, RS_RESOLVE_MS)) {
			return;
		}
		break;
	case RS_STEP_ROUTE:
		rs->step = RS_STEP_CONNECT;
		if (rs_create_io(rs))
			break;
		rs_format_conn_data(rs, &cd);
		conn_param(&param, &cd);
		if (!rdma_connect(rs->cm_id, &param))
			return;
		break;
	default:
		return;
	}
	connect_failed(rs, errno);
}

void rs_cm_progress(struct rsocket *rs)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(rs->chan, &ev)) {
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			connect_step(rs);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (rs->step == RS_STEP_CONNECT) {
				if (!conn_data_ok(ev->param.conn.private_data,
						  ev->param.conn.private_data_len)) {
					rdma_disconnect(rs->cm_id);
					connect_failed(rs, ECONNREFUSED);
					break;
				}
				rs_save_conn_data(rs,
						  ev->param.conn.private_data);
			} else if (rs->step != RS_STEP_ACCEPT) {
				break;
			}
			rs->step = RS_STEP_NONE;
			rs->state = RS_CONNECT_RDWR;
			rs_connected(rs);
			break;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_REJECTED:
			if (rs->state & RS_OPENING)
				connect_failed(rs, event_errno(ev));
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			/* answer the DREQ; what was received stays readable */
			rdma_disconnect(rs->cm_id);
			if (rs->state & RS_OPENING)
				connect_failed(rs, ECONNRESET);
			else
				rs->state = RS_DISCONNECTED |
					    (rs->state & RS_ERROR);
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			rs->state = RS_ERROR | RS_DISCONNECTED;
			rs->err = ENETDOWN;
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
}

static bool connect_done(struct rsocket *rs)
{
	return !(rs->state & RS_OPENING);
}

RS_EXPORT int rconnect(int socket, const struct sockaddr *addr,
		       socklen_t addrlen)
{
	struct rsocket *rs = rs_get(socket);
	struct sockaddr_storage dst;
	int ret = -1;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	if (rs->state & RS_OPENING) {
		if (rs->fd_flags & O_NONBLOCK) {
			errno = EALREADY;
			goto out;
		}
	} else if (rs->state & (RS_CONNECTED | RS_DISCONNECTED)) {
		errno = EISCONN;
		goto out;
	} else if (rs->state & (RS_LISTENING | RS_CONNECT_ERROR)) {
		errno = rs->state & RS_LISTENING ? EINVAL : ECONNABORTED;
		goto out;
	} else if (!addr_ok(rs, addr, addrlen)) {
		errno = addr ? EAFNOSUPPORT : EFAULT;
		goto out;
	} else {
		memset(&dst, 0, sizeof(dst));
		memcpy(&dst, addr, addr->sa_family == AF_INET
					   ? sizeof(struct sockaddr_in)
					   : sizeof(struct sockaddr_in6));
		if (rdma_resolve_addr(rs->cm_id, NULL, (struct sockaddr *)&dst,
				      RS_RESOLVE_MS)) {
			if (errno == ENODEV || errno == EADDRNOTAVAIL)
				errno = ENETUNREACH;
			goto out;
		}
		rs->state |= RS_OPENING;
		rs->step = RS_STEP_ADDR;
	}
	if (rs_wait(rs, rs->fd_flags & O_NONBLOCK, connect_done)) {
		if (errno == EAGAIN)
			errno = EINPROGRESS;
		goto out;
	}
	if (rs->state & RS_CONNECT_ERROR) {
		errno = rs->err;
		goto out;
	}
	ret = 0;
out:
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

/* ---- shutdown and close -------------------------------------------------- */

static bool ctrl_avail(struct rsocket *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max_seqno ||
	       !(rs->state & RS_CONNECTED);
}

static bool sends_done(struct rsocket *rs)
{
	return rs_all_sends_done(rs) || !(rs->state & RS_CONNECTED);
}

/* Tells the peer what this side stops doing and, when it stops both,
 * disconnects (lock held).  Waits for the peer to have the message even on
 * a nonblocking socket: the message must not be lost behind our back. */
static void rs_do_shutdown(struct rsocket *rs, int how)
{
	uint32_t ctrl;

	if (how == SHUT_RDWR) {
		ctrl = RS_CTRL_DISCONNECT;
		rs->state &= ~(RS_READABLE | RS_WRITABLE);
	} else if (how == SHUT_WR) {
		rs->state &= ~RS_WRITABLE;
		ctrl = rs->state & RS_READABLE ? RS_CTRL_SHUTDOWN
					       : RS_CTRL_DISCONNECT;
	} else {
		rs->state &= ~RS_READABLE;
		if (rs->state & RS_WRITABLE)
			return;
		ctrl = RS_CTRL_DISCONNECT;
	}
	if (rs->state & RS_CONNECTED) {
		while (!ctrl_avail(rs) && !rs_wait(rs, false, ctrl_avail))
			;
		if ((rs->state & RS_CONNECTED) && !rs_send_ctrl(rs, ctrl))
			while (!sends_done(rs) && !rs_wait(rs, false, sends_done))
				;
	}
	if (ctrl == RS_CTRL_DISCONNECT) {
		if (rs->state & (RS_CONNECTED | RS_DISCONNECTED))
			rdma_disconnect(rs->cm_id);
		rs->state = RS_DISCONNECTED | (rs->state & RS_ERROR);
	}
}

RS_EXPORT int rshutdown(int socket, int how)
{
	struct rsocket *rs = rs_get(socket);
	int ret = 0;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		errno = EINVAL;
		ret = -1;
	} else if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED))) {
		errno = ENOTCONN;
		ret = -1;
	} else {
		rs_do_shutdown(rs, how);
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

RS_EXPORT int rclose(int socket)
{
	struct rsocket *rs = rs_get(socket);

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	if (rs->state & RS_CONNECTED)
		rs_do_shutdown(rs, SHUT_RDWR);
	else if (rs->state & RS_OPENING && rs->step == RS_STEP_ACCEPT)
		rdma_disconnect(rs->cm_id);
	pthread_mutex_unlock(&rs->lock);
	tbl_remove(rs);
	rs_free(rs);
	return 0;
}
