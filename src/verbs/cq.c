/*
 * Completion queues and completion channels.
 *
 * A CQ is a ring of struct ibv_wc behind a mutex: producers are the engine
 * and posting threads (which run the requester and completer inline), the
 * consumer is whoever polls.  The ring has a power-of-two number of slots and
 * one stays empty, so ibcq.cqe = slots - 1 >= what was asked for.
 *
 * A completion channel is a pipe whose read end is the application's fd, plus
 * a list of the CQs that have an event for it.  The pipe carries a token, not
 * the CQ pointer, because a CQ may be destroyed while its event is unread:
 * destroy takes it off the list (as the kernel drops such events), so
 * ibv_get_cq_event can never hand out a freed CQ.  A CQ is on the list at most
 * once and the pipe holds about one token, so the engine's write never finds
 * the pipe full and never blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/transport.h"
#include "verbs/ops.h"

enum {
	CQ_DISARMED = 0,
	CQ_ARMED_NEXT = 1,
	CQ_ARMED_SOLICITED = 2,
};

static struct uroce_comp_channel *to_uch(struct ibv_comp_channel *ch)
{
	return container_of(ch, struct uroce_comp_channel, ibch);
}

/* Ring slots for at least cqe entries plus the one kept empty. */
static uint32_t ring_slots(int cqe)
{
	uint32_t n = 2;

	while (n < (uint32_t)cqe + 1)
		n <<= 1;
	return n;
}

static uint32_t cq_count(const struct uroce_cq *cq)
{
	return (cq->head - cq->tail) & (cq->size - 1);
}

/* ---- completion channels --------------------------------------------------- */

static void channel_wake(struct uroce_comp_channel *ch)
{
	static const uint8_t token = 1;

	if (write(ch->wfd, &token, sizeof(token)) < 0) {
		/* The write end is non-blocking.  EAGAIN means the pipe is
		 * full of tokens already, and any of them wakes a reader. */
	}
}

/* The wake-ups a receiving thread holds back (uroce_cq_hold_wakes): the
 * channels to wake, each once; past the array's room, at once. */
enum { HELD_WAKES = 16 };
static __thread struct {
	bool holding;
	unsigned n;
	struct uroce_comp_channel *ch[HELD_WAKES];
} held_wakes;

void uroce_cq_hold_wakes(void)
{
	held_wakes.holding = true;
}

void uroce_cq_release_wakes(void)
{
	held_wakes.holding = false;
	for (unsigned i = 0; i < held_wakes.n; i++)
		channel_wake(held_wakes.ch[i]);
	held_wakes.n = 0;
}

/* The channel this thread sleeps on in ibv_get_cq_event while it receives
 * for the process (uroce_engine_wait): an event it raises there itself
 * needs no token in the pipe (a write, a poll and a read), only this flag,
 * and the thread takes the event at once. */
static __thread struct uroce_comp_channel *waiting_on;
static __thread bool waiting_raised;

/* Wakes the channel's reader, now or when the thread releases its held
 * wake-ups. */
static void channel_wake_or_hold(struct uroce_comp_channel *ch)
{
	if (ch == waiting_on) {
		waiting_raised = true;
		return;
	}
	if (held_wakes.holding) {
		for (unsigned i = 0; i < held_wakes.n; i++)
			if (held_wakes.ch[i] == ch)
				return;
		if (held_wakes.n < HELD_WAKES) {
			held_wakes.ch[held_wakes.n++] = ch;
			return;
		}
	}
	channel_wake(ch);
}

/* Queue cq's event; a CQ already queued is not queued twice (its consumer
 * re-arms and polls after taking the event, which covers both). */
static void channel_post(struct uroce_comp_channel *ch, struct uroce_cq *cq)
{
	bool wake = false;

	pthread_mutex_lock(&ch->lock);
	if (!cq->ev_queued) {
		cq->ev_queued = true;
		cq->ev_next = NULL;
		if (ch->ev_tail)
			ch->ev_tail->ev_next = cq;
		else
			ch->ev_head = cq;
		ch->ev_tail = cq;
		wake = ch->ev_head == cq;
		atomic_store(&ch->queued, true);
	}
	pthread_mutex_unlock(&ch->lock);
	if (wake)
		channel_wake_or_hold(ch);
}

/* Take cq's unread event off the channel; channel lock held. */
static void channel_unlink_locked(struct uroce_comp_channel *ch,
				  struct uroce_cq *cq)
{
	struct uroce_cq **pp = &ch->ev_head, *prev = NULL;

	if (!cq->ev_queued)
		return;
	while (*pp != cq) {
		prev = *pp;
		pp = &(*pp)->ev_next;
	}
	*pp = cq->ev_next;
	if (ch->ev_tail == cq)
		ch->ev_tail = prev;
	cq->ev_queued = false;
	cq->ev_next = NULL;
	atomic_store(&ch->queued, ch->ev_head != NULL);
}

