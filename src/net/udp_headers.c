/*
 * What the UDP link knows of the headers below the BTH, which the kernel
 * writes and its sockets only partly tell: the ICRC (RoCE v2, Annex
 * A17.3.3), which covers them, computed for the sockets and GSO runs the
 * link chose and checked against what the sockets tell; and the GRH area of
 * a UD receive, rebuilt from the socket addresses.
 */
#include <arpa/inet.h>
#include <string.h>

#include "net/icrc.h"
#include "net/ip_header.h"
#include "nic.h"
#include "transport/hdr.h"

/*
 * The ICRC covers the IPv4 identification and flags, which the kernel fills
 * in.  The link sends from unconnected sockets with IP_PMTUDISC_DO, for
 * which Linux emits DF with identification 0 (ip_select_ident), so that is
 * what we compute over; the segments of a GSO run get 0, 1, 2, ...
 */
void uroce_udp_seal(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n)
{
	uint16_t sport = nic->net->tx_sport(nic, tx);
	unsigned run_end = 0, run_start = 0;

	for (unsigned i = 0; i < n; i++) {
		struct uroce_txpkt *p = &pkts[i];

		if (i == run_end) {
			run_start = i;
			run_end = i + (nic->gso ? uroce_gso_run(p, n - i) : 1);
		}
		struct iovec *tail = &p->iov[p->niov - 1];
		size_t pad = tail->iov_len - ICRC_LEN;
		struct uroce_icrc_ip ip = {
			.family = p->dst->sa.sa_family,
			.src = uroce_sockaddr_ip(p->src),
			.dst = uroce_sockaddr_ip(p->dst),
			.sport = sport,
			.dport = ntohs(p->dst->in4.sin_port),
			.ip_id = (uint16_t)(i - run_start),
			.df = true,
		};

		tail->iov_len = pad;
		uroce_icrc_put(p->trailer + pad,
			       uroce_icrc_compute(&ip, p->iov, p->niov));
		tail->iov_len = pad + ICRC_LEN;
	}
}

/*
 * The ICRC covers the IPv4 identification, which a UDP socket does not see:
 * uroce_icrc_check() recovers it, and a corrupted datagram passes as one
 * with some ID 2^-15 of the time, with a native ID (DF, below 64) only
 * 2^-26.  uroce and Linux's unconnected sockets send native IDs; Soft-RoCE
 * and NICs others.  So each IPv4 sender is held to the habit its first
 * datagram shows: one that sent native IDs gets only those, until it sends
 * ID_HABIT_STRIKES datagrams in a row that hold only with another ID (which
 * its retransmissions of what we drop do, and corruption does not), and
 * then any.
 */
#define ID_HABIT_STRIKES 8

static bool id_habit_ok(struct uroce_nic *nic, const struct in_addr *src,
			enum uroce_icrc_verdict v)
{
	struct uroce_id_habit *h =
		&nic->id_habits[(src->s_addr * 2654435761u) >>
				(32 - UROCE_ID_HABITS_LOG2)];

	if (h->addr != src->s_addr) {
		*h = (struct uroce_id_habit){ .addr = src->s_addr,
					      .any_id = v == UROCE_ICRC_OK_ANY_ID };
		return true;
	}
	if (v == UROCE_ICRC_OK) {
		h->strikes = 0;
		return true;
	}
	if (h->any_id)
		return true;
	if (++h->strikes < ID_HABIT_STRIKES)
		return false;
	h->any_id = true;
	return true;
}

bool uroce_udp_icrc_ok(struct uroce_nic *nic, const struct uroce_rxpkt *rx)
{
	struct uroce_icrc_ip ip = {
		.family = rx->src.sa.sa_family,
		.src = uroce_sockaddr_ip(&rx->src),
		.dst = uroce_sockaddr_ip(&rx->dst),
		.sport = ntohs(rx->src.in4.sin_port),
		.dport = ntohs(rx->dst.in4.sin_port),
	};
	enum uroce_icrc_verdict v = uroce_icrc_check(&ip, rx->data, rx->len,
						     NULL);

	if (v == UROCE_ICRC_BAD)
		return false;
	return ip.family != AF_INET || id_habit_ok(nic, ip.src, v);
}

/* The 40-byte GRH area of a UD receive (IBTA 11.4.1.2): the IPv6 header,
 * or for IPv4 the IPv4 header in its last 20 bytes, as RoCE v2 devices
 * write it and ibv_init_ah_from_wc reads it.  RoCE has no SL: mlx5 reports
 * the packet's kind there instead, and UCX reads it to find the
 * destination address in the GRH area: bit 3 a UDP (RoCE v2) frame, bits
 * 2:0 its L3 header, 1 IPv6, 2 IPv4. */
enum { WC_SL_IPV6 = 0x1, WC_SL_IPV4 = 0x2, WC_SL_ROCE_V2 = 0x8 };

uint8_t uroce_udp_rx_grh(const struct uroce_rxpkt *rx, uint8_t *grh)
{
	bool v4 = rx->src.sa.sa_family == AF_INET;

	memset(grh, 0, UROCE_GRH_LEN);
	/* neither the IPv4 ID nor the TTL is visible to us: 0 and the usual
	 * default */
	uroce_ip_header(v4 ? grh + UROCE_GRH_LEN - UROCE_IP4_HDR : grh,
			&(struct uroce_ip_fields){
				.src = &rx->src, .dst = &rx->dst,
				.payload = 8 + rx->len, .tos = rx->tos,
				.ttl = 64 });
	return WC_SL_ROCE_V2 | (v4 ? WC_SL_IPV4 : WC_SL_IPV6);
}
