/*
 * Replies the CM builds from a received MAD alone, for messages that no id
 * owns: what the kernel's CM sends in those cases (the field values are
 * those of the Linux captures in the research notes).
 */
#include <string.h>

#include "cm/cm.h"

void uroce_cm_mad_init(uint8_t *mad, uint16_t attr, uint64_t tid)
{
	memset(mad, 0, MAD_LEN);
	mad[MADH_BASE_VERSION] = MAD_BASE_VERSION;
	mad[MADH_CLASS] = MAD_CLASS_CM;
	mad[MADH_CLASS_VERSION] = MAD_CLASS_VERSION_CM;
	mad[MADH_METHOD] = MAD_METHOD_SEND;
	mad_put_be64(mad, MADH_TID, tid);
	mad_put_be16(mad, MADH_ATTR_ID, attr);
}

void uroce_cm_reply_addrs(struct uroce_nic *nic, const struct cm_mad_rx *m,
			  union uroce_sockaddr *self,
			  union uroce_sockaddr *peer)
{
	(void)nic;
	*self = m->rx->dst;
	*peer = m->rx->src;
}

static void reply(struct uroce_nic *nic, const struct cm_mad_rx *m,
		  const uint8_t *mad)
{
	union uroce_sockaddr self, peer;

	uroce_cm_reply_addrs(nic, m, &self, &peer);
	if (uroce_gsi_send(nic, m->rx->roce1, &self, &peer, mad))
		STAT_INC(nic, tx_errors);
}

/* A REJ of a REQ: Local Comm ID 0, Remote = the REQ's, the REQ's TID. */
void uroce_cm_reply_rej(struct uroce_nic *nic, const struct cm_mad_rx *m,
			uint16_t reason)
{
	const uint8_t *req = m->mad + MAD_HDR_LEN;
	uint8_t mad[MAD_LEN], *pl = mad + MAD_HDR_LEN;

	uroce_cm_mad_init(mad, CM_ATTR_REJ, mad_be64(m->mad, MADH_TID));
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, mad_be32(req, REQ_LOCAL_COMM_ID));
	mad_set_bits(pl, REJ_BYTE8, 0xC0, CM_MSG_REQ);
	mad_put_be16(pl, REJ_REASON, reason);
	STAT_INC(nic, mad_rejected);
	uroce_log("CM: REJ (reason %u) of a REQ for service ID 0x%016llx",
		  reason, (unsigned long long)mad_be64(req, REQ_SERVICE_ID));
	reply(nic, m, mad);
}

void uroce_cm_reply_sidr(struct uroce_nic *nic, const struct cm_mad_rx *m,
			 uint8_t status)
{
	const uint8_t *req = m->mad + MAD_HDR_LEN;
	uint8_t mad[MAD_LEN], *pl = mad + MAD_HDR_LEN;

	uroce_cm_mad_init(mad, CM_ATTR_SIDR_REP, mad_be64(m->mad, MADH_TID));
	mad_put_be32(pl, SIDR_REP_REQUEST_ID,
		     mad_be32(req, SIDR_REQ_REQUEST_ID));
	pl[SIDR_REP_STATUS] = status;
	mad_put_be64(pl, SIDR_REP_SERVICE_ID,
		     mad_be64(req, SIDR_REQ_SERVICE_ID));
	STAT_INC(nic, mad_rejected);
	uroce_log("CM: SIDR_REP (status %u) for service ID 0x%016llx", status,
		  (unsigned long long)mad_be64(req, SIDR_REQ_SERVICE_ID));
	reply(nic, m, mad);
}

/* A DREQ nobody knows still gets its DREP, the IDs swapped, so that the
 * peer's rdma_disconnect completes at once. */
void uroce_cm_reply_drep(struct uroce_nic *nic, const struct cm_mad_rx *m)
{
	const uint8_t *dreq = m->mad + MAD_HDR_LEN;
	uint8_t mad[MAD_LEN], *pl = mad + MAD_HDR_LEN;

	uroce_cm_mad_init(mad, CM_ATTR_DREP, mad_be64(m->mad, MADH_TID));
	mad_put_be32(pl, MSG_LOCAL_COMM_ID,
		     mad_be32(dreq, MSG_REMOTE_COMM_ID));
	mad_put_be32(pl, MSG_REMOTE_COMM_ID,
		     mad_be32(dreq, MSG_LOCAL_COMM_ID));
	STAT_INC(nic, mad_unknown_id);
	reply(nic, m, mad);
}

void uroce_cm_reply_unsupported(struct uroce_nic *nic,
				const struct cm_mad_rx *m)
{
	uint8_t mad[MAD_LEN];

	memcpy(mad, m->mad, MAD_LEN);
	mad[MADH_METHOD] = MAD_METHOD_GET_RESP;
	mad_put_be16(mad, MADH_STATUS, MAD_STATUS_UNSUPPORTED);
	reply(nic, m, mad);
}
