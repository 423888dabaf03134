/*
 * The rsocket data path's machinery (the calls that use it, rsend, rrecv
 * and their kin, are in rsocket_rw.c).  Data goes as RDMA WRITE WITH IMMEDIATE into the
 * half of the peer's receive ring it last gave us; the immediate carries the
 * length.  The receiver reads the ring in order and, once half of it is
 * read, gives that half back by RDMA-writing its address into our target
 * SGL (RS_OP_SGL, whose immediate also raises our credit limit).  Credits
 * count data writes against the peer's posted receives; control messages
 * (SGL, CTRL) have a small allowance of their own (RS_QP_CTRL_SIZE).
 */
#include <byteswap.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "rsocket.h"

static bool host_is_net(void)
{
	return __BYTE_ORDER == __BIG_ENDIAN;
}

/* ---- resources ----------------------------------------------------------- */

static size_t target_len(const struct rsocket *rs)
{
	return RS_SGL_SIZE * sizeof(struct rs_sge) +
	       (size_t)rs->iomap_size * sizeof(struct rs_iomap);
}

static int post_recv(struct rsocket *rs)
{
	/* data lands by RDMA WRITE: the receive only takes the immediate */
	struct ibv_recv_wr wr = { .wr_id = RS_WR_RECV }, *bad;

	return ibv_post_recv(rs->cm_id->qp, &wr, &bad) ? -1 : 0;
}

int rs_create_io(struct rsocket *rs)
{
	struct rdma_cm_id *id = rs->cm_id;
	struct ibv_qp_init_attr attr;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	rs->comp = ibv_create_comp_channel(id->verbs);
	if (!rs->comp || fcntl(rs->comp->fd, F_SETFL, O_NONBLOCK))
		goto fail;
	rs->cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, rs,
			       rs->comp, 0);
	if (!rs->cq)
		goto fail;
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = rs->cq;
	attr.recv_cq = rs->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	attr.cap.max_send_wr = rs->sq_size;
	attr.cap.max_recv_wr = rs->rq_size;
	attr.cap.max_send_sge = 2;	/* a copy that wraps the send ring */
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(id, id->pd, &attr))
		goto fail;
	rs->sq_inline = attr.cap.max_inline_data;

	rs->sbuf = malloc(rs->sbuf_size + RS_QP_CTRL_SIZE * sizeof(struct rs_sge));
	rs->rbuf = malloc(rs->rbuf_size);
	rs->target_mem = calloc(1, target_len(rs));
	rs->rmsg = calloc(rs->rq_size + 1, sizeof(*rs->rmsg));
	if (!rs->sbuf || !rs->rbuf || !rs->target_mem || !rs->rmsg) {
		errno = ENOMEM;
		goto fail;
	}
	rs->smr = ibv_reg_mr(id->pd, rs->sbuf,
			     rs->sbuf_size + RS_QP_CTRL_SIZE * sizeof(struct rs_sge),
			     IBV_ACCESS_LOCAL_WRITE);
	rs->rmr = ibv_reg_mr(id->pd, rs->rbuf, rs->rbuf_size, access);
	rs->target_mr = ibv_reg_mr(id->pd, rs->target_mem, target_len(rs),
				   access);
	if (!rs->smr || !rs->rmr || !rs->target_mr)
		goto fail;
	rs->target_sgl = rs->target_mem;
	rs->target_iomap = (volatile struct rs_iomap *)(rs->target_sgl +
							RS_SGL_SIZE);

	rs->sbuf_avail = rs->sbuf_size;
	rs->sqe_avail = rs->sq_size - RS_QP_CTRL_SIZE;
	rs->ctrl_max_seqno = RS_QP_CTRL_SIZE;
	/* the first half of the ring goes in the conn data, the second in
	 * the first SGL message */
	rs->rbuf_bytes_avail = rs->rbuf_size / 2;
	rs->rbuf_free_offset = rs->rbuf_size / 2;
	rs->rseq_comp = rs->rq_size / 2;
	for (int i = 0; i < rs->rq_size; i++)
		if (post_recv(rs))
			goto fail;
	return 0;
fail:
	if (!errno)
		errno = ENOMEM;
	return -1;
}

