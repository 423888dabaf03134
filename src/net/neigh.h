/*
 * Ethernet addresses of IP neighbours, from the kernel's neighbour tables
 * (ARP, IPv6 neighbour discovery), for the links that write their own
 * Ethernet headers (net/neigh.c).
 */
#ifndef UROCE_NET_NEIGH_H
#define UROCE_NET_NEIGH_H

#include <stdint.h>

#include "net/link.h"

enum { UROCE_ETH_ALEN = 6 };

/* The ARPHRD_* type of interface ifindex, or -1. */
int uroce_if_hwtype(unsigned ifindex);

/* The Ethernet address of ip on interface ifindex, asking the kernel to
 * resolve it (from self) when its table has none, for at most timeout_ms:
 * 0, or -EHOSTUNREACH when no neighbour answered, or another -errno. */
int uroce_neigh_resolve(unsigned ifindex, const union uroce_sockaddr *self,
			const union uroce_sockaddr *ip,
			uint8_t mac[UROCE_ETH_ALEN], unsigned timeout_ms);

#endif
