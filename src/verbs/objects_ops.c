/*
 * The verbs objects' side of the transport (struct uroce_objects_ops in
 * transport/transport.h): the transport, below the objects, reaches them
 * only through this table, which the objects hand the device when it opens.
 */
#include "transport/transport.h"
#include "verbs/ops.h"

const struct uroce_objects_ops uroce_verbs_objects = {
	.mr_lookup = uroce_mr_lookup,
	.mr_ptr = uroce_mr_ptr,
	.sges_recheck = uroce_sges_recheck,
	.mw_ptr = uroce_mw_ptr,
	.mw_bind = uroce_mw_bind,
	.mw_local_inv = uroce_mw_local_inv,
	.mw_remote_inv = uroce_mw_remote_inv,
	.odp_fault = uroce_odp_fault,
	.rq_pop = uroce_rq_pop,
	.srq_lookup = uroce_srq_lookup,
	.srq_check_limit = uroce_srq_check_limit,
	.cq_push = uroce_cq_push,
	.hold_wakes = uroce_cq_hold_wakes,
	.release_wakes = uroce_cq_release_wakes,
	.qp_to_error = uroce_qp_to_error,
	.qp_to_error_locked = uroce_qp_to_error_locked,
	.async_event = uroce_async_event,
};