UROCE_EXPORT struct ibv_comp_channel *
ibv_create_comp_channel(struct ibv_context *context)
{
	struct uroce_comp_channel *ch;
	int fds[2], err;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC)) {
		err = errno;
		free(ch);
		errno = err;
		return NULL;
	}
	/* Only the producer's end: the application's end blocks in read()
	 * until an event arrives, unless the application sets O_NONBLOCK. */
	if (fcntl(fds[1], F_SETFL, O_NONBLOCK)) {
		err = errno;
		close(fds[0]);
		close(fds[1]);
		free(ch);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&ch->lock, NULL);
	ch->ibch.context = context;
	ch->ibch.fd = fds[0];
	ch->ibch.refcnt = 0;
	ch->wfd = fds[1];
	return &ch->ibch;
}

UROCE_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct ibv_context *context;
	struct uroce_comp_channel *ch;

	if (!channel)
		return EINVAL;
	ch = to_uch(channel);
	context = channel->context;
	/* refcnt counts the CQs using the channel; it changes under the
	 * context mutex, as in rdma-core. */
	pthread_mutex_lock(&context->mutex);
	if (channel->refcnt) {
		pthread_mutex_unlock(&context->mutex);
		return EBUSY;
	}
	pthread_mutex_unlock(&context->mutex);
	close(ch->ibch.fd);
	close(ch->wfd);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
	return 0;
}

UROCE_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel,
				  struct ibv_cq **cq, void **cq_context)
{
	struct uroce_comp_channel *ch;
	struct uroce_cq *ucq;
	struct uroce_nic *nic;

	if (!channel || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	nic = to_uctx(channel->context)->nic;
	ch = to_uch(channel);
	do {
		uint8_t token;
		ssize_t n;
		int fl = fcntl(channel->fd, F_GETFL);

		/* about to sleep, most likely: not polling any more */
		if (fl < 0 || (fl & O_NONBLOCK))
			uroce_engine_app_left(nic, true);
		/* a blocking read would sleep: sleep receiving instead, so
		 * that what brings the completion wakes this thread */
		else {
			int err;

			waiting_on = ch;
			waiting_raised = false;
			struct uroce_wait w = {
				.fd = channel->fd,
				.raised = &waiting_raised,
				.queued = &ch->queued,
				.poll_ns = &ch->poll_ns,
			};

			err = uroce_engine_wait(nic, &w);
			waiting_on = NULL;
			if (err)
				return -1;
		}
		if (!waiting_raised) {
			n = read(channel->fd, &token, sizeof(token));
			if (n != (ssize_t)sizeof(token)) {
				/* EAGAIN (O_NONBLOCK and no event), EINTR */
				if (n >= 0)
					errno = EIO;
				return -1;
			}
		}
		waiting_raised = false;
		pthread_mutex_lock(&ch->lock);
		ucq = ch->ev_head;
		if (ucq) {
			ch->ev_head = ucq->ev_next;
			if (!ch->ev_head)
				ch->ev_tail = NULL;
			atomic_store(&ch->queued, ch->ev_head != NULL);
			ucq->ev_queued = false;
			ucq->ev_next = NULL;
			/* destroy_cq waits until this one is acknowledged */
			ucq->comp_events_reported++;
			/* the token just read stood for the whole list */
			if (ch->ev_head)
				channel_wake(ch);
		}
		pthread_mutex_unlock(&ch->lock);
		/* No CQ: the token was left by a CQ destroyed with its event
		 * unread.  Wait for a real event like the kernel would. */
	} while (!ucq);
	*cq = &ucq->ibcq;
	*cq_context = ucq->ibcq.cq_context;
	return 0;
}

UROCE_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq)
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- completion queues ----------------------------------------------------- */

UROCE_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
					  void *cq_context,
					  struct ibv_comp_channel *channel,
					  int comp_vector)
{
	struct uroce_cq *cq = uroce_cq_create(context, cqe, cq_context, channel,
					      comp_vector);

	return cq ? &cq->ibcq : NULL;
}

