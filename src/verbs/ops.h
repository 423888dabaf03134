/* Provider functions installed in ibv_context.ops / verbs_context. */
#ifndef UROCE_VERBS_OPS_H
#define UROCE_VERBS_OPS_H

#include "uroce.h"

/* Bits the spec defines for ibv_reg_mr that uroce accepts, in an MR's
 * access flags and (as the kernel's providers take them) a QP's.  HUGETLB is
 * only a promise about the pages, which a CPU copy does not care about; the
 * FLUSH bits are rdma-core 45's (see verbs_newer.h). */
#define UROCE_ACCESS_SUPPORTED                                                 \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                    \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |                   \
	 IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_HUGETLB |     \
	 IBV_ACCESS_ON_DEMAND | UROCE_ACCESS_FLUSH_GLOBAL |                    \
	 UROCE_ACCESS_FLUSH_PERSISTENT)

/* qp.c */
int uroce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
/* Where work requests come from decides what they may ask for: FLUSH and
 * ATOMIC_WRITE only through the ibv_wr_* API (whose encoding of them the
 * classic ibv_send_wr has no fields for), a type 1 window's bind only
 * through ibv_bind_mw. */
enum uroce_post_from { UROCE_POST_VERB, UROCE_POST_WR_API, UROCE_POST_BIND_MW };
int uroce_post_send_wrs(struct ibv_qp *qp, struct ibv_send_wr *wr,
			struct ibv_send_wr **bad_wr, enum uroce_post_from from);
/* qp_ex.c: the ibv_wr_* API of QPs created with send_ops_flags */
int uroce_qp_ex_check(const struct ibv_qp_init_attr_ex *attr);
int uroce_qp_ex_init(struct uroce_qp *qp, const struct ibv_qp_init_attr_ex *attr);
void uroce_qp_ex_free(struct uroce_qp *qp);
int uroce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
struct ibv_qp *uroce_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
/* mr.c: a key for mr (an MR or a window's slot) in the table; ENOMEM when full */
int uroce_key_publish(struct uroce_nic *nic, struct uroce_mr *mr);
void uroce_key_unpublish(struct uroce_nic *nic, struct uroce_mr *mr);
/* odp.c */
int uroce_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		    uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge);
/* mw.c */
struct ibv_mw *uroce_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int uroce_dealloc_mw(struct ibv_mw *mw);
int uroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
		  struct ibv_mw_bind *mw_bind);
/* cq.c */
int uroce_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
/* ibv_create_cq's checks and CQ, for it and for the extended kind. */
struct uroce_cq *uroce_cq_create(struct ibv_context *context, int cqe,
				 void *cq_context,
				 struct ibv_comp_channel *channel,
				 int comp_vector);
/* Whether the CQ is armed for an event: its poller means to sleep. */
bool uroce_cq_armed(struct uroce_cq *cq);
/* Up to n completions out of the ring (see verbs/cq.c), with their
 * timestamps into ts if it is not NULL (and the CQ keeps them). */
int uroce_cq_take(struct uroce_cq *cq, int n, struct ibv_wc *wc,
		  struct uroce_cq_ts *ts);
/* Keep a timestamp with every completion from now on (extended CQs that
 * ask); ENOMEM. */
int uroce_cq_keep_ts(struct uroce_cq *cq);
int uroce_query_rt_values(struct ibv_context *ctx,
			  struct ibv_values_ex *values);
struct ibv_cq_ex *uroce_create_cq_ex(struct ibv_context *ctx,
				     struct ibv_cq_init_attr_ex *attr);
int uroce_req_notify_cq(struct ibv_cq *cq, int solicited_only);
/* srq.c */
int uroce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
struct ibv_srq *uroce_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr);
int uroce_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
/* xrcd.c */
struct ibv_xrcd *uroce_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *attr);
int uroce_close_xrcd(struct ibv_xrcd *xrcd);
/* dm.c: device memory */
struct ibv_dm *uroce_alloc_dm(struct ibv_context *ctx,
			      struct ibv_alloc_dm_attr *attr);
int uroce_free_dm(struct ibv_dm *dm);
struct ibv_mr *uroce_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm,
			       uint64_t offset, size_t length,
			       unsigned int access);
/* mr.c: an MR on memory the library owns (device memory), at iova; unlike
 * ibv_reg_mr's, it may be empty. */
struct ibv_mr *uroce_reg_mr_at(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t iova, unsigned int access);
/* device.c */
int uroce_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
int uroce_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size);

/* verbs/qp_state.c: may a QP of this type go from cur to next with exactly
 * these attribute mask bits (IBTA 11.2.5 / table of required and optional
 * attributes)?  IBV_QP_STATE must be in mask. */
bool uroce_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur,
			    enum ibv_qp_state next, int mask);

/* Count a user of ibpd, or drop one (delta -1): a parent domain and the PD
 * it stands for are both kept from being deallocated (EBUSY). */
void uroce_pd_hold(struct ibv_pd *ibpd, int delta);
bool uroce_pd_is_parent(struct ibv_pd *ibpd);
struct ibv_pd *uroce_alloc_parent_domain(struct ibv_context *ctx,
					 struct ibv_parent_domain_init_attr *attr);
struct ibv_td *uroce_alloc_td(struct ibv_context *ctx,
			      struct ibv_td_init_attr *attr);
int uroce_dealloc_td(struct ibv_td *td);

#endif
