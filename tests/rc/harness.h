/*
 * Multi-process harness for the RC tests.  Written against the public verbs
 * API only, so the same programs run over any libibverbs.so.1 that provides a
 * RoCE device named "uroce0".
 *
 * A test is a set of roles, each run in its own process: role 0 is the hub
 * and has one socketpair to every other role.  The supervisor forks all roles
 * before any verb is called (the library runs a thread, and a forked copy of a
 * process with threads is not safe to use), then waits for them with a
 * deadline.  A failed check prints where and why and ends the process with
 * status 1; the supervisor then stops the other roles and reports.
 */
#ifndef UROCE_TEST_HARNESS_H
#define UROCE_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

enum {
	H_MAX_ROLES = 3,
	H_GID_INDEX = 0,	/* uroce: ::ffff:127.0.0.1 */
	H_PORT = 1,
	H_WC_TIMEOUT_MS = 10000,	/* one completion never takes longer */
};

#define H_DEVICE_NAME "uroce0"
#define H_MIB (1024u * 1024u)

struct h_proc;

struct h_test {
	const char *name;
	int nroles;
	void (*role[H_MAX_ROLES])(struct h_proc *p);
	unsigned deadline_s;	/* whole test, all roles */
	const char *faults;	/* UROCE_FAULTS for every role, or NULL */
	long arg;		/* scenario parameter (e.g. path MTU bytes) */
	/* Per role, or NULL: the network namespace (a path such as
	 * /run/netns/NAME) the role enters before it opens the device, and
	 * its UROCE_ADDRS, an address inside a namespace the test made; GID 0
	 * is then that address instead of loopback. */
	const char *netns[H_MAX_ROLES];
	const char *addrs[H_MAX_ROLES];
	/* Per role: it opens the device itself (h_open), later, e.g. as a
	 * process that starts once another role died. */
	bool opens_late[H_MAX_ROLES];
	/* Per role: another role kills it with SIGKILL, which is then no
	 * failure. */
	bool sigkilled[H_MAX_ROLES];
};

/* One role's process: its device, protection domain and sockets. */
struct h_proc {
	const struct h_test *t;
	int role;
	int sock[H_MAX_ROLES];	/* role 0: sock[i-1] leads to role i */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_device_attr dev;
	struct ibv_port_attr port;
	union ibv_gid gid;
};

/* How to build and connect one RC QP. */
struct h_qp_cfg {
	enum ibv_mtu mtu;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
	uint32_t psn;			/* our sq_psn, the peer's rq_psn */
	unsigned access;		/* qp_access_flags */
	struct ibv_qp_cap cap;
	int sq_sig_all;
	struct ibv_pd *pd;		/* NULL: the process's PD */
	struct ibv_comp_channel *channel;	/* for both CQs, or NULL */
	uint64_t send_ops_flags;	/* nonzero: the ibv_wr_* API too */
};

/* An RC QP with a send CQ and a receive CQ of its own, so that completion
 * order can be checked per queue. */
struct h_ep {
	struct ibv_qp *qp;
	struct ibv_cq *scq, *rcq;
	struct h_qp_cfg cfg;
	uint32_t peer_qpn;
};

/* Registered memory. */
struct h_buf {
	uint8_t *mem;
	size_t len;
	struct ibv_mr *mr;
};

