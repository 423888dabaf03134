/*
 * The progress engine: a background thread per process that plays the NIC.
 * It receives and executes inbound packets (so one-sided operations complete
 * while the target application calls no verb), sends ACKs, and runs the
 * retransmission and RNR timers at microsecond resolution.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "samehost/samehost.h"
#include "section.h"
#include "transport/transport.h"

/* While any timer is armed the engine wakes at least this often, so that a
 * posting thread rarely needs to kick it (kicks cost a syscall each). */
#define ENGINE_TIMER_TICK_NS 1000000ull
/* ... and goes on ticking this long after it last had work (a kick, data,
 * an armed timer): a request-response loop disarms the timers at every
 * response and arms them at the next request, which would otherwise kick
 * an engine asleep without a deadline, a wake-up and a pass (contending
 * for rx_lock with the poller) per round trip. */
#define ENGINE_TICK_LINGER_NS 1000000000ull
/* While an application thread busy-polls an empty CQ it receives for
 * itself, and the engine stays off the sockets for this long after its last
 * poll: two receivers would only contend for rx_lock, and on a busy machine
 * the engine thread can be preempted holding it, stalling the poller for a
 * scheduler tick.  uroce_engine_app_left ends the deferral at once where
 * the thread has stopped receiving and only the engine can go on: it waits
 * for a CQ event, or it may spin on memory that only the engine can fill,
 * as ib_write_lat does. */
#define ENGINE_DEFER_NS ((uint64_t)UROCE_ENGINE_DEFER_NS)
/* How long after the last one-sided request received the engine still
 * treats this process as a target (see uroce_engine_app_left). */
#define ENGINE_ONE_SIDED_RECENT_NS 1000000000ull
/* Datagrams handled before the timers get a look, bounding their lateness. */
#define ENGINE_RX_BUDGET UROCE_RX_BATCH
/* Times the engine yields to a waiting uroce_engine_call() before it takes
 * rx_lock anyway: the caller, woken as the lock drops, gets it within a
 * yield or two; the bound keeps a caller that sleeps from stalling us. */
#define ENGINE_CALLER_YIELDS 64

static const uint32_t rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960,
	1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

uint64_t uroce_rnr_timer_ns(uint8_t code)
{
	return (uint64_t)rnr_timer_us[code & 31] * 1000;
}

uint64_t uroce_ack_timeout_ns(uint8_t timeout)
{
	if (timeout == 0)
		return 0;
	/* 4.096 us * 2^timeout */
	return 4096ull << (timeout & 31);
}

static void engine_enter(struct uroce_nic *nic)
{
	atomic_fetch_add(&nic->engine_seq, 1);
}

static void engine_leave(struct uroce_nic *nic)
{
	atomic_fetch_add(&nic->engine_seq, 1);
}

/* Ends a receive pass: leaves the engine section, drops rx_lock, then
 * sends what the pass listed (ACKs and timers never send under rx_lock). */
static void engine_unlock(struct uroce_nic *nic)
{
	engine_leave(nic);
	pthread_mutex_unlock(&nic->rx_lock);
	uroce_req_release_held(nic);
}

static void count_rx(struct uroce_nic *nic, const struct uroce_rxpkt *pkts,
		     int n)
{
	uint64_t bytes = 0;

	for (int i = 0; i < n; i++)
		bytes += pkts[i].len;
	atomic_fetch_add_explicit(&nic->stats.rx_packets, n,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&nic->stats.rx_bytes, bytes,
				  memory_order_relaxed);
}

/* How a receive pass treats the sockets: not at all (their readiness
 * wakes a sleeper anyway), when due (while same-host rings are busy, only
 * now and then), or at once (a poll said they are readable). */
enum rx_sockets { SOCKETS_SKIP, SOCKETS_WHEN_DUE, SOCKETS_READY };