struct uroce_cq *uroce_cq_create(struct ibv_context *context, int cqe,
				 void *cq_context,
				 struct ibv_comp_channel *channel,
				 int comp_vector)
{
	struct uroce_cq *cq;
	uint32_t slots;

	if (!context || cqe < 1 || cqe > UROCE_MAX_CQE || comp_vector < 0 ||
	    comp_vector >= context->num_comp_vectors ||
	    (channel && channel->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	if (!uroce_nic_take(&to_uctx(context)->nic->used.cq, UROCE_MAX_CQ)) {
		errno = ENOMEM;
		return NULL;
	}
	slots = ring_slots(cqe);
	cq = calloc(1, sizeof(*cq));
	if (cq)
		cq->ring = malloc((size_t)slots * sizeof(*cq->ring));
	if (!cq || !cq->ring) {
		free(cq);
		atomic_fetch_sub(&to_uctx(context)->nic->used.cq, 1);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&cq->lock, NULL);
	cq->size = slots;
	atomic_init(&cq->use_cnt, 0);

	cq->ibcq.context = context;
	cq->ibcq.channel = channel;
	cq->ibcq.cq_context = cq_context;
	cq->ibcq.cqe = (int)(slots - 1);
	pthread_mutex_init(&cq->ibcq.mutex, NULL);
	pthread_cond_init(&cq->ibcq.cond, NULL);
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	return cq;
}

UROCE_EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct uroce_cq *cq;
	struct ibv_wc *ring, *old;
	struct uroce_cq_ts *ts = NULL, *old_ts;
	uint32_t slots, n;

	if (!ibcq || cqe < 1 || cqe > UROCE_MAX_CQE)
		return EINVAL;
	cq = to_ucq(ibcq);
	slots = ring_slots(cqe);
	ring = malloc((size_t)slots * sizeof(*ring));
	/* (cq->ts is set at creation only: reading it here is safe) */
	if (ring && cq->ts)
		ts = malloc((size_t)slots * sizeof(*ts));
	if (!ring || (cq->ts && !ts)) {
		free(ring);
		return ENOMEM;
	}
	pthread_mutex_lock(&cq->lock);
	n = cq_count(cq);
	/* the man page: cqe must cover the entries not yet polled */
	if (n > slots - 1) {
		pthread_mutex_unlock(&cq->lock);
		free(ring);
		free(ts);
		return EINVAL;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t at = (cq->tail + i) & (cq->size - 1);

		ring[i] = cq->ring[at];
		if (ts)
			ts[i] = cq->ts[at];
	}
	old = cq->ring;
	old_ts = cq->ts;
	cq->ring = ring;
	cq->ts = ts;
	cq->size = slots;
	cq->tail = 0;
	cq->head = n;
	ibcq->cqe = (int)(slots - 1);
	pthread_mutex_unlock(&cq->lock);
	free(old);
	free(old_ts);
	return 0;
}

UROCE_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct uroce_cq *cq;
	struct ibv_comp_channel *channel;
	uint32_t reported = 0;

	if (!ibcq)
		return EINVAL;
	cq = to_ucq(ibcq);
	if (atomic_load(&cq->use_cnt))
		return EBUSY;
	channel = ibcq->channel;
	if (channel) {
		struct uroce_comp_channel *ch = to_uch(channel);

		pthread_mutex_lock(&ch->lock);
		channel_unlink_locked(ch, cq);
		reported = cq->comp_events_reported;
		pthread_mutex_unlock(&ch->lock);
	}
	/* As in rdma-core: every event handed out must be acknowledged before
	 * the CQ goes, so that no thread still uses the pointer it got. */
	pthread_mutex_lock(&ibcq->mutex);
	while (ibcq->comp_events_completed != reported)
		pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
	pthread_mutex_unlock(&ibcq->mutex);
	if (channel) {
		pthread_mutex_lock(&channel->context->mutex);
		channel->refcnt--;
		pthread_mutex_unlock(&channel->context->mutex);
	}
	pthread_cond_destroy(&ibcq->cond);
	pthread_mutex_destroy(&ibcq->mutex);
	pthread_mutex_destroy(&cq->lock);
	if (cq->parent_domain)
		uroce_pd_hold(cq->parent_domain, -1);
	atomic_fetch_sub(&to_uctx(ibcq->context)->nic->used.cq, 1);
	free(cq->ring);
	free(cq->ts);
	free(cq->ex);
	free(cq);
	return 0;
}

static void cq_stamp(struct uroce_cq_ts *ts)
{
	struct timespec wall;

	ts->raw = uroce_now_ns();
	clock_gettime(CLOCK_REALTIME, &wall);
	ts->wall = (uint64_t)wall.tv_sec * 1000000000ull +
		   (uint64_t)wall.tv_nsec;
}

int uroce_cq_keep_ts(struct uroce_cq *cq)
{
	cq->ts = calloc(cq->size, sizeof(*cq->ts));
	return cq->ts ? 0 : ENOMEM;
}

void uroce_cq_clean(struct uroce_cq *cq, uint32_t qp_num)
{
	uint32_t keep;

	pthread_mutex_lock(&cq->lock);
	keep = cq->tail;
	for (uint32_t i = cq->tail; i != cq->head; i = (i + 1) & (cq->size - 1)) {
		if (cq->ring[i].qp_num == qp_num)
			continue;
		cq->ring[keep] = cq->ring[i];
		if (cq->ts)
			cq->ts[keep] = cq->ts[i];
		keep = (keep + 1) & (cq->size - 1);
	}
	cq->head = keep;
	pthread_mutex_unlock(&cq->lock);
}