void rs_free_io(struct rsocket *rs)
{
	if (rs->cm_id && rs->cm_id->qp)
		rdma_destroy_qp(rs->cm_id);
	rs_free_iomaps(rs);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->target_mr)
		ibv_dereg_mr(rs->target_mr);
	if (rs->cq)
		ibv_destroy_cq(rs->cq);
	if (rs->comp)
		ibv_destroy_comp_channel(rs->comp);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->target_mem);
	free(rs->rmsg);
	rs->smr = rs->rmr = rs->target_mr = NULL;
	rs->cq = NULL;
	rs->comp = NULL;
	rs->sbuf = rs->rbuf = NULL;
	rs->target_mem = NULL;
	rs->rmsg = NULL;
}

void rs_format_conn_data(struct rsocket *rs, struct rs_conn_data *cd)
{
	memset(cd, 0, sizeof(*cd));
	cd->version = RS_CONN_VERSION;
	cd->flags = RS_CONN_FLAG_IOMAP | (host_is_net() ? RS_CONN_FLAG_NET : 0);
	cd->credits = htobe16(rs->rq_size);
	cd->target_iomap_size = rs_iomap_scale(rs->iomap_size);
	cd->target_sgl.addr = htobe64((uintptr_t)rs->target_sgl);
	cd->target_sgl.key = htobe32(rs->target_mr->rkey);
	cd->target_sgl.length = htobe32(RS_SGL_SIZE);
	cd->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	cd->data_buf.key = htobe32(rs->rmr->rkey);
	cd->data_buf.length = htobe32(rs->rbuf_size / 2);
}

void rs_save_conn_data(struct rsocket *rs, const struct rs_conn_data *cd)
{
	rs->remote_sgl.addr = be64toh(cd->target_sgl.addr);
	rs->remote_sgl.key = be32toh(cd->target_sgl.key);
	rs->remote_sgl.length = be32toh(cd->target_sgl.length);
	rs->remote_sge = 1;
	rs->swap_sgl = !!(cd->flags & RS_CONN_FLAG_NET) != host_is_net();
	if (cd->flags & RS_CONN_FLAG_IOMAP) {
		rs->remote_iomap.addr = rs->remote_sgl.addr +
					sizeof(struct rs_sge) * rs->remote_sgl.length;
		rs->remote_iomap.key = rs->remote_sgl.key;
		rs->remote_iomap.length = rs_iomap_unscale(cd->target_iomap_size);
	}
	rs->target_sgl[0].addr = be64toh(cd->data_buf.addr);
	rs->target_sgl[0].key = be32toh(cd->data_buf.key);
	rs->target_sgl[0].length = be32toh(cd->data_buf.length);
	rs->sseq_comp = be16toh(cd->credits);
}

/* ---- posting ------------------------------------------------------------- */

static int post_send(struct rsocket *rs, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	if (ibv_post_send(rs->cm_id->qp, wr, &bad)) {
		rs->state = RS_ERROR | RS_DISCONNECTED;
		rs->err = ECONNRESET;
		errno = ECONNRESET;
		return -1;
	}
	return 0;
}

int rs_post_write_msg(struct rsocket *rs, struct ibv_sge *sgl, int nsge,
			  uint32_t msg, int flags, uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr = {
		.wr_id = msg,
		.sg_list = sgl,
		.num_sge = nsge,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = flags,
		.imm_data = htobe32(msg),
		.wr.rdma = { .remote_addr = addr, .rkey = rkey },
	};

	return post_send(rs, &wr);
}

/* riowrite's data: a plain RDMA WRITE, nothing for the peer to receive. */
int rs_post_write(struct rsocket *rs, struct ibv_sge *sgl, int nsge,
		      uint32_t len, int flags, uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr = {
		.wr_id = RS_MSG(RS_OP_WRITE, len),
		.sg_list = sgl,
		.num_sge = nsge,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = flags,
		.wr.rdma = { .remote_addr = addr, .rkey = rkey },
	};

	return post_send(rs, &wr);
}

/* A message with nothing but its immediate.  Its zero-length write names
 * the peer's target SGL, a region that we know is there. */
