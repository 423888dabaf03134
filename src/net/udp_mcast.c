/*
 * Multicast on the UDP link.  A RoCEv2 multicast group is an IP multicast
 * group (Annex A17.7: the MGID is the group's IPv6 address, or an IPv4 one
 * mapped), its datagrams sent to UDP port 4791 with DestQP 0xFFFFFF.
 *
 * Whoever owns the port's receiving sockets joins the group on them, on
 * every interface that carries one of the port's GIDs of the group's family
 * (the kernel then answers IGMP/MLD queries for it): a process in
 * single-user mode for itself, uroced for the processes it serves.  The
 * sockets take only the groups joined on them (IP_MULTICAST_ALL off), so
 * each process sharing the port in single-user mode gets its own copy of
 * its groups' datagrams and none of the others'; uroced records which
 * slots joined and hands each datagram to those processes only.
 */
#include <errno.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>

#include "net/udp.h"

struct udp_mcast_group {
	union uroce_sockaddr addr;	/* the IP group, port 0 */
	uint64_t slots[UROCE_MAX_SLOTS / 64];	/* members */
};

static bool slot_member(const struct udp_mcast_group *g, unsigned slot)
{
	return g->slots[slot / 64] >> (slot % 64) & 1;
}

static bool no_members(const struct udp_mcast_group *g)
{
	for (unsigned i = 0; i < UROCE_MAX_SLOTS / 64; i++)
		if (g->slots[i])
			return false;
	return true;
}

static struct udp_mcast_group *group_find(struct udp_priv *p,
					  const union uroce_sockaddr *addr)
{
	for (unsigned i = 0; i < p->nmcast; i++)
		if (uroce_sockaddr_same_ip(&p->mcast[i].addr, addr))
			return &p->mcast[i];
	return NULL;
}

/* Joins (or leaves) group on the socket of its family, once per interface
 * that has a GID of that family.  Returns how many interfaces took it, or
 * the last error when none did. */
static int group_membership(struct uroce_nic *nic, struct udp_priv *p,
			    const union uroce_sockaddr *addr, bool join)
{
	int family = addr->sa.sa_family;
	int fd = family == AF_INET ? p->fd4 : p->fd6;
	unsigned done[UROCE_GID_TBL_LEN];
	int ndone = 0, err = -EADDRNOTAVAIL;

	if (fd < 0)
		return -EAFNOSUPPORT;
	for (int i = 0; i < nic->num_gids; i++) {
		union uroce_sockaddr gid_addr;
		unsigned ifindex = nic->gids[i].ifindex;
		bool seen = false;
		int r;

		uroce_gid_to_sockaddr(&nic->gids[i].gid, 0, &gid_addr);
		if (gid_addr.sa.sa_family != family || !ifindex)
			continue;
		for (int k = 0; k < ndone; k++)
			seen |= done[k] == ifindex;
		if (seen)
			continue;
		if (family == AF_INET) {
			struct ip_mreqn mr = {
				.imr_multiaddr = addr->in4.sin_addr,
				.imr_ifindex = (int)ifindex,
			};

			r = setsockopt(fd, IPPROTO_IP,
				       join ? IP_ADD_MEMBERSHIP
					    : IP_DROP_MEMBERSHIP,
				       &mr, sizeof(mr));
		} else {
			struct ipv6_mreq mr = {
				.ipv6mr_multiaddr = addr->in6.sin6_addr,
				.ipv6mr_interface = ifindex,
			};

			r = setsockopt(fd, IPPROTO_IPV6,
				       join ? IPV6_JOIN_GROUP
					    : IPV6_LEAVE_GROUP,
				       &mr, sizeof(mr));
		}
		if (r) {
			err = -errno;
			continue;
		}
		done[ndone++] = ifindex;
	}
	return ndone ? ndone : err;
}

int udp_mcast_member(struct uroce_nic *nic, unsigned slot,
		     const union uroce_sockaddr *addr, bool join)
{
	struct udp_priv *p = nic->net_priv;
	struct udp_mcast_group *g;
	int err = 0;

	if (slot >= UROCE_MAX_SLOTS)
		return -EINVAL;
	pthread_mutex_lock(&p->mcast_lock);
	g = group_find(p, addr);
	if (join && !g) {
		if (p->nmcast == p->mcast_cap) {
			unsigned cap = p->mcast_cap ? 2 * p->mcast_cap : 8;
			struct udp_mcast_group *m =
				realloc(p->mcast, cap * sizeof(*m));

			if (!m) {
				err = -ENOMEM;
				goto out;
			}
			p->mcast = m;
			p->mcast_cap = cap;
		}
		err = group_membership(nic, p, addr, true);
		if (err < 0)
			goto out;
		err = 0;
		g = &p->mcast[p->nmcast++];
		memset(g, 0, sizeof(*g));
		g->addr = *addr;
	}
	if (!g) {
		err = -ENOENT;
		goto out;
	}
	if (join) {
		g->slots[slot / 64] |= 1ull << (slot % 64);
		goto out;
	}
	g->slots[slot / 64] &= ~(1ull << (slot % 64));
	if (no_members(g)) {
		group_membership(nic, p, &g->addr, false);
		*g = p->mcast[--p->nmcast];
	}
out:
	pthread_mutex_unlock(&p->mcast_lock);
	return err;
}

void udp_mcast_drop_slot(struct uroce_nic *nic, unsigned slot)
{
	struct udp_priv *p = nic->net_priv;

	pthread_mutex_lock(&p->mcast_lock);
	for (unsigned i = 0; i < p->nmcast;) {
		struct udp_mcast_group *g = &p->mcast[i];

		g->slots[slot / 64] &= ~(1ull << (slot % 64));
		if (no_members(g)) {
			group_membership(nic, p, &g->addr, false);
			*g = p->mcast[--p->nmcast];
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&p->mcast_lock);
}

bool udp_mcast_route(struct uroce_nic *nic, const struct uroce_rxpkt *rx)
{
	struct udp_priv *p = nic->net_priv;
	struct udp_mcast_group *g;
	bool ours = false;

	pthread_mutex_lock(&p->mcast_lock);
	g = group_find(p, &rx->dst);
	for (unsigned slot = 0; g && slot < UROCE_MAX_SLOTS; slot++) {
		if (!g->slots[slot / 64]) {
			slot |= 63;
			continue;
		}
		if (!slot_member(g, slot))
			continue;
		if (slot == nic->slot)
			ours = true;
		else
			udp_fwd_send(nic, slot, rx);
	}
	pthread_mutex_unlock(&p->mcast_lock);
	if (!g)
		STAT_INC(nic, rx_unknown_qp);
	return ours;
}

int udp_mcast_join(struct uroce_nic *nic, const union uroce_sockaddr *group)
{
	struct udp_priv *p = nic->net_priv;

	if (p->svc_fd >= 0)
		return udp_svc_mcast(p, group, true);
	return udp_mcast_member(nic, nic->slot, group, true);
}

void udp_mcast_leave(struct uroce_nic *nic, const union uroce_sockaddr *group)
{
	struct udp_priv *p = nic->net_priv;

	if (p->svc_fd >= 0)
		udp_svc_mcast(p, group, false);
	else
		udp_mcast_member(nic, nic->slot, group, false);
}

void udp_mcast_close(struct udp_priv *p)
{
	free(p->mcast);
	p->mcast = NULL;
	p->nmcast = p->mcast_cap = 0;
	pthread_mutex_destroy(&p->mcast_lock);
}
