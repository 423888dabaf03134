/*
 * The rsocket send and receive calls: rsend, rsendmsg, rwritev ... copy the
 * application's data into the send staging area or straight from it, and
 * post it as WRITE WITH IMMEDIATE (rsocket_io.c); rrecv, rrecvmsg, rreadv
 * ... copy it out of the receive ring and give ring space back as credits.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/uio.h>

#include "rsocket.h"

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
		rs_update_credits(rs);
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
