/*
 * The rsocket data path.  Data goes as RDMA WRITE WITH IMMEDIATE into the
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

static void update_credits(struct rsocket *rs)
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
	update_credits(rs);
	rs_send_iomaps(rs);
}

void rs_progress(struct rsocket *rs)
{
	if (rs->state & RS_LISTENING)
		return;
	rs_cm_progress(rs);
	poll_cq(rs);
	update_credits(rs);
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
	update_credits(rs);
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

/* ---- send ---------------------------------------------------------------- */

size_t rs_iter_copy_from(struct iov_iter *it, void *dst, size_t len)
{
	size_t done = 0;

	while (done < len && it->cnt) {
		size_t n = it->iov->iov_len - it->off;

		if (n > len - done)
			n = len - done;
		memcpy((uint8_t *)dst + done, (const uint8_t *)it->iov->iov_base +
						      it->off, n);
		done += n;
		it->off += n;
		if (it->off == it->iov->iov_len) {
			it->iov++;
			it->cnt--;
			it->off = 0;
		}
	}
	return done;
}

static size_t iter_copy_to(struct iov_iter *it, const void *src, size_t len)
{
	size_t done = 0;

	while (done < len && it->cnt) {
		size_t n = it->iov->iov_len - it->off;

		if (n > len - done)
			n = len - done;
		memcpy((uint8_t *)it->iov->iov_base + it->off,
		       (const uint8_t *)src + done, n);
		done += n;
		it->off += n;
		if (it->off == it->iov->iov_len) {
			it->iov++;
			it->cnt--;
			it->off = 0;
		}
	}
	return done;
}

/* Stages len bytes in the send ring (or, when small, in a buffer for an
 * inline post) and fills the SGEs: 1 or 2, the ring may wrap. */
int rs_stage(struct rsocket *rs, struct iov_iter *it, uint32_t len,
		 struct ibv_sge *sge, uint8_t *inline_buf, int *flags)
{
	uint32_t first;

	if (len <= rs->sq_inline) {
		rs_iter_copy_from(it, inline_buf, len);
		sge[0] = (struct ibv_sge){ (uintptr_t)inline_buf, len, 0 };
		*flags = IBV_SEND_INLINE;
		return 1;
	}
	*flags = 0;
	first = rs->sbuf_size - rs->sbuf_head;
	if (first > len)
		first = len;
	rs_iter_copy_from(it, rs->sbuf + rs->sbuf_head, first);
	sge[0] = (struct ibv_sge){ (uintptr_t)(rs->sbuf + rs->sbuf_head), first,
				   rs->smr->lkey };
	rs->sbuf_head = (rs->sbuf_head + first) % rs->sbuf_size;
	if (first == len)
		return 1;
	rs_iter_copy_from(it, rs->sbuf, len - first);
	sge[1] = (struct ibv_sge){ (uintptr_t)rs->sbuf, len - first,
				   rs->smr->lkey };
	rs->sbuf_head = len - first;
	return 2;
}

static bool can_send_or_closed(struct rsocket *rs)
{
	return rs_can_send(rs) || !(rs->state & RS_WRITABLE);
}

static bool opened(struct rsocket *rs)
{
	return !(rs->state & RS_OPENING);
}

/* A connect or accept still under way: wait for it as the mode says. */
int rs_finish_open(struct rsocket *rs, bool nonblock)
{
	if (!(rs->state & RS_OPENING))
		return 0;
	return rs_wait(rs, nonblock, opened);
}

int rs_send_errno(const struct rsocket *rs)
{
	if (rs->state & RS_ERROR)
		return ECONNRESET;
	return rs->state & (RS_CONNECTED | RS_DISCONNECTED) ? EPIPE : ENOTCONN;
}

static ssize_t rs_sendv(int socket, const struct iovec *iov, int iovcnt,
			int flags)
{
	struct rsocket *rs = rs_get(socket);
	struct iov_iter it = { iov, iovcnt, 0 };
	uint8_t inline_buf[1024];
	size_t total = 0, sent = 0;
	bool nonblock;
	int err = 0;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	pthread_mutex_lock(&rs->lock);
	nonblock = rs_nonblocking(rs, flags);
	if (rs_finish_open(rs, nonblock))
		err = errno;
	while (!err && sent < total) {
		struct ibv_sge sge[2];
		uint32_t len, room;
		uint64_t addr;
		uint32_t rkey;
		int nsge, wflags;

		if (!rs_can_send(rs)) {
			rs_progress(rs);
			if (!can_send_or_closed(rs) &&
			    rs_wait(rs, nonblock, can_send_or_closed)) {
				err = errno;
				break;
			}
		}
		if (!(rs->state & RS_WRITABLE)) {
			err = rs_send_errno(rs);
			break;
		}
		room = rs->target_sgl[rs->target_sge].length;
		len = total - sent > RS_MAX_TRANSFER ? RS_MAX_TRANSFER
						     : (uint32_t)(total - sent);
		if (len > room)
			len = room;
		if (len > rs->sbuf_avail)
			len = rs->sbuf_avail;
		nsge = rs_stage(rs, &it, len, sge, inline_buf, &wflags);

		/* the target entry moves before the post: the peer may
		 * rewrite it as soon as the data is in */
		addr = rs->target_sgl[rs->target_sge].addr;
		rkey = rs->target_sgl[rs->target_sge].key;
		rs->target_sgl[rs->target_sge].addr = addr + len;
		rs->target_sgl[rs->target_sge].length = room - len;
		if (room == len && ++rs->target_sge == RS_SGL_SIZE)
			rs->target_sge = 0;
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_avail -= len;
		if (rs_post_write_msg(rs, sge, nsge, RS_MSG(RS_OP_DATA, len),
				   wflags, addr, rkey)) {
			err = errno;
			break;
		}
		sent += len;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	if (sent || !total)
		return (ssize_t)sent;
	errno = err;
	return -1;
}

RS_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct iovec iov = { (void *)buf, len };

	return rs_sendv(socket, &iov, 1, flags);
}