static int post_msg(struct rsocket *rs, uint32_t msg)
{
	return rs_post_write_msg(rs, NULL, 0, msg, 0, rs->remote_sgl.addr,
			      rs->remote_sgl.key);
}

int rs_send_ctrl(struct rsocket *rs, uint32_t ctrl)
{
	rs->ctrl_seqno++;
	return post_msg(rs, RS_MSG(RS_OP_CTRL, ctrl));
}

static bool ctrl_avail(const struct rsocket *rs)
{
	return rs->ctrl_seqno != rs->ctrl_max_seqno;
}

/* Gives the peer the next ring half once half the ring is read, or just
 * fresh credits once half the receives are used. */
static void send_credits(struct rsocket *rs)
{
	uint32_t credits = (uint16_t)(rs->rseq_no + rs->rq_size);
	uint32_t half = rs->rbuf_size / 2;
	struct rs_sge *slot;
	struct ibv_sge sge;

	rs->rseq_comp = rs->rseq_no + rs->rq_size / 2;
	if (rs->rbuf_bytes_avail < half) {
		rs->ctrl_seqno++;
		post_msg(rs, RS_MSG(RS_OP_SGL, credits));
		return;
	}
	slot = (struct rs_sge *)(rs->sbuf + rs->sbuf_size) +
	       (rs->ctrl_seqno & (RS_QP_CTRL_SIZE - 1));
	slot->addr = (uintptr_t)&rs->rbuf[rs->rbuf_free_offset];
	slot->key = rs->rmr->rkey;
	slot->length = half;
	if (rs->swap_sgl) {
		slot->addr = bswap_64(slot->addr);
		slot->key = bswap_32(slot->key);
		slot->length = bswap_32(slot->length);
	}
	sge = (struct ibv_sge){ (uintptr_t)slot, sizeof(*slot), rs->smr->lkey };
	rs->ctrl_seqno++;
	if (rs_post_write_msg(rs, &sge, 1, RS_MSG(RS_OP_SGL, credits), 0,
			   rs->remote_sgl.addr +
				   rs->remote_sge * sizeof(struct rs_sge),
			   rs->remote_sgl.key))
		return;
	rs->rbuf_bytes_avail -= half;
	rs->rbuf_free_offset = (rs->rbuf_free_offset + half) % rs->rbuf_size;
	if (++rs->remote_sge == (int)rs->remote_sgl.length)
		rs->remote_sge = 0;
}

void rs_update_credits(struct rsocket *rs)
{
	if ((rs->state & RS_CONNECTED) && ctrl_avail(rs) &&
	    (rs->rbuf_bytes_avail >= rs->rbuf_size / 2 ||
	     (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0))
		send_credits(rs);
}

/* ---- completions --------------------------------------------------------- */

static void on_recv(struct rsocket *rs, uint32_t msg)
{
	switch (RS_MSG_OP(msg)) {
	case RS_OP_SGL:
		rs->sseq_comp = (uint16_t)RS_MSG_DATA(msg);
		break;
	case RS_OP_IOMAP_SGL:
		/* the table entry is written; the write used a credit that
		 * no read will return */
		rs->rseq_no++;
		break;
	case RS_OP_CTRL:
		if (RS_MSG_DATA(msg) == RS_CTRL_DISCONNECT)
			rs->state = RS_DISCONNECTED | (rs->state & RS_ERROR);
		else if (RS_MSG_DATA(msg) == RS_CTRL_SHUTDOWN) {
			if (rs->state & RS_WRITABLE)
				rs->state &= ~RS_READABLE;
			else
				rs->state = RS_DISCONNECTED;
		}
		break;
	case RS_OP_DATA:
		rs->rmsg[rs->rmsg_tail] = (struct rs_msg){ RS_OP_DATA,
							   RS_MSG_DATA(msg) };
		if (++rs->rmsg_tail == rs->rq_size + 1)
			rs->rmsg_tail = 0;
		break;
	default:
		break;
	}
}

static void on_send(struct rsocket *rs, uint32_t msg)
{
	switch (RS_MSG_OP(msg)) {
	case RS_OP_SGL:
	case RS_OP_CTRL:
		rs->ctrl_max_seqno++;
		break;
	case RS_OP_IOMAP_SGL:
		rs->sqe_avail++;
		rs->sbuf_avail += sizeof(struct rs_iomap);
		break;
	default:
		rs->sqe_avail++;
		rs->sbuf_avail += RS_MSG_DATA(msg);
		break;
	}
}

/* Returns how many completions it took. */
static int poll_cq(struct rsocket *rs)
{
	struct ibv_wc wc[16];
	int n, total = 0, received = 0;

	if (!rs->cq)
		return 0;
	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		total += n;
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id & RS_WR_RECV) {
				/* flushed receives: the QP is going down */
				if (wc[i].status != IBV_WC_SUCCESS)
					continue;
				received++;
				if (wc[i].wc_flags & IBV_WC_WITH_IMM)
					on_recv(rs, be32toh(wc[i].imm_data));
				continue;
			}
			on_send(rs, (uint32_t)wc[i].wr_id);
			if (wc[i].status != IBV_WC_SUCCESS &&
			    (rs->state & RS_CONNECTED)) {
				rs->state = RS_ERROR | RS_DISCONNECTED;
				rs->err = ECONNRESET;
			}
		}
	}
	if (rs->state & RS_CONNECTED) {
		while (received--)
			if (post_recv(rs)) {
				rs->state = RS_ERROR | RS_DISCONNECTED;
				rs->err = ECONNRESET;
				break;
			}
	}
	return total;
}

