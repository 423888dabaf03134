/*
 * RoCEv2 ICRC.  Sending and the usual receive take one CRC pass: the masked
 * IP/UDP/BTH pseudo header is built on the stack and the payload is
 * checksummed in place.  Only an IPv4 packet whose sender did not use ID 0
 * with DF costs more, and then a few GF(2) multiplications, independent of
 * the payload size.
 */
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>

#include <isa-l.h>

#include "net/icrc.h"
#include "transport/hdr.h"

enum {
	PSEUDO_LRH_LEN = 8,
	IP4_HDR_LEN = 20,
	IP6_HDR_LEN = 40,
	UDP_HDR_LEN = 8,
	/* Largest UDP payload IPv4 can carry; bounds x_inv8_pow2k below. */
	IP4_UDP_MAX = 65535 - IP4_HDR_LEN - UDP_HDR_LEN,
};

/*
 * ISA-L's AVX-512 CRC returns with the upper halves of the vector registers
 * in use (it ends without vzeroupper), and the first SSE instructions that
 * follow, anywhere, then pay for the transition: 330 cycles per packet
 * measured here, more than the CRC of its 4 KiB payload.  We end the
 * transition ourselves where the CPU has AVX (vzeroupper faults without).
 */
static bool clear_upper_vectors;

__attribute__((constructor)) static void icrc_detect_avx(void)
{
	__builtin_cpu_init();
	clear_upper_vectors = __builtin_cpu_supports("avx");
}

static inline void end_vector_code(void)
{
	if (clear_upper_vectors)
		__asm__ volatile("vzeroupper");
}

/* CRC state (as crc32_gzip_refl chains it) after the 8 0xFF pseudo-LRH bytes. */
#define ICRC_SEED 0x2144DF1Cu

static void icrc_put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

/* Masked IP header; returns its length.  udp_len includes the UDP header. */
static size_t build_ip(uint8_t *h, const struct uroce_icrc_ip *ip,
		       uint16_t udp_len)
{
	if (ip->family == AF_INET) {
		h[0] = 0x45;
		h[1] = 0xFF;			/* TOS */
		icrc_put16(h + 2, IP4_HDR_LEN + udp_len);
		icrc_put16(h + 4, ip->ip_id);
		icrc_put16(h + 6, ip->df ? 0x4000 : 0);
		h[8] = 0xFF;			/* TTL */
		h[9] = IPPROTO_UDP;
		h[10] = h[11] = 0xFF;		/* header checksum */
		memcpy(h + 12, ip->src, 4);
		memcpy(h + 16, ip->dst, 4);
		return IP4_HDR_LEN;
	}
	/* Version 6 survives; traffic class and flow label are masked. */
	h[0] = 0x6F;
	h[1] = h[2] = h[3] = 0xFF;
	icrc_put16(h + 4, udp_len);
	h[6] = IPPROTO_UDP;
	h[7] = 0xFF;				/* hop limit */
	memcpy(h + 8, ip->src, 16);
	memcpy(h + 24, ip->dst, 16);
	return IP6_HDR_LEN;
}

/* CRC of the pseudo headers h[0..hl) (room for a BTH after them), then of
 * iov with the BTH's byte 4 masked. */
static uint32_t icrc_over(uint8_t *h, size_t hl, const struct iovec *iov,
			  unsigned niov)
{
	size_t got = 0, off = 0;
	unsigned i;
	uint32_t crc;

	/* The BTH may straddle iovecs; gather it so byte 4 can be masked. */
	for (i = 0; i < niov && got < BTH_LEN; ) {
		size_t n = iov[i].iov_len - off;

		if (n > BTH_LEN - got)
			n = BTH_LEN - got;
		memcpy(h + hl + got, (const uint8_t *)iov[i].iov_base + off, n);
		got += n;
		off += n;
		if (off == iov[i].iov_len) {
			i++;
			off = 0;
		}
	}
	if (got > 4)
		h[hl + 4] = 0xFF;		/* FECN, BECN, resv6 */

	crc = crc32_gzip_refl(ICRC_SEED, h, hl + got);
	for (; i < niov; i++, off = 0)
		crc = crc32_gzip_refl(crc, (const uint8_t *)iov[i].iov_base + off,
				      iov[i].iov_len - off);
	end_vector_code();
	return crc;
}

uint32_t uroce_icrc_compute(const struct uroce_icrc_ip *ip,
			    const struct iovec *iov, unsigned niov)
{
	uint8_t h[IP6_HDR_LEN + UDP_HDR_LEN + BTH_LEN];
	size_t len = 0, hl;
	uint16_t udp_len;

	for (unsigned i = 0; i < niov; i++)
		len += iov[i].iov_len;
	udp_len = UDP_HDR_LEN + len + ICRC_LEN;

	hl = build_ip(h, ip, udp_len);
	icrc_put16(h + hl, ip->sport);
	icrc_put16(h + hl + 2, ip->dport);
	icrc_put16(h + hl + 4, udp_len);
	icrc_put16(h + hl + 6, 0xFFFF);		/* UDP checksum */
	return icrc_over(h, hl + UDP_HDR_LEN, iov, niov);
}

