/*
 * The connection manager inside the NIC: gsi.c carries MADs on QP1 and
 * routes each to the process that owns its connection or service; cm.c and
 * cm_receive.c run the IB CM state machine of every id (see uroce_cm.h for
 * the API that librdmacm uses).
 */
#ifndef UROCE_CM_H
#define UROCE_CM_H

#include "cm/mad.h"
#include "cm/uroce_cm.h"
#include "uroce.h"

/* Local comm IDs (and SIDR request IDs) carry the owning process's slot in
 * their top bits, as QPNs do: a MAD that names one reaches that process. */
enum {
	CM_ID_SLOT_SHIFT = 32 - (24 - UROCE_QPN_SLOT_SHIFT),
	CM_EPHEMERAL_LO = 32768,	/* net.ipv4.ip_local_port_range */
	CM_EPHEMERAL_HI = 60999,
};

/* One MAD received on QP1, after gsi.c checked its framing. */
struct cm_mad_rx {
	const uint8_t *mad;		/* MAD_LEN bytes */
	const struct uroce_rxpkt *rx;	/* its addresses */
};

/* ---- gsi.c ---- */
/* A datagram for QP1 (receive path, rx_lock held). */
void uroce_gsi_rx(struct uroce_nic *nic, struct uroce_rxpkt *rx);
/* Send one MAD from self to peer (port numbers ignored), over RoCE v1 or
 * v2; 0 or -errno. */
int uroce_gsi_send(struct uroce_nic *nic, bool roce1,
		   const union uroce_sockaddr *self,
		   const union uroce_sockaddr *peer, const uint8_t *mad);
void uroce_gsi_close(struct uroce_nic *nic);

/* ---- cm.c, cm_receive.c ---- */
int uroce_cm_init(struct uroce_nic *nic);
void uroce_cm_fini(struct uroce_nic *nic);
/* Is the service ID bound in this process? */
bool uroce_cm_sid_local(struct uroce_nic *nic, uint64_t sid);
/* A CM MAD for a connection or service of this process, or one that no
 * process owns (answered statelessly where the protocol says so). */
void uroce_cm_rx(struct uroce_nic *nic, const struct cm_mad_rx *m);
/* The process exits: tell the peers of its connections (DREQ, REJ). */
void uroce_cm_exit(struct uroce_nic *nic);
/* Retransmissions and TimeWait; returns the next deadline (ns). */
uint64_t uroce_cm_timers(struct uroce_nic *nic, uint64_t now);

/* For tests: how many ids the CM holds, and an id's local comm ID. */
unsigned uroce_cm_num_ids(struct uroce_nic *nic);
uint32_t uroce_cm_local_id(struct uroce_cm_id *id);

/* ---- replies built from a received MAD alone (cm_reply.c) ---- */
void uroce_cm_reply_rej(struct uroce_nic *nic, const struct cm_mad_rx *m,
			uint16_t reason);
void uroce_cm_reply_sidr(struct uroce_nic *nic, const struct cm_mad_rx *m,
			 uint8_t status);
void uroce_cm_reply_drep(struct uroce_nic *nic, const struct cm_mad_rx *m);
void uroce_cm_reply_unsupported(struct uroce_nic *nic,
				const struct cm_mad_rx *m);
/* The addresses to answer a received MAD from and to. */
void uroce_cm_reply_addrs(struct uroce_nic *nic, const struct cm_mad_rx *m,
			  union uroce_sockaddr *self,
			  union uroce_sockaddr *peer);
/* A MAD header for a CM Send. */
void uroce_cm_mad_init(uint8_t *mad, uint16_t attr, uint64_t tid);

#endif