void rs_connected(struct rsocket *rs)
{
	rs_update_credits(rs);
	rs_send_iomaps(rs);
}

void rs_progress(struct rsocket *rs)
{
	if (rs->state & RS_LISTENING)
		return;
	rs_cm_progress(rs);
	poll_cq(rs);
	rs_update_credits(rs);
}

bool rs_arm(struct rsocket *rs)
{
	if (!rs->cq)
		return false;
	if (!rs->cq_armed) {
		if (ibv_req_notify_cq(rs->cq, 0))
			return true;	/* cannot sleep on it: look again */
		rs->cq_armed = true;
	}
	if (!poll_cq(rs))
		return false;
	rs_update_credits(rs);
	return true;
}

void rs_consume_cq_event(struct rsocket *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	/* nonblocking: another thread may have taken the event */
	if (rs->comp && !ibv_get_cq_event(rs->comp, &cq, &ctx)) {
		ibv_ack_cq_events(cq, 1);
		rs->cq_armed = false;
	}
}

int rs_wait(struct rsocket *rs, bool nonblock, bool (*done)(struct rsocket *))
{
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = rs->chan->fd, .events = POLLIN },
			{ .fd = rs->comp ? rs->comp->fd : -1, .events = POLLIN },
		};
		int ret;

		rs_progress(rs);
		if (done(rs))
			return 0;
		if (nonblock) {
			errno = EAGAIN;
			return -1;
		}
		if (rs->waiter) {
			/* one thread sleeps on the channels, the rest on it */
			pthread_cond_wait(&rs->wake, &rs->lock);
			continue;
		}
		if (rs_arm(rs))
			continue;
		rs->waiter = true;
		pthread_mutex_unlock(&rs->lock);
		ret = poll(p, 2, -1);
		pthread_mutex_lock(&rs->lock);
		rs->waiter = false;
		pthread_cond_broadcast(&rs->wake);
		if (ret < 0)
			return -1;
		if (p[1].revents)
			rs_consume_cq_event(rs);
	}
}

bool rs_can_send(struct rsocket *rs)
{
	return rs->cq && rs->sqe_avail > 0 && rs->sbuf_avail >= RS_SNDLOWAT &&
	       rs->sseq_no != rs->sseq_comp &&
	       rs->target_sgl[rs->target_sge].length != 0;
}

bool rs_have_rdata(struct rsocket *rs)
{
	return rs->rmsg && rs->rmsg_head != rs->rmsg_tail;
}

bool rs_all_sends_done(struct rsocket *rs)
{
	return (int)(rs->ctrl_max_seqno - rs->ctrl_seqno) + rs->sqe_avail ==
	       rs->sq_size;
}
