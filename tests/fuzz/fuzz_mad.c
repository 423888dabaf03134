/*
 * The connection manager (cm/gsi.c, cm.c, cm_reply.c) against arbitrary
 * MADs on QP1, fed into the receive path as datagrams from a peer, while
 * the CM holds a listener and connections in every state: a REQ sent, a
 * REQ received, a REP sent, established, a DREQ sent, a SIDR_REQ sent.
 *
 * The input is a list of commands:
 *   0, 1  MAD: flags, the id it is aimed at, [BTH and DETH], the MAD,
 *         [length, the bytes past the MAD].  The flags make the harness fix what a fuzzer cannot guess:
 *         the ICRC, the QP1 framing, the MAD header (keeping the
 *         attribute), the receiver's comm ID (that id's), the sender's
 *         comm ID and CA GUID (the peer's of that id), the service ID (the
 *         listener's); and choose IPv6 and a length of the input's.
 *   2     the consumer acts on an id: REP, RTU, REJ, DREQ, DREP, establish,
 *         SIDR_REP, REQ, SIDR_REQ or destroy
 *   3     the CM's timers run, some time later
 * After each input every id is destroyed and the timers run until the CM
 * is back to its listener alone: no id may be left behind, nor freed twice
 * (ASan).
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "cm/cm.h"
#include "device.h"
#include "net/icrc.h"
#include "transport/hdr.h"
#include "transport/transport.h"

enum {
	PKT_LEN = BTH_LEN + DETH_LEN + MAD_LEN + ICRC_LEN,
	MAX_IDS = 32,
	SID = 0x0000000001060001ull & 0xFFFFFFFF,
	PEER_SID = SID + 1,
	PEER_QPN = 0x100,
};

static const uint64_t peer_guid = 0x525400fffe770001ull;

/* The ids of one input, with the comm ID the peer gave each (0 if none). */
static struct {
	struct uroce_cm_id *id;
	uint32_t peer_id;
} ids[MAX_IDS];
static unsigned nids;
static struct uroce_cm_id *listener;
static unsigned base_ids;	/* the CM's count with the listener alone */
static uint64_t now;		/* the time timers are run at */

static void track(struct uroce_cm_id *id, uint32_t peer_id)
{
	ids[nids].id = id;
	ids[nids].peer_id = peer_id;
	nids++;
}

/* The consumer takes every request while there is room to track it. */
static int handler(struct uroce_cm_id *id, const struct uroce_cm_event *ev,
		   void *context)
{
	(void)id;
	(void)context;
	if (ev->type != UROCE_CM_REQ_RECEIVED &&
	    ev->type != UROCE_CM_SIDR_REQ_RECEIVED)
		return 0;
	if (nids == MAX_IDS)
		return 1;
	track(ev->new_id, 0);
	return 0;
}

static uint8_t pkt[PKT_LEN + 64];

static void frame(void)
{
	memset(pkt, 0, BTH_LEN + DETH_LEN);
	pkt[0] = 0x64;		/* UD SEND_ONLY */
	pkt[2] = pkt[3] = 0xFF;
	put_be32(pkt + 4, GSI_QPN);
	put_be32(pkt + BTH_LEN, GSI_QKEY);
	put_be32(pkt + BTH_LEN + 4, GSI_QPN);
}

static void deliver(uint32_t len, bool ipv6, bool seal)
{
	struct uroce_rxpkt rx;

	fuzz_rx_init(&rx, pkt, len, ipv6, false, seal);
	fuzz_deliver(&rx, 1);
}

/* A REQ from the peer, as the harness sets up connections; returns the id
 * the consumer got. */
static struct uroce_cm_id *peer_req(uint32_t comm_id, uint32_t qpn)
{
	uint8_t *mad = pkt + BTH_LEN + DETH_LEN, *pl = mad + MAD_HDR_LEN;
	unsigned before = nids;

	frame();
	memset(mad, 0, MAD_LEN);
	uroce_cm_mad_init(mad, CM_ATTR_REQ, 0x100000000ull | comm_id);
	mad_put_be32(pl, REQ_LOCAL_COMM_ID, comm_id);
	mad_put_be64(pl, REQ_SERVICE_ID, SID);
	mad_put_be64(pl, REQ_LOCAL_CA_GUID, peer_guid);
	mad_put_be24(pl, REQ_LOCAL_QPN, qpn);
	pl[REQ_RESP_RESOURCES] = 1;
	pl[REQ_INIT_DEPTH] = 1;
	mad_set_bits(pl, REQ_BYTE43, 0xF8, 20);
	mad_put_be24(pl, REQ_STARTING_PSN, 0x1b2b3b);
	mad_set_bits(pl, REQ_BYTE47, 0xF8, 20);
	mad_set_bits(pl, REQ_BYTE47, 0x07, 7);
	mad_put_be16(pl, REQ_PKEY, 0xFFFF);
	mad_set_bits(pl, REQ_BYTE50, 0xF0, IBV_MTU_1024);
	mad_set_bits(pl, REQ_BYTE51, 0xF0, 15);
	deliver(PKT_LEN, false, true);
	FUZZ_CHECK(nids == before + 1);
	ids[before].peer_id = comm_id;
	return ids[before].id;
}

