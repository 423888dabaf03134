/*
 * The same-host path: when both ends of an RC QP are uroce processes of one
 * user on one host, the requester moves RDMA WRITE and READ data itself,
 * straight between the two processes' registered memory with cross-memory
 * attach (process_vm_writev/readv), and completes the WQE: no packet, no
 * thread of the target runs.
 *
 * Each process publishes what a NIC would check a request against (its
 * QPs' state, peer and rights, its MRs' keys, PDs, rights and bounds) in a
 * POSIX shared-memory segment that only its user may open; a requester maps
 * the segment of its QP's peer and checks there.  Every request the segment
 * does not prove valid goes the ordinary way, on the wire, so that errors,
 * windows and anything unusual behave exactly as between hosts.
 */
#ifndef UROCE_SAMEHOST_H
#define UROCE_SAMEHOST_H

#include "uroce.h"

/* This process's segment: created with the NIC unless the path is off
 * (UROCE_SHM=0, a capture or fault injection wants every packet on the
 * wire).  Failure is not fatal: the NIC then only uses the wire. */
void uroce_sh_open(struct uroce_nic *nic);
void uroce_sh_close(struct uroce_nic *nic);
/* The process exits without closing: remove the segment's name. */
void uroce_sh_exit(struct uroce_nic *nic);

/* Publish an MR (its key becomes usable by same-host peers), withdraw it
 * (once this returns no peer access to it lands). */
void uroce_sh_mr_publish(struct uroce_nic *nic, const struct uroce_mr *mr);
void uroce_sh_mr_withdraw(struct uroce_nic *nic, uint32_t index);

/* Publish what a peer needs of a QP now; when the QP stops accepting
 * requests (a state other than RTR/RTS/SQD, fewer rights, destroyed), no
 * peer access through it lands once this returns. */
void uroce_sh_qp_update(struct uroce_qp *qp);
void uroce_sh_qp_withdraw(struct uroce_qp *qp);

/* Requester: find the same-host peer of a QP entering RTR (or forget it). */
void uroce_sh_attach(struct uroce_qp *qp);

/* Send n packets of qp (ICRC done) through its ring in the same-host
 * peer's segment; how many went, or -1 when the QP has no ring. */
int uroce_sh_xmit(struct uroce_qp *qp, struct uroce_txpkt *pkts, unsigned n);
/* Whether qp's packets go by a ring, which loses none: a peer slow to
 * answer is descheduled, not missing packets, and is waited for. */
bool uroce_sh_ringed(const struct uroce_qp *qp);
/* Receive what the rings of this process's segment hold (rx_lock held);
 * the buffers stay valid until uroce_sh_recv_done. */
int uroce_sh_recv(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		  unsigned max);
void uroce_sh_recv_done(struct uroce_nic *nic);
/* Whether this receive call should look at the sockets too (rx_lock
 * held; ring_data: the rings just gave packets).  While rings carry
 * traffic, a system call on every empty poll would cost each same-host
 * packet the time of one: the sockets are then looked at every few
 * calls. */
bool uroce_sh_sockets_due(struct uroce_nic *nic, bool ring_data);
/* Whether a same-host peer has a ring in this process's segment, so that
 * what it sends takes no system call to look for. */
bool uroce_sh_has_rings(struct uroce_nic *nic);
/* An application thread polled (ns) or stopped polling (0): peers then
 * need not (or must) ring our engine's doorbell. */
void uroce_sh_note_poll(struct uroce_nic *nic, uint64_t ns);

/* Capturing or injecting faults (on) or no longer (off): while on, this
 * process and its peers send each other every packet on the wire. */
void uroce_sh_set_wire_only(struct uroce_nic *nic, bool on);

#endif
