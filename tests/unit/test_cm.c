/*
 * The CM (src/cm/) against MADs a peer sends: a passive connection from REQ
 * to TimeWait with its duplicates and a DREQ for the wrong QP, a REQ nobody
 * listens for, a flood of REQs past the backlog, a consumer that refuses,
 * and hostile MADs (random bytes, truncated, unknown attributes and comm
 * IDs, mutated valid messages).  Nothing may crash (ASan/UBSan build too),
 * every refused MAD is counted, and no id is left behind.
 *
 * MADs go through the link's ICRC check into uroce_recv_batch() of a real
 * device opened in this process, under rx_lock as the engine delivers them; the replies the CM
 * sends go to loopback and come back as MADs for comm IDs nobody has.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm/cm.h"
#include "net/icrc.h"
#include "transport/hdr.h"
#include "transport/transport.h"

enum {
	PKT_LEN = BTH_LEN + DETH_LEN + MAD_LEN + ICRC_LEN,
	PEER_QPN = 0x1a,
	SID = 0x000000000106A5A5ull & 0xFFFFFFFF,
	MAX_EVENTS = 256,
	HOSTILE_ROUNDS = 30000,
};

static const uint64_t peer_guid = 0x525400fffe770001ull;
static struct ibv_context *ctx;
static struct uroce_nic *nic;

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint64_t rnd(void)
{
	uint64_t z = (rng += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ---- what the handler saw ---- */
static struct {
	unsigned n;
	struct uroce_cm_event ev[MAX_EVENTS];
	struct uroce_cm_id *id[MAX_EVENTS];
	uint8_t first_byte[MAX_EVENTS];
} seen;
static int refuse;

static int handler(struct uroce_cm_id *id, const struct uroce_cm_event *ev,
		   void *context)
{
	(void)context;
	if (seen.n < MAX_EVENTS) {
		seen.ev[seen.n] = *ev;
		seen.id[seen.n] = id;
		seen.first_byte[seen.n] =
			ev->private_data_len ? ev->private_data[0] : 0;
		seen.n++;
	}
	return refuse;
}

/* ---- MADs from the peer ---- */
static uint8_t pkt_buf[PKT_LEN + 64];

static uint8_t *mad_start(uint16_t attr, uint64_t tid)
{
	uint8_t *mad = pkt_buf + BTH_LEN + DETH_LEN;

	memset(pkt_buf, 0, sizeof(pkt_buf));
	pkt_buf[0] = 0x64;		/* UD SEND_ONLY */
	pkt_buf[2] = pkt_buf[3] = 0xFF;
	put_be32(pkt_buf + 4, GSI_QPN);
	put_be32(pkt_buf + BTH_LEN, GSI_QKEY);
	put_be32(pkt_buf + BTH_LEN + 4, GSI_QPN);
	uroce_cm_mad_init(mad, attr, tid);
	return mad + MAD_HDR_LEN;
}

/* Deliver pkt_buf (len bytes with a valid ICRC unless len is odd-sized). */
static void deliver_len(uint32_t len, bool seal)
{
	struct uroce_rxpkt rx = { .data = pkt_buf, .len = len };

	rx.src.in4.sin_family = AF_INET;
	rx.src.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	rx.src.in4.sin_port = htons(49153);
	rx.dst.in4.sin_family = AF_INET;
	rx.dst.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	rx.dst.in4.sin_port = htons(UROCE_UDP_PORT);
	if (seal && len >= ICRC_LEN) {
		struct iovec iov = { pkt_buf, len - ICRC_LEN };
		struct uroce_icrc_ip ip = {
			.family = AF_INET,
			.src = &rx.src.in4.sin_addr,
			.dst = &rx.dst.in4.sin_addr,
			.sport = 49153,
			.dport = UROCE_UDP_PORT,
			.df = true,
		};

		uroce_icrc_put(pkt_buf + len - ICRC_LEN,
			       uroce_icrc_compute(&ip, &iov, 1));
	}
	pthread_mutex_lock(&nic->rx_lock);
	uroce_recv_batch(nic, &rx, (int)uroce_link_rx_verify(nic, &rx, 1));
	pthread_mutex_unlock(&nic->rx_lock);
}

static void deliver(void)
{
	deliver_len(PKT_LEN, true);
}