static void peer_rtu(uint32_t comm_id, struct uroce_cm_id *id)
{
	uint8_t *mad = pkt + BTH_LEN + DETH_LEN, *pl = mad + MAD_HDR_LEN;

	frame();
	memset(mad, 0, MAD_LEN);
	uroce_cm_mad_init(mad, CM_ATTR_RTU, 0x100000000ull | comm_id);
	mad_put_be32(pl, MSG_LOCAL_COMM_ID, comm_id);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, uroce_cm_local_id(id));
	deliver(PKT_LEN, false, true);
}

static struct uroce_cm_path peer_path(void)
{
	struct uroce_cm_path p = { .hop_limit = 64, .mtu = IBV_MTU_1024,
				   .packet_life_time = 14 };

	p.sgid = fuzz_nic->gids[0].gid;
	p.dgid = fuzz_nic->gids[0].gid;
	return p;
}

static int send_req(struct uroce_cm_id *id)
{
	struct uroce_cm_req_param p = {
		.path = peer_path(), .service_id = PEER_SID, .qp_num = 0x55,
		.starting_psn = 7, .responder_resources = 1,
		.initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7,
		.local_ack_timeout = 14, .remote_cm_response_timeout = 20,
		.local_cm_response_timeout = 20, .max_cm_retries = 15,
	};

	return uroce_cm_send_req(id, &p);
}

static int send_sidr_req(struct uroce_cm_id *id)
{
	struct uroce_cm_sidr_req_param p = {
		.path = peer_path(), .service_id = PEER_SID,
		.timeout_ms = 100, .max_retries = 3,
	};

	return uroce_cm_send_sidr_req(id, &p);
}

static int send_rep(struct uroce_cm_id *id)
{
	struct uroce_cm_rep_param p = { .qp_num = 0x66, .starting_psn = 9,
					.responder_resources = 1,
					.initiator_depth = 1,
					.target_ack_delay = 15,
					.rnr_retry_count = 7 };

	return uroce_cm_send_rep(id, &p);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uint64_t sid = SID;

	(void)argc;
	(void)argv;
	fuzz_open_device(NULL);
	listener = uroce_cm_create_id(fuzz_ctx, handler, NULL);
	FUZZ_CHECK(listener);
	FUZZ_CHECK(uroce_cm_bind(listener, &sid, 0) == 0);
	FUZZ_CHECK(uroce_cm_listen(listener, 8) == 0);
	base_ids = uroce_cm_num_ids(fuzz_nic);
	return 0;
}

/* One connection in each state. */
static void set_up(void)
{
	struct uroce_cm_id *id;

	nids = 0;
	track(listener, 0);
	id = uroce_cm_create_id(fuzz_ctx, handler, NULL);
	FUZZ_CHECK(id && send_req(id) == 0);		/* REQ sent */
	track(id, 0);
	peer_req(0x1001, PEER_QPN + 1);			/* REQ received */
	id = peer_req(0x1002, PEER_QPN + 2);
	FUZZ_CHECK(send_rep(id) == 0);			/* REP sent */
	id = peer_req(0x1003, PEER_QPN + 3);
	FUZZ_CHECK(send_rep(id) == 0);
	peer_rtu(0x1003, id);				/* established */
	id = peer_req(0x1004, PEER_QPN + 4);
	FUZZ_CHECK(send_rep(id) == 0);
	peer_rtu(0x1004, id);
	FUZZ_CHECK(uroce_cm_send_dreq(id, NULL, 0) == 0); /* DREQ sent */
	id = uroce_cm_create_id(fuzz_ctx, handler, NULL);
	FUZZ_CHECK(id && send_sidr_req(id) == 0);	/* SIDR_REQ sent */
	track(id, 0);
}

enum {
	F_ICRC = 1 << 0,
	F_FRAME = 1 << 1,	/* BTH and DETH of a MAD on QP1 */
	F_HDR = 1 << 2,		/* a CM Send MAD header */
	F_RECEIVER = 1 << 3,	/* names the id as the receiver */
	F_SENDER = 1 << 4,	/* from the id's peer */
	F_SID = 1 << 5,		/* the listener's service ID */
	F_IPV6 = 1 << 6,
	F_LEN = 1 << 7,		/* a length of the input's */
};

