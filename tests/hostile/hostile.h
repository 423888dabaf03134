/*
 * hostile.*: a uroce target process under attack by a peer that is not
 * uroce.  Three processes: the target (uroce, the public verbs API only), a
 * legitimate uroce peer, and the attacker (the supervising process itself,
 * which never opens a device: it speaks raw RoCEv2 over UDP, wire.h).
 *
 * The attacker drives the target over a socketpair with the commands below
 * (create a QP connected to the attacker's address, register memory, dump
 * it, deregister it, ...), attacks, and checks the replies on the wire, the
 * target's memory and QP states, and, after the target closed its device,
 * its counters (UROCE_DEBUG=1 prints them to the target's stderr, which
 * goes to a file).  Every case ends with the legitimate peer passing
 * traffic to the target.
 */
#ifndef UROCE_HOSTILE_H
#define UROCE_HOSTILE_H

#include <stdint.h>

enum {
	GUARD_LEN = 4096,	/* bytes either side of every MR */
	GUARD_BYTE = 0xA5,
	MAX_QPS = 64,
	MAX_MRS = 16,
	MAX_MWS = 8,
	MAX_KEYS = 256,
	ATK_QPN = 0x00A1A1,	/* the attacker's made-up QP number */
	PATH_MTU = 1024,	/* of the QPs connected to the attacker */
};

#define ATK_IP "127.0.0.3"	/* the address QPs are connected to */
#define SPOOF_IP "127.0.0.2"	/* another address of the same host */
#define TARGET_IP "127.0.0.1"	/* the target's GID 0 */

enum cmd_op {
	C_MR = 1,	/* a: length, b: access, c: 1 = in the second PD, x: seed */
	C_MR_DUMP,	/* a: MR; the reply is followed by the guarded area */
	C_MR_FILL,	/* a: MR, x: seed */
	C_MR_DEREG,	/* a: MR */
	C_MR_REREG,	/* a: MR, b: IBV_REREG_MR_* flags, c: access */
	C_QP,		/* a: QP access, b: max_dest_rd_atomic, c: 1 = second
			 * PD, d: rq_psn */
	C_QP_STATE,	/* a: QP */
	C_QP_REUSE,	/* a: QP to destroy; its QPN is given to a new QP
			 * connected as C_QP's b and d say, x: access */
	C_MW,		/* a: MR, b: QP, c: type, d: offset; x: length */
	C_MW_LOCAL_INV,	/* a: window, b: QP */
	C_MW_FREE,	/* a: window */
	C_RECV_POST,	/* a: QP */
	C_RECV_WAIT,	/* a: QP */
	C_USAGE,	/* resident memory and CPU time */
	C_KEYS,		/* a: how many MRs to register (and deregister) */
	C_CM_LISTEN,	/* a: backlog */
	C_CM_DRAIN,	/* refuse every connection request received */
	C_DONE,		/* legitimate traffic, then exit */
};

struct cmd {
	uint32_t op, a, b, c, d;
	uint64_t x;
};

struct reply {
	int32_t err;		/* errno value of the failed verb, or 0 */
	uint32_t id, rkey, qpn, state, n;
	uint64_t va, x;
	uint32_t keys[MAX_KEYS];
};

#endif
