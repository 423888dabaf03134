/*
 * What an id sends: the MADs of the connection messages the consumer asks
 * for (REQ, REP, RTU, REJ, DREQ/DREP, SIDR) and the ones the state machine
 * sends by itself (MRA, REJ), with the state each one moves the id to.
 * Called with the CM's lock held unless the function takes it itself.
 */
#include <errno.h>
#include <string.h>

#include "cm/cm_id.h"
#include "verbs/ops.h"

/* ---- sending ------------------------------------------------------------- */

/* How long the peer said it takes to answer (its CM response timeout). */
static uint64_t response_timeout_ns(const struct uroce_cm_id *id)
{
	return cm_ms_ns(uroce_cm_time_ms(id->cm_response_timeout));
}

int cm_id_send(struct uroce_cm_id *id)
{
	return uroce_gsi_send(id->cm->nic, id->roce1, &id->self, &id->peer,
			      id->mad);
}

int cm_id_send_timed(struct uroce_cm_id *id, uint64_t timeout_ns,
		     unsigned retries)
{
	id->timeout_ns = timeout_ns;
	id->retries_left = retries;
	cm_set_timer(id, uroce_now_ns() + timeout_ns);
	return cm_id_send(id);
}

uint8_t *cm_id_mad(struct uroce_cm_id *id, uint16_t attr)
{
	uroce_cm_mad_init(id->mad, attr, id->tid);
	return id->mad + MAD_HDR_LEN;
}

/* REJ from an id: our comm ID and the peer's, the TID of the exchange. */
void cm_id_send_rej(struct uroce_cm_id *id, unsigned msg, uint16_t reason,
		    const void *ari, unsigned ari_len, const void *data,
		    unsigned len)
{
	uint8_t *pl = cm_id_mad(id, CM_ATTR_REJ);

	mad_put_be32(pl, MSG_LOCAL_COMM_ID, id->local_id);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, id->remote_id);
	mad_set_bits(pl, REJ_BYTE8, 0xC0, msg);
	mad_set_bits(pl, REJ_BYTE9, 0xFE, ari_len);
	mad_put_be16(pl, REJ_REASON, reason);
	if (ari_len)
		memcpy(pl + REJ_ARI, ari, ari_len);
	if (len)
		memcpy(pl + REJ_PRIVATE_DATA, data, len);
	if (cm_id_send(id))
		STAT_INC(id->cm->nic, tx_errors);
}

void cm_id_send_mra(struct uroce_cm_id *id, unsigned msg)
{
	uint8_t mad[MAD_LEN], *pl = mad + MAD_HDR_LEN;

	/* not id->mad: that is the REP/RTU a duplicate may still need */
	uroce_cm_mad_init(mad, CM_ATTR_MRA, id->tid);
	mad_put_be32(pl, MSG_LOCAL_COMM_ID, id->local_id);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, id->remote_id);
	mad_set_bits(pl, MRA_BYTE8, 0xC0, msg);
	mad_set_bits(pl, MRA_BYTE9, 0xF8, MRA_SERVICE_TIMEOUT);
	if (uroce_gsi_send(id->cm->nic, id->roce1, &id->self, &id->peer, mad))
		STAT_INC(id->cm->nic, tx_errors);
}

void cm_id_send_sidr_rej(struct uroce_cm_id *id)
{
	uint8_t *pl = cm_id_mad(id, CM_ATTR_SIDR_REP);

	mad_put_be32(pl, SIDR_REP_REQUEST_ID, id->remote_id);
	pl[SIDR_REP_STATUS] = 2;	/* rejected */
	mad_put_be64(pl, SIDR_REP_SERVICE_ID, id->service_id);
	if (cm_id_send(id))
		STAT_INC(id->cm->nic, tx_errors);
}

int cm_id_send_dreq(struct uroce_cm_id *id, const void *data, unsigned len)
{
	uint8_t *pl = cm_id_mad(id, CM_ATTR_DREQ);

	mad_put_be32(pl, MSG_LOCAL_COMM_ID, id->local_id);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, id->remote_id);
	mad_put_be24(pl, DREQ_REMOTE_QPN, id->remote_qpn);
	if (len)
		memcpy(pl + DREQ_PRIVATE_DATA, data, len);
	id->state = CM_DREQ_SENT;
	return cm_id_send_timed(id, response_timeout_ns(id), id->max_retries);
}

int cm_id_send_drep(struct uroce_cm_id *id, const void *data, unsigned len)
{
	uint8_t *pl = cm_id_mad(id, CM_ATTR_DREP);

	mad_put_be32(pl, MSG_LOCAL_COMM_ID, id->local_id);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, id->remote_id);
	if (len)
		memcpy(pl + DREP_PRIVATE_DATA, data, len);
	/* kept in id->mad: a repeated DREQ in TimeWait gets it again */
	cm_enter_timewait(id);
	return cm_id_send(id);
}