static void cmd_mad(struct fuzz_in *in)
{
	uint8_t flags = fuzz_u8(in);
	unsigned k = fuzz_u8(in) % nids;
	uint8_t *mad = pkt + BTH_LEN + DETH_LEN, *pl = mad + MAD_HDR_LEN;
	uint32_t len = PKT_LEN;
	uint16_t attr;

	if (flags & F_FRAME)
		frame();
	else
		fuzz_bytes(in, pkt, BTH_LEN + DETH_LEN);
	fuzz_bytes(in, mad, MAD_LEN);
	memset(mad + MAD_LEN, 0, sizeof(pkt) - BTH_LEN - DETH_LEN - MAD_LEN);
	if (flags & F_LEN) {
		len = fuzz_u16(in) % sizeof(pkt);
		/* the bytes past the MAD: its ICRC, and more */
		if (len > PKT_LEN - ICRC_LEN)
			fuzz_bytes(in, mad + MAD_LEN,
				   len - (PKT_LEN - ICRC_LEN));
	}
	attr = mad_be16(mad, MADH_ATTR_ID);
	if (flags & F_HDR)
		uroce_cm_mad_init(mad, attr, mad_be64(mad, MADH_TID));
	if ((flags & F_RECEIVER) && ids[k].id)
		mad_put_be32(pl, attr == CM_ATTR_SIDR_REP ? SIDR_REP_REQUEST_ID
							  : MSG_REMOTE_COMM_ID,
			     uroce_cm_local_id(ids[k].id));
	if (flags & F_SENDER) {
		mad_put_be32(pl, MSG_LOCAL_COMM_ID, ids[k].peer_id);
		if (attr == CM_ATTR_REQ)
			mad_put_be64(pl, REQ_LOCAL_CA_GUID, peer_guid);
		else if (attr == CM_ATTR_REP)
			mad_put_be64(pl, REP_LOCAL_CA_GUID, peer_guid);
	}
	if (flags & F_SID)
		mad_put_be64(pl, attr == CM_ATTR_REQ ? REQ_SERVICE_ID
						     : SIDR_REQ_SERVICE_ID, SID);
	deliver(len, flags & F_IPV6, flags & F_ICRC);
}

static void cmd_act(struct fuzz_in *in)
{
	unsigned k = fuzz_u8(in) % nids;
	uint8_t act = fuzz_u8(in);
	struct uroce_cm_id *id = ids[k].id;
	struct uroce_cm_sidr_rep_param sidr = { .status = act >> 4 & 3,
						.qp_num = 0x77,
						.qkey = 0x11111111 };

	/* the listener stays, and a destroyed id is gone */
	if (!id || id == listener)
		return;
	/* refused in most states: that is fine */
	switch (act % 10) {
	case 0:
		send_rep(id);
		break;
	case 1:
		uroce_cm_send_rtu(id, NULL, 0);
		break;
	case 2:
		uroce_cm_send_rej(id, UROCE_CM_REJ_CONSUMER_DEFINED, NULL, 0);
		break;
	case 3:
		uroce_cm_send_dreq(id, NULL, 0);
		break;
	case 4:
		uroce_cm_send_drep(id, NULL, 0);
		break;
	case 5:
		uroce_cm_establish(id);
		break;
	case 6:
		uroce_cm_send_sidr_rep(id, &sidr);
		break;
	case 7:
		send_req(id);
		break;
	case 8:
		send_sidr_req(id);
		break;
	default:
		uroce_cm_destroy_id(id);
		ids[k].id = NULL;
		break;
	}
}

static void run_timers(uint64_t at)
{
	pthread_mutex_lock(&fuzz_nic->rx_lock);
	uroce_cm_timers(fuzz_nic, at);
	pthread_mutex_unlock(&fuzz_nic->rx_lock);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	unsigned round;

	now = uroce_now_ns();
	set_up();
	for (int cmds = 0; in.left && cmds < 32; cmds++) {
		switch (fuzz_u8(&in) % 4) {
		case 0:
		case 1:
			cmd_mad(&in);
			break;
		case 2:
			cmd_act(&in);
			break;
		default:
			now += (uint64_t)fuzz_u16(&in) << 16;
			run_timers(now);
			break;
		}
	}
	for (unsigned i = 0; i < nids; i++)
		if (ids[i].id && ids[i].id != listener)
			uroce_cm_destroy_id(ids[i].id);
	/* every retransmission given up, every TimeWait over */
	for (round = 0; round < 64 && uroce_cm_num_ids(fuzz_nic) != base_ids;
	     round++) {
		now += 3600 * 1000000000ull;
		run_timers(now);
	}
	FUZZ_CHECK(uroce_cm_num_ids(fuzz_nic) == base_ids);
	return 0;
}
