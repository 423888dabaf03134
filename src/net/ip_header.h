/*
 * The IP header of a RoCE v2 datagram, as the kernel would have sent it:
 * for captures (net/pcap.c) and for the GRH area a UD receive reports
 * (IBTA 11.4.1.2), both of which only see socket addresses.
 */
#ifndef UROCE_NET_IP_HEADER_H
#define UROCE_NET_IP_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "net/link.h"

enum { UROCE_IP4_HDR = 20, UROCE_IP6_HDR = 40 };

struct uroce_ip_fields {
	const union uroce_sockaddr *src, *dst;	/* same family */
	uint16_t payload;	/* bytes after the IP header: UDP header on */
	uint16_t id;		/* IPv4 identification */
	uint8_t tos, ttl;	/* traffic class, hop limit */
};

/* RFC 1071: the one's-complement sum of an IPv4 header's 20 bytes, which
 * is 0xffff over a header whose checksum is right. */
uint16_t uroce_ip4_header_sum(const uint8_t *h);
/* Writes the IPv4 header (DF set, checksum filled in) or the IPv6 header
 * (flow label 0) of a UDP datagram into h; returns its length. */
size_t uroce_ip_header(uint8_t *h, const struct uroce_ip_fields *f);

#endif