/* A REQ of the given transport (byte 43) and extended transport (51). */
static void send_req_of(uint32_t comm_id, uint32_t qpn, uint64_t sid,
			unsigned transport, unsigned ext)
{
	uint8_t *pl = mad_start(CM_ATTR_REQ, 0x100000000ull | comm_id);

	mad_put_be32(pl, REQ_LOCAL_COMM_ID, comm_id);
	mad_put_be64(pl, REQ_SERVICE_ID, sid);
	mad_put_be64(pl, REQ_LOCAL_CA_GUID, peer_guid);
	mad_put_be24(pl, REQ_LOCAL_QPN, qpn);
	pl[REQ_RESP_RESOURCES] = 1;
	pl[REQ_INIT_DEPTH] = 2;
	mad_set_bits(pl, REQ_BYTE43, 0xF8, 20);
	mad_put_be24(pl, REQ_STARTING_PSN, 0x1b2b3b);
	mad_set_bits(pl, REQ_BYTE47, 0xF8, 20);
	mad_set_bits(pl, REQ_BYTE47, 0x07, 7);
	mad_put_be16(pl, REQ_PKEY, 0xFFFF);
	mad_set_bits(pl, REQ_BYTE50, 0xF0, IBV_MTU_1024);
	mad_set_bits(pl, REQ_BYTE50, 0x07, 6);
	mad_set_bits(pl, REQ_BYTE51, 0xF0, 15);
	mad_set_bits(pl, REQ_BYTE43, 0x06, transport);
	mad_set_bits(pl, REQ_BYTE51, 0x07, ext);
	pl[REQ_PRIVATE_DATA] = 0xAB;
	deliver();
}

static void send_req(uint32_t comm_id, uint32_t qpn, uint64_t sid)
{
	send_req_of(comm_id, qpn, sid, UROCE_CM_TRANSPORT_RC, 0);
}

static void send_ids(uint16_t attr, uint32_t local, uint32_t remote)
{
	uint8_t *pl = mad_start(attr, 0x100000000ull | local);

	mad_put_be32(pl, MSG_LOCAL_COMM_ID, local);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, remote);
	if (attr == CM_ATTR_DREQ)
		mad_put_be24(pl, DREQ_REMOTE_QPN, 0x55);
	deliver();
}

static unsigned long stat(atomic_ulong *c)
{
	return atomic_load(c);
}

static struct uroce_cm_id *listen_on(uint64_t sid, int backlog)
{
	struct uroce_cm_id *l = uroce_cm_create_id(ctx, handler, NULL);

	assert_non_null(l);
	assert_int_equal(uroce_cm_bind(l, &sid, 0), 0);
	assert_int_equal(uroce_cm_listen(l, backlog), 0);
	return l;
}

static int setup(void **state)
{
	struct ibv_device **devs;

	(void)state;
	devs = ibv_get_device_list(NULL);
	assert_non_null(devs);
	ctx = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	assert_non_null(ctx);
	nic = to_uctx(ctx)->nic;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	assert_int_equal(ibv_close_device(ctx), 0);
	return 0;
}