uint32_t uroce_icrc_roce1(const uint8_t *grh, const struct iovec *iov,
			  unsigned niov)
{
	uint8_t h[IP6_HDR_LEN + BTH_LEN];

	memcpy(h, grh, IP6_HDR_LEN);
	/* IPVer survives; traffic class, flow label and hop limit do not */
	h[0] |= 0x0F;
	h[1] = h[2] = h[3] = 0xFF;
	h[7] = 0xFF;
	return icrc_over(h, IP6_HDR_LEN, iov, niov);
}

/*
 * GF(2)[x] mod the CRC-32 polynomial P, in the CRC's own reflected
 * representation: bit 31 holds the coefficient of x^0.
 */
#define CRC_POLY 0xEDB88320u

static uint32_t gf2_mul(uint32_t a, uint32_t b)
{
	uint32_t p = 0;

	for (int i = 0; i < 32; i++) {
		p ^= b & -(a >> 31);
		a <<= 1;
		b = b >> 1 ^ (CRC_POLY & -(b & 1));	/* b *= x */
	}
	return p;
}

/*
 * x^(-8 * 2^k) mod P for k = 0..16, enough for any IPv4 datagram.  P is
 * primitive, so x^-1 = x^(2^32 - 2).
 */
static const uint32_t x_inv8_pow2k[17] = {
	0x6567cb95, 0xd7125358, 0x5b358fd3, 0x2e9bb40b, 0x12a59a49,
	0x8df9403d, 0x5139de12, 0xba340226, 0x29c45641, 0x12fbc105,
	0xecd30c55, 0x3755ebd8, 0x24ee460c, 0x23783fcf, 0x479933fc,
	0xa39442a5, 0x9ea0056d,
};

/*
 * Recovering the IPv4 ID and DF.  A reflected CRC feeds bit j of byte k as
 * the (8k+j)-th bit, so flipping it in a message of L bytes XORs
 * x^(8L + 31 - (8k+j)) mod P into the CRC, whatever the other bits are.  The
 * last unknown bit fed is DF (bit 6 of the flags byte), at DF_POS; an
 * unknown bit t positions before it contributes x^(8L + 31 - DF_POS) * x^t.
 * Multiplying the observed difference by x^-(8L + 31 - DF_POS) therefore
 * leaves sum(c_t x^t) over t < 32, which needs no reduction: the flipped
 * bits can be read off directly, and any other bit set means corruption.
 * In the reflected representation t = 0 (DF) lands in bit 31, the ID's
 * high byte in bits 9..16 and its low byte in bits 17..24.
 */
enum {
	DF_POS = 8 * (PSEUDO_LRH_LEN + 6) + 6,
	ID_SHIFT = 9,
};
#define X_POW_DF_POS_MINUS_31 0xa6770bb4u	/* x^87 mod P */
#define DF_FLIP 0x80000000u

static bool solve_id(uint32_t diff, size_t msg_len, uint16_t *id, bool *df)
{
	/* The segments of a GSO run (all but the first carry an ID other
	 * than 0) are mostly of one length: keep the last length's scale. */
	static _Thread_local size_t cached_len;
	static _Thread_local uint32_t cached_scale;
	uint32_t scale = X_POW_DF_POS_MINUS_31, u;

	if (msg_len == cached_len) {
		scale = cached_scale;
	} else {
		cached_len = msg_len;
		for (unsigned k = 0; msg_len; k++, msg_len >>= 1)
			if (msg_len & 1)
				scale = gf2_mul(scale, x_inv8_pow2k[k]);
		cached_scale = scale;
	}
	u = gf2_mul(scale, diff);
	if (u & ~(DF_FLIP | 0xFFFFu << ID_SHIFT))
		return false;
	*id = __builtin_bswap16(u >> ID_SHIFT);
	*df = !(u & DF_FLIP);
	return true;
}

enum uroce_icrc_verdict uroce_icrc_check(const struct uroce_icrc_ip *ip,
					 const uint8_t *pkt, size_t len,
					 uint16_t *ip_id_out)
{
	struct uroce_icrc_ip guess = *ip;
	struct iovec iov = { .iov_base = (void *)pkt };
	uint32_t stored, crc;
	uint16_t id = 0;
	bool df = true;

	if (len < BTH_LEN + ICRC_LEN ||
	    (ip->family != AF_INET && ip->family != AF_INET6))
		return UROCE_ICRC_BAD;
	iov.iov_len = len - ICRC_LEN;
	stored = uroce_icrc_get(pkt + iov.iov_len);

	if (ip->family == AF_INET6) {
		if (uroce_icrc_compute(ip, &iov, 1) != stored)
			return UROCE_ICRC_BAD;
	} else {
		if (len > IP4_UDP_MAX)
			return UROCE_ICRC_BAD;
		guess.ip_id = 0;
		guess.df = true;
		crc = uroce_icrc_compute(&guess, &iov, 1);
		if (crc != stored &&
		    !solve_id(crc ^ stored, PSEUDO_LRH_LEN + IP4_HDR_LEN +
			      UDP_HDR_LEN + iov.iov_len, &id, &df))
			return UROCE_ICRC_BAD;
	}
	if (ip_id_out)
		*ip_id_out = id;
	return df && id < UROCE_ICRC_NATIVE_IDS ? UROCE_ICRC_OK
						: UROCE_ICRC_OK_ANY_ID;
}
