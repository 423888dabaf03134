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

/* Store / load the ICRC in wire order. */
static inline void uroce_icrc_put(uint8_t *p, uint32_t crc)
{
	p[0] = crc; p[1] = crc >> 8; p[2] = crc >> 16; p[3] = crc >> 24;
}
static inline uint32_t uroce_icrc_get(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * Check a received datagram (pkt/len include the trailing ICRC).  A UDP
 * socket cannot see the IPv4 identification or DF bit, so ip->ip_id/df are
 * ignored for IPv4: the check first assumes ID 0 with DF (what uroce and any
 * Linux sender on an unconnected DF socket emit), then solves for the ID and
 * DF bit as a linear correction of the CRC (CRC-32 is affine over GF(2)),
 * which still catches corruption elsewhere with probability 1 - 2^-15.
 * On success *ip_id_out (if not NULL) receives the identification found.
 */
bool uroce_icrc_check(const struct uroce_icrc_ip *ip, const uint8_t *pkt,
		      size_t len, uint16_t *ip_id_out);

#endif