/* Caller holds rx_lock, which also guards nic->rx_pkts. */
static void engine_receive(struct uroce_nic *nic, enum rx_sockets sockets)
{
	struct uroce_rxpkt *pkts = nic->rx_pkts;
	int budget = ENGINE_RX_BUDGET;
	int n;

	/* same-host packets first: they cost no system call to look for */
	n = uroce_sh_recv(nic, pkts, UROCE_RX_BATCH);
	if (n > 0) {
		count_rx(nic, pkts, n);
		uroce_recv_batch(nic, pkts, n);
		uroce_sh_recv_done(nic);
		budget -= n;
	}
	if (sockets == SOCKETS_SKIP ||
	    (!uroce_sh_sockets_due(nic, n > 0) && sockets != SOCKETS_READY))
		return;
	/* an empty look costs a system call on the latency path: stop as
	 * soon as the sockets say they are drained */
	for (bool drained = false; budget > 0 && !drained;) {
		n = uroce_link_recv(nic, pkts, UROCE_RX_BATCH, &drained);
		if (n < 0)
			break;
		if (!n) {	/* all dropped, and more may be there */
			budget--;
			continue;
		}
		count_rx(nic, pkts, n);
		uroce_recv_batch(nic, pkts, n);
		budget -= n;
	}
}

/* Runs every QP's timers; returns the earliest deadline still armed. */
static uint64_t engine_timers(struct uroce_nic *nic)
{
	uint64_t now = uroce_now_ns(), next = UINT64_MAX;
	int n = atomic_load(&nic->num_live_qps);

	for (int i = 0; i < n; i++) {
		struct uroce_qp *qp = atomic_load(&nic->live_qps[i]);
		uint64_t d;

		if (!qp)
			continue;
		pthread_mutex_lock(&qp->sq_lock);
		uroce_comp_timer(qp, now);
		d = qp->comp.deadline;
		if (qp->comp.probe_at && (!d || qp->comp.probe_at < d))
			d = qp->comp.probe_at;
		if (qp->req.wait_until && (!d || qp->req.wait_until < d))
			d = qp->req.wait_until;
		pthread_mutex_unlock(&qp->sq_lock);
		if (d && d < next)
			next = d;
	}
	return next;
}

/* Empties an eventfd; true if it had been signalled. */
static bool eventfd_take(struct pollfd *pfd)
{
	uint64_t v;

	if (!(pfd->revents & POLLIN))
		return false;
	/* EAGAIN: another read already consumed it */
	return read(pfd->fd, &v, sizeof(v)) == sizeof(v);
}

