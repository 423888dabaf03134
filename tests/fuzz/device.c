/* See device.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "net/icrc.h"
#include "transport/hdr.h"
#include "transport/transport.h"

struct ibv_context *fuzz_ctx;
struct uroce_nic *fuzz_nic;
uint16_t fuzz_port;

static struct uroce_net_ops sink_net;
static void (*tx_checker)(const struct uroce_txpkt *pkt);

static int sink_xmit(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		     unsigned n)
{
	static uint8_t copy[UROCE_RX_BUF];

	(void)nic;
	(void)tx;
	for (unsigned i = 0; i < n; i++) {
		uint32_t len = 0;

		for (unsigned k = 0; k < pkts[i].niov; k++) {
			size_t l = pkts[i].iov[k].iov_len;

			FUZZ_CHECK(l <= sizeof(copy) - len);
			/* ASan checks every byte a send would read */
			memcpy(copy + len, pkts[i].iov[k].iov_base, l);
			len += l;
		}
		FUZZ_CHECK(len == pkts[i].len);
		if (tx_checker)
			tx_checker(&pkts[i]);
	}
	return (int)n;
}

static int no_forward(struct uroce_nic *nic, unsigned slot,
		      const struct uroce_rxpkt *rx)
{
	(void)nic;
	(void)slot;
	(void)rx;
	return -ENOENT;
}

static int no_sid_forward(struct uroce_nic *nic, uint64_t sid,
			  const struct uroce_rxpkt *rx)
{
	(void)nic;
	(void)sid;
	(void)rx;
	return -ENOENT;
}

void fuzz_open_device(void (*check_tx)(const struct uroce_txpkt *pkt))
{
	static const char *const unset[] = {
		"UROCE_CONFIG", "UROCE_FAULTS", "UROCE_PCAP", "UROCE_MTU",
		"UROCE_WINDOW", "UROCE_RATE", "UROCE_DEBUG", "UROCE_ENGINE",
	};
	struct ibv_device **devs;
	char port[16];

	for (size_t i = 0; i < ARRAY_SIZE(unset); i++)
		unsetenv(unset[i]);
	/* a port no other uroce process uses: concurrent fuzzers differ by
	 * pid */
	fuzz_port = 20000 + getpid() % 20000;
	snprintf(port, sizeof(port), "%u", fuzz_port);
	setenv("UROCE_PORT", port, 1);
	setenv("UROCE_SHM", "0", 1);
	setenv("UROCE_ADDRS", "127.0.0.1,::1", 1);
	devs = ibv_get_device_list(NULL);
	FUZZ_CHECK(devs && devs[0]);
	fuzz_ctx = ibv_open_device(devs[0]);
	ibv_free_device_list(devs);
	FUZZ_CHECK(fuzz_ctx);
	fuzz_nic = to_uctx(fuzz_ctx)->nic;
	FUZZ_CHECK(fuzz_nic->num_gids == 2);

	uroce_engine_stop(fuzz_nic);
	/* no kick wakes the stopped engine: it promised nothing */
	atomic_store(&fuzz_nic->engine_sleep_until, 0);
	tx_checker = check_tx;
	sink_net = *fuzz_nic->net;
	sink_net.xmit = sink_xmit;
	sink_net.forward = no_forward;
	sink_net.sid_forward = no_sid_forward;
	fuzz_nic->net = &sink_net;
}

void fuzz_rx_init(struct uroce_rxpkt *rx, uint8_t *data, uint32_t len,
		  bool ipv6, bool stranger, bool seal)
{
	const uint16_t peer_port = 0xC123;

	memset(rx, 0, sizeof(*rx));
	rx->data = data;
	rx->len = len;
	if (ipv6) {
		rx->src.in6.sin6_family = AF_INET6;
		rx->src.in6.sin6_addr = in6addr_loopback;
		rx->src.in6.sin6_addr.s6_addr[15] = stranger ? 2 : 1;
		rx->src.in6.sin6_port = htons(peer_port);
		rx->dst.in6.sin6_family = AF_INET6;
		rx->dst.in6.sin6_addr = in6addr_loopback;
		rx->dst.in6.sin6_port = htons(fuzz_port);
	} else {
		rx->src.in4.sin_family = AF_INET;
		rx->src.in4.sin_addr.s_addr =
			htonl(stranger ? 0x7F000002 : INADDR_LOOPBACK);
		rx->src.in4.sin_port = htons(peer_port);
		rx->dst.in4.sin_family = AF_INET;
		rx->dst.in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		rx->dst.in4.sin_port = htons(fuzz_port);
	}
	if (seal && len >= ICRC_LEN) {
		struct iovec iov = { data, len - ICRC_LEN };
		struct uroce_icrc_ip ip = {
			.family = ipv6 ? AF_INET6 : AF_INET,
			.src = ipv6 ? (const void *)&rx->src.in6.sin6_addr
				    : (const void *)&rx->src.in4.sin_addr,
			.dst = ipv6 ? (const void *)&rx->dst.in6.sin6_addr
				    : (const void *)&rx->dst.in4.sin_addr,
			.sport = peer_port,
			.dport = fuzz_port,
			.df = true,
		};

		uroce_icrc_put(data + len - ICRC_LEN,
			       uroce_icrc_compute(&ip, &iov, 1));
	}
}

void fuzz_deliver(struct uroce_rxpkt *pkts, int n)
{
	pthread_mutex_lock(&fuzz_nic->rx_lock);
	/* through the link's ICRC check, as the engine receives */
	n = (int)uroce_link_rx_verify(fuzz_nic, pkts, (unsigned)n);
	uroce_recv_batch(fuzz_nic, pkts, n);
	uroce_flush_acks(fuzz_nic);
	pthread_mutex_unlock(&fuzz_nic->rx_lock);
}
