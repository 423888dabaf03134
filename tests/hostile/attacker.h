/*
 * The attacker of the hostile tests (hostile.c): what it knows of the
 * target, how it drives it, the packets it builds and the answers it
 * expects (attacker.c), and the attacks (cases_access.c: keys, bounds and
 * rights; cases_network.c: addresses, PSNs and floods).
 */
#ifndef HOSTILE_ATTACKER_H
#define HOSTILE_ATTACKER_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "harness.h"
#include "hostile.h"
#include "target.h"
#include "wire.h"


enum {
	DEADLINE_S = 50,
	RESP_WAIT_MS = 3000,	/* an answer the target owes comes by then */
	SILENCE_MS = 300,	/* no answer within this is taken as none */
	STATE_POLLS = 1000,	/* a QP state change shows within 1 s */
	MR_LEN = 4096,
	ALL_REMOTE = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	RSS_GROWTH_MAX_KB = 32 * 1024,
	FLOOD_PACKETS = 100000,
	FLOOD_CPU_MAX_MS = 20000,
	READ_FLOOD = 2000,
	READ_FLOOD_LEN = 16 * 1024,
	IMG_MAX = READ_FLOOD_LEN + 2 * GUARD_LEN,	/* the largest MR's */
	CM_FLOOD = 20000,
	CM_BACKLOG = 4,
	KEY_SAMPLES = 256,
	KEY_GUESSES = 24,
	KEY_RANDOM_BITS = 12,	/* README/mr.c: index << 12 | random */
};

#define HUGE_VA 0xFFFFFFFFFFFFFFF8ull	/* VA + length wraps past 2^64 */

struct atk {
	int ctl;
	int fd;				/* ATK_IP:ROCE_PORT, where replies arrive */
	struct sockaddr_in self, target;
	uint32_t next_psn;
};

struct aqp {
	uint32_t id, qpn, psn;		/* psn: the next request's */
};

struct amr {
	uint32_t id, rkey, len;
	uint64_t va;
	uint8_t img[IMG_MAX];		/* what the guarded area must hold */
};

struct reply cmd(struct atk *a, struct cmd c);
struct aqp qp_new_rd(struct atk *a, unsigned access, unsigned rd_atomic,
		     bool pd2);
struct aqp qp_new(struct atk *a);
struct amr mr_new_pd(struct atk *a, uint32_t len, unsigned access,
		     bool pd2, uint64_t seed);
struct amr mr_new(struct atk *a, unsigned access);
void expect_mem_at(const char *file, int line, struct atk *a,
		   const struct amr *m);
void expect_state_at(const char *file, int line, struct atk *a,
		     const struct aqp *q, enum ibv_qp_state want);
void send_from(int fd, const struct sockaddr_in *src,
	       const struct sockaddr_in *dst, struct w_pkt *k);
void send_pkt(struct atk *a, struct w_pkt *k);
void write_pkt(struct w_pkt *k, const struct aqp *q, uint64_t va,
	       uint32_t rkey, uint32_t len, const void *data,
	       size_t paylen);
void write_only(struct atk *a, struct aqp *q, uint64_t va,
		uint32_t rkey, uint32_t len, uint64_t seed);
void written(struct amr *m, uint64_t va, uint32_t len, uint64_t seed);
void read_req(struct atk *a, const struct aqp *q, uint64_t va,
	      uint32_t rkey, uint32_t len);
void atomic_req(struct atk *a, const struct aqp *q, uint8_t op,
		uint64_t va, uint32_t rkey, uint64_t swap_add,
		uint64_t compare);
struct w_resp expect_resp_at(const char *file, int line, struct atk *a,
			     uint8_t opcode, uint8_t syndrome,
			     uint32_t psn, const char *what);
void expect_silence_at(const char *file, int line, int fd,
		       const char *what);
uint32_t psn_plus(uint32_t psn, uint32_t n);
void expect_refused_at(const char *file, int line, struct atk *a,
		       const struct aqp *q, uint8_t syndrome,
		       const char *what);

#define expect_mem(a, m) expect_mem_at(__FILE__, __LINE__, a, m)
#define expect_state(a, q, s) expect_state_at(__FILE__, __LINE__, a, q, s)
#define expect_resp(a, op, syn, psn, what)                                     \
	expect_resp_at(__FILE__, __LINE__, a, op, syn, psn, what)
#define expect_nak(a, syn, psn, what)                                          \
	expect_resp(a, OP_ACK, syn, psn, what)
#define expect_ack(a, psn, what)                                               \
	expect_resp(a, OP_ACK, AETH_ACK_NO_CREDIT, psn, what)
#define expect_silence(a, what)                                                \
	expect_silence_at(__FILE__, __LINE__, (a)->fd, what)
#define expect_refused(a, q, syn, what)                                        \
	expect_refused_at(__FILE__, __LINE__, a, q, syn, what)

/* the attacks, one a test */
void case_va_overflow(struct atk *a);
void case_write_beyond(struct atk *a);
void case_read_beyond(struct atk *a);
void case_zero_length(struct atk *a);
void case_atomic_unaligned(struct atk *a);
void case_atomic_no_access(struct atk *a);
void case_dereg(struct atk *a);
void case_rereg(struct atk *a);
void case_mw(struct atk *a);
void case_other_pd(struct atk *a);
void case_wrong_source_ip(struct atk *a);
void case_wrong_source_port(struct atk *a);
void case_wrong_dest_qpn(struct atk *a);
void case_psn_replay(struct atk *a);
void case_read_flood(struct atk *a);
void case_flood(struct atk *a);
void case_cm_flood(struct atk *a);
void case_rkey_guess(struct atk *a);

#endif
