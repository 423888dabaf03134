/*
 * The port's GID table and node GUID.  On RoCEv2 a GID is an IP address
 * (IPv4 as the IPv4-mapped IPv6 address ::ffff:a.b.c.d) and the peer is
 * addressed by GID alone, so the table is simply the host's usable
 * addresses.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if_arp.h>
#include <net/if.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "net/gid.h"
#include "net/neigh.h"
#include "uroce.h"

void uroce_gid_to_sockaddr(const union ibv_gid *gid, uint16_t port,
			   union uroce_sockaddr *out)
{
	const struct in6_addr *a6 = (const struct in6_addr *)gid->raw;

	memset(out, 0, sizeof(*out));
	if (IN6_IS_ADDR_V4MAPPED(a6)) {
		out->in4.sin_family = AF_INET;
		out->in4.sin_port = htons(port);
		memcpy(&out->in4.sin_addr, &gid->raw[12], 4);
	} else {
		out->in6.sin6_family = AF_INET6;
		out->in6.sin6_port = htons(port);
		memcpy(&out->in6.sin6_addr, gid->raw, 16);
	}
}

void uroce_sockaddr_to_gid(const union uroce_sockaddr *sa, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa.sa_family == AF_INET) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &sa->in4.sin_addr, 4);
	} else if (sa->sa.sa_family == AF_INET6) {
		memcpy(gid->raw, &sa->in6.sin6_addr, 16);
	}
}

bool uroce_sockaddr_same_ip(const union uroce_sockaddr *a,
			    const union uroce_sockaddr *b)
{
	union ibv_gid ga, gb;

	if ((a->sa.sa_family != AF_INET && a->sa.sa_family != AF_INET6) ||
	    (b->sa.sa_family != AF_INET && b->sa.sa_family != AF_INET6))
		return false;
	/* Through the GID form, so that a.b.c.d and ::ffff:a.b.c.d (as a
	 * dual-stack socket reports it) compare equal. */
	uroce_sockaddr_to_gid(a, &ga);
	uroce_sockaddr_to_gid(b, &gb);
	return !memcmp(&ga, &gb, sizeof(ga));
}

/* Discovery order: best first, because applications take index 0. */
enum gid_class {
	GID_V4_LOOPBACK,	/* client and server on one host just work */
	GID_V4,
	GID_V6_LOOPBACK,
	GID_V6,
	GID_UNUSABLE,
};

static enum gid_class classify(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;

		return in4->sin_addr.s_addr == htonl(INADDR_LOOPBACK) ?
			       GID_V4_LOOPBACK : GID_V4;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a6 =
			&((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_LOOPBACK(a6))
			return GID_V6_LOOPBACK;
		/* A link-local address names a peer only together with a
		 * scope id (the interface), which a 16-byte GID cannot
		 * carry; multicast is never a unicast endpoint. */
		if (IN6_IS_ADDR_LINKLOCAL(a6) || IN6_IS_ADDR_MULTICAST(a6))
			return GID_UNUSABLE;
		return GID_V6;
	}
	return GID_UNUSABLE;
}

/* type < 0: any */
static int gid_search(const struct uroce_nic *nic, const union ibv_gid *gid,
		      int type)
{
	for (int i = 0; i < nic->num_gids; i++)
		if ((type < 0 || nic->gids[i].type == (enum ibv_gid_type)type) &&
		    !memcmp(&nic->gids[i].gid, gid, sizeof(*gid)))
			return i;
	return -1;
}

int uroce_gid_find(const struct uroce_nic *nic, const union ibv_gid *gid)
{
	return gid_search(nic, gid, -1);
}

int uroce_gid_find_type(const struct uroce_nic *nic, const union ibv_gid *gid,
			enum ibv_gid_type type)
{
	return gid_search(nic, gid, (int)type);
}

static bool gid_present(const struct uroce_nic *nic, const union ibv_gid *gid)
{
	return uroce_gid_find(nic, gid) >= 0;
}

