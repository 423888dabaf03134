/*
 * Invariant CRC of RoCEv2 (IBTA Annex A17.3.3): CRC-32 over 8 bytes of 0xFF,
 * the IP header and UDP header with their variant fields masked to ones, the
 * BTH with byte 4 masked, and the rest of the packet.  Stored least
 * significant byte first.
 */
#ifndef UROCE_ICRC_H
#define UROCE_ICRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* The outer headers of one datagram, as far as the ICRC covers them. */
struct uroce_icrc_ip {
	int family;		/* AF_INET or AF_INET6 */
	const void *src;	/* struct in_addr or struct in6_addr */
	const void *dst;
	uint16_t sport, dport;	/* host byte order */
	uint16_t ip_id;		/* IPv4 identification as sent */
	bool df;		/* IPv4 don't-fragment flag as sent */
};

/* ICRC of a datagram whose UDP payload, less its 4 ICRC bytes, is iov. */
uint32_t uroce_icrc_compute(const struct uroce_icrc_ip *ip,
			    const struct iovec *iov, unsigned niov);

/* ICRC of a RoCE v1 packet (Annex A16): the same 8 bytes of 0xFF for the
 * LRH it lacks, then its 40-byte GRH with the traffic class, flow label and
 * hop limit masked, the BTH with byte 4 masked, and the rest (iov: BTH up
 * to the ICRC, exclusive). */
uint32_t uroce_icrc_roce1(const uint8_t *grh, const struct iovec *iov,
			  unsigned niov);

/* Store / load the ICRC in wire order. */
static inline void uroce_icrc_put(uint8_t *p, uint32_t crc)
{
	p[0] = crc; p[1] = crc >> 8; p[2] = crc >> 16; p[3] = crc >> 24;
}
static inline uint32_t uroce_icrc_get(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/* IPv4 identifications that uroce, and Linux on an unconnected DF socket,
 * send: 0, or a GSO segment's index (at most 64 segments). */
enum { UROCE_ICRC_NATIVE_IDS = 64 };

enum uroce_icrc_verdict {
	UROCE_ICRC_BAD = 0,
	UROCE_ICRC_OK,		/* IPv6, or IPv4 with DF and a native ID */
	UROCE_ICRC_OK_ANY_ID,	/* IPv4, with another ID or without DF */
};

/*
 * Check a received datagram (pkt/len include the trailing ICRC).  A UDP
 * socket cannot see the IPv4 identification or DF bit, so ip->ip_id/df are
 * ignored for IPv4: the check first assumes ID 0 with DF, then solves for
 * the ID and DF bit as a linear correction of the CRC (CRC-32 is affine over
 * GF(2)).  Any ID catches corruption elsewhere with probability 1 - 2^-15
 * (UROCE_ICRC_OK_ANY_ID); taking only native IDs with DF, 1 - 2^-26
 * (UROCE_ICRC_OK): which to take is the receiver's to know of the sender.
 * On success *ip_id_out (if not NULL) receives the identification found.
 */
enum uroce_icrc_verdict uroce_icrc_check(const struct uroce_icrc_ip *ip,
					 const uint8_t *pkt, size_t len,
					 uint16_t *ip_id_out);

#endif