static void *engine_main(void *arg)
{
	struct uroce_nic *nic = arg;
	struct pollfd pfd[10];
	int nfds, fds[6];
	uint64_t next = UINT64_MAX, last_pass = uroce_now_ns();
	uint64_t last_busy = 0;
	sigset_t all;

	/* Signals belong to the application's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);

	/* what brings packets (the sockets, the same-host doorbell), then
	 * the two eventfds, which alone are watched while deferring */
	nfds = uroce_link_rx_fds(nic, fds, ARRAY_SIZE(fds));
	for (int i = 0; i < nfds; i++)
		pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	pfd[nfds++] = (struct pollfd){ .fd = nic->doorbell_fd, .events = POLLIN };
	pfd[nfds] = (struct pollfd){ .fd = nic->wake_fd, .events = POLLIN };
	pfd[nfds + 1] = (struct pollfd){ .fd = nic->leave_fd, .events = POLLIN };

	while (!atomic_load(&nic->stop)) {
		uint64_t now = uroce_now_ns(), sleep_until = next;
		uint64_t app = atomic_load(&nic->app_poll_ns);
		uint64_t woke = atomic_load(&nic->sleeper_left_ns);
		bool sleeper = atomic_load(&nic->sleeper);
		bool defer = now - app < ENGINE_DEFER_NS || sleeper ||
			     now - woke < ENGINE_DEFER_NS;
		bool kicked, left, app_receives, data = false;
		struct timespec ts, *tsp = NULL;

		if (now - app < ENGINE_DEFER_NS &&
		    sleep_until > app + ENGINE_DEFER_NS)
			sleep_until = app + ENGINE_DEFER_NS;
		/* a thread that slept receiving comes back within the
		 * deferral, most likely: the sockets stay its own */
		if (!sleeper && now - woke < ENGINE_DEFER_NS &&
		    sleep_until > woke + ENGINE_DEFER_NS)
			sleep_until = woke + ENGINE_DEFER_NS;
		if (now - last_busy < ENGINE_TICK_LINGER_NS &&
		    sleep_until > last_pass + ENGINE_TIMER_TICK_NS)
			sleep_until = last_pass + ENGINE_TIMER_TICK_NS;
		/* same-host WRITEs held for a burst (uroce_req_hold) go at
		 * the latest this long after the last hold */
		atomic_store(&nic->engine_awake, false);
		uint64_t held_until = atomic_load(&nic->sh_hold_ns) +
				      UROCE_SH_HOLD_NS;
		if (held_until > now && sleep_until > held_until)
			sleep_until = held_until;
		if (sleep_until != UINT64_MAX) {
			if (sleep_until > last_pass + ENGINE_TIMER_TICK_NS)
				sleep_until = last_pass + ENGINE_TIMER_TICK_NS;
			uint64_t d = sleep_until > now ? sleep_until - now : 0;
			ts.tv_sec = d / 1000000000ull;
			ts.tv_nsec = d % 1000000000ull;
			tsp = &ts;
		}
		/* UROCE_ENGINE=spin: look and go round again, never sleep: a
		 * core for the wake-ups a sleeping thread pays on every
		 * packet nobody polls for (ib_write_lat's target) */
		if (nic->cfg->spin) {
			ts = (struct timespec){ 0, 0 };
			tsp = &ts;
		}
		for (int i = 0; i < nfds + 2; i++)
			pfd[i].revents = 0;
		atomic_store(&nic->engine_sleep_until, sleep_until);
		/* a same-host hold announced since we looked, which its
		 * poster did not kick us for (uroce_req_list_held) */
		held_until = atomic_load(&nic->sh_hold_ns) + UROCE_SH_HOLD_NS;
		if (held_until > now && held_until < sleep_until)
			continue;
		/* deferring: wait for a kick or the deadline, not for data.
		 * Announced before app_poll_ns is read again, so that a poller
		 * leaving (uroce_engine_app_left) either is seen here or sees
		 * us deferring and kicks. */
		if (defer) {
			atomic_store(&nic->engine_deferring, true);
			atomic_store(&nic->engine_sleeper_wait, sleeper);
			/* unless the one we defer to has left meanwhile (a
			 * sleeper waking after this sees us, and kicks if we
			 * would sleep too long: uroce_engine_wait) */
			if (!(now - app < ENGINE_DEFER_NS &&
			      !atomic_load(&nic->app_poll_ns)) &&
			    !(sleeper && !atomic_load(&nic->sleeper)))
				ppoll(&pfd[nfds], 2, tsp, NULL);
			atomic_store(&nic->engine_sleeper_wait, false);
			atomic_store(&nic->engine_deferring, false);
		} else {
			ppoll(pfd, nfds + 2, tsp, NULL);
			for (int i = 0; i < nfds; i++)
				data |= pfd[i].revents != 0;
			eventfd_take(&pfd[nfds - 1]);
		}
		atomic_store(&nic->engine_awake, true);
		kicked = eventfd_take(&pfd[nfds]);
		left = eventfd_take(&pfd[nfds + 1]);

		/* Nothing to do under rx_lock (which the poller would find
		 * taken) unless we were kicked or reached the time we promised
		 * to be back by (a poster that arms a later timer does not
		 * kick), or there is something to receive that the poller will
		 * not: after it left only once data arrives, while it polls
		 * never. */
		now = uroce_now_ns();
		app_receives = now - atomic_load(&nic->app_poll_ns) <
			       ENGINE_DEFER_NS;
		if (!kicked && now < sleep_until &&
		    (app_receives || ((left || nic->cfg->spin) && !data)))
			continue;
		/* The deferral ran out but the application polled again
		 * meanwhile: it receives and sends the ACKs; only timers are
		 * ours, and a poster that armed one without kicking us is
		 * served within a tick of the last pass. */
		if (!kicked && app_receives && now < next &&
		    now - last_pass < ENGINE_TIMER_TICK_NS)
			continue;

		for (unsigned i = 0; i < ENGINE_CALLER_YIELDS &&
				     atomic_load(&nic->rx_callers); i++)
			sched_yield();
		/* A poller retakes rx_lock the moment it drops it, so a
		 * waiting engine would lose nearly every time and make each
		 * of its unlocks a futex wake: ask it to stand aside. */
		if (pthread_mutex_trylock(&nic->rx_lock)) {
			atomic_fetch_add(&nic->rx_callers, 1);
			pthread_mutex_lock(&nic->rx_lock);
			atomic_fetch_sub(&nic->rx_callers, 1);
		}
		last_pass = uroce_now_ns();
		engine_enter(nic);
		/* a timer due judges what has arrived: an ACK waiting in a
		 * socket must not look lost.  Received here even while a
		 * sleeper watches: same-host peers rang no doorbell for what
		 * they wrote while a poller seemed to be polling, and that
		 * poller may have gone without saying so. */
		now = uroce_now_ns();
		nic->objects->hold_wakes();
		if (now - atomic_load(&nic->app_poll_ns) >= ENGINE_DEFER_NS ||
		    now >= next)
			engine_receive(nic, data ? SOCKETS_READY :
						   SOCKETS_WHEN_DUE);
		uroce_flush_acks(nic);
		nic->objects->release_wakes();
		/* From here a poster must kick us if it arms an earlier timer
		 * than the one we are about to compute (see uroce_engine_kick). */
		atomic_store(&nic->engine_sleep_until, UINT64_MAX);
		next = engine_timers(nic);
		uint64_t qp1_next = nic->qp1 ? nic->qp1->timers(nic, uroce_now_ns())
					     : UINT64_MAX;
		if (qp1_next < next)
			next = qp1_next;
		if (kicked || data || next != UINT64_MAX)
			last_busy = last_pass;
		engine_unlock(nic);
	}
	return NULL;
}

