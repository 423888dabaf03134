/*
 * Event channels, ids and events: the part of rdma_cm that rdma-core's
 * librdmacm and the kernel's rdma_ucm share.  A channel is a pipe that
 * holds one byte while events are queued, so its fd polls readable exactly
 * then and honours O_NONBLOCK set by the application.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "rdmacm/cma.h"

pthread_mutex_t cma_lock = PTHREAD_MUTEX_INITIALIZER;

static struct cma_device the_dev;
static struct ibv_context *dev_list[2];
static pthread_once_t dev_once = PTHREAD_ONCE_INIT;

static void dev_open(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device_attr attr;

	if (!list)
		return;
	if (list[0])
		the_dev.verbs = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!the_dev.verbs)
		return;
	the_dev.pd = ibv_alloc_pd(the_dev.verbs);
	if (!the_dev.pd || ibv_query_device(the_dev.verbs, &attr)) {
		if (the_dev.pd)
			ibv_dealloc_pd(the_dev.pd);
		ibv_close_device(the_dev.verbs);
		the_dev.verbs = NULL;
		return;
	}
	the_dev.max_resp_res = attr.max_qp_rd_atom;
	the_dev.max_init_depth = attr.max_qp_init_rd_atom;
	dev_list[0] = the_dev.verbs;
}

struct cma_device *cma_device(void)
{
	pthread_once(&dev_once, dev_open);
	return the_dev.verbs ? &the_dev : NULL;
}

static pthread_mutex_t cma_xrcd_lock = PTHREAD_MUTEX_INITIALIZER;

struct ibv_xrcd *cma_xrcd(struct cma_device *dev)
{
	struct ibv_xrcd_init_attr attr = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
		.oflags = O_CREAT,
	};

	/* not cma_lock: that is never held across a verb (src/LOCKING.md) */
	pthread_mutex_lock(&cma_xrcd_lock);
	if (!dev->xrcd)
		dev->xrcd = ibv_open_xrcd(dev->verbs, &attr);
	pthread_mutex_unlock(&cma_xrcd_lock);
	return dev->xrcd;
}

int cma_errno(int err)
{
	if (!err)
		return 0;
	errno = err < 0 ? -err : err;
	return -1;
}

CMA_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list;
	int n = cma_device() ? 1 : 0;

	if (num_devices)
		*num_devices = n;
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (n)
		list[0] = dev_list[0];
	return list;
}

CMA_EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

/* ---- channels ------------------------------------------------------------ */

struct cma_channel *cma_channel_new(void)
{
	struct cma_channel *chan = calloc(1, sizeof(*chan));
	int fds[2];

	if (!chan) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC)) {
		free(chan);
		return NULL;
	}
	/* the event thread must never block on a full pipe */
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	chan->ch.fd = fds[0];
	chan->wfd = fds[1];
	return chan;
}

void cma_channel_free(struct cma_channel *chan)
{
	close(chan->ch.fd);
	close(chan->wfd);
	free(chan);
}

CMA_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cma_channel *chan;

	if (!cma_device()) {
		errno = ENODEV;
		return NULL;
	}
	chan = cma_channel_new();
	return chan ? &chan->ch : NULL;
}

enum { GRAVEYARD = 64 };
static struct cma_channel *graveyard;	/* newest first */
static unsigned graveyard_len;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