/* ---- the consumer's messages -------------------------------------------- */

static void path_to_addrs(struct uroce_cm_id *id,
			  const struct uroce_cm_path *path)
{
	uroce_gid_to_sockaddr(&path->sgid, 0, &id->self);
	uroce_gid_to_sockaddr(&path->dgid, 0, &id->peer);
	id->roce1 = path->sgid_index < id->cm->nic->num_gids &&
		    id->cm->nic->gids[path->sgid_index].type ==
			    IBV_GID_TYPE_ROCE_V1;
}

static void put_path(uint8_t *pl, unsigned off,
		     const struct uroce_cm_path *path, uint8_t ack_timeout)
{
	/* RoCE has no LIDs: both permissive, as the kernel sends them */
	mad_put_be16(pl, off + REQ_PRIMARY_LOCAL_LID - REQ_PRIMARY_LOCAL_LID,
		     0xFFFF);
	mad_put_be16(pl, off + REQ_PRIMARY_REMOTE_LID - REQ_PRIMARY_LOCAL_LID,
		     0xFFFF);
	memcpy(pl + off + REQ_PRIMARY_LOCAL_GID - REQ_PRIMARY_LOCAL_LID,
	       path->sgid.raw, 16);
	memcpy(pl + off + REQ_PRIMARY_REMOTE_GID - REQ_PRIMARY_LOCAL_LID,
	       path->dgid.raw, 16);
	mad_put_be32(pl, off + REQ_FLOW_LABEL - REQ_PRIMARY_LOCAL_LID,
		     (path->flow_label & 0xFFFFF) << 12);
	pl[off + REQ_TRAFFIC_CLASS - REQ_PRIMARY_LOCAL_LID] =
		path->traffic_class;
	pl[off + REQ_HOP_LIMIT - REQ_PRIMARY_LOCAL_LID] = path->hop_limit;
	mad_set_bits(pl, off + REQ_BYTE94 - REQ_PRIMARY_LOCAL_LID, 0xF0,
		     path->sl);
	mad_set_bits(pl, off + REQ_BYTE95 - REQ_PRIMARY_LOCAL_LID, 0xF8,
		     ack_timeout);
}