static void test_passive_connection(void **state)
{
	struct uroce_cm_id *l, *conn;
	struct uroce_cm_rep_param rep = { .qp_num = 0x55, .starting_psn = 7,
					  .responder_resources = 1,
					  .initiator_depth = 1,
					  .target_ack_delay = 15,
					  .rnr_retry_count = 7 };
	unsigned base = uroce_cm_num_ids(nic);
	unsigned long dups;
	uint32_t ours;

	(void)state;
	seen.n = 0;
	l = listen_on(SID, 4);
	send_req(0x1001, PEER_QPN, SID);
	assert_int_equal(seen.n, 1);
	assert_int_equal(seen.ev[0].type, UROCE_CM_REQ_RECEIVED);
	assert_ptr_equal(seen.id[0], l);
	assert_int_equal(seen.ev[0].req.qp_num, PEER_QPN);
	assert_int_equal(seen.ev[0].req.starting_psn, 0x1b2b3b);
	assert_int_equal(seen.ev[0].req.responder_resources, 1);
	assert_int_equal(seen.ev[0].req.initiator_depth, 2);
	assert_int_equal(seen.ev[0].req.rnr_retry_count, 6);
	assert_int_equal(seen.ev[0].private_data_len, REQ_PRIVATE_DATA_LEN);
	assert_int_equal(seen.first_byte[0], 0xAB);
	conn = seen.ev[0].new_id;
	assert_non_null(conn);
	ours = uroce_cm_local_id(conn);
	assert_int_equal(ours >> CM_ID_SLOT_SHIFT, nic->slot);

	/* a retransmitted REQ is a duplicate, not a second connection */
	dups = stat(&nic->stats.mad_duplicates);
	send_req(0x1001, PEER_QPN, SID);
	assert_int_equal(seen.n, 1);
	assert_true(stat(&nic->stats.mad_duplicates) > dups);

	assert_int_equal(uroce_cm_send_rep(conn, &rep), 0);
	/* an RTU naming another connection changes nothing */
	send_ids(CM_ATTR_RTU, 0x1002, ours);
	assert_int_equal(seen.n, 1);
	send_ids(CM_ATTR_RTU, 0x1001, ours);
	assert_int_equal(seen.n, 2);
	assert_int_equal(seen.ev[1].type, UROCE_CM_RTU_RECEIVED);
	assert_ptr_equal(seen.id[1], conn);

	/* a DREQ for another QP is dropped; the right one is delivered */
	uint8_t *pl = mad_start(CM_ATTR_DREQ, 1);
	mad_put_be32(pl, MSG_LOCAL_COMM_ID, 0x1001);
	mad_put_be32(pl, MSG_REMOTE_COMM_ID, ours);
	mad_put_be24(pl, DREQ_REMOTE_QPN, 0x56);
	deliver();
	assert_int_equal(seen.n, 2);
	send_ids(CM_ATTR_DREQ, 0x1001, ours);
	assert_int_equal(seen.n, 3);
	assert_int_equal(seen.ev[2].type, UROCE_CM_DREQ_RECEIVED);
	assert_int_equal(uroce_cm_send_drep(conn, NULL, 0), 0);
	/* in TimeWait a repeated DREQ is answered again, not delivered */
	dups = stat(&nic->stats.mad_duplicates);
	send_ids(CM_ATTR_DREQ, 0x1001, ours);
	assert_int_equal(seen.n, 3);
	assert_true(stat(&nic->stats.mad_duplicates) > dups);
	/* and a REQ reusing its comm ID is stale */
	send_req(0x1001, PEER_QPN, SID);
	assert_int_equal(seen.n, 3);

	uroce_cm_destroy_id(conn);
	uroce_cm_destroy_id(l);
	/* the connection waits out TimeWait inside the CM, then goes (its
	 * REQ asked for the shortest: within moments; 5 s at the most, for
	 * a slow sanitized build), leaving the next tests a clean count */
	assert_int_equal(uroce_cm_num_ids(nic), base + 1);
	for (unsigned i = 0; i < 500 && uroce_cm_num_ids(nic) != base; i++)
		usleep(10000);
	assert_int_equal(uroce_cm_num_ids(nic), base);
}

static void test_no_listener(void **state)
{
	unsigned long rej = stat(&nic->stats.mad_rejected);

	(void)state;
	seen.n = 0;
	send_req(0x2001, PEER_QPN, SID + 1);
	assert_int_equal(seen.n, 0);
	assert_true(stat(&nic->stats.mad_rejected) > rej);
}

static void test_backlog_and_refusal(void **state)
{
	unsigned base = uroce_cm_num_ids(nic);
	unsigned long drops = stat(&nic->stats.mad_backlog_drops);
	struct uroce_cm_id *l = listen_on(SID + 2, 4);

	(void)state;
	seen.n = 0;
	for (uint32_t i = 0; i < 100; i++)
		send_req(0x3000 + i, 0x100 + i, SID + 2);
	assert_int_equal(seen.n, 4);
	assert_int_equal(stat(&nic->stats.mad_backlog_drops) - drops, 96);
	assert_int_equal(uroce_cm_num_ids(nic), base + 5);
	for (unsigned i = 0; i < seen.n; i++)
		uroce_cm_destroy_id(seen.ev[i].new_id);
	assert_int_equal(uroce_cm_num_ids(nic), base + 1);

	/* a consumer that refuses leaves nothing behind */
	refuse = 1;
	seen.n = 0;
	for (uint32_t i = 0; i < 10; i++)
		send_req(0x4000 + i, 0x200 + i, SID + 2);
	refuse = 0;
	assert_int_equal(seen.n, 10);
	assert_int_equal(uroce_cm_num_ids(nic), base + 1);
	uroce_cm_destroy_id(l);
	assert_int_equal(uroce_cm_num_ids(nic), base);
}

