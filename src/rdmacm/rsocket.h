/*
 * rsockets: the socket API of <rdma/rsocket.h> over rdma_cm and verbs.
 *
 * rsocket.c       the fd table, socket life cycle (connect, accept, close)
 * rsocket_opt.c   names, options, rfcntl
 * rsocket_io.c    the data path: completions, credits, send / receive
 * rsocket_iomap.c riomap / riounmap / riowrite
 * rsocket_poll.c  rpoll, rselect
 *
 * The wire protocol is rdma-core's: each side RDMA-writes-with-immediate
 * into a receive ring the peer advertised; the immediate says what the write
 * was (data and its length, a new ring half, a control message).  The rings
 * and the first credits travel in a 40-byte struct rs_conn_data, the private
 * data of the REQ and the REP.
 *
 * An rsocket's number is the fd of its own rdma_cm event channel, a real fd
 * that no other rsocket or file can hold while it is open.
 */
#ifndef UROCE_RSOCKET_H
#define UROCE_RSOCKET_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define RS_EXPORT __attribute__((visibility("default")))

enum {
	RS_SGL_SIZE = 2,		/* ring halves the sender may hold */
	RS_QP_CTRL_SIZE = 4,		/* control messages in flight */
	RS_MAX_TRANSFER = 65536,	/* one write at most */
	RS_SNDLOWAT = 2048,		/* smallest write worth waiting for */
	RS_QP_MIN_SIZE = 16,
	RS_QP_MAX_SIZE = 0xFFFE,
	RS_DEF_SQSIZE = 384,
	RS_DEF_RQSIZE = 384,
	RS_DEF_INLINE = 64,
	RS_DEF_MEM = 1 << 17,		/* receive ring and send buffer */
	RS_MIN_MEM = 4096,
	RS_MAX_MEM = 1 << 26,
	RS_CONN_VERSION = 1,
	RS_CONN_FLAG_NET = 1 << 0,	/* sender is big-endian */
	RS_CONN_FLAG_IOMAP = 1 << 1,	/* target_sgl is followed by iomaps */
	RS_RESOLVE_MS = 2000,
};

/* The 3 top bits of an immediate: what the write carried. */
enum {
	RS_OP_DATA = 0,
	RS_OP_WRITE = 2,		/* riowrite: never on the wire */
	RS_OP_SGL = 4,			/* data: the peer's new credit limit */
	RS_OP_IOMAP_SGL = 6,		/* data: the iomap index written */
	RS_OP_CTRL = 7,
};
#define RS_MSG(op, data) (((uint32_t)(op) << 29) | ((uint32_t)(data) & 0x1FFFFFFF))
#define RS_MSG_OP(msg) ((uint32_t)(msg) >> 29)
#define RS_MSG_DATA(msg) ((uint32_t)(msg) & 0x1FFFFFFF)

enum {
	RS_CTRL_DISCONNECT = 0,
	RS_CTRL_KEEPALIVE = 1,
	RS_CTRL_SHUTDOWN = 2,
};

/* wr_id of a receive; sends carry their message in the low 32 bits */
#define RS_WR_RECV (UINT64_C(1) << 63)

/* A buffer the peer may write: in rs_conn_data in network order, in the
 * target SGL / iomap arrays in the writer's order. */
struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

struct rs_conn_data {
	uint8_t version;
	uint8_t flags;
	uint16_t credits;		/* big-endian: receives posted */
	uint8_t reserved[3];
	uint8_t target_iomap_size;	/* log2 of the iomap entries, 0 none */
	struct rs_sge target_sgl;	/* where to send ring halves; length
					 * = entries */
	struct rs_sge data_buf;		/* the first ring half */
};
_Static_assert(sizeof(struct rs_conn_data) == 40, "rdma-core's layout");

struct rs_iomap {
	uint64_t offset;
	struct rs_sge sge;
};

/* A local riomap region. */
struct rs_iomap_mr {
	struct rs_iomap_mr *next;
	uint64_t offset;
	struct ibv_mr *mr;
	int index;			/* in the peer's iomap table, -1 local */
	bool sent;			/* the peer knows it */
};

/* States, as bits so that "connected and readable" is one test. */
enum {
	RS_INIT = 0,
	RS_BOUND = 1 << 0,
	RS_LISTENING = 1 << 1,
	RS_OPENING = 1 << 2,		/* connecting or accepting */
	RS_CONNECTED = 1 << 3,
	RS_READABLE = 1 << 4,
	RS_WRITABLE = 1 << 5,
	RS_CONNECT_ERROR = 1 << 6,
	RS_DISCONNECTED = 1 << 7,
	RS_ERROR = 1 << 8,
	RS_CONNECT_RDWR = RS_CONNECTED | RS_READABLE | RS_WRITABLE,
};

/* Where a connect stands in its steps. */
enum rs_connect_step {
	RS_STEP_NONE,
	RS_STEP_ADDR,			/* rdma_resolve_addr sent */
	RS_STEP_ROUTE,			/* rdma_resolve_route sent */
	RS_STEP_CONNECT,		/* rdma_connect sent */
	RS_STEP_ACCEPT,			/* passive: rdma_accept sent */
};

struct rs_msg {
	uint32_t op;
	uint32_t data;
};

struct rsocket {
	int index;			/* the fd the application holds */
	int domain, type;
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* the thread in poll() came back */
	bool waiter;			/* a thread sleeps in poll() for it */
	unsigned refs;			/* rclose waits for calls under way */

	struct rdma_event_channel *chan;
	struct rdma_cm_id *cm_id;
	struct ibv_comp_channel *comp;
	struct ibv_cq *cq;
	bool cq_armed;

	int state;
	enum rs_connect_step step;
	int err;			/* SO_ERROR */
	int fd_flags;			/* O_NONBLOCK */