/* The address of a usable (AF_INET or AF_INET6) ifaddrs entry. */
static void ifa_sockaddr(const struct ifaddrs *ifa, union uroce_sockaddr *sa)
{
	memset(sa, 0, sizeof(*sa));
	memcpy(sa, ifa->ifa_addr, ifa->ifa_addr->sa_family == AF_INET ?
					  sizeof(sa->in4) : sizeof(sa->in6));
}

/* Append the address of ifa unless it is already in the table; false once
 * the table is full. */
static bool gid_add(struct uroce_nic *nic, const struct ifaddrs *ifa)
{
	union uroce_sockaddr sa;
	union ibv_gid gid;

	ifa_sockaddr(ifa, &sa);
	uroce_sockaddr_to_gid(&sa, &gid);
	if (gid_present(nic, &gid))
		return true;
	if (nic->num_gids == UROCE_GID_TBL_LEN) {
		uroce_log("GID table full (%d entries): %s on %s left out",
			  UROCE_GID_TBL_LEN, ifa->ifa_name,
			  ifa->ifa_addr->sa_family == AF_INET ? "IPv4" : "IPv6");
		return false;
	}
	nic->gids[nic->num_gids].gid = gid;
	nic->gids[nic->num_gids].ifindex = if_nametoindex(ifa->ifa_name);
	nic->gids[nic->num_gids].type = IBV_GID_TYPE_ROCE_V2;
	nic->num_gids++;
	return true;
}

static bool usable(const struct ifaddrs *ifa)
{
	return ifa->ifa_addr && (ifa->ifa_flags & IFF_UP) &&
	       classify(ifa->ifa_addr) != GID_UNUSABLE;
}

static void discover_all(struct uroce_nic *nic, struct ifaddrs *ifas)
{
	for (enum gid_class c = GID_V4_LOOPBACK; c < GID_UNUSABLE; c++)
		for (struct ifaddrs *ifa = ifas; ifa; ifa = ifa->ifa_next)
			if (usable(ifa) && classify(ifa->ifa_addr) == c &&
			    !gid_add(nic, ifa))
				return;
}

/* UROCE_ADDRS: exactly the listed addresses, in the listed order (config.c
 * has already checked the syntax).  An address that no up interface holds
 * is skipped: we could neither send from it nor receive on it. */
static void discover_listed(struct uroce_nic *nic, struct ifaddrs *ifas,
			    const char *addrs)
{
	char list[sizeof(nic->cfg->addrs)], *save, *tok;

	snprintf(list, sizeof(list), "%s", addrs);
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		union uroce_sockaddr want;
		struct ifaddrs *found = NULL;

		memset(&want, 0, sizeof(want));
		if (inet_pton(AF_INET, tok, &want.in4.sin_addr) == 1)
			want.sa.sa_family = AF_INET;
		else if (inet_pton(AF_INET6, tok, &want.in6.sin6_addr) == 1)
			want.sa.sa_family = AF_INET6;
		else
			continue;

		for (struct ifaddrs *ifa = ifas; ifa && !found; ifa = ifa->ifa_next) {
			union uroce_sockaddr have;

			if (!usable(ifa))
				continue;
			ifa_sockaddr(ifa, &have);
			if (uroce_sockaddr_same_ip(&want, &have))
				found = ifa;
		}
		if (!found) {
			fprintf(stderr,
				"uroce: UROCE_ADDRS: %s is not a usable address "
				"of any up interface; skipped\n", tok);
			continue;
		}
		if (!gid_add(nic, found))
			return;
	}
}

int uroce_gids_discover(struct uroce_nic *nic)
{
	struct ifaddrs *ifas;

	if (getifaddrs(&ifas))
		return errno;
	nic->num_gids = 0;
	if (nic->cfg->addrs[0])
		discover_listed(nic, ifas, nic->cfg->addrs);
	else
		discover_all(nic, ifas);
	freeifaddrs(ifas);

	if (!nic->num_gids) {
		fprintf(stderr, "uroce: no usable IP address for the GID table%s\n",
			nic->cfg->addrs[0] ? " (check UROCE_ADDRS)" : "");
		return EADDRNOTAVAIL;
	}
	for (int i = 0; i < nic->num_gids; i++) {
		char buf[INET6_ADDRSTRLEN];

		inet_ntop(AF_INET6, nic->gids[i].gid.raw, buf, sizeof(buf));
		uroce_log("GID[%d] = %s (ifindex %u)", i, buf,
			  nic->gids[i].ifindex);
	}
	return 0;
}