void uroce_engine_quiesce(struct uroce_nic *nic)
{
	uroce_section_wait(&nic->engine_seq);
}

void uroce_engine_kick(struct uroce_nic *nic, uint64_t deadline_ns)
{
	uint64_t one = 1;

	if (deadline_ns < atomic_load(&nic->engine_sleep_until)) {
		if (write(nic->wake_fd, &one, sizeof(one)) < 0) {
			/* eventfd only fails when its counter is saturated,
			 * which already means a wake-up is pending. */
		}
	}
}

/* uroce_engine_call for a thread that polls: whoever holds rx_lock, or
 * waits for it, is already receiving, and a poller only adds contention,
 * so it stands aside (false). */
static bool engine_try_call(struct uroce_nic *nic,
			    void (*fn)(struct uroce_nic *nic, void *arg),
			    void *arg)
{
	if (atomic_load_explicit(&nic->rx_callers, memory_order_relaxed) ||
	    pthread_mutex_trylock(&nic->rx_lock))
		return false;
	engine_enter(nic);
	fn(nic, arg);
	engine_unlock(nic);
	return true;
}

struct app_poll {
	uint64_t now;
	bool will_wait;
};

static void app_poll_call(struct uroce_nic *nic, void *arg)
{
	const struct app_poll *ap = arg;

	/* ACKs kept for answers that have not come (see receive.c) */
	uroce_flush_acks(nic);
	nic->objects->hold_wakes();
	/* A thread about to sleep looks at the sockets as it goes to sleep
	 * (uroce_engine_wait) or leaves them to the engine: looking here as
	 * well costs each sleep a system call or two more. */
	engine_receive(nic, ap->will_wait ? SOCKETS_SKIP : SOCKETS_WHEN_DUE);
	/* a thread about to sleep answers nothing soon */
	if (ap->will_wait)
		uroce_flush_acks(nic);
	else
		uroce_settle_app_acks(nic, ap->now);
	nic->objects->release_wakes();
	/* if the application neither answers nor polls, the engine sends
	 * them */
	if (nic->n_acks_owed)
		uroce_engine_kick(nic, ap->now + ENGINE_DEFER_NS);
}

