/*
 * The responder's state in a QP (responder.c, read_atomic.c): the request
 * being executed and what it owes the requester.  resp is guarded by
 * rx_lock (the receive ring it takes WQEs from by its own lock); ack is
 * lock-free.
 */
#ifndef UROCE_TRANSPORT_RESP_STATE_H
#define UROCE_TRANSPORT_RESP_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "verbs/objects.h"

/* The ACK the responder owes, lock-free: any thread may claim it
 * whole, once (uroce_resp_take_ack), so that anything the requester
 * sends carries it ahead without rx_lock.  owed: UROCE_ACK_OWED |
 * PSN << 24 | MSN, or 0.  An ACK an application thread owes after
 * receiving in ibv_poll_cq waits for its answer, to leave in the same
 * system call, once the application has answered many times in a row
 * (answers); app_rx_ns: the last such receipt not yet answered (see
 * transport/receive.c). */
struct uroce_ack_state {
	_Atomic uint64_t owed;
	/* a thread other than the requester has claimed the ACK and
	 * not sent it yet: the requester waits for it */
	atomic_bool sending;
	atomic_uint answers;
	atomic_uint_fast64_t app_rx_ns;
};

struct uroce_resp_state {
	uint32_t psn;		/* expected PSN */
	uint32_t msn;
	bool nak_sent;		/* NAKed (a gap, RNR): silent until the
				 * expected PSN comes */
	bool drop_msg;		/* UC: ignore packets until a FIRST/ONLY */
	bool cur_held;		/* cur is taken but its message was lost
				 * (UC): reuse it for the next one */
	bool ack_pending;	/* the request just handled asks one */
	bool ack_listed;	/* in nic->acks_owed */
	/* since when the owed ACK waits for the application's answer
	 * (0: it does not; see transport/receive.c) */
	uint64_t ack_waits_ns;
	/* multi-packet SEND in progress */
	bool in_send;
	struct uroce_recv_wqe cur;
	struct uroce_sge cur_sge[UROCE_MAX_SGE];
	uint32_t cur_offset;
	/* multi-packet WRITE in progress */
	bool in_write;
	uint8_t *write_ptr;
	uint32_t write_left;
	uint32_t write_total;
	struct uroce_resp_res *res;	/* max_dest_rd_atomic entries */
	uint32_t res_count, res_next;
};

#endif
