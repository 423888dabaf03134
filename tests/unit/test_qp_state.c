/*
 * uroce_qp_transition_ok(): the QP state machine and the required/optional
 * attribute masks of ibv_modify_qp() for RC, UC and UD.
 *
 * The expected masks here are written out independently of the table in
 * src/verbs/qp_state.c (from the IBTA rules and from what real applications
 * such as ibv_rc_pingpong pass), so a slip in the table shows up as a failure
 * instead of being mirrored.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "verbs/ops.h"

#define S IBV_QP_STATE

/* Masks ibv_rc_pingpong (and the UC/UD pingpongs) pass at each step. */
#define RC_INIT (S | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define RC_RTR  (S | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | \
		 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RC_RTS  (S | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | \
		 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)
#define UC_INIT (S | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define UC_RTR  (S | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define UC_RTS  (S | IBV_QP_SQ_PSN)
#define UD_INIT (S | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
#define UD_RTR  (S)
#define UD_RTS  (S | IBV_QP_SQ_PSN)
/* Masks ibv_xsrq_pingpong passes: each XRC QP has half of RC's. */
#define XI_RTR  (S | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define XT_RTS  (S | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN)

static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
static const enum ibv_qp_state states[] = {
	IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
	IBV_QPS_SQD, IBV_QPS_SQE, IBV_QPS_ERR,
};

static bool ok(enum ibv_qp_type t, enum ibv_qp_state c, enum ibv_qp_state n,
	       int mask)
{
	return uroce_qp_transition_ok(t, c, n, mask);
}

/* Check one transition exhaustively over single bits: `req` (which must
 * include IBV_QP_STATE) is accepted; dropping any one of its bits is
 * rejected; adding any one bit of `opt` is accepted and adding any other bit
 * of the 32 is rejected. */
static void check_masks(enum ibv_qp_type t, enum ibv_qp_state c,
			enum ibv_qp_state n, int req, int opt)
{
	assert_true(ok(t, c, n, req));
	assert_true(ok(t, c, n, req | opt));
	for (unsigned b = 0; b < 32; b++) {
		int bit = (int)(1u << b);

		if (req & bit)
			assert_false(ok(t, c, n, req & ~bit));
		else if (opt & bit)
			assert_true(ok(t, c, n, req | bit));
		else
			assert_false(ok(t, c, n, req | bit));
	}
}

static void test_rc_connect(void **state)
{
	(void)state;
	check_masks(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, RC_INIT, 0);
	check_masks(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, RC_RTR,
		    IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX);
	check_masks(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, RC_RTS,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE);
}

static void test_uc_connect(void **state)
{
	(void)state;
	check_masks(IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_INIT, UC_INIT, 0);
	check_masks(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, UC_RTR,
		    IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX);
	check_masks(IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS, UC_RTS,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_PATH_MIG_STATE);
	/* The RC-only RDMA-read and retry attributes are not UC's to set. */
	assert_false(ok(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR, RC_RTR));
	assert_false(ok(IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS, RC_RTS));
}

static void test_xrc_connect(void **state)
{
	(void)state;
	/* initiator: RC's send side */
	check_masks(IBV_QPT_XRC_SEND, IBV_QPS_RESET, IBV_QPS_INIT, RC_INIT, 0);
	check_masks(IBV_QPT_XRC_SEND, IBV_QPS_INIT, IBV_QPS_RTR, XI_RTR,
		    IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX);
	check_masks(IBV_QPT_XRC_SEND, IBV_QPS_RTR, IBV_QPS_RTS, RC_RTS,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE);
	/* target: RC's receive side */
	check_masks(IBV_QPT_XRC_RECV, IBV_QPS_RESET, IBV_QPS_INIT, RC_INIT, 0);
	check_masks(IBV_QPT_XRC_RECV, IBV_QPS_INIT, IBV_QPS_RTR, RC_RTR,
		    IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX);
	check_masks(IBV_QPT_XRC_RECV, IBV_QPS_RTR, IBV_QPS_RTS, XT_RTS,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE);
	/* neither ever enters SQE */
	assert_false(ok(IBV_QPT_XRC_SEND, IBV_QPS_SQE, IBV_QPS_RTS, S));
	assert_false(ok(IBV_QPT_XRC_RECV, IBV_QPS_SQE, IBV_QPS_RTS, S));
	assert_true(ok(IBV_QPT_XRC_RECV, IBV_QPS_RTS, IBV_QPS_ERR, S));
}

static void test_ud_connect(void **state)
{
	(void)state;
	check_masks(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, UD_INIT, 0);
	check_masks(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, UD_RTR,
		    IBV_QP_PKEY_INDEX | IBV_QP_QKEY);
	check_masks(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, UD_RTS,
		    IBV_QP_CUR_STATE | IBV_QP_QKEY);
	/* UD has no connection: a destination or access flags are errors. */
	assert_false(ok(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, RC_INIT));
	assert_false(ok(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, UC_RTR));
}