void uroce_engine_poll(struct uroce_nic *nic, uint64_t now, bool will_wait)
{
	struct app_poll ap = { .now = now, .will_wait = will_wait };

	if (!will_wait) {
		uint64_t was = atomic_exchange(&nic->app_poll_ns, now);

		uroce_sh_note_poll(nic, now);
		/* Same-host peers ring no doorbell while we poll: should this
		 * thread stop without saying so, the engine must look at the
		 * rings once the deferral runs out.  An engine that ticks
		 * does; an idle one is woken, once per start of polling. */
		if (now - was >= ENGINE_DEFER_NS)
			uroce_engine_kick(nic, now + ENGINE_TIMER_TICK_NS);
	}
	engine_try_call(nic, app_poll_call, &ap);
}

void uroce_engine_call(struct uroce_nic *nic,
		       void (*fn)(struct uroce_nic *nic, void *arg), void *arg)
{
	atomic_fetch_add(&nic->rx_callers, 1);
	pthread_mutex_lock(&nic->rx_lock);
	atomic_fetch_sub(&nic->rx_callers, 1);
	engine_enter(nic);
	fn(nic, arg);
	engine_unlock(nic);
}

static void flush_acks_call(struct uroce_nic *nic, void *arg)
{
	(void)arg;
	uroce_flush_acks(nic);
}

void uroce_engine_flush_acks(struct uroce_nic *nic)
{
	/* a waiter that kept none (the engine received) pays nothing: taking
	 * rx_lock here costs an event-driven round trip as much again */
	if (atomic_load_explicit(&nic->acks_waiting, memory_order_relaxed))
		uroce_engine_call(nic, flush_acks_call, NULL);
}

static void receive_call(struct uroce_nic *nic, void *arg)
{
	nic->objects->hold_wakes();
	engine_receive(nic, *(enum rx_sockets *)arg);
	uroce_flush_acks(nic);
	nic->objects->release_wakes();
}

/* One receive pass on an application thread, as the engine's. */
static void receive_pass(struct uroce_nic *nic, enum rx_sockets sockets)
{
	uroce_engine_call(nic, receive_call, &sockets);
}

/*
 * Before it sleeps, a thread polls (as KVM's halt polling, or the kernel's
 * busy_poll for sockets), for as long as the channel's budget: an event
 * that comes within it costs no wake-up, neither the doorbell or datagram
 * that wakes a sleeper nor the scheduler's switch back, which on a VM cost
 * as much as a whole TCP round trip.  The budget doubles, up to
 * UROCE_WAIT_POLL_US, after a wait that a poll that long would have
 * caught, and halves (to none) after one it would not, so that a thread
 * whose events come seldom sleeps at once, and idles on no CPU.
 */
#define WAIT_POLL_START_NS 10000ull

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield" ::: "memory");
#endif
}