	/* options */
	uint16_t sq_size, rq_size;
	uint32_t sq_inline;
	uint32_t sbuf_size, rbuf_size;
	int iomap_size;			/* entries of our target iomap */
	int so_reuseaddr, so_keepalive, tcp_nodelay, so_oobinline, v6only;
	struct linger linger;
	int keepidle;
	void *route;			/* RDMA_ROUTE: ibv_path_data array */
	size_t route_len;

	/* send side */
	uint8_t *sbuf;			/* the ring, then RS_QP_CTRL_SIZE
					 * rs_sge slots for ring halves sent */
	struct ibv_mr *smr;
	uint32_t sbuf_head;		/* next byte to fill */
	uint32_t sbuf_avail;
	int sqe_avail;
	uint16_t sseq_no, sseq_comp;	/* data writes sent, credit limit */
	unsigned ctrl_seqno, ctrl_max_seqno;
	bool swap_sgl;			/* peer's byte order is not ours */

	/* what the peer lets us write: target SGL and its iomap table */
	void *target_mem;		/* registered: sgl then iomap */
	struct ibv_mr *target_mr;
	volatile struct rs_sge *target_sgl;
	volatile struct rs_iomap *target_iomap;
	int target_sge;

	/* where to put our ring halves and iomaps at the peer */
	struct rs_sge remote_sgl;	/* length = entries */
	struct rs_sge remote_iomap;	/* length = entries */
	int remote_sge;

	/* receive side */
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	uint32_t rbuf_offset;		/* next byte to read */
	uint32_t rbuf_free_offset;	/* next half to give */
	uint32_t rbuf_bytes_avail;	/* read and not yet given back */
	uint16_t rseq_no, rseq_comp;	/* data messages consumed, next
					 * threshold for fresh credits */
	struct rs_msg *rmsg;		/* rq_size + 1 slots */
	int rmsg_head, rmsg_tail;

	/* riomap */
	struct rs_iomap_mr *iomaps;
};

/* RDMA_IOMAPSIZE travels as 8 bits: up to 127 exactly, larger values in
 * units of 256 with the top bit set (rdma-core's encoding). */
static inline uint8_t rs_iomap_scale(int value)
{
	return value <= 127 ? (uint8_t)value
			    : (uint8_t)(0x80 | ((value >> 8) & 0x7F));
}

static inline int rs_iomap_unscale(uint8_t scale)
{
	return scale & 0x80 ? (scale & 0x7F) << 8 : scale;
}

/* rsocket.c */
struct rsocket *rs_get(int index);	/* with a reference, or NULL */
void rs_put(struct rsocket *rs);
bool rs_nonblocking(const struct rsocket *rs, int flags);
/* Copies an address as getpeername does: truncated, with its full size. */
void rs_copy_addr(struct sockaddr *to, socklen_t *to_len,
		  const struct sockaddr *from);
/* Runs the CM events queued on the rsocket's channel (lock held). */
void rs_cm_progress(struct rsocket *rs);

/* rsocket_io.c */
int rs_create_io(struct rsocket *rs);	/* CQ, QP, buffers (lock held) */
void rs_free_io(struct rsocket *rs);
void rs_format_conn_data(struct rsocket *rs, struct rs_conn_data *cd);
void rs_save_conn_data(struct rsocket *rs, const struct rs_conn_data *cd);
void rs_connected(struct rsocket *rs);	/* the QP is up: credits flow */
/* Polls the CQ and CM channel and sends credits due (lock held). */
void rs_progress(struct rsocket *rs);
/* Waits (lock held, dropped while asleep) until done(rs) or the rsocket's
 * mode says not to wait: 0, or -1 with errno EAGAIN / EINTR. */
int rs_wait(struct rsocket *rs, bool nonblock, bool (*done)(struct rsocket *));
/* Arms the CQ and says whether something is already there to process. */
bool rs_arm(struct rsocket *rs);
void rs_consume_cq_event(struct rsocket *rs);
bool rs_can_send(struct rsocket *rs);
bool rs_have_rdata(struct rsocket *rs);
bool rs_all_sends_done(struct rsocket *rs);
/* Gives the peer back what was read of the receive ring, when enough was
 * (or it ran out of credits) and a control message may go. */
void rs_update_credits(struct rsocket *rs);
int rs_send_ctrl(struct rsocket *rs, uint32_t ctrl);
int rs_post_write_msg(struct rsocket *rs, struct ibv_sge *sgl, int nsge,
		      uint32_t msg, int flags, uint64_t addr, uint32_t rkey);
int rs_post_write(struct rsocket *rs, struct ibv_sge *sgl, int nsge,
		  uint32_t len, int flags, uint64_t addr, uint32_t rkey);

/* rsocket_rw.c, for rsocket_iomap.c too */

/* A connect or accept still under way: waits for it as the mode says. */
int rs_finish_open(struct rsocket *rs, bool nonblock);
int rs_send_errno(const struct rsocket *rs);	/* why sending fails */

/* A position in an iovec array. */
struct iov_iter {
	const struct iovec *iov;
	int cnt;
	size_t off;
};

size_t rs_iter_copy_from(struct iov_iter *it, void *dst, size_t len);
/* Stages len bytes in the send ring (or, when small, in inline_buf for an
 * inline post) and fills 1 or 2 SGEs (the ring may wrap). */
int rs_stage(struct rsocket *rs, struct iov_iter *it, uint32_t len,
	     struct ibv_sge *sge, uint8_t *inline_buf, int *flags);

/* rsocket_iomap.c */
void rs_send_iomaps(struct rsocket *rs);	/* those made before connect */
void rs_free_iomaps(struct rsocket *rs);

#endif