CMA_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cma_channel *chan = (struct cma_channel *)channel;

	if (!chan)
		return;
	/* the ids on it are gone: the application destroyed them first */
	pthread_mutex_lock(&cma_lock);
	while (chan->head) {
		struct cma_event *ev = chan->head;

		chan->head = ev->next;
		free(ev);
	}
	chan->tail = NULL;
	/* Programs (rping) destroy the channel under their event thread and
	 * exit; that thread may be blocked on it or about to call
	 * rdma_get_cm_event again.  Either way it blocks for good, as a
	 * thread in the kernel's read would, rather than touch freed memory:
	 * the pipe goes (its closed write end wakes a poller), the memory is
	 * kept for the last GRAVEYARD channels destroyed. */
	chan->destroyed = true;
	close(chan->ch.fd);
	close(chan->wfd);
	chan->grave_next = graveyard;
	graveyard = chan;
	if (++graveyard_len > GRAVEYARD) {
		struct cma_channel **pp = &graveyard, *old;

		while ((*pp)->grave_next)
			pp = &(*pp)->grave_next;
		old = *pp;
		if (!old->waiters) {
			*pp = NULL;
			graveyard_len--;
			free(old);
		}
	}
	pthread_mutex_unlock(&cma_lock);
}

/* ---- events -------------------------------------------------------------- */

struct cma_event *cma_event_new(struct cma_id *id, enum rdma_cm_event_type t,
				int status)
{
	struct cma_event *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return NULL;
	ev->id_priv = id;
	ev->event.id = &id->id;
	ev->event.event = t;
	ev->event.status = status;
	return ev;
}

void cma_set_state(struct cma_id *id, enum cma_state state)
{
	pthread_mutex_lock(&cma_lock);
	id->state = state;
	pthread_mutex_unlock(&cma_lock);
}

void cma_revert_state(struct cma_id *id, enum cma_state from,
		      enum cma_state to)
{
	pthread_mutex_lock(&cma_lock);
	if (id->state == from)
		id->state = to;
	pthread_mutex_unlock(&cma_lock);
}

void cma_queue(struct cma_event *ev)
{
	struct cma_channel *chan = ev->id_priv->chan;
	char one = 1;

	ev->next = NULL;
	if (chan->tail) {
		chan->tail->next = ev;
	} else {
		chan->head = ev;
		if (write(chan->wfd, &one, 1) != 1) {
			/* cannot happen: the pipe holds at most this byte */
		}
	}
	chan->tail = ev;
}

void cma_queue_event(struct cma_id *id, enum rdma_cm_event_type type,
		     int status)
{
	struct cma_event *ev = cma_event_new(id, type, status);

	if (!ev)
		return;
	pthread_mutex_lock(&cma_lock);
	cma_queue(ev);
	pthread_mutex_unlock(&cma_lock);
}

/* The next event of a channel (cma_lock held), waiting as the fd's own
 * blocking mode says. */
static struct cma_event *dequeue(struct cma_channel *chan)
{
	struct cma_event *ev;
	char byte;

	while (!chan->head || chan->destroyed) {
		struct pollfd pfd = { .fd = chan->ch.fd, .events = POLLIN };
		int flags;

		if (chan->destroyed) {
			chan->waiters++;
			for (;;)
				pthread_cond_wait(&never, &cma_lock);
		}
		flags = fcntl(chan->ch.fd, F_GETFL);
		if (flags >= 0 && (flags & O_NONBLOCK)) {
			errno = EAGAIN;
			return NULL;
		}
		chan->waiters++;
		pthread_mutex_unlock(&cma_lock);
		poll(&pfd, 1, -1);
		pthread_mutex_lock(&cma_lock);
		chan->waiters--;
	}
	ev = chan->head;
	chan->head = ev->next;
	if (!chan->head) {
		chan->tail = NULL;
		if (read(chan->ch.fd, &byte, 1) != 1) {
			/* the byte is there while events are: cannot fail */
		}
	}
	return ev;
}

CMA_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel,
				 struct rdma_cm_event **event)
{
	struct cma_channel *chan = (struct cma_channel *)channel;
	struct cma_event *ev;

