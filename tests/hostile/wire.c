#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"

enum { GSO_SEGMENTS_MAX = 64 };	/* segment k of a GSO send has IP ID k */

void w_put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

void w_put32(uint8_t *p, uint32_t v)
{
	w_put16(p, v >> 16);
	w_put16(p + 2, v);
}

void w_put64(uint8_t *p, uint64_t v)
{
	w_put32(p, v >> 32);
	w_put32(p + 4, v);
}

uint32_t w_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

uint64_t w_get64(const uint8_t *p)
{
	return (uint64_t)w_get32(p) << 32 | w_get32(p + 4);
}

void w_bth(struct w_pkt *k, uint8_t opcode, uint32_t dqpn, uint32_t psn)
{
	memset(k->b, 0, W_BTH);
	k->b[0] = opcode;
	w_put16(k->b + 2, 0xFFFF);
	w_put32(k->b + 4, dqpn & 0xFFFFFF);
	w_put32(k->b + 8, 1u << 31 | (psn & 0xFFFFFF));
	k->len = W_BTH;
}

void w_reth(struct w_pkt *k, uint64_t va, uint32_t rkey, uint32_t len)
{
	w_put64(k->b + k->len, va);
	w_put32(k->b + k->len + 8, rkey);
	w_put32(k->b + k->len + 12, len);
	k->len += W_RETH;
}

void w_atomic_eth(struct w_pkt *k, uint64_t va, uint32_t rkey,
		  uint64_t swap_add, uint64_t compare)
{
	w_put64(k->b + k->len, va);
	w_put32(k->b + k->len + 8, rkey);
	w_put64(k->b + k->len + 12, swap_add);
	w_put64(k->b + k->len + 20, compare);
	k->len += W_ATOMIC_ETH;
}

void w_append(struct w_pkt *k, const void *data, size_t len)
{
	if (k->len + len + 3 + W_ICRC > sizeof(k->b))
		h_fail("packet of %zu bytes does not fit", k->len + len);
	memcpy(k->b + k->len, data, len);
	k->len += len;
}

uint32_t w_icrc(const struct sockaddr_in *src, const struct sockaddr_in *dst,
		uint16_t ip_id, const uint8_t *p, size_t len)
{
	/* Annex A17: 8 bytes of ones stand for the LRH; the variant fields
	 * of the IP and UDP headers and the BTH's byte 4 are masked to ones */
	uint8_t pre[8 + 20 + 8], bth[W_BTH];
	uint8_t *ip = pre + 8, *udp = pre + 28;
	uLong crc;

	memset(pre, 0xFF, 8);
	ip[0] = 0x45;
	ip[1] = 0xFF;				/* TOS */
	w_put16(ip + 2, (uint16_t)(20 + 8 + len + W_ICRC));
	w_put16(ip + 4, ip_id);
	w_put16(ip + 6, 0x4000);		/* DF */
	ip[8] = 0xFF;				/* TTL */
	ip[9] = IPPROTO_UDP;
	w_put16(ip + 10, 0xFFFF);		/* header checksum */
	memcpy(ip + 12, &src->sin_addr, 4);
	memcpy(ip + 16, &dst->sin_addr, 4);
	memcpy(udp, &src->sin_port, 2);
	memcpy(udp + 2, &dst->sin_port, 2);
	w_put16(udp + 4, (uint16_t)(8 + len + W_ICRC));
	w_put16(udp + 6, 0xFFFF);		/* UDP checksum */
	memcpy(bth, p, W_BTH);
	bth[4] = 0xFF;				/* FECN, BECN, reserved */
	crc = crc32(0, pre, sizeof(pre));
	crc = crc32(crc, bth, W_BTH);
	return (uint32_t)crc32(crc, p + W_BTH, (uInt)(len - W_BTH));
}