/* Receives as a polling thread does until the event comes or the budget
 * runs out; true if it came.  Same-host peers ring no doorbell meanwhile.
 * As a polling thread, it stands aside while another one receives (the
 * engine's timer pass: a waiter that insisted on rx_lock would make it
 * yield to us over and over), and sees the events that one raises.  The
 * engine is not told: it leaves receiving to the sleeper anyway, and a
 * deferral renewed by every look would wake it every ENGINE_DEFER_NS, a
 * third thread runnable beside two pollers on a machine with two CPUs. */
static bool wait_poll(struct uroce_nic *nic, const struct uroce_wait *w,
		      uint64_t budget)
{
	uint64_t start = uroce_now_ns(), now = start;
	enum rx_sockets sockets = SOCKETS_WHEN_DUE;

	do {
		uroce_sh_note_poll(nic, now);
		engine_try_call(nic, receive_call, &sockets);
		if (*w->raised || atomic_load(w->queued))
			return true;
		cpu_relax();
		now = uroce_now_ns();
	} while (now - start < budget);
	return false;
}

static void wait_poll_adapt(_Atomic uint64_t *poll_ns, uint64_t waited,
			    uint64_t max)
{
	uint64_t b = atomic_load_explicit(poll_ns, memory_order_relaxed);

	if (waited <= max)
		b = b ? b * 2 : WAIT_POLL_START_NS;
	else
		b = b / 2 < WAIT_POLL_START_NS ? 0 : b / 2;
	atomic_store_explicit(poll_ns, b < max ? b : max,
			      memory_order_relaxed);
}

/*
 * A thread about to sleep in ibv_get_cq_event receives for the process
 * while it sleeps: the datagram or same-host doorbell that brings its
 * completion wakes it, not the engine, which would then have to wake it in
 * turn (two wake-ups per message, the dearer half of an event-driven round
 * trip).  One thread at a time; the engine stays off the sockets meanwhile
 * and for ENGINE_DEFER_NS after, so that a thread back asleep within that
 * time finds them its own again.  Timers stay the engine's.  An event
 * another thread raises meanwhile (a token in the channel's pipe) waits
 * for the end of the poll before it, at most UROCE_WAIT_POLL_MAX_US.
 */
