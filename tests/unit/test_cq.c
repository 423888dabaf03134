/*
 * Completion queues and completion channels (src/verbs/cq.c), white-box:
 * ring wrap-around, overflow, resize, arming (next / solicited-only), channel
 * fd readiness seen through poll(), event hand-out and acknowledgement, and
 * concurrent producers.
 *
 * The CQ code needs only a context whose nic the poll path can hand to the
 * engine, so the test builds a bare uroce_context and replaces the engine and
 * the async event queue with the doubles below.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/transport.h"
#include "verbs/ops.h"

/* How long a test waits for something that must happen (ms); what must not
 * happen is checked with a zero timeout, after the push that could cause it
 * has returned. */
#define WAIT_MS 2000

/* ---- doubles for the engine and the async event queue -------------------- */

static int engine_polls;
static bool engine_poll_will_wait;	/* what the last inline receive said */
static int engine_app_left;	/* polls that returned completions */
static struct uroce_cq *engine_inject;	/* completion "received" inline */
static int async_events;
static struct ibv_async_event last_async;

void uroce_engine_poll(struct uroce_nic *nic, uint64_t now, bool will_wait)
{
	(void)nic;
	(void)now;
	engine_poll_will_wait = will_wait;
	engine_polls++;
	if (engine_inject) {
		struct ibv_wc wc = { .wr_id = 0xE, .status = IBV_WC_SUCCESS };

		uroce_cq_push(engine_inject, &wc, false);
		engine_inject = NULL;
	}
}

void uroce_engine_app_left(struct uroce_nic *nic, bool will_wait)
{
	(void)nic;
	(void)will_wait;
	engine_app_left++;
}

int uroce_engine_wait(struct uroce_nic *nic, const struct uroce_wait *w)
{
	struct pollfd p = { .fd = w->fd, .events = POLLIN };

	(void)nic;
	return poll(&p, 1, -1) < 0 ? -1 : 0;
}

void uroce_engine_flush_acks(struct uroce_nic *nic)
{
	(void)nic;
}

void uroce_req_app_release_held(struct uroce_nic *nic, uint64_t now)
{
	(void)nic;
	(void)now;
}

void uroce_async_event(struct uroce_context *ctx,
		       const struct ibv_async_event *ev)
{
	(void)ctx;
	async_events++;
	last_async = *ev;
}

/* ---- fixture -------------------------------------------------------------- */

struct fixture {
	struct uroce_nic nic;
	struct uroce_context ctx;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct ibv_context *c;

	if (!f)
		return -1;
	c = &f->ctx.vctx.context;
	f->ctx.nic = &f->nic;
	c->num_comp_vectors = 1;
	c->ops.poll_cq = uroce_poll_cq;
	c->ops.req_notify_cq = uroce_req_notify_cq;
	pthread_mutex_init(&c->mutex, NULL);
	engine_polls = 0;
	engine_poll_will_wait = false;
	engine_app_left = 0;
	engine_inject = NULL;
	async_events = 0;
	memset(&last_async, 0, sizeof(last_async));
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	pthread_mutex_destroy(&f->ctx.vctx.context.mutex);
	free(f);
	return 0;
}

static struct ibv_context *ctx_of(void **state)
{
	return &((struct fixture *)*state)->ctx.vctx.context;
}

static bool push(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
		 bool solicited)
{
	struct ibv_wc wc = { .wr_id = wr_id, .status = status };

	return uroce_cq_push(to_ucq(cq), &wc, solicited);
}