RS_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen)
{
	/* a connected stream ignores the address, as TCP does */
	(void)dest_addr;
	(void)addrlen;
	return rsend(socket, buf, len, flags);
}

RS_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (!msg || msg->msg_iovlen > IOV_MAX) {
		errno = EINVAL;
		return -1;
	}
	return rs_sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

RS_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return rsend(socket, buf, count, 0);
}

RS_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0 || iovcnt > IOV_MAX) {
		errno = EINVAL;
		return -1;
	}
	return rs_sendv(socket, iov, iovcnt, 0);
}

/* ---- receive ------------------------------------------------------------- */

static bool rdata_or_closed(struct rsocket *rs)
{
	return rs_have_rdata(rs) || !(rs->state & RS_READABLE);
}

/* Copies up to len bytes of the queued messages out; consumes them unless
 * peeking. */
static size_t copy_rdata(struct rsocket *rs, struct iov_iter *it, size_t len,
			 bool peek)
{
	int head = rs->rmsg_head;
	uint32_t offset = rs->rbuf_offset, partial = 0;
	size_t done = 0;

	while (done < len && head != rs->rmsg_tail) {
		uint32_t left = rs->rmsg[head].data - partial;
		uint32_t n = len - done < left ? (uint32_t)(len - done) : left;
		uint32_t first = rs->rbuf_size - offset;

		if (first > n)
			first = n;
		iter_copy_to(it, rs->rbuf + offset, first);
		iter_copy_to(it, rs->rbuf, n - first);
		offset = (offset + n) % rs->rbuf_size;
		done += n;
		if (n < left) {
			partial += n;
			break;
		}
		partial = 0;
		if (++head == rs->rq_size + 1)
			head = 0;
		if (!peek)
			rs->rseq_no++;
	}
	if (peek)
		return done;
	if (partial)
		rs->rmsg[head].data -= partial;
	rs->rmsg_head = head;
	rs->rbuf_offset = offset;
	rs->rbuf_bytes_avail += done;
	return done;
}

static ssize_t rs_recvv(int socket, const struct iovec *iov, int iovcnt,
			int flags)
{
	struct rsocket *rs = rs_get(socket);
	struct iov_iter it = { iov, iovcnt, 0 };
	size_t total = 0, got = 0;
	bool nonblock;
	int err = 0;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	pthread_mutex_lock(&rs->lock);
	nonblock = rs_nonblocking(rs, flags);
	if (rs_finish_open(rs, nonblock))
		err = errno;
	else if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED)))
		err = ENOTCONN;
	while (!err && got < total) {
		if (!rs_have_rdata(rs)) {
			rs_progress(rs);
			/* after the data already queued: EOF, or an error */
			if (!rs_have_rdata(rs) && !(rs->state & RS_READABLE)) {
				if ((rs->state & RS_ERROR) && !got && rs->err)
					err = rs->err;
				break;
			}
			if (got && !(flags & MSG_WAITALL))
				break;
			if (rs_wait(rs, nonblock, rdata_or_closed)) {
				err = errno;
				break;
			}
			continue;
		}
		got += copy_rdata(rs, &it, total - got, flags & MSG_PEEK);
		if (flags & MSG_PEEK)
			break;
		update_credits(rs);
		if (!(flags & MSG_WAITALL))
			break;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	if (got || !err)
		return (ssize_t)got;
	errno = err;
	return -1;
}

RS_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	struct iovec iov = { buf, len };

	return rs_recvv(socket, &iov, 1, flags);
}

RS_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
			    struct sockaddr *src_addr, socklen_t *addrlen)
{
	ssize_t ret = rrecv(socket, buf, len, flags);

	if (ret >= 0 && src_addr && addrlen) {
		int err = errno;

		if (rgetpeername(socket, src_addr, addrlen))
			*addrlen = 0;
		errno = err;
	}
	return ret;
}

RS_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	ssize_t ret;

	if (!msg || msg->msg_iovlen > IOV_MAX) {
		errno = EINVAL;
		return -1;
	}
	ret = rs_recvv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
	if (ret >= 0) {
		int err = errno;

		msg->msg_flags = 0;
		msg->msg_controllen = 0;
		if (msg->msg_name &&
		    rgetpeername(socket, msg->msg_name, &msg->msg_namelen))
			msg->msg_namelen = 0;
		errno = err;
	}
	return ret;
}

RS_EXPORT ssize_t rread(int socket, void *buf, size_t count)
{
	return rrecv(socket, buf, count, 0);
}

RS_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0 || iovcnt > IOV_MAX) {
		errno = EINVAL;
		return -1;
	}
	return rs_recvv(socket, iov, iovcnt, 0);
}
