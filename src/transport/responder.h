/* Between responder.c and read_atomic.c, the two halves of the responder
 * (rx_lock held throughout). */
#ifndef UROCE_TRANSPORT_RESPONDER_H
#define UROCE_TRANSPORT_RESPONDER_H

#include "transport/hdr.h"
#include "transport/transport.h"

/* responder.c */
/* Responses are in the requester's transport: RC's, or XRC's numbers. */
uint8_t resp_service(const struct uroce_qp *qp);
/* The PD requests are checked against (an XRC target QP's is its SRQ's). */
struct ibv_pd *resp_pd(struct uroce_qp *qp);
/* Class B/C errors (IBTA 9.9.3): NAK the request, then the QP is in error. */
void resp_fatal(struct uroce_qp *qp, struct uroce_pkt *pkt,
		enum aeth_nak_code code);
/* Acknowledges a duplicate SEND or WRITE at once, in an ACK of its own. */
void resp_ack_duplicate(struct uroce_qp *qp);
/* rkey check (C9-88 ff.): the target address of [va, va + len), or NULL. */
uint8_t *resp_check_rkey(struct uroce_qp *qp, uint32_t rkey,
			 uint64_t va, uint32_t len, int access);

/* read_atomic.c: the request handlers */
void resp_read(struct uroce_qp *qp, struct uroce_pkt *pkt);
void resp_atomic(struct uroce_qp *qp, struct uroce_pkt *pkt);
void resp_atomic_write(struct uroce_qp *qp, struct uroce_pkt *pkt);
void resp_flush(struct uroce_qp *qp, struct uroce_pkt *pkt);
/* A request we already executed (its response or ACK was lost). */
void resp_duplicate(struct uroce_qp *qp, struct uroce_pkt *pkt);

#endif