	if (!chan || !event)
		return cma_errno(EINVAL);
	for (;;) {
		pthread_mutex_lock(&cma_lock);
		ev = dequeue(chan);
		if (!ev) {
			pthread_mutex_unlock(&cma_lock);
			return -1;
		}
		ev->id_priv->events_reported++;
		pthread_mutex_unlock(&cma_lock);
		if (ev->internal == CMA_EV_REPORT ||
		    !cma_process_conn_resp(ev->id_priv, ev))
			break;
		/* consumed internally: nothing for the application */
		pthread_mutex_lock(&cma_lock);
		ev->id_priv->events_acked++;
		pthread_cond_broadcast(&ev->id_priv->acked);
		pthread_mutex_unlock(&cma_lock);
		free(ev);
	}
	*event = &ev->event;
	return 0;
}

CMA_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cma_event *ev = (struct cma_event *)event;

	if (!event)
		return cma_errno(EINVAL);
	pthread_mutex_lock(&cma_lock);
	ev->id_priv->events_acked++;
	pthread_cond_broadcast(&ev->id_priv->acked);
	/* a listener's connection, handed out, is the application's now:
	 * an id it was refused on is destroyed with the event */
	pthread_mutex_unlock(&cma_lock);
	free(ev);
	return 0;
}

CMA_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned)event < sizeof(names) / sizeof(names[0]) && names[event])
		return names[event];
	return "UNKNOWN EVENT";
}

/* ---- ids ----------------------------------------------------------------- */

void cma_set_verbs(struct cma_id *id)
{
	id->id.verbs = id->dev->verbs;
	id->id.port_num = 1;
	id->id.pd = id->dev->pd;
}

struct cma_id *cma_id_new(struct cma_channel *chan, void *context,
			  enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct cma_device *dev = cma_device();
	struct cma_id *id;

	if (!dev) {
		errno = ENODEV;
		return NULL;
	}
	id = calloc(1, sizeof(*id));
	if (!id) {
		errno = ENOMEM;
		return NULL;
	}
	id->dev = dev;
	id->chan = chan;
	id->id.channel = &chan->ch;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = qp_type;
	id->id.route.addr.addr.ibaddr.pkey = htobe16(0xFFFF);
	id->qkey = RDMA_UDP_QKEY;
	pthread_cond_init(&id->acked, NULL);
	/* the PSN we expect, random as Linux picks it */
	if (getrandom(&id->seq_num, sizeof(id->seq_num), 0) !=
	    sizeof(id->seq_num))
		id->seq_num = (uint32_t)(uintptr_t)id;
	id->seq_num &= 0xFFFFFF;
	return id;
}

static int ps_qp_type(enum rdma_port_space ps, enum ibv_qp_type *type)
{
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_IB:
		*type = IBV_QPT_RC;
		return 0;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		*type = IBV_QPT_UD;
		return 0;
	default:
		return EINVAL;
	}
}

CMA_EXPORT int rdma_create_id(struct rdma_event_channel *channel,
			      struct rdma_cm_id **id, void *context,
			      enum rdma_port_space ps)
{
	struct cma_channel *chan = (struct cma_channel *)channel;
	struct cma_id *priv;
	enum ibv_qp_type type;
	bool sync = !chan;

	if (!id || ps_qp_type(ps, &type))
		return cma_errno(EINVAL);
	/* rdma_create_id2 names the QP type for RDMA_PS_IB; this one takes
	 * the port space's */
	if (sync) {
		chan = cma_channel_new();
		if (!chan)
			return -1;
	}
	priv = cma_id_new(chan, context, ps, type);
	if (priv)
		priv->cm = uroce_cm_create_id(priv->dev->verbs, cma_cm_handler,
					      priv);
	if (!priv || !priv->cm) {
		int err = errno;

		free(priv);
		if (sync)
			cma_channel_free(chan);
		return cma_errno(err);
	}
	priv->sync = sync;
	*id = &priv->id;
	return 0;
}

/* Drops the id's queued events; a CONNECT_REQUEST on a listener takes its
 * unseen connection with it. */