UROCE_EXPORT int uroce_cm_send_req(struct uroce_cm_id *id,
				   const struct uroce_cm_req_param *p)
{
	struct uroce_cm *cm = id->cm;
	uint8_t *pl;
	unsigned timeout_ms;
	int err;

	if (p->private_data_len > REQ_PRIVATE_DATA_LEN ||
	    (p->transport != UROCE_CM_TRANSPORT_RC &&
	     p->transport != UROCE_CM_TRANSPORT_UC &&
	     p->transport != UROCE_CM_TRANSPORT_XRC) ||
	    p->max_cm_retries > 15 ||
	    p->remote_cm_response_timeout > 31 ||
	    p->local_cm_response_timeout > 31)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	if (id->state != CM_IDLE) {
		pthread_mutex_unlock(&cm->lock);
		return -EINVAL;
	}
	/* Linux's TIDs: 2 in the high word, the comm ID's bytes swapped */
	id->tid = 2ull << 32 | __builtin_bswap32(id->local_id);
	id->local_qpn = p->qp_num;
	id->xrc = p->transport == UROCE_CM_TRANSPORT_XRC;
	id->service_id = p->service_id;
	id->max_retries = p->max_cm_retries;
	id->cm_response_timeout = p->remote_cm_response_timeout;
	id->timewait_ms = uroce_cm_time_ms(p->local_ack_timeout);
	path_to_addrs(id, &p->path);

	pl = cm_id_mad(id, CM_ATTR_REQ);
	mad_put_be32(pl, REQ_LOCAL_COMM_ID, id->local_id);
	mad_put_be64(pl, REQ_SERVICE_ID, p->service_id);
	mad_put_be64(pl, REQ_LOCAL_CA_GUID, cm->guid);
	mad_put_be24(pl, REQ_LOCAL_QPN, p->qp_num);
	pl[REQ_INIT_DEPTH] = p->initiator_depth;
	mad_set_bits(pl, REQ_BYTE43, 0xF8, p->remote_cm_response_timeout);
	mad_set_bits(pl, REQ_BYTE43, 0x06, p->transport);
	mad_set_bits(pl, REQ_BYTE43, 0x01, p->flow_control);
	mad_put_be24(pl, REQ_STARTING_PSN, p->starting_psn);
	mad_set_bits(pl, REQ_BYTE47, 0xF8, p->local_cm_response_timeout);
	mad_put_be16(pl, REQ_PKEY, 0xFFFF);
	mad_set_bits(pl, REQ_BYTE50, 0xF0, p->path.mtu);
	mad_set_bits(pl, REQ_BYTE51, 0xF0, p->max_cm_retries);
	if (id->xrc) {
		/* an XRC initiator receives nothing: the kernel leaves the
		 * responder's fields out */
		mad_set_bits(pl, REQ_BYTE51, 0x07, CM_EXT_TRANSPORT_XRC);
	} else {
		pl[REQ_RESP_RESOURCES] = p->responder_resources;
		mad_set_bits(pl, REQ_BYTE47, 0x07, p->retry_count);
		mad_set_bits(pl, REQ_BYTE50, 0x07, p->rnr_retry_count);
		mad_set_bits(pl, REQ_BYTE51, 0x08, p->srq);
	}
	put_path(pl, REQ_PRIMARY_LOCAL_LID, &p->path, p->local_ack_timeout);
	if (p->private_data_len)
		memcpy(pl + REQ_PRIVATE_DATA, p->private_data,
		       p->private_data_len);

	/* per try: the packet's round trip plus the peer's response time */
	timeout_ms = 2 * uroce_cm_time_ms(p->path.packet_life_time) +
		     uroce_cm_time_ms(p->remote_cm_response_timeout);
	id->state = CM_REQ_SENT;
	err = cm_id_send_timed(id, cm_ms_ns(timeout_ms), p->max_cm_retries);
	if (err)
		cm_enter_idle(id);
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_send_rep(struct uroce_cm_id *id,
				   const struct uroce_cm_rep_param *p)
{
	struct uroce_cm *cm = id->cm;
	uint8_t *pl;
	int err;

	if (p->private_data_len > REP_PRIVATE_DATA_LEN)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	if (id->state != CM_REQ_RCVD) {
		pthread_mutex_unlock(&cm->lock);
		return -EINVAL;
	}
	if (p->xrc_target != id->xrc) {
		pthread_mutex_unlock(&cm->lock);
		return -EINVAL;
	}
	id->local_qpn = p->qp_num;
	pl = cm_id_mad(id, CM_ATTR_REP);
	mad_put_be32(pl, REP_LOCAL_COMM_ID, id->local_id);
	mad_put_be32(pl, REP_REMOTE_COMM_ID, id->remote_id);
	mad_put_be24(pl, REP_STARTING_PSN, p->starting_psn);
	pl[REP_RESP_RESOURCES] = p->responder_resources;
	mad_set_bits(pl, REP_BYTE26, 0xF8, p->target_ack_delay);
	mad_set_bits(pl, REP_BYTE27, 0xE0, p->rnr_retry_count);
	if (id->xrc) {
		/* an XRC target names itself in the EECN, always on an SRQ */
		mad_put_be24(pl, REP_LOCAL_EECN, p->qp_num);
		mad_set_bits(pl, REP_BYTE27, 0x10, 1);
	} else {
		mad_put_be24(pl, REP_LOCAL_QPN, p->qp_num);
		pl[REP_INIT_DEPTH] = p->initiator_depth;
		mad_set_bits(pl, REP_BYTE26, 0x01, p->flow_control);
		mad_set_bits(pl, REP_BYTE27, 0x10, p->srq);
	}
	mad_put_be64(pl, REP_LOCAL_CA_GUID, cm->guid);
	if (p->private_data_len)
		memcpy(pl + REP_PRIVATE_DATA, p->private_data,
		       p->private_data_len);
	id->state = CM_REP_SENT;
	cm_id_unwait(id);
	/* the REQ said how long to wait for the RTU, and how often */
	err = cm_id_send_timed(id, response_timeout_ns(id), id->max_retries);
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_send_rtu(struct uroce_cm_id *id,
				   const void *data, uint8_t len)
{
	struct uroce_cm *cm = id->cm;
	uint8_t *pl;
	int err;

	if (len > RTU_PRIVATE_DATA_LEN)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	if (id->state != CM_REP_RCVD) {
		pthread_mutex_unlock(&cm->lock);
		return -EINVAL;
	}
	/* kept in id->mad: a duplicate REP gets it again */
	pl = cm_id_mad(id, CM_ATTR_RTU);
	mad_put_be32(pl, MSG_LOCAL_COMM_ID, id->local_id);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, id->remote_id);
	if (len)
		memcpy(pl + RTU_PRIVATE_DATA, data, len);
	id->state = CM_ESTABLISHED;
	id->deadline = 0;
	err = cm_id_send(id);
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_send_rej(struct uroce_cm_id *id, int reason,
				   const void *data, uint8_t len)
{
	struct uroce_cm *cm = id->cm;
	int err = 0;

	if (len > REJ_PRIVATE_DATA_LEN)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	switch (id->state) {
	case CM_REQ_RCVD:
		cm_id_send_rej(id, CM_MSG_REQ, reason, NULL, 0, data, len);
		cm_enter_idle(id);
		break;
	case CM_REP_RCVD:
		cm_id_send_rej(id, CM_MSG_REP, reason, NULL, 0, data, len);
		cm_enter_idle(id);
		break;
	default:
		err = -EINVAL;
	}
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_send_dreq(struct uroce_cm_id *id, const void *data,
				    uint8_t len)
{
	struct uroce_cm *cm = id->cm;
	int err;

	if (len > DREQ_PRIVATE_DATA_LEN)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	if (id->state == CM_ESTABLISHED || id->state == CM_REP_SENT)
		err = cm_id_send_dreq(id, data, len);
	else
		err = -EINVAL;
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_send_drep(struct uroce_cm_id *id, const void *data,
				    uint8_t len)
{
	struct uroce_cm *cm = id->cm;
	int err;

	if (len > DREP_PRIVATE_DATA_LEN)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	if (id->state == CM_DREQ_RCVD)
		err = cm_id_send_drep(id, data, len);
	else
		err = -EINVAL;
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_establish(struct uroce_cm_id *id)
{
	struct uroce_cm *cm = id->cm;
	struct pending_list pl = { 0 };
	int err = 0;

	pthread_mutex_lock(&cm->lock);
	if (id->state == CM_REP_SENT) {
		id->state = CM_ESTABLISHED;
		id->deadline = 0;
		cm_queue_event(&pl, id, UROCE_CM_RTU_RECEIVED, NULL, 0);
	} else if (id->state != CM_ESTABLISHED) {
		err = -EINVAL;
	}
	cm_deliver_unlock(cm, &pl);
	return err;
}

UROCE_EXPORT int uroce_cm_send_sidr_req(struct uroce_cm_id *id,
					const struct uroce_cm_sidr_req_param *p)
{
	struct uroce_cm *cm = id->cm;
	uint8_t *pl;
	int err;

	if (p->private_data_len > SIDR_REQ_PRIVATE_DATA_LEN ||
	    p->max_retries > 15)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	if (id->state != CM_IDLE) {
		pthread_mutex_unlock(&cm->lock);
		return -EINVAL;
	}
	id->tid = 2ull << 32 | __builtin_bswap32(id->local_id);
	id->service_id = p->service_id;
	path_to_addrs(id, &p->path);
	pl = cm_id_mad(id, CM_ATTR_SIDR_REQ);
	mad_put_be32(pl, SIDR_REQ_REQUEST_ID, id->local_id);
	mad_put_be16(pl, SIDR_REQ_PKEY, 0xFFFF);
	mad_put_be64(pl, SIDR_REQ_SERVICE_ID, p->service_id);
	if (p->private_data_len)
		memcpy(pl + SIDR_REQ_PRIVATE_DATA, p->private_data,
		       p->private_data_len);
	id->state = CM_SIDR_REQ_SENT;
	err = cm_id_send_timed(id, cm_ms_ns(p->timeout_ms), p->max_retries);
	if (err)
		cm_enter_idle(id);
	pthread_mutex_unlock(&cm->lock);
	return err;
}

UROCE_EXPORT int uroce_cm_send_sidr_rep(struct uroce_cm_id *id,
					const struct uroce_cm_sidr_rep_param *p)
{
	struct uroce_cm *cm = id->cm;
	uint8_t *pl;
	int err;

	if (p->private_data_len > SIDR_REP_PRIVATE_DATA_LEN)
		return -EINVAL;
	pthread_mutex_lock(&cm->lock);
	if (id->state != CM_SIDR_REQ_RCVD) {
		pthread_mutex_unlock(&cm->lock);
		return -EINVAL;
	}
	pl = cm_id_mad(id, CM_ATTR_SIDR_REP);
	mad_put_be32(pl, SIDR_REP_REQUEST_ID, id->remote_id);
	pl[SIDR_REP_STATUS] = p->status;
	mad_put_be24(pl, SIDR_REP_QPN, p->status ? 0 : p->qp_num);
	mad_put_be64(pl, SIDR_REP_SERVICE_ID, id->service_id);
	mad_put_be32(pl, SIDR_REP_QKEY, p->status ? 0 : p->qkey);
	if (p->private_data_len)
		memcpy(pl + SIDR_REP_PRIVATE_DATA, p->private_data,
		       p->private_data_len);
	err = cm_id_send(id);
	cm_enter_idle(id);
	pthread_mutex_unlock(&cm->lock);
	return err;
}
