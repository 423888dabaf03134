/*
 * IP headers rebuilt from socket addresses (net/ip_header.h).
 */
#include <netinet/in.h>
#include <string.h>

#include "net/ip_header.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

uint16_t uroce_ip4_header_sum(const uint8_t *h)
{
	uint32_t sum = 0;

	for (int i = 0; i < UROCE_IP4_HDR; i += 2)
		sum += (uint32_t)h[i] << 8 | h[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

size_t uroce_ip_header(uint8_t *h, const struct uroce_ip_fields *f)
{
	if (f->src->sa.sa_family == AF_INET) {
		memset(h, 0, UROCE_IP4_HDR);
		h[0] = 0x45;
		h[1] = f->tos;
		put16(h + 2, UROCE_IP4_HDR + f->payload);
		put16(h + 4, f->id);
		put16(h + 6, 0x4000);			/* DF */
		h[8] = f->ttl;
		h[9] = IPPROTO_UDP;
		memcpy(h + 12, &f->src->in4.sin_addr, 4);
		memcpy(h + 16, &f->dst->in4.sin_addr, 4);
		put16(h + 10, ~uroce_ip4_header_sum(h));
		return UROCE_IP4_HDR;
	}
	h[0] = 0x60 | f->tos >> 4;
	h[1] = f->tos << 4;
	h[2] = h[3] = 0;				/* flow label */
	put16(h + 4, f->payload);
	h[6] = IPPROTO_UDP;
	h[7] = f->ttl;
	memcpy(h + 8, &f->src->in6.sin6_addr, 16);
	memcpy(h + 24, &f->dst->in6.sin6_addr, 16);
	return UROCE_IP6_HDR;
}
