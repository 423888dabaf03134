/*
 * The progress engine's hand-over with a polling application thread
 * (src/transport/progress.c), white-box: when a poll that returned
 * completions or an armed CQ ends the engine's deferral, and when it wakes
 * the engine.  The engine thread itself is not started: the test plays it
 * by setting engine_deferring and reading its eventfd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/transport.h"

/* A time on CLOCK_MONOTONIC far before the "recent" window (a second), as
 * long as the machine has been up longer than that. */
#define LONG_AGO_NS 1ull

static int setup(void **state)
{
	struct uroce_nic *nic = calloc(1, sizeof(*nic));

	if (!nic)
		return -1;
	nic->leave_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (nic->leave_fd < 0) {
		free(nic);
		return -1;
	}
	*state = nic;
	return 0;
}

static int teardown(void **state)
{
	struct uroce_nic *nic = *state;

	close(nic->leave_fd);
	free(nic);
	return 0;
}

/* Whether the engine was woken; consumes the wake-up. */
static bool woken(struct uroce_nic *nic)
{
	uint64_t v;

	return read(nic->leave_fd, &v, sizeof(v)) == sizeof(v);
}

/* A thread busy-polling while the engine sleeps, leaving the sockets to it. */
static void polling(struct uroce_nic *nic)
{
	atomic_store(&nic->app_poll_ns, uroce_now_ns());
	atomic_store(&nic->engine_deferring, true);
}

static void test_plain_poller_keeps_the_deferral(void **state)
{
	struct uroce_nic *nic = *state;
	uint64_t polled;

	/* no one-sided request ever received: the thread will be back */
	polling(nic);
	polled = atomic_load(&nic->app_poll_ns);
	uroce_engine_app_left(nic, false);
	assert_int_equal(atomic_load(&nic->app_poll_ns), polled);
	assert_false(woken(nic));

	/* one long ago changes nothing */
	atomic_store(&nic->one_sided_rx_ns, LONG_AGO_NS);
	uroce_engine_app_left(nic, false);
	assert_int_equal(atomic_load(&nic->app_poll_ns), polled);
	assert_false(woken(nic));
}

static void test_target_hands_back_and_wakes(void **state)
{
	struct uroce_nic *nic = *state;

	/* a WRITE just arrived: the thread may now spin on its memory */
	atomic_store(&nic->one_sided_rx_ns, uroce_now_ns());
	polling(nic);
	uroce_engine_app_left(nic, false);
	assert_int_equal(atomic_load(&nic->app_poll_ns), 0);
	assert_true(woken(nic));

	/* already handed back: nothing more to do, no second wake-up */
	uroce_engine_app_left(nic, false);
	assert_false(woken(nic));
}

static void test_engine_awake_is_not_woken(void **state)
{
	struct uroce_nic *nic = *state;

	atomic_store(&nic->one_sided_rx_ns, uroce_now_ns());
	polling(nic);
	atomic_store(&nic->engine_deferring, false);
	uroce_engine_app_left(nic, false);
	/* the engine sees the hand-back when it next looks */
	assert_int_equal(atomic_load(&nic->app_poll_ns), 0);
	assert_false(woken(nic));
}

static void test_waiter_hands_back_and_wakes(void **state)
{
	struct uroce_nic *nic = *state;

	/* ibv_req_notify_cq: the thread is about to sleep on its channel */
	polling(nic);
	uroce_engine_app_left(nic, true);
	assert_int_equal(atomic_load(&nic->app_poll_ns), 0);
	assert_true(woken(nic));
}

static void test_not_polling_is_a_no_op(void **state)
{
	struct uroce_nic *nic = *state;

	atomic_store(&nic->engine_deferring, true);
	uroce_engine_app_left(nic, true);
	assert_int_equal(atomic_load(&nic->app_poll_ns), 0);
	assert_false(woken(nic));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_plain_poller_keeps_the_deferral, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_target_hands_back_and_wakes, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_engine_awake_is_not_woken, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_waiter_hands_back_and_wakes, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_not_polling_is_a_no_op, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