int uroce_engine_wait(struct uroce_nic *nic, const struct uroce_wait *w)
{
	uint64_t max = nic->cfg->wait_poll_ns, start = uroce_now_ns();
	uint64_t budget = atomic_load_explicit(w->poll_ns, memory_order_relaxed);
	const bool *done = w->raised;
	struct pollfd pfd[8];
	int fds[6], nfds, err = 0;
	bool receiver = !atomic_exchange(&nic->sleeper, true);

	/* Only where same-host peers send by ring: over UDP every look is a
	 * system call, and a poll there won no time on the bench VM while it
	 * cost a sixth more CPU per request. */
	if (receiver && max && budget && uroce_sh_has_rings(nic) &&
	    wait_poll(nic, w, budget)) {
		STAT_INC(nic, waits_polled);
		goto left;
	}
	/* Not polling any more: same-host peers ring the doorbell from here
	 * on.  One that wrote before this saw no need to: the first pass
	 * below, after the fence, finds what it wrote (uroce_sh_xmit fences
	 * between its write and its look).  No kick for the engine: this
	 * thread looks itself. */
	atomic_store(&nic->app_poll_ns, 0);
	uroce_sh_note_poll(nic, 0);
	atomic_thread_fence(memory_order_seq_cst);
	receive_pass(nic, SOCKETS_SKIP);
	if (*done)
		goto out;
	if (!receiver) {
		/* another thread receives: sleep as the channel's reader */
		struct pollfd one = { .fd = w->fd, .events = POLLIN };

		return poll(&one, 1, -1) < 0 ? -1 : 0;
	}
	STAT_INC(nic, waits_slept);
	nfds = uroce_link_rx_fds(nic, fds, ARRAY_SIZE(fds));
	for (int i = 0; i < nfds; i++)
		pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	pfd[nfds++] = (struct pollfd){ .fd = nic->doorbell_fd, .events = POLLIN };
	pfd[nfds] = (struct pollfd){ .fd = w->fd, .events = POLLIN };
	for (;;) {
		if (ppoll(pfd, nfds + 1, NULL, NULL) < 0) {
			err = errno;	/* EINTR: a signal, as a read's */
			break;
		}
		if (pfd[nfds].revents)
			break;
		bool readable = false;

		for (int i = 0; i < nfds - 1; i++)
			readable |= pfd[i].revents != 0;
		eventfd_take(&pfd[nfds - 1]);
		receive_pass(nic, readable ? SOCKETS_READY : SOCKETS_WHEN_DUE);
		if (*done)
			break;
	}
out:
	if (!receiver)
		return 0;
	if (max && !err)
		wait_poll_adapt(w->poll_ns, uroce_now_ns() - start, max);
left:
	atomic_store(&nic->sleeper_left_ns, uroce_now_ns());
	atomic_store(&nic->sleeper, false);
	/* an engine asleep with no deadline soon enough would leave the
	 * sockets to nobody if this thread does not come back */
	if (atomic_load(&nic->engine_sleeper_wait) &&
	    atomic_load(&nic->engine_sleep_until) >
		    uroce_now_ns() + ENGINE_TIMER_TICK_NS) {
		uint64_t one = 1;

		if (write(nic->leave_fd, &one, sizeof(one)) < 0) {
			/* saturated eventfd: a wake-up is pending anyway */
		}
	}
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

void uroce_engine_app_left(struct uroce_nic *nic, bool will_wait)
{
	uint64_t one = 1;

	if (!atomic_load_explicit(&nic->app_poll_ns, memory_order_relaxed))
		return;
	/* A thread that got completions most likely polls again soon and
	 * receives then; taking over from it, let alone waking the engine,
	 * costs the round trip some microseconds on a busy machine.  End the
	 * deferral only where the engine alone can make progress: for a
	 * waiter, and in a target of one-sided operations, whose application
	 * may be spinning on the memory they fill. */
	if (!will_wait &&
	    uroce_now_ns() - atomic_load_explicit(&nic->one_sided_rx_ns,
						  memory_order_relaxed) >=
		    ENGINE_ONE_SIDED_RECENT_NS)
		return;
	atomic_store(&nic->app_poll_ns, 0);
	uroce_sh_note_poll(nic, 0);
	if (atomic_load(&nic->engine_deferring) &&
	    write(nic->leave_fd, &one, sizeof(one)) < 0) {
		/* saturated eventfd: a wake-up is pending anyway */
	}
}

/* Rounds of receiving at exit, each waiting this long for more. */
#define ENGINE_DRAIN_ROUNDS 16
#define ENGINE_DRAIN_GRACE_MS 2

void uroce_engine_drain(struct uroce_nic *nic)
{
	int fds[6], nfds = uroce_link_rx_fds(nic, fds, ARRAY_SIZE(fds));
	struct pollfd pfd[6];

	for (int i = 0; i < nfds; i++)
		pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	for (unsigned round = 0; round < ENGINE_DRAIN_ROUNDS; round++) {
		if (poll(pfd, nfds, ENGINE_DRAIN_GRACE_MS) <= 0)
			return;
		pthread_mutex_lock(&nic->rx_lock);
		engine_enter(nic);
		engine_receive(nic, SOCKETS_READY);
		uroce_flush_acks(nic);
		engine_unlock(nic);
	}
}

int uroce_engine_start(struct uroce_nic *nic)
{
	atomic_store(&nic->stop, false);
	atomic_store(&nic->engine_sleep_until, UINT64_MAX);
	return pthread_create(&nic->engine, NULL, engine_main, nic);
}

void uroce_engine_stop(struct uroce_nic *nic)
{
	atomic_store(&nic->stop, true);
	uroce_engine_kick(nic, 0);
	pthread_join(nic->engine, NULL);
}
