/*
 * riomap / riounmap / riowrite: a region the peer may RDMA WRITE into
 * directly.  riomap writes the region's address into the peer's iomap
 * table (RS_OP_IOMAP_SGL); riowrite looks an offset up in the table the
 * peer wrote into ours and writes there, with no receive at the peer.
 */
#include <byteswap.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "rsocket.h"

/* ---- riomap / riowrite --------------------------------------------------- */

void rs_free_iomaps(struct rsocket *rs)
{
	while (rs->iomaps) {
		struct rs_iomap_mr *m = rs->iomaps;

		rs->iomaps = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
}

static bool iomap_can_send(struct rsocket *rs)
{
	return rs->cq && rs->sqe_avail > 0 &&
	       rs->sbuf_avail >= sizeof(struct rs_iomap) &&
	       rs->sseq_no != rs->sseq_comp;
}

/* Writes a mapping into the peer's iomap table (lock held, sending
 * possible). */
static int send_iomap(struct rsocket *rs, struct rs_iomap_mr *m)
{
	struct rs_iomap iom = {
		.offset = m->offset,
		.sge = { (uintptr_t)m->mr->addr, m->mr->rkey,
			 (uint32_t)m->mr->length },
	};
	struct iovec iov = { &iom, sizeof(iom) };
	struct iov_iter it = { &iov, 1, 0 };
	uint8_t inline_buf[sizeof(iom)];
	struct ibv_sge sge[2];
	int nsge, flags;

	if (rs->swap_sgl) {
		iom.offset = bswap_64(iom.offset);
		iom.sge.addr = bswap_64(iom.sge.addr);
		iom.sge.key = bswap_32(iom.sge.key);
		iom.sge.length = bswap_32(iom.sge.length);
	}
	nsge = rs_stage(rs, &it, sizeof(iom), sge, inline_buf, &flags);
	rs->sseq_no++;
	rs->sqe_avail--;
	rs->sbuf_avail -= sizeof(iom);
	if (rs_post_write_msg(rs, sge, nsge, RS_MSG(RS_OP_IOMAP_SGL, m->index),
			   flags,
			   rs->remote_iomap.addr +
				   m->index * sizeof(struct rs_iomap),
			   rs->remote_iomap.key))
		return -1;
	m->sent = true;
	return 0;
}

/* The mappings made before the connection was up, as far as sending goes
 * now; riowrite and riomap send the rest. */
void rs_send_iomaps(struct rsocket *rs)
{
	for (struct rs_iomap_mr *m = rs->iomaps; m; m = m->next)
		if (m->index >= 0 && !m->sent && iomap_can_send(rs))
			send_iomap(rs, m);
}

static int free_iomap_index(struct rsocket *rs)
{
	for (int i = 0; i < (int)rs->remote_iomap.length; i++) {
		struct rs_iomap_mr *m = rs->iomaps;

		while (m && m->index != i)
			m = m->next;
		if (!m)
			return i;
	}
	return -1;
}

static bool iomap_sendable_or_closed(struct rsocket *rs)
{
	return iomap_can_send(rs) || !(rs->state & RS_WRITABLE);
}

RS_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags,
		       off_t offset)
{
	struct rsocket *rs = rs_get(socket);
	struct rs_iomap_mr *m;
	int err = 0;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	if (!(prot & PROT_WRITE) || (prot & ~(PROT_READ | PROT_WRITE)) ||
	    flags || !buf || !len || len > UINT32_MAX) {
		err = EINVAL;
		goto out;
	}
	if (!rs->cq) {
		/* the peer's table size is known once connected */
		err = ENOTCONN;
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		err = ENOMEM;
		goto out;
	}
	m->index = free_iomap_index(rs);
	if (m->index < 0) {
		free(m);
		err = ENOMEM;
		goto out;
	}
	m->mr = ibv_reg_mr(rs->cm_id->pd, buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!m->mr) {
		err = errno ? errno : ENOMEM;
		free(m);
		goto out;
	}
	m->offset = offset == -1 ? (uint64_t)(uintptr_t)buf : (uint64_t)offset;
	m->next = rs->iomaps;
	rs->iomaps = m;
	if (rs->state & RS_CONNECTED) {
		if (!iomap_can_send(rs) &&
		    rs_wait(rs, rs->fd_flags & O_NONBLOCK,
			    iomap_sendable_or_closed) &&
		    errno != EAGAIN)
			err = errno;
		else if (iomap_can_send(rs) && send_iomap(rs, m))
			err = errno;
	}
	if (!err)
		offset = (off_t)m->offset;
out:
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	if (err) {
		errno = err;
		return -1;
	}
	return offset;
}

