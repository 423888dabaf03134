/*
 * What fuzz_receive and fuzz_mad share: a real device opened once in the
 * fuzzing process and made deterministic.  Its engine thread is stopped, so
 * that only the harness receives and runs timers; and nothing it sends
 * leaves the process: the backend's transmit and forwarding are replaced by
 * a sink that checks what would have been sent.  It runs on a UDP port of
 * its own, so that no other uroce process on the host shares its sockets or
 * its service IDs.
 */
#ifndef UROCE_FUZZ_DEVICE_H
#define UROCE_FUZZ_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "input.h"
#include "uroce.h"

extern struct ibv_context *fuzz_ctx;
extern struct uroce_nic *fuzz_nic;
extern uint16_t fuzz_port;	/* the device's RoCEv2 port */

/* Opens the device as described above; every datagram it would send is
 * passed to check_tx (may be NULL) after its bytes have been read. */
void fuzz_open_device(void (*check_tx)(const struct uroce_txpkt *pkt));

/* A datagram from peer (127.0.0.1, or ::1 with ipv6; the source address
 * ends in 2 instead of 1 with stranger) to the device, with a valid ICRC
 * when seal. */
void fuzz_rx_init(struct uroce_rxpkt *rx, uint8_t *data, uint32_t len,
		  bool ipv6, bool stranger, bool seal);
/* Hands datagrams to the receive path, as the engine does. */
void fuzz_deliver(struct uroce_rxpkt *pkts, int n);

#endif