/* XRC: transport 3 with extended type 1 is an XRC initiator's REQ, which
 * only an XRC target's REP answers; transport 3 of another extended type,
 * or the reserved 2, is no transport and is refused. */
static void test_xrc_request(void **state)
{
	struct uroce_cm_rep_param rep = { .qp_num = 0x77, .starting_psn = 9,
					  .target_ack_delay = 15 };
	struct uroce_cm_id *l = listen_on(SID + 4, 4);
	unsigned long rej;

	(void)state;
	seen.n = 0;
	send_req_of(0x5001, PEER_QPN, SID + 4, UROCE_CM_TRANSPORT_XRC,
		    CM_EXT_TRANSPORT_XRC);
	assert_int_equal(seen.n, 1);
	assert_int_equal(seen.ev[0].req.transport, UROCE_CM_TRANSPORT_XRC);
	assert_int_equal(uroce_cm_send_rep(seen.ev[0].new_id, &rep), -EINVAL);
	rep.xrc_target = true;
	assert_int_equal(uroce_cm_send_rep(seen.ev[0].new_id, &rep), 0);
	uroce_cm_destroy_id(seen.ev[0].new_id);

	rej = stat(&nic->stats.mad_rejected);
	send_req_of(0x5002, PEER_QPN + 1, SID + 4, UROCE_CM_TRANSPORT_XRC, 0);
	send_req_of(0x5003, PEER_QPN + 2, SID + 4, 2, 0);
	assert_int_equal(seen.n, 1);
	assert_int_equal(stat(&nic->stats.mad_rejected) - rej, 2);
	uroce_cm_destroy_id(l);
}

static void test_hostile_mads(void **state)
{
	static const uint16_t attrs[] = {
		CM_ATTR_CLASS_PORT_INFO, CM_ATTR_REQ, CM_ATTR_MRA, CM_ATTR_REJ,
		CM_ATTR_REP, CM_ATTR_RTU, CM_ATTR_DREQ, CM_ATTR_DREP,
		CM_ATTR_SIDR_REQ, CM_ATTR_SIDR_REP, 0x0019, 0x001A, 0x7777,
	};
	struct uroce_cm_id *l = listen_on(SID + 3, 8);
	struct uroce_cm_id *active = uroce_cm_create_id(ctx, handler, NULL);
	uint32_t active_id = uroce_cm_local_id(active);
	unsigned long before = stat(&nic->stats.mad_malformed) +
			       stat(&nic->stats.rx_bad_icrc) +
			       stat(&nic->stats.mad_unknown_id);

	(void)state;
	refuse = 1;	/* REQs that get through are refused: nothing lingers */
	for (unsigned round = 0; round < HOSTILE_ROUNDS; round++) {
		uint16_t attr = attrs[rnd() % ARRAY_SIZE(attrs)];
		uint8_t *pl = mad_start(attr, rnd());
		uint32_t len = PKT_LEN;

		for (unsigned i = 0; i < CM_PAYLOAD_LEN; i++)
			pl[i] = rnd();
		switch (rnd() % 8) {
		case 0:		/* aimed at ids we have */
			mad_put_be32(pl, MSG_REMOTE_COMM_ID,
				     rnd() % 2 ? active_id : 0);
			break;
		case 1:		/* at the listener */
			mad_put_be64(pl, attr == CM_ATTR_REQ ? REQ_SERVICE_ID
							     : SIDR_REQ_SERVICE_ID,
				     SID + 3);
			break;
		case 2:		/* a broken MAD header */
			pl[-MAD_HDR_LEN + rnd() % MAD_HDR_LEN] = rnd();
			break;
		case 3:		/* truncated or too long */
			len = rnd() % (PKT_LEN + 32);
			break;
		case 4:		/* not a GSI packet at all */
			pkt_buf[rnd() % (BTH_LEN + DETH_LEN)] = rnd();
			break;
		default:
			break;
		}
		deliver_len(len, rnd() % 16 != 0);
	}
	refuse = 0;
	assert_true(stat(&nic->stats.mad_malformed) +
			    stat(&nic->stats.rx_bad_icrc) +
			    stat(&nic->stats.mad_unknown_id) > before);
	uroce_cm_destroy_id(active);
	uroce_cm_destroy_id(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_passive_connection),
		cmocka_unit_test(test_no_listener),
		cmocka_unit_test(test_backlog_and_refusal),
		cmocka_unit_test(test_xrc_request),
		cmocka_unit_test(test_hostile_mads),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