/* What a peer needs to address our memory. */
struct h_rbuf {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

/* A scatter/gather layout as offsets into an h_buf, so that both processes
 * can compute the same layout and apply it to their own buffers. */
struct h_piece {
	size_t off, len;
};
struct h_layout {
	int n;
	struct h_piece pc[3];
};

/* Expected fields of one work completion.  byte_len is compared on the
 * receive side and, on the send side, for RDMA READ and atomics only (the
 * only send completions for which ibv_poll_cq(3) defines it). */
struct h_want {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len;
	bool with_imm;
	uint32_t imm;			/* raw, as put in ibv_send_wr.imm_data */
};

/* ---- running --------------------------------------------------------- */

/* Forks the roles, waits, prints PASS/FAIL; the return value is main's. */
int h_main(const struct h_test *t);

/* ---- checks: print file:line and end the role with status 1 ----------- */

_Noreturn void h_fail_at(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define h_fail(...) h_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define H_CHECK(cond)                                                          \
	do {                                                                   \
		if (!(cond))                                                   \
			h_fail("check failed: %s", #cond);                     \
	} while (0)
#define H_EQ(got, want)                                                        \
	do {                                                                   \
		unsigned long long g_ = (unsigned long long)(got);             \
		unsigned long long w_ = (unsigned long long)(want);            \
		if (g_ != w_)                                                  \
			h_fail("%s == %s: got %llu (0x%llx), want %llu (0x%llx)", \
			       #got, #want, g_, g_, w_, w_);                   \
	} while (0)
/* Verbs that return 0 or an errno value. */
#define H_OK(expr)                                                             \
	do {                                                                   \
		int e_ = (expr);                                               \
		if (e_)                                                        \
			h_fail("%s failed: %d (%s)", #expr, e_,                \
			       h_strerror(e_));                                \
	} while (0)
const char *h_strerror(int err);

/* ---- processes and sockets -------------------------------------------- */

/* The test's QPs take the UDP path (UROCE_SHM=0), not the same-host one. */
bool h_over_udp(void);
/* Opens "uroce0" and fills ctx, dev, port, gid and pd. */
void h_open(struct h_proc *p);
/* Nothing to do once a role closed its device itself and cleared ctx. */
void h_close(struct h_proc *p);
/* Closes the device (as h_close) and reads back the counters uroce prints
 * as it closes ("uroce: slot N: name value", UROCE_DEBUG=1 set before it
 * opened): vals[i] is names[i]'s value, 0 if not printed.  The lines go
 * to stdout, for the log. */
void h_close_counting(struct h_proc *p, const char *const *names,
		      uint64_t *vals, size_t n);

void h_send(int sock, const void *buf, size_t len);
void h_recv(int sock, void *buf, size_t len);	/* fails on EOF or timeout */
bool h_peer_closed(int sock, unsigned timeout_ms);
void h_sync(int sock);				/* both sides wait for each other */
void h_send_rbuf(int sock, const struct h_buf *b);
struct h_rbuf h_recv_rbuf(int sock);

/* ---- QPs ------------------------------------------------------------- */

/* Path MTU 4096, timeout 14, retry 7, rnr_retry 7, min_rnr_timer 12, all
 * remote access, 256 WRs and 4 SGEs per queue, signal only when asked. */
struct h_qp_cfg h_qp_defaults(const struct h_proc *p);
/* Creates the CQs and the QP and moves it to INIT. */
void h_ep_create(struct h_proc *p, struct h_ep *ep, const struct h_qp_cfg *c);
/* Exchanges {qpn, psn, gid} over sock, moves to RTR then RTS and waits until
 * the peer is in RTS too, so nobody sends to a QP that cannot receive yet. */
void h_ep_connect(struct h_proc *p, struct h_ep *ep, int sock);
void h_ep_destroy(struct h_ep *ep);
enum ibv_qp_state h_qp_state(struct ibv_qp *qp);
unsigned h_mtu_bytes(enum ibv_mtu mtu);
enum ibv_mtu h_mtu_enum(long bytes);

/* ---- memory ------------------------------------------------------------ */

void h_buf_alloc(struct h_proc *p, struct h_buf *b, size_t len, int access);
void h_buf_alloc_pd(struct ibv_pd *pd, struct h_buf *b, size_t len,
		    int access);
void h_buf_free(struct h_buf *b);

/* Deterministic pseudo-random bytes: the same seed gives the same bytes in
 * every process. */
void h_fill(void *buf, size_t len, uint64_t seed);
uint64_t h_rand64(uint64_t *state);
/* Fails with the first differing offset if got != want. */
void h_expect_mem_at(const char *file, int line, const void *got,
		     const void *want, size_t len, const char *what);
#define h_expect_mem(got, want, len, what)                                     \
	h_expect_mem_at(__FILE__, __LINE__, got, want, len, what)

/* Splits len into up to three uneven pieces (about 1/6, 1/2, 1/3 when
 * uneven is 0, 1/3, 1/4, rest otherwise) starting at off, separated by gap
 * bytes; slack is added to the last piece's length.  Empty pieces are left
 * out, so len 0 and no slack gives no pieces at all. */
struct h_layout h_split(size_t off, size_t len, size_t gap, int uneven,
			size_t slack);
/* Copies the first len bytes of stream into image through the layout. */
void h_scatter(const struct h_layout *l, uint8_t *image, const uint8_t *stream,
	       size_t len);
/* Scatter/gather entries for b's memory; returns the number used. */
int h_sges(const struct h_layout *l, const struct h_buf *b,
	   struct ibv_sge *sge);

/* ---- posting and completions ------------------------------------------ */

void h_post_rdma(struct h_ep *ep, uint64_t wr_id, enum ibv_wr_opcode op,
		 struct ibv_sge *sge, int nsge, unsigned flags,
		 uint64_t raddr, uint32_t rkey, uint32_t imm);
void h_post_atomic(struct h_ep *ep, uint64_t wr_id, enum ibv_wr_opcode op,
		   struct ibv_sge *sge, unsigned flags, uint64_t raddr,
		   uint32_t rkey, uint64_t compare_add, uint64_t swap);
void h_post_recv(struct h_ep *ep, uint64_t wr_id, struct ibv_sge *sge,
		 int nsge);
/* n receives of size bytes each, the i-th (wr_id i) at b->mem + i * size:
 * a ring of message slots, each reposted with h_post_recv as it is used. */
void h_post_recv_slots(struct h_ep *ep, const struct h_buf *b, unsigned n,
		       uint32_t size);
/* A message received into one of those slots (wc's wr_id): checks that it
 * is size bytes long and starts with the 8-byte sequence number seq, and
 * posts the slot again. */
void h_recv_slot_done(struct h_ep *ep, const struct h_buf *b,
		      const struct ibv_wc *wc, uint32_t size, uint64_t seq);

/* One completion within timeout_ms; false if none came. */
bool h_poll(struct ibv_cq *cq, struct ibv_wc *wc, unsigned timeout_ms);
/* Polls ep's send (or receive) CQ for one completion and checks it against
 * want, plus qp_num and, for successful receives, src_qp. */
struct ibv_wc h_expect_wc_at(const char *file, int line, struct h_ep *ep,
			     bool send, struct h_want want);
#define H_EXPECT_SEND(ep, ...)                                                 \
	h_expect_wc_at(__FILE__, __LINE__, ep, true, (struct h_want){ __VA_ARGS__ })
#define H_EXPECT_RECV(ep, ...)                                                 \
	h_expect_wc_at(__FILE__, __LINE__, ep, false, (struct h_want){ __VA_ARGS__ })
/* Polls ep's send CQ for one completion, which must be wr_id's with
 * status (whatever its other fields); what names the operation. */
void h_expect_status_at(const char *file, int line, struct h_ep *ep,
			uint64_t wr_id, enum ibv_wc_status status,
			const char *what);
#define H_EXPECT_STATUS(ep, wr_id, status, what)                               \
	h_expect_status_at(__FILE__, __LINE__, ep, wr_id, status, what)
/* Fails if cq yields a completion within ms. */
void h_expect_no_wc_at(const char *file, int line, struct ibv_cq *cq,
		       unsigned ms);
#define h_expect_no_wc(cq, ms) h_expect_no_wc_at(__FILE__, __LINE__, cq, ms)

/* ---- time -------------------------------------------------------------- */

uint64_t h_now_ns(void);
void h_sleep_ms(unsigned ms);

#endif