void w_seal(struct w_pkt *k, const struct sockaddr_in *src,
	    const struct sockaddr_in *dst)
{
	size_t pad = (4 - (k->len & 3)) & 3;
	uint32_t crc;

	memset(k->b + k->len, 0, pad);
	k->len += pad;
	k->b[1] = (k->b[1] & ~0x30) | (uint8_t)(pad << 4);
	crc = w_icrc(src, dst, 0, k->b, k->len);
	/* the ICRC goes least significant byte first */
	for (int i = 0; i < 4; i++)
		k->b[k->len + i] = (uint8_t)(crc >> (8 * i));
	k->len += W_ICRC;
}

struct sockaddr_in w_addr(const char *ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		h_fail("bad address %s", ip);
	return a;
}

int w_socket(const char *ip, uint16_t port)
{
	struct sockaddr_in a = w_addr(ip, port);
	int one = 1, pmtu = IP_PMTUDISC_DO;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	/* DF with an unconnected socket: the kernel sends IP ID 0, which is
	 * what w_seal computes the ICRC over */
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) ||
	    setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)))
		h_fail("UDP socket at %s:%u: %s", ip, port, strerror(errno));
	return fd;
}

void w_send(int fd, const struct w_pkt *k, const struct sockaddr_in *dst)
{
	if (sendto(fd, k->b, k->len, 0, (const struct sockaddr *)dst,
		   sizeof(*dst)) != (ssize_t)k->len)
		h_fail("sendto: %s", strerror(errno));
}

static bool icrc_ok(const struct sockaddr_in *src,
		    const struct sockaddr_in *dst, const struct w_pkt *k)
{
	uint32_t got = 0;

	for (int i = 0; i < 4; i++)
		got |= (uint32_t)k->b[k->len - W_ICRC + i] << (8 * i);
	for (uint16_t id = 0; id < GSO_SEGMENTS_MAX; id++)
		if (w_icrc(src, dst, id, k->b, k->len - W_ICRC) == got)
			return true;
	return false;
}

static void parse(const struct w_pkt *k, struct w_resp *r)
{
	const uint8_t *p = k->b + W_BTH;
	size_t pad = (k->b[1] >> 4) & 3;

	memset(r, 0, sizeof(*r));
	r->opcode = k->b[0];
	r->dqpn = w_get32(k->b + 4) & 0xFFFFFF;
	r->psn = w_get32(k->b + 8) & 0xFFFFFF;
	/* responses: READ RESPONSE MIDDLE alone has no AETH */
	r->has_aeth = r->opcode >= OP_READ_RESP_FIRST &&
		      r->opcode <= OP_ATOMIC_ACK &&
		      r->opcode != OP_READ_RESP_MIDDLE;
	if (r->has_aeth) {
		r->syndrome = p[0];
		r->msn = w_get32(p) & 0xFFFFFF;
		p += W_AETH;
	}
	if (r->opcode == OP_ATOMIC_ACK) {
		r->atomic_orig = w_get64(p);
		p += 8;
	}
	r->payload = p;
	r->paylen = k->len - W_ICRC - pad - (size_t)(p - k->b);
}

bool w_recv(int fd, struct w_pkt *k, struct w_resp *r, unsigned ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	struct sockaddr_in src, dst;
	socklen_t slen = sizeof(src), dlen = sizeof(dst);
	ssize_t n;

	if (poll(&pfd, 1, (int)ms) <= 0)
		return false;
	n = recvfrom(fd, k->b, sizeof(k->b), 0, (struct sockaddr *)&src, &slen);
	if (n < 0)
		h_fail("recvfrom: %s", strerror(errno));
	if (getsockname(fd, (struct sockaddr *)&dst, &dlen))
		h_fail("getsockname: %s", strerror(errno));
	k->len = (size_t)n;
	if (k->len < W_BTH + W_ICRC)
		h_fail("runt datagram of %zd bytes from the target", n);
	/* the target's packets must carry a correct ICRC (Annex A17) */
	if (!icrc_ok(&src, &dst, k))
		h_fail("datagram of %zd bytes from the target: bad ICRC", n);
	parse(k, r);
	return true;
}

void w_drain(int fd)
{
	uint8_t b[W_MAX_PKT];

	for (int i = 0; i < 100000 && recv(fd, b, sizeof(b), MSG_DONTWAIT) >= 0; i++)
		;
}