RS_EXPORT int riounmap(int socket, void *buf, size_t len)
{
	struct rsocket *rs = rs_get(socket);
	struct rs_iomap_mr **p;
	int ret = -1;

	if (!rs) {
		errno = EBADF;
		return -1;
	}
	pthread_mutex_lock(&rs->lock);
	for (p = &rs->iomaps; *p; p = &(*p)->next) {
		struct rs_iomap_mr *m = *p;

		if (m->mr->addr == buf && m->mr->length == len) {
			*p = m->next;
			ibv_dereg_mr(m->mr);
			free(m);
			ret = 0;
			break;
		}
	}
	if (ret)
		errno = EINVAL;
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret;
}

/* The peer's mapping holding offset, copied out of the table it writes. */
static bool find_iomap(struct rsocket *rs, uint64_t offset,
		       struct rs_iomap *out)
{
	for (int i = 0; i < rs->iomap_size; i++) {
		struct rs_iomap iom;

		iom.offset = rs->target_iomap[i].offset;
		iom.sge.addr = rs->target_iomap[i].sge.addr;
		iom.sge.key = rs->target_iomap[i].sge.key;
		iom.sge.length = rs->target_iomap[i].sge.length;
		if (rs->swap_sgl) {
			iom.offset = bswap_64(iom.offset);
			iom.sge.addr = bswap_64(iom.sge.addr);
			iom.sge.key = bswap_32(iom.sge.key);
			iom.sge.length = bswap_32(iom.sge.length);
		}
		if (iom.sge.length && offset >= iom.offset &&
		    offset < iom.offset + iom.sge.length) {
			*out = iom;
			return true;
		}
	}
	return false;
}

/* riowrite takes neither credits nor ring space at the peer. */
static bool can_write_direct(struct rsocket *rs)
{
	return rs->cq && rs->sqe_avail > 0 && rs->sbuf_avail >= RS_SNDLOWAT;
}

static bool can_write_direct_or_closed(struct rsocket *rs)
{
	return can_write_direct(rs) || !(rs->state & RS_WRITABLE);
}

RS_EXPORT size_t riowrite(int socket, const void *buf, size_t count,
			  off_t offset, int flags)
{
	struct rsocket *rs = rs_get(socket);
	struct iovec iov = { (void *)buf, count };
	struct iov_iter it = { &iov, 1, 0 };
	uint8_t inline_buf[1024];
	size_t sent = 0;
	bool nonblock;
	int err = 0;

	if (!rs) {
		errno = EBADF;
		return (size_t)-1;
	}
	pthread_mutex_lock(&rs->lock);
	nonblock = rs_nonblocking(rs, flags);
	if (rs_finish_open(rs, nonblock))
		err = errno;
	while (!err && sent < count) {
		uint64_t off = (uint64_t)offset + sent;
		struct rs_iomap iom;
		struct ibv_sge sge[2];
		uint32_t len;
		int nsge, wflags;

		if (!can_write_direct(rs)) {
			rs_progress(rs);
			if (!can_write_direct_or_closed(rs) &&
			    rs_wait(rs, nonblock, can_write_direct_or_closed)) {
				err = errno;
				break;
			}
		}
		if (!(rs->state & RS_WRITABLE)) {
			err = rs_send_errno(rs);
			break;
		}
		if (!find_iomap(rs, off, &iom)) {
			/* nothing mapped there (yet) */
			if (!sent)
				err = EINVAL;
			break;
		}
		len = count - sent > RS_MAX_TRANSFER ? RS_MAX_TRANSFER
						     : (uint32_t)(count - sent);
		if (len > iom.offset + iom.sge.length - off)
			len = (uint32_t)(iom.offset + iom.sge.length - off);
		if (len > rs->sbuf_avail)
			len = rs->sbuf_avail;
		nsge = rs_stage(rs, &it, len, sge, inline_buf, &wflags);
		rs->sqe_avail--;
		rs->sbuf_avail -= len;
		if (rs_post_write(rs, sge, nsge, len, wflags,
			       iom.sge.addr + (off - iom.offset), iom.sge.key)) {
			err = errno;
			break;
		}
		sent += len;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	if (sent || !count)
		return sent;
	errno = err;
	return (size_t)-1;
}