static void test_init_and_rts_reconfigure(void **state)
{
	(void)state;
	check_masks(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, S,
		    IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	check_masks(IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_INIT, S,
		    IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	check_masks(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_INIT, S,
		    IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	check_masks(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE);
	check_masks(IBV_QPT_UC, IBV_QPS_RTS, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_PATH_MIG_STATE);
	check_masks(IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_QKEY);
}

static void test_sqd(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		check_masks(types[i], IBV_QPS_RTS, IBV_QPS_SQD, S,
			    IBV_QP_EN_SQD_ASYNC_NOTIFY);

	check_masks(IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_SQD, S,
		    IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
		    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
		    IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
		    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE);
	check_masks(IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_SQD, S,
		    IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE);
	check_masks(IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_SQD, S,
		    IBV_QP_PKEY_INDEX | IBV_QP_QKEY);

	check_masks(IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE);
	check_masks(IBV_QPT_UC, IBV_QPS_SQD, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		    IBV_QP_PATH_MIG_STATE);
	check_masks(IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_QKEY);
}

static void test_sqe(void **state)
{
	(void)state;
	check_masks(IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS);
	check_masks(IBV_QPT_UD, IBV_QPS_SQE, IBV_QPS_RTS, S,
		    IBV_QP_CUR_STATE | IBV_QP_QKEY);
	/* RC never enters SQE, so there is nothing to recover from. */
	assert_false(ok(IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RTS, S));
	assert_false(ok(IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RTS, S | IBV_QP_CUR_STATE));
}

static void test_to_reset_and_error(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		for (size_t j = 0; j < sizeof(states) / sizeof(states[0]); j++) {
			enum ibv_qp_type t = types[i];
			enum ibv_qp_state c = states[j];

			check_masks(t, c, IBV_QPS_RESET, S, 0);
			if (c == IBV_QPS_RESET)
				/* A QP that was never set up has nothing to flush. */
				assert_false(ok(t, c, IBV_QPS_ERR, S));
			else
				check_masks(t, c, IBV_QPS_ERR, S, 0);
		}
	}
}

/* Every (cur, next) pair not listed in the state diagram is refused whatever
 * the mask, including the masks that make the real transitions pass. */
static void test_illegal_transitions(void **state)
{
	static const int masks[] = {
		S, S | IBV_QP_CUR_STATE, RC_INIT, RC_RTR, RC_RTS,
		UC_RTR, UD_INIT, UD_RTS, ~0,
	};
	(void)state;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		enum ibv_qp_type t = types[i];

		for (size_t c = 0; c < sizeof(states) / sizeof(states[0]); c++) {
			for (size_t n = 0; n < sizeof(states) / sizeof(states[0]); n++) {
				enum ibv_qp_state cur = states[c], next = states[n];
				bool legal =
					next == IBV_QPS_RESET ||
					(next == IBV_QPS_ERR && cur != IBV_QPS_RESET) ||
					(cur == IBV_QPS_RESET && next == IBV_QPS_INIT) ||
					(cur == IBV_QPS_INIT && next == IBV_QPS_INIT) ||
					(cur == IBV_QPS_INIT && next == IBV_QPS_RTR) ||
					(cur == IBV_QPS_RTR && next == IBV_QPS_RTS) ||
					(cur == IBV_QPS_RTS && next == IBV_QPS_RTS) ||
					(cur == IBV_QPS_RTS && next == IBV_QPS_SQD) ||
					(cur == IBV_QPS_SQD && next == IBV_QPS_SQD) ||
					(cur == IBV_QPS_SQD && next == IBV_QPS_RTS) ||
					(cur == IBV_QPS_SQE && next == IBV_QPS_RTS &&
					 t != IBV_QPT_RC);

				if (legal)
					continue;
				for (size_t m = 0; m < sizeof(masks) / sizeof(masks[0]); m++)
					assert_false(ok(t, cur, next, masks[m]));
			}
		}
	}
	/* The ones a confused application is most likely to try. */
	assert_false(ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RTR, RC_RTR));
	assert_false(ok(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTS, RC_RTS));
	assert_false(ok(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_INIT, RC_INIT));
	assert_false(ok(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_RTS, UD_RTS));
}

static void test_state_bit_required(void **state)
{
	(void)state;
	/* Without IBV_QP_STATE the mask does not request a transition. */
	assert_false(ok(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, RC_INIT & ~S));
	assert_false(ok(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, 0));
	assert_false(ok(IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_ERR, 0));
}

static void test_unsupported_types_and_states(void **state)
{
	static const enum ibv_qp_type others[] = {
		IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER,
	};
	(void)state;

	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		assert_false(ok(others[i], IBV_QPS_RESET, IBV_QPS_INIT, RC_INIT));
		assert_false(ok(others[i], IBV_QPS_RESET, IBV_QPS_INIT, UD_INIT));
		assert_false(ok(others[i], IBV_QPS_RTS, IBV_QPS_ERR, S));
		assert_false(ok(others[i], IBV_QPS_ERR, IBV_QPS_RESET, S));
	}
	assert_false(ok(IBV_QPT_RC, IBV_QPS_UNKNOWN, IBV_QPS_RESET, S));
	assert_false(ok(IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_UNKNOWN, S));
	assert_false(ok(IBV_QPT_RC, (enum ibv_qp_state)-1, IBV_QPS_ERR, S));
	assert_false(ok(IBV_QPT_RC, IBV_QPS_RTS, (enum ibv_qp_state)99, S));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rc_connect),
		cmocka_unit_test(test_uc_connect),
		cmocka_unit_test(test_ud_connect),
		cmocka_unit_test(test_xrc_connect),
		cmocka_unit_test(test_init_and_rts_reconfigure),
		cmocka_unit_test(test_sqd),
		cmocka_unit_test(test_sqe),
		cmocka_unit_test(test_to_reset_and_error),
		cmocka_unit_test(test_illegal_transitions),
		cmocka_unit_test(test_state_bit_required),
		cmocka_unit_test(test_unsupported_types_and_states),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
