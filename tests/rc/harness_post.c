/*
 * The harness's posting and completion helpers (harness.h): work requests,
 * polls with a deadline, and the checks of what completed.
 */
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

enum {
	SPIN_BEFORE_NAP = 64,	/* empty polls before yielding the CPU */
	NAP_US = 20,
};

static void nap(void)
{
	struct timespec ts = { .tv_nsec = NAP_US * 1000 };

	nanosleep(&ts, NULL);
}

void h_post_rdma(struct h_ep *ep, uint64_t wr_id, enum ibv_wr_opcode op,
		 struct ibv_sge *sge, int nsge, unsigned flags,
		 uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = sge, .num_sge = nsge, .opcode = op,
		.send_flags = flags, .imm_data = imm,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	}, *bad = NULL;

	H_OK(ibv_post_send(ep->qp, &wr, &bad));
}

void h_post_atomic(struct h_ep *ep, uint64_t wr_id, enum ibv_wr_opcode op,
		   struct ibv_sge *sge, unsigned flags, uint64_t raddr,
		   uint32_t rkey, uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = sge, .num_sge = 1, .opcode = op,
		.send_flags = flags,
		.wr.atomic = { .remote_addr = raddr, .rkey = rkey,
			       .compare_add = compare_add, .swap = swap },
	}, *bad = NULL;

	H_OK(ibv_post_send(ep->qp, &wr, &bad));
}

void h_post_recv(struct h_ep *ep, uint64_t wr_id, struct ibv_sge *sge, int nsge)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge,
				  .num_sge = nsge }, *bad = NULL;

	H_OK(ibv_post_recv(ep->qp, &wr, &bad));
}

void h_post_recv_slots(struct h_ep *ep, const struct h_buf *b, unsigned n,
		       uint32_t size)
{
	for (unsigned i = 0; i < n; i++) {
		struct ibv_sge sge = { (uintptr_t)b->mem + (size_t)size * i,
				       size, b->mr->lkey };

		h_post_recv(ep, i, &sge, 1);
	}
}

void h_recv_slot_done(struct h_ep *ep, const struct h_buf *b,
		      const struct ibv_wc *wc, uint32_t size, uint64_t seq)
{
	uint8_t *slot = b->mem + (size_t)size * wc->wr_id;
	struct ibv_sge sge = { (uintptr_t)slot, size, b->mr->lkey };
	uint64_t got;

	H_EQ(wc->byte_len, size);
	memcpy(&got, slot, sizeof(got));
	H_EQ(got, seq);
	h_post_recv(ep, wc->wr_id, &sge, 1);
}

bool h_poll(struct ibv_cq *cq, struct ibv_wc *wc, unsigned timeout_ms)
{
	uint64_t end = h_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	/* each idle round naps >= NAP_US, so time runs out before the count */
	uint64_t rounds = SPIN_BEFORE_NAP + (uint64_t)timeout_ms * 1000 / NAP_US + 1;

	for (uint64_t i = 0; i < rounds; i++) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			h_fail("ibv_poll_cq returned %d", n);
		if (n == 1)
			return true;
		if (h_now_ns() >= end)
			return false;
		/* Let the library's progress threads run on small machines. */
		if (i >= SPIN_BEFORE_NAP)
			nap();
	}
	return false;
}

static void describe_wc(char *buf, size_t len, const struct ibv_wc *wc)
{
	snprintf(buf, len,
		 "{wr_id %llu, status %s (%d), opcode %d, byte_len %u, imm 0x%x, "
		 "wc_flags 0x%x, qp_num 0x%x, src_qp 0x%x}",
		 (unsigned long long)wc->wr_id, ibv_wc_status_str(wc->status),
		 wc->status, wc->opcode, wc->byte_len, wc->imm_data,
		 wc->wc_flags, wc->qp_num, wc->src_qp);
}

void h_expect_status_at(const char *file, int line, struct h_ep *ep,
			uint64_t wr_id, enum ibv_wc_status status,
			const char *what)
{
	struct ibv_wc wc;

	if (!h_poll(ep->scq, &wc, H_WC_TIMEOUT_MS))
		h_fail_at(file, line, "%s: no completion", what);
	if (wc.wr_id != wr_id || wc.status != status)
		h_fail_at(file, line, "%s: wr %llu status %s, want wr %llu %s",
			  what, (unsigned long long)wc.wr_id,
			  ibv_wc_status_str(wc.status),
			  (unsigned long long)wr_id, ibv_wc_status_str(status));
}

struct ibv_wc h_expect_wc_at(const char *file, int line, struct h_ep *ep,
			     bool send, struct h_want want)
{
	const char *q = send ? "send" : "receive";
	struct ibv_wc wc;
	char d[256];
	bool len_defined;

	if (!h_poll(send ? ep->scq : ep->rcq, &wc, H_WC_TIMEOUT_MS))
		h_fail_at(file, line,
			  "no %s completion within %d ms (want wr_id %llu, %s)",
			  q, H_WC_TIMEOUT_MS, (unsigned long long)want.wr_id,
			  ibv_wc_status_str(want.status));
	describe_wc(d, sizeof(d), &wc);
	if (wc.wr_id != want.wr_id || wc.status != want.status)
		h_fail_at(file, line, "%s completion %s: want wr_id %llu, %s", q,
			  d, (unsigned long long)want.wr_id,
			  ibv_wc_status_str(want.status));
	if (wc.qp_num != ep->qp->qp_num)
		h_fail_at(file, line, "%s completion %s: want qp_num 0x%x", q, d,
			  ep->qp->qp_num);
	if (wc.status != IBV_WC_SUCCESS)
		return wc;	/* only wr_id, status and qp_num are defined */
	if (wc.opcode != want.opcode)
		h_fail_at(file, line, "%s completion %s: want opcode %d", q, d,
			  want.opcode);
	len_defined = !send || want.opcode == IBV_WC_RDMA_READ ||
		      want.opcode == IBV_WC_COMP_SWAP ||
		      want.opcode == IBV_WC_FETCH_ADD;
	if (len_defined && wc.byte_len != want.byte_len)
		h_fail_at(file, line, "%s completion %s: want byte_len %u", q, d,
			  want.byte_len);
	if (send)
		return wc;
	if (wc.src_qp != ep->peer_qpn)
		h_fail_at(file, line, "receive completion %s: want src_qp 0x%x", d,
			  ep->peer_qpn);
	if (!!(wc.wc_flags & IBV_WC_WITH_IMM) != want.with_imm)
		h_fail_at(file, line, "receive completion %s: want IBV_WC_WITH_IMM %s",
			  d, want.with_imm ? "set" : "clear");
	if (want.with_imm && wc.imm_data != want.imm)
		h_fail_at(file, line, "receive completion %s: want imm 0x%x", d,
			  want.imm);
	return wc;
}

void h_expect_no_wc_at(const char *file, int line, struct ibv_cq *cq,
		       unsigned ms)
{
	struct ibv_wc wc;
	char d[256];

	if (!h_poll(cq, &wc, ms))
		return;
	describe_wc(d, sizeof(d), &wc);
	h_fail_at(file, line, "unexpected completion %s", d);
}
