/*
 * The capture writer (net/pcap.c) with arbitrary packets: sent ones (any
 * split into iovecs, any IPv4 identification) and received ones (any TOS,
 * any bytes, so that the identification is recovered from a valid or an
 * invalid ICRC), over IPv4 and IPv6, any addresses and ports, of every
 * length a packet can have (up to the receive buffer).  Each input writes a
 * fresh capture into a memfd, which is then read back and must be exactly
 * the frames given: record lengths, Ethernet type, the IP and UDP headers
 * with correct lengths and checksums, the addresses and ports, the bytes.
 *
 * Input: packets of  flags (bit 0 sent, bit 1 IPv6), source and
 * destination address (4 or 16 bytes each), ports (2 + 2), TOS, IPv4
 * identification (2), length (2), the bytes, and for a sent packet where
 * its iovecs are cut (1).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "input.h"
#include "net/pcap.h"

enum {
	MAX_PKTS = 16,
	FILE_HDR = 24,
	REC_HDR = 16,
	ETH = 14,
	UDP = 8,
	F_TX = 1 << 0,
	F_IPV6 = 1 << 1,
};

static int memfd;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	memfd = memfd_create("fuzz_pcap", MFD_CLOEXEC);
	FUZZ_CHECK(memfd >= 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	return 0;
}

struct pkt {
	bool tx, v6;
	union uroce_sockaddr src, dst;
	uint8_t tos;
	uint16_t ip_id;
	uint32_t len;
	uint8_t data[UROCE_RX_BUF];
};

static struct pkt pkts[MAX_PKTS];
static uint8_t file[FILE_HDR + MAX_PKTS * (REC_HDR + ETH + 40 + UDP +
					   UROCE_RX_BUF)];

static uint16_t be16(const uint8_t *p)
{
	return p[0] << 8 | p[1];
}

static uint32_t sum16(uint32_t sum, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += be16(p + i);
	if (n & 1)
		sum += p[n - 1] << 8;
	return sum;
}

static uint16_t fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xFFFF) + (sum >> 16);
	return sum;
}

static const uint8_t *ip_of(const union uroce_sockaddr *sa)
{
	return sa->sa.sa_family == AF_INET ? (const uint8_t *)&sa->in4.sin_addr
					   : (const uint8_t *)&sa->in6.sin6_addr;
}

static void read_packet(struct fuzz_in *in, struct pkt *p)
{
	uint8_t flags = fuzz_u8(in);
	uint8_t a[16], b[16];
	uint16_t sport, dport;

	p->tx = flags & F_TX;
	p->v6 = flags & F_IPV6;
	fuzz_bytes(in, a, p->v6 ? 16 : 4);
	fuzz_bytes(in, b, p->v6 ? 16 : 4);
	sport = fuzz_u16(in);
	dport = fuzz_u16(in);
	memset(&p->src, 0, sizeof(p->src));
	memset(&p->dst, 0, sizeof(p->dst));
	if (p->v6) {
		p->src.in6.sin6_family = p->dst.in6.sin6_family = AF_INET6;
		memcpy(&p->src.in6.sin6_addr, a, 16);
		memcpy(&p->dst.in6.sin6_addr, b, 16);
		p->src.in6.sin6_port = htons(sport);
		p->dst.in6.sin6_port = htons(dport);
	} else {
		p->src.in4.sin_family = p->dst.in4.sin_family = AF_INET;
		memcpy(&p->src.in4.sin_addr, a, 4);
		memcpy(&p->dst.in4.sin_addr, b, 4);
		p->src.in4.sin_port = htons(sport);
		p->dst.in4.sin_port = htons(dport);
	}
	p->tos = fuzz_u8(in);
	p->ip_id = fuzz_u16(in);
	p->len = fuzz_u16(in) % (UROCE_RX_BUF + 1);
}

/* A sent packet as the transport hands it over: the bytes cut into up to
 * UROCE_TX_IOV pieces at points the input chooses. */
static bool write_tx(struct uroce_pcap *pc, struct fuzz_in *in,
		     struct pkt *p)
{
	struct uroce_txpkt tx = { .dst = &p->dst, .src = &p->src,
				  .len = p->len };
	uint8_t split = fuzz_u8(in);
	uint32_t at = 0;

	while (at < p->len && tx.niov < UROCE_TX_IOV - 1) {
		uint32_t n = split ? (uint32_t)split * 7 % (p->len - at) + 1
				   : p->len - at;

		tx.iov[tx.niov++] = (struct iovec){ p->data + at, n };
		at += n;
		split = split * 37 + 11;
	}
	if (at < p->len)
		tx.iov[tx.niov++] = (struct iovec){ p->data + at, p->len - at };
	p->tos = 0;	/* sent packets are captured with TOS 0 */
	return uroce_pcap_tx(pc, &tx, ntohs(p->src.in4.sin_port), p->ip_id);
}