static void purge_events(struct cma_id *id)
{
	struct cma_channel *chan = id->chan;
	struct cma_event **p = &chan->head, *kept_tail = NULL;
	struct cma_event *orphans = NULL;

	pthread_mutex_lock(&cma_lock);
	while (*p) {
		struct cma_event *ev = *p;

		if (ev->id_priv == id || ev->event.listen_id == &id->id) {
			*p = ev->next;
			ev->next = orphans;
			orphans = ev;
			continue;
		}
		kept_tail = ev;
		p = &ev->next;
	}
	chan->tail = kept_tail;
	if (!chan->head && orphans) {
		char byte;

		if (read(chan->ch.fd, &byte, 1) != 1) {
			/* the byte was there: events were queued */
		}
	}
	pthread_mutex_unlock(&cma_lock);
	while (orphans) {
		struct cma_event *ev = orphans;

		orphans = ev->next;
		if (ev->event.listen_id == &id->id &&
		    ev->event.event == RDMA_CM_EVENT_CONNECT_REQUEST)
			rdma_destroy_id(ev->event.id);
		free(ev);
	}
}

CMA_EXPORT int rdma_destroy_id(struct rdma_cm_id *cm_id)
{
	struct cma_id *id = to_cma(cm_id);

	if (!cm_id)
		return cma_errno(EINVAL);
	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	cma_forget_groups(id);
	/* first no more events: no request picks the id as its listener, and
	 * the CM sends what the state calls for */
	cma_unbind_port(id);
	uroce_cm_destroy_id(id->cm);
	purge_events(id);
	pthread_mutex_lock(&cma_lock);
	while (id->events_acked < id->events_reported)
		pthread_cond_wait(&id->acked, &cma_lock);
	pthread_mutex_unlock(&cma_lock);
	if (id->sync)
		cma_channel_free(id->chan);
	free(id->qp_init_attr);
	pthread_cond_destroy(&id->acked);
	free(id);
	return 0;
}

CMA_EXPORT int rdma_migrate_id(struct rdma_cm_id *cm_id,
			       struct rdma_event_channel *channel)
{
	struct cma_id *id = to_cma(cm_id);
	struct cma_channel *to = (struct cma_channel *)channel, *from;
	struct cma_event *moved = NULL, **tail = &moved;
	bool sync = !to;

	if (!cm_id)
		return cma_errno(EINVAL);
	if (sync) {
		to = cma_channel_new();
		if (!to)
			return -1;
	}
	pthread_mutex_lock(&cma_lock);
	from = id->chan;
	/* the id's queued events go with it, in order */
	for (struct cma_event **p = &from->head; *p;) {
		struct cma_event *ev = *p;

		if (ev->id_priv != id) {
			p = &ev->next;
			continue;
		}
		*p = ev->next;
		ev->next = NULL;
		*tail = ev;
		tail = &ev->next;
	}
	from->tail = NULL;
	for (struct cma_event *ev = from->head; ev; ev = ev->next)
		from->tail = ev;
	if (!from->head && moved) {
		char byte;

		if (read(from->ch.fd, &byte, 1) != 1) {
			/* events were queued, so the byte was there */
		}
	}
	id->chan = to;
	id->id.channel = &to->ch;
	while (moved) {
		struct cma_event *ev = moved;

		moved = ev->next;
		cma_queue(ev);
	}
	pthread_mutex_unlock(&cma_lock);
	if (id->sync)
		cma_channel_free(from);
	id->sync = sync;
	return 0;
}

int cma_complete(struct cma_id *id)
{
	struct rdma_cm_event *event;

	if (!id->sync)
		return 0;
	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	if (rdma_get_cm_event(&id->chan->ch, &event))
		return -1;
	id->id.event = event;
	if (event->status) {
		/* a refusal is ECONNREFUSED; the rest carry -errno */
		errno = event->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED
			: event->status < 0			? -event->status
								: ECONNREFUSED;
		return -1;
	}
	switch (event->event) {
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_REJECTED:
		errno = ECONNREFUSED;
		return -1;
	default:
		return 0;
	}
}