/*
 * RoCE v1 GIDs: one for each v2 GID on an Ethernet (or the loopback)
 * interface, the same address, after all the v2 ones, so that index 0 and
 * every index a program found before stay what they were.
 */
void uroce_gids_add_roce1(struct uroce_nic *nic)
{
	int nv2 = nic->num_gids;

	for (int i = 0; i < nv2; i++) {
		int hw = uroce_if_hwtype(nic->gids[i].ifindex);
		char buf[INET6_ADDRSTRLEN];

		if (hw != ARPHRD_ETHER && hw != ARPHRD_LOOPBACK)
			continue;
		if (nic->num_gids == UROCE_GID_TBL_LEN) {
			uroce_log("GID table full (%d entries): RoCE v1 GIDs "
				  "from index %d left out", UROCE_GID_TBL_LEN, i);
			return;
		}
		nic->gids[nic->num_gids] = nic->gids[i];
		nic->gids[nic->num_gids].type = IBV_GID_TYPE_ROCE_V1;
		inet_ntop(AF_INET6, nic->gids[i].gid.raw, buf, sizeof(buf));
		uroce_log("GID[%d] = %s (ifindex %u, RoCE v1)", nic->num_gids,
			  buf, nic->gids[i].ifindex);
		nic->num_gids++;
	}
}

/*
 * The largest RoCE MTU (256..4096, at most the port's) whose packets fit
 * the link that GID index gid's address is on: the link MTU less 80 bytes
 * of headers (IPv6 40, UDP 8, BTH 12, RETH 16, ICRC 4), as rxe derives
 * it.  Packets must fit: uroce sends with DF set, and the kernel refuses
 * larger datagrams.
 */
uint32_t uroce_gid_path_mtu(struct uroce_nic *nic, unsigned gid)
{
	uint32_t mtu = 128u << nic->cfg->max_mtu;
	struct ifreq ifr = { 0 };
	int fd;

	if (gid >= (unsigned)nic->num_gids ||
	    !if_indextoname(nic->gids[gid].ifindex, ifr.ifr_name))
		return mtu;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return mtu;
	if (!ioctl(fd, SIOCGIFMTU, &ifr))
		while (mtu > 256 && mtu + 80 > (uint32_t)ifr.ifr_mtu)
			mtu /= 2;
	close(fd);
	return mtu;
}

static __be64 node_guid;
static pthread_once_t node_guid_once = PTHREAD_ONCE_INIT;

/* FNV-1a: a stable, well-spread 64-bit hash of a short string. */
static uint64_t fnv1a(uint64_t h, const char *s)
{
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* A GUID that stays the same across runs on one host and differs between
 * hosts: hashed from the machine id (and the host name, which tells apart
 * containers cloned from one image). */
static void make_node_guid(void)
{
	uint64_t h = 0xcbf29ce484222325ull;
	char buf[256] = "";
	uint8_t eui[8];
	FILE *f = fopen("/etc/machine-id", "re");

	if (f) {
		if (fgets(buf, sizeof(buf), f))
			h = fnv1a(h, buf);
		fclose(f);
	}
	if (!gethostname(buf, sizeof(buf) - 1))
		h = fnv1a(h, buf);
	for (int i = 0; i < 8; i++)
		eui[i] = h >> (56 - 8 * i);
	/* EUI-64 rules: unicast (I/G bit clear), locally administered
	 * (U/L bit set), so it can never collide with a vendor-assigned GUID. */
	eui[0] = (eui[0] & ~0x01) | 0x02;
	memcpy(&node_guid, eui, sizeof(node_guid));
}

__be64 uroce_node_guid(void)
{
	pthread_once(&node_guid_once, make_node_guid);
	return node_guid;
}