static bool write_rx(struct uroce_pcap *pc, struct pkt *p)
{
	struct uroce_rxpkt rx = { .data = p->data, .len = p->len,
				  .src = p->src, .dst = p->dst,
				  .tos = p->tos };

	return uroce_pcap_rx(pc, &rx);
}

/* The record at f (size bytes left) is p's frame; returns its size. */
static size_t check_record(const uint8_t *f, size_t size, const struct pkt *p)
{
	uint32_t caplen, len;
	size_t ip_len = p->v6 ? 40 : 20, alen = p->v6 ? 16 : 4;
	const uint8_t *eth = f + REC_HDR, *ip = eth + ETH, *udp = ip + ip_len;
	uint32_t sum;

	FUZZ_CHECK(size >= REC_HDR);
	memcpy(&caplen, f + 8, 4);
	memcpy(&len, f + 12, 4);
	FUZZ_CHECK(caplen == len);
	FUZZ_CHECK(len == ETH + ip_len + UDP + p->len);
	FUZZ_CHECK(size >= REC_HDR + len);
	FUZZ_CHECK(be16(eth + 12) == (p->v6 ? 0x86DD : 0x0800));
	FUZZ_CHECK(!memcmp(eth + 2, ip_of(&p->dst) + alen - 4, 4));
	FUZZ_CHECK(!memcmp(eth + 8, ip_of(&p->src) + alen - 4, 4));
	if (p->v6) {
		FUZZ_CHECK(ip[0] >> 4 == 6);
		FUZZ_CHECK(((ip[0] & 0xF) << 4 | ip[1] >> 4) == p->tos);
		FUZZ_CHECK(be16(ip + 4) == UDP + p->len);
		FUZZ_CHECK(ip[6] == IPPROTO_UDP);
		FUZZ_CHECK(!memcmp(ip + 8, ip_of(&p->src), 16));
		FUZZ_CHECK(!memcmp(ip + 24, ip_of(&p->dst), 16));
	} else {
		FUZZ_CHECK(ip[0] == 0x45);
		FUZZ_CHECK(ip[1] == p->tos);
		FUZZ_CHECK(be16(ip + 2) == 20 + UDP + p->len);
		if (p->tx)
			FUZZ_CHECK(be16(ip + 4) == p->ip_id);
		FUZZ_CHECK(ip[9] == IPPROTO_UDP);
		FUZZ_CHECK(fold(sum16(0, ip, 20)) == 0xFFFF);
		FUZZ_CHECK(!memcmp(ip + 12, ip_of(&p->src), 4));
		FUZZ_CHECK(!memcmp(ip + 16, ip_of(&p->dst), 4));
	}
	FUZZ_CHECK(be16(udp) == ntohs(p->src.in4.sin_port));
	FUZZ_CHECK(be16(udp + 2) == ntohs(p->dst.in4.sin_port));
	FUZZ_CHECK(be16(udp + 4) == UDP + p->len);
	FUZZ_CHECK(be16(udp + 6) != 0);
	/* the UDP checksum over the pseudo header verifies */
	sum = sum16(0, ip + (p->v6 ? 8 : 12), 2 * alen);
	sum += IPPROTO_UDP + UDP + p->len;
	sum = sum16(sum, udp, UDP);
	sum = sum16(sum, p->data, p->len);
	FUZZ_CHECK(fold(sum) == 0xFFFF);
	FUZZ_CHECK(!memcmp(udp + UDP, p->data, p->len));
	return REC_HDR + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct uroce_pcap *pc = uroce_pcap_open(path);
	unsigned n = 0;
	ssize_t got;
	size_t at = FILE_HDR;

	FUZZ_CHECK(pc);
	while (in.left && n < MAX_PKTS) {
		struct pkt *p = &pkts[n++];

		read_packet(&in, p);
		fuzz_bytes(&in, p->data, p->len);
		FUZZ_CHECK(p->tx ? write_tx(pc, &in, p) : write_rx(pc, p));
	}
	uroce_pcap_close(pc);

	got = pread(memfd, file, sizeof(file), 0);
	FUZZ_CHECK(got >= FILE_HDR);
	FUZZ_CHECK(be16(file) == 0x4d3c || be16(file) == 0xa1b2);
	for (unsigned i = 0; i < n; i++)
		at += check_record(file + at, (size_t)got - at, &pkts[i]);
	FUZZ_CHECK(at == (size_t)got);
	return 0;
}