/* poll() on the channel fd: true if readable within ms. */
static bool fd_ready(struct ibv_comp_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void get_event(struct ibv_comp_channel *ch, struct ibv_cq *want,
		      void *want_ctx)
{
	struct ibv_cq *cq = NULL;
	void *cq_ctx = NULL;

	assert_int_equal(ibv_get_cq_event(ch, &cq, &cq_ctx), 0);
	assert_ptr_equal(cq, want);
	assert_ptr_equal(cq_ctx, want_ctx);
}

/* ---- tests ----------------------------------------------------------------- */

static void test_create_args(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_cq *cq;

	errno = 0;
	assert_null(ibv_create_cq(c, 0, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(c, -1, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(c, UROCE_MAX_CQE + 1, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(c, 4, NULL, NULL, 1));	/* one vector */
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(ibv_create_cq(NULL, 4, NULL, NULL, 0));
	assert_int_equal(errno, EINVAL);

	cq = ibv_create_cq(c, 1, NULL, NULL, 0);
	assert_non_null(cq);
	assert_int_equal(cq->cqe, 1);
	assert_ptr_equal(cq->context, c);
	assert_int_equal(ibv_destroy_cq(cq), 0);

	cq = ibv_create_cq(c, 5, NULL, NULL, 0);
	assert_non_null(cq);
	assert_true(cq->cqe >= 5);
	assert_int_equal(ibv_destroy_cq(cq), 0);

	cq = ibv_create_cq(c, UROCE_MAX_CQE, NULL, NULL, 0);
	assert_non_null(cq);
	assert_int_equal(cq->cqe, UROCE_MAX_CQE);
	assert_int_equal(ibv_destroy_cq(cq), 0);

	assert_int_equal(ibv_destroy_cq(NULL), EINVAL);
}

/* Exactly cqe entries fit, and the ring keeps FIFO order across many
 * wrap-arounds with varying produce/consume batch sizes. */
static void test_ring_wrap(void **state)
{
	struct ibv_cq *cq = ibv_create_cq(ctx_of(state), 3, NULL, NULL, 0);
	uint64_t next_in = 0, next_out = 0;
	struct ibv_wc wc[4];

	assert_non_null(cq);
	assert_int_equal(cq->cqe, 3);
	for (int round = 0; round < 1000; round++) {
		int in = 1 + round % 3, out = 1 + (round / 3) % 4;
		int queued = (int)(next_in - next_out);

		for (int i = 0; i < in && queued < cq->cqe; i++, queued++)
			assert_true(push(cq, next_in++, IBV_WC_SUCCESS, false));
		int n = ibv_poll_cq(cq, out, wc);
		assert_int_equal(n, out < queued ? out : queued);
		for (int i = 0; i < n; i++)
			assert_int_equal(wc[i].wr_id, next_out++);
	}
	/* a zero-sized poll consumes nothing */
	assert_true(push(cq, next_in++, IBV_WC_SUCCESS, false));
	assert_int_equal(ibv_poll_cq(cq, 0, wc), 0);
	while (next_out < next_in) {
		assert_int_equal(ibv_poll_cq(cq, 1, wc), 1);
		assert_int_equal(wc[0].wr_id, next_out++);
	}
	assert_int_equal(async_events, 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

static void test_overflow(void **state)
{
	struct ibv_cq *cq = ibv_create_cq(ctx_of(state), 2, NULL, NULL, 0);
	struct ibv_wc wc[8];
	int cap;

	assert_non_null(cq);
	cap = cq->cqe;
	for (int i = 0; i < cap; i++)
		assert_true(push(cq, i, IBV_WC_SUCCESS, false));
	assert_false(push(cq, 100, IBV_WC_SUCCESS, false));
	assert_int_equal(async_events, 1);
	assert_int_equal(last_async.event_type, IBV_EVENT_CQ_ERR);
	assert_ptr_equal(last_async.element.cq, cq);

	/* in error: later pushes are refused without another event */
	assert_false(push(cq, 101, IBV_WC_SUCCESS, false));
	assert_int_equal(async_events, 1);

	/* what was queued before the overflow is intact */
	assert_int_equal(ibv_poll_cq(cq, 8, wc), cap);
	for (int i = 0; i < cap; i++)
		assert_int_equal(wc[i].wr_id, i);
	/* then the consumer learns that completions were lost */
	assert_true(ibv_poll_cq(cq, 8, wc) < 0);
	assert_false(push(cq, 102, IBV_WC_SUCCESS, false));
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

static void test_poll_args_and_inline_receive(void **state)
{
	struct ibv_cq *cq = ibv_create_cq(ctx_of(state), 4, NULL, NULL, 0);
	struct ibv_wc wc;

	assert_non_null(cq);
	assert_int_equal(ibv_poll_cq(cq, -1, &wc), -EINVAL);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
	assert_int_equal(engine_polls, 1);	/* empty: received inline */
	assert_int_equal(engine_app_left, 0);	/* still polling */

	engine_inject = to_ucq(cq);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 1);
	assert_int_equal(wc.wr_id, 0xE);
	/* completions returned: the engine takes over receiving */
	assert_int_equal(engine_app_left, 1);

	/* a non-empty CQ does not call into the engine to receive */
	engine_polls = 0;
	assert_true(push(cq, 1, IBV_WC_SUCCESS, false));
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 1);
	assert_int_equal(engine_polls, 0);
	assert_int_equal(engine_app_left, 2);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* A thread that armed its CQ polls once more before it sleeps: it receives
 * inline but tells the engine it will wait (the engine keeps receiving). */
static void test_poll_armed_will_wait(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	struct ibv_cq *cq;
	struct ibv_wc wc;

	assert_non_null(ch);
	cq = ibv_create_cq(c, 4, NULL, ch, 0);
	assert_non_null(cq);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
	assert_false(engine_poll_will_wait);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
	assert_int_equal(engine_polls, 2);
	assert_true(engine_poll_will_wait);
	/* the event disarms it: polling again is polling */
	assert_true(push(cq, 1, IBV_WC_SUCCESS, false));
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 1);
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
	assert_false(engine_poll_will_wait);
	{
		struct ibv_cq *got;
		void *got_ctx;

		assert_int_equal(ibv_get_cq_event(ch, &got, &got_ctx), 0);
		ibv_ack_cq_events(got, 1);
	}
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

static void test_notify_next(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	int cookie;
	struct ibv_cq *cq;
	struct ibv_wc wc[4];

	assert_non_null(ch);
	assert_true(fcntl(ch->fd, F_GETFD) & FD_CLOEXEC);
	cq = ibv_create_cq(c, 4, &cookie, ch, 0);
	assert_non_null(cq);
	assert_ptr_equal(cq->channel, ch);
	assert_false(fd_ready(ch, 0));

	/* not armed: no event */
	assert_true(push(cq, 1, IBV_WC_SUCCESS, false));
	assert_false(fd_ready(ch, 0));

	/* arming does not fire for entries already queued */
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_false(fd_ready(ch, 0));

	assert_true(push(cq, 2, IBV_WC_SUCCESS, false));
	assert_true(fd_ready(ch, WAIT_MS));
	get_event(ch, cq, &cookie);
	assert_false(fd_ready(ch, 0));

	/* one event per arming */
	assert_true(push(cq, 3, IBV_WC_SUCCESS, false));
	assert_false(fd_ready(ch, 0));

	ibv_ack_cq_events(cq, 1);
	assert_int_equal(cq->comp_events_completed, 1);
	assert_int_equal(ibv_poll_cq(cq, 4, wc), 3);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

static void test_notify_solicited(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, ch, 0);

	assert_non_null(ch);
	assert_non_null(cq);

	/* solicited-only: an unsolicited success does not fire ... */
	assert_int_equal(ibv_req_notify_cq(cq, 1), 0);
	assert_true(push(cq, 1, IBV_WC_SUCCESS, false));
	assert_false(fd_ready(ch, 0));
	/* ... a solicited one does */
	assert_true(push(cq, 2, IBV_WC_SUCCESS, true));
	assert_true(fd_ready(ch, WAIT_MS));
	get_event(ch, cq, NULL);

	/* ... and so does any completion in error */
	assert_int_equal(ibv_req_notify_cq(cq, 1), 0);
	assert_true(push(cq, 3, IBV_WC_WR_FLUSH_ERR, false));
	assert_true(fd_ready(ch, WAIT_MS));
	get_event(ch, cq, NULL);

	/* solicited-only then next: next wins */
	assert_int_equal(ibv_req_notify_cq(cq, 1), 0);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_true(push(cq, 4, IBV_WC_SUCCESS, false));
	assert_true(fd_ready(ch, WAIT_MS));
	get_event(ch, cq, NULL);

	/* next then solicited-only: next is kept */
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_int_equal(ibv_req_notify_cq(cq, 1), 0);
	assert_true(push(cq, 5, IBV_WC_SUCCESS, false));
	assert_true(fd_ready(ch, WAIT_MS));
	get_event(ch, cq, NULL);

	ibv_ack_cq_events(cq, 4);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/* Events of several CQs come out oldest first; a CQ with an event not yet
 * taken does not queue a second one. */
static void test_channel_order(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	struct ibv_cq *a = ibv_create_cq(c, 8, (void *)1, ch, 0);
	struct ibv_cq *b = ibv_create_cq(c, 8, (void *)2, ch, 0);

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(ch->refcnt, 2);
	assert_int_equal(ibv_req_notify_cq(b, 0), 0);
	assert_int_equal(ibv_req_notify_cq(a, 0), 0);
	assert_true(push(b, 1, IBV_WC_SUCCESS, false));
	assert_true(push(a, 1, IBV_WC_SUCCESS, false));
	assert_int_equal(ibv_req_notify_cq(b, 0), 0);
	assert_true(push(b, 2, IBV_WC_SUCCESS, false));

	assert_true(fd_ready(ch, WAIT_MS));
	get_event(ch, b, (void *)2);
	assert_true(fd_ready(ch, WAIT_MS));
	get_event(ch, a, (void *)1);
	assert_false(fd_ready(ch, 0));

	ibv_ack_cq_events(a, 1);
	ibv_ack_cq_events(b, 1);
	assert_int_equal(ibv_destroy_cq(a), 0);
	assert_int_equal(ibv_destroy_cq(b), 0);
	assert_int_equal(ch->refcnt, 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

/* With O_NONBLOCK set by the application, no event means EAGAIN; and a CQ
 * destroyed with its event unread is never handed out afterwards. */
static void test_nonblocking_and_destroy_pending(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	struct ibv_cq *cq = ibv_create_cq(c, 8, NULL, ch, 0), *got;
	void *got_ctx;

	assert_non_null(cq);
	assert_int_equal(fcntl(ch->fd, F_SETFL,
			       fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
	errno = 0;
	assert_int_equal(ibv_get_cq_event(ch, &got, &got_ctx), -1);
	assert_int_equal(errno, EAGAIN);

	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_true(push(cq, 1, IBV_WC_SUCCESS, false));
	assert_true(fd_ready(ch, WAIT_MS));
	/* unread events need no ack: destroy does not wait for them */
	assert_int_equal(ibv_destroy_cq(cq), 0);

	errno = 0;
	assert_int_equal(ibv_get_cq_event(ch, &got, &got_ctx), -1);
	assert_int_equal(errno, EAGAIN);
	assert_false(fd_ready(ch, 0));
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

static void test_busy(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	struct ibv_cq *cq = ibv_create_cq(c, 8, NULL, ch, 0);

	assert_non_null(cq);
	assert_int_equal(ibv_destroy_comp_channel(ch), EBUSY);
	/* a QP or SRQ using the CQ */
	atomic_fetch_add(&to_ucq(cq)->use_cnt, 1);
	assert_int_equal(ibv_destroy_cq(cq), EBUSY);
	atomic_fetch_sub(&to_ucq(cq)->use_cnt, 1);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
	assert_int_equal(ibv_destroy_comp_channel(NULL), EINVAL);
}

struct destroyer {
	struct ibv_cq *cq;
	atomic_bool done;
	int ret;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;

	d->ret = ibv_destroy_cq(d->cq);
	atomic_store(&d->done, true);
	return NULL;
}

/* ibv_destroy_cq waits until every event handed out is acknowledged. */
static void test_destroy_waits_for_ack(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	struct ibv_cq *cq = ibv_create_cq(c, 8, NULL, ch, 0);
	struct destroyer d = { .cq = cq };
	struct timespec pause = { 0, 50 * 1000 * 1000 };
	pthread_t t;

	assert_non_null(cq);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	assert_true(push(cq, 1, IBV_WC_SUCCESS, false));
	get_event(ch, cq, NULL);

	assert_int_equal(pthread_create(&t, NULL, destroy_thread, &d), 0);
	nanosleep(&pause, NULL);
	assert_false(atomic_load(&d.done));
	ibv_ack_cq_events(cq, 1);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(d.ret, 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
}

static void test_resize(void **state)
{
	struct ibv_cq *cq = ibv_create_cq(ctx_of(state), 3, NULL, NULL, 0);
	struct ibv_wc wc[16];
	uint64_t in = 0, out = 0;

	assert_non_null(cq);
	/* wrap the ring first so the copy has to unwrap it */
	for (int i = 0; i < 2; i++)
		assert_true(push(cq, in++, IBV_WC_SUCCESS, false));
	assert_int_equal(ibv_poll_cq(cq, 2, wc), 2);
	out += 2;
	for (int i = 0; i < 3; i++)
		assert_true(push(cq, in++, IBV_WC_SUCCESS, false));

	assert_int_equal(ibv_resize_cq(cq, 10), 0);
	assert_true(cq->cqe >= 10);
	while (in - out < (uint64_t)cq->cqe)
		assert_true(push(cq, in++, IBV_WC_SUCCESS, false));
	/* the resized ring holds exactly cqe entries */
	assert_false(push(cq, 999, IBV_WC_SUCCESS, false));
	int n = ibv_poll_cq(cq, 16, wc);
	assert_int_equal(n, (int)(in - out));
	for (int i = 0; i < n; i++)
		assert_int_equal(wc[i].wr_id, out++);
	assert_int_equal(ibv_destroy_cq(cq), 0);

	cq = ibv_create_cq(ctx_of(state), 8, NULL, NULL, 0);
	assert_non_null(cq);
	for (int i = 0; i < 5; i++)
		assert_true(push(cq, i, IBV_WC_SUCCESS, false));
	/* cannot shrink below the entries not yet polled */
	assert_int_equal(ibv_resize_cq(cq, 2), EINVAL);
	assert_int_equal(ibv_resize_cq(cq, 0), EINVAL);
	assert_int_equal(ibv_resize_cq(cq, UROCE_MAX_CQE + 1), EINVAL);
	assert_int_equal(ibv_resize_cq(cq, 5), 0);
	assert_true(cq->cqe >= 5);
	assert_int_equal(ibv_poll_cq(cq, 16, wc), 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(wc[i].wr_id, i);
	assert_int_equal(ibv_resize_cq(cq, 1), 0);
	assert_int_equal(cq->cqe, 1);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

enum { PRODUCERS = 4, PER_PRODUCER = 20000 };

struct producer {
	struct ibv_cq *cq;
	uint64_t id;
};

static void *produce(void *arg)
{
	struct producer *p = arg;

	for (uint64_t i = 0; i < PER_PRODUCER; i++) {
		struct ibv_wc wc = { .wr_id = p->id << 32 | i };

		/* sized so that it never overflows */
		if (!uroce_cq_push(to_ucq(p->cq), &wc, false))
			abort();
	}
	return NULL;
}

/* Several producers against one consumer: nothing lost or duplicated, and
 * each producer's completions stay in order. */
static void test_concurrent_producers(void **state)
{
	struct ibv_cq *cq = ibv_create_cq(ctx_of(state),
					  PRODUCERS * PER_PRODUCER, NULL,
					  NULL, 0);
	struct producer p[PRODUCERS];
	pthread_t t[PRODUCERS];
	uint64_t next[PRODUCERS] = { 0 }, total = 0;
	struct ibv_wc wc[64];

	assert_non_null(cq);
	for (int i = 0; i < PRODUCERS; i++) {
		p[i] = (struct producer){ .cq = cq, .id = (uint64_t)i };
		assert_int_equal(pthread_create(&t[i], NULL, produce, &p[i]), 0);
	}
	while (total < (uint64_t)PRODUCERS * PER_PRODUCER) {
		int n = ibv_poll_cq(cq, 64, wc);

		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			uint64_t id = wc[i].wr_id >> 32;

			assert_true(id < PRODUCERS);
			assert_int_equal(wc[i].wr_id & 0xffffffff, next[id]);
			next[id]++;
		}
		total += (uint64_t)n;
	}
	for (int i = 0; i < PRODUCERS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_int_equal(ibv_poll_cq(cq, 64, wc), 0);
	assert_int_equal(async_events, 0);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* Extended CQs (verbs/cq_ex.c): start/next/end_poll read completions one
 * at a time with every field; a cycle ended early leaves the rest for the
 * next one and for ibv_poll_cq, in order; what has no field is refused. */
static void test_cq_ex(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_cq_init_attr_ex a = { .cqe = 8,
					 .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;
	struct ibv_wc wc[4];

	a.wc_flags |= IBV_WC_EX_WITH_CVLAN;	/* no VLANs on loopback UDP */
	assert_null(uroce_create_cq_ex(c, &a));
	assert_int_equal(errno, EOPNOTSUPP);
	a.wc_flags = IBV_WC_STANDARD_FLAGS;
	a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	assert_null(uroce_create_cq_ex(c, &a));
	assert_int_equal(errno, EOPNOTSUPP);
	a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	cqx = uroce_create_cq_ex(c, &a);
	assert_non_null(cqx);
	cq = ibv_cq_ex_to_cq(cqx);

	assert_int_equal(ibv_start_poll(cqx, &pa), ENOENT);
	for (uint64_t i = 1; i <= 5; i++) {
		struct ibv_wc w = { .wr_id = i, .opcode = IBV_WC_RECV,
				    .byte_len = 100 * (uint32_t)i,
				    .imm_data = htobe32(7), .qp_num = 0x42,
				    .src_qp = 0x43, .wc_flags = IBV_WC_WITH_IMM,
				    .sl = 1 };

		assert_true(uroce_cq_push(to_ucq(cq), &w, false));
	}
	assert_int_equal(ibv_start_poll(cqx, &pa), 0);
	assert_int_equal(cqx->wr_id, 1);
	assert_int_equal(cqx->status, IBV_WC_SUCCESS);
	assert_int_equal(ibv_wc_read_opcode(cqx), IBV_WC_RECV);
	assert_int_equal(ibv_wc_read_byte_len(cqx), 100);
	assert_int_equal(be32toh(ibv_wc_read_imm_data(cqx)), 7);
	assert_int_equal(ibv_wc_read_qp_num(cqx), 0x42);
	assert_int_equal(ibv_wc_read_src_qp(cqx), 0x43);
	assert_int_equal(ibv_wc_read_wc_flags(cqx), IBV_WC_WITH_IMM);
	assert_int_equal(ibv_wc_read_sl(cqx), 1);
	assert_int_equal(ibv_next_poll(cqx), 0);
	assert_int_equal(cqx->wr_id, 2);
	assert_int_equal(ibv_wc_read_byte_len(cqx), 200);
	ibv_end_poll(cqx);
	/* 3 comes next, whichever way it is read */
	assert_int_equal(ibv_poll_cq(cq, 1, wc), 1);
	assert_int_equal(wc[0].wr_id, 3);
	assert_int_equal(ibv_start_poll(cqx, &pa), 0);
	assert_int_equal(cqx->wr_id, 4);
	assert_int_equal(ibv_next_poll(cqx), 0);
	assert_int_equal(cqx->wr_id, 5);
	assert_int_equal(ibv_next_poll(cqx), ENOENT);
	ibv_end_poll(cqx);
	assert_int_equal(ibv_poll_cq(cq, 4, wc), 0);

	pa.comp_mask = 1;
	assert_int_equal(ibv_start_poll(cqx, &pa), EINVAL);
	assert_int_equal(ibv_destroy_cq(cq), 0);
}

/* Completion timestamps: the free-running clock ibv_query_rt_values_ex
 * reads (ns), and the wall clock, at the moment the completion was made;
 * kept across a resize. */
static void test_cq_ex_timestamps(void **state)
{
	struct ibv_context *c = ctx_of(state);
	struct ibv_cq_init_attr_ex a = {
		.cqe = 2,
		.wc_flags = IBV_WC_STANDARD_FLAGS |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_wc w = { .wr_id = 1 };
	struct ibv_cq_ex *cqx = uroce_create_cq_ex(c, &a);
	struct timespec wall;
	uint64_t before, after, wall_ns;

	assert_non_null(cqx);
	assert_int_equal(uroce_query_rt_values(c, &v), 0);
	before = (uint64_t)v.raw_clock.tv_nsec;
	assert_true(uroce_cq_push(to_ucq(ibv_cq_ex_to_cq(cqx)), &w, false));
	assert_int_equal(ibv_resize_cq(ibv_cq_ex_to_cq(cqx), 40), 0);
	w.wr_id = 2;
	assert_true(uroce_cq_push(to_ucq(ibv_cq_ex_to_cq(cqx)), &w, false));
	assert_int_equal(uroce_query_rt_values(c, &v), 0);
	after = (uint64_t)v.raw_clock.tv_nsec;
	clock_gettime(CLOCK_REALTIME, &wall);
	wall_ns = (uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec;

	assert_int_equal(ibv_start_poll(cqx, &pa), 0);
	assert_int_equal(cqx->wr_id, 1);
	assert_in_range(ibv_wc_read_completion_ts(cqx), before, after);
	assert_in_range(ibv_wc_read_completion_wallclock_ns(cqx),
			wall_ns - 60000000000ull, wall_ns);
	assert_int_equal(ibv_next_poll(cqx), 0);
	assert_int_equal(cqx->wr_id, 2);
	assert_in_range(ibv_wc_read_completion_ts(cqx), before, after);
	ibv_end_poll(cqx);

	v.comp_mask = 2;
	assert_int_equal(uroce_query_rt_values(c, &v), EINVAL);
	assert_int_equal(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ring_wrap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_overflow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_args_and_inline_receive,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_armed_will_wait, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_notify_next, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_solicited, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_channel_order, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_nonblocking_and_destroy_pending,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_busy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_destroy_waits_for_ack,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_resize, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cq_ex, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cq_ex_timestamps, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_producers,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