bool uroce_cq_push(struct uroce_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	bool fire = false, overflow_now = false;

	pthread_mutex_lock(&cq->lock);
	if (cq->overflow) {
		/* In error: a later completion after lost ones would only
		 * mislead the consumer. */
		pthread_mutex_unlock(&cq->lock);
		return false;
	}
	if (cq_count(cq) == cq->size - 1) {
		cq->overflow = true;
		overflow_now = true;
	} else {
		cq->ring[cq->head] = *wc;
		if (cq->ts)
			cq_stamp(&cq->ts[cq->head]);
		cq->head = (cq->head + 1) & (cq->size - 1);
		/* solicited-only arming also fires on any completion in
		 * error (IBTA, Request Completion Notification) */
		fire = cq->armed == CQ_ARMED_NEXT ||
		       (cq->armed == CQ_ARMED_SOLICITED &&
			(solicited || wc->status != IBV_WC_SUCCESS));
		if (fire)
			cq->armed = CQ_DISARMED;
	}
	pthread_mutex_unlock(&cq->lock);

	if (overflow_now) {
		struct ibv_async_event ev = {
			.element.cq = &cq->ibcq,
			.event_type = IBV_EVENT_CQ_ERR,
		};

		uroce_async_event(to_uctx(cq->ibcq.context), &ev);
		return false;
	}
	if (fire && cq->ibcq.channel)
		channel_post(to_uch(cq->ibcq.channel), cq);
	return true;
}

/* Move up to n completions out; -EOVERFLOW once an overflowed CQ is empty,
 * since completions were lost and waiting for them would hang. */
int uroce_cq_take(struct uroce_cq *cq, int n, struct ibv_wc *wc,
		  struct uroce_cq_ts *ts)
{
	int got = 0;

	pthread_mutex_lock(&cq->lock);
	while (got < n && cq->tail != cq->head) {
		if (ts && cq->ts)
			ts[got] = cq->ts[cq->tail];
		wc[got++] = cq->ring[cq->tail];
		cq->tail = (cq->tail + 1) & (cq->size - 1);
	}
	if (!got && n && cq->overflow)
		got = -EOVERFLOW;
	pthread_mutex_unlock(&cq->lock);
	return got;
}

bool uroce_cq_armed(struct uroce_cq *cq)
{
	return atomic_load_explicit(&cq->armed, memory_order_relaxed) !=
	       CQ_DISARMED;
}

int uroce_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
	struct uroce_cq *cq = to_ucq(ibcq);
	struct uroce_nic *nic = to_uctx(ibcq->context)->nic;
	uint64_t now;
	int got;

	/* ibv_poll_cq reports errors as negative values */
	if (num_entries < 0)
		return -EINVAL;
	if (cq->ex && cq->ex->cur < cq->ex->n) {
		/* an extended CQ's batch comes first: it is the oldest */
		struct uroce_cq_ex_poll *p = cq->ex;

		for (got = 0; got < num_entries && p->cur < p->n; got++)
			wc[got] = p->wc[p->cur++];
		return got;
	}
	/* requests held back for company go now, as a batch */
	now = uroce_now_ns();
	uroce_req_app_release_held(nic, now);
	got = uroce_cq_take(cq, num_entries, wc, NULL);
	if (got == 0 && num_entries) {
		/* Receive on this thread instead of waiting for the engine
		 * thread to wake up: the completion may be one datagram away.
		 * A thread that armed the CQ polls once more before it sleeps
		 * (the race every event loop closes): the engine keeps
		 * receiving for it. */
		uroce_engine_poll(nic, now, uroce_cq_armed(cq));
		got = uroce_cq_take(cq, num_entries, wc, NULL);
	}
	if (got > 0)
		uroce_engine_app_left(nic, false);
	return got;
}

int uroce_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct uroce_cq *cq = to_ucq(ibcq);

	pthread_mutex_lock(&cq->lock);
	/* "next" already covers every solicited completion: keep it */
	if (!solicited_only)
		cq->armed = CQ_ARMED_NEXT;
	else if (cq->armed != CQ_ARMED_NEXT)
		cq->armed = CQ_ARMED_SOLICITED;
	pthread_mutex_unlock(&cq->lock);
	/* the application is about to wait for the event, not poll */
	uroce_req_app_release_held(to_uctx(ibcq->context)->nic, uroce_now_ns());
	uroce_engine_flush_acks(to_uctx(ibcq->context)->nic);
	uroce_engine_app_left(to_uctx(ibcq->context)->nic, true);
	return 0;
}
