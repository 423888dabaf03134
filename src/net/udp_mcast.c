/*
 * Multicast on the UDP link.  A RoCEv2 multicast group is an IP multicast
 * group (Annex A17.7: the MGID is the group's IPv6 address, or an IPv4 one
 * mapped), its datagrams sent to UDP port 4791 with DestQP 0xFFFFFF.
 *
 * Whoever owns the port receives a group's datagrams: a process in
 * single-user mode for itself, uroced for the processes it serves.  It
 * receives them on a socket of the group's own, bound to the group's
 * address and port 4791 (so nothing else arrives there) and joined to it on
 * every interface that carries one of the port's GIDs of the group's family
 * (the kernel then answers IGMP/MLD queries for it).  A socket of its own
 * per group keeps each group within the kernel's limit of memberships per
 * socket (net.ipv4.igmp_max_memberships, 20), and processes sharing the port
 * in single-user mode each get their own copy.  uroced records which slots
 * joined and hands each datagram to those processes only.
 */
#include <errno.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/udp.h"

struct udp_mcast_group {
	union uroce_sockaddr addr;	/* the IP group, port 0 */
	int fd;				/* bound to it, joined */
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

/* Joins fd to the group on every interface that has a GID of its family.
 * Returns how many took it, or the last error when none did. */
static int group_join(struct uroce_nic *nic, int fd,
		      const union uroce_sockaddr *addr)
{
	int family = addr->sa.sa_family;
	unsigned done[UROCE_GID_TBL_LEN];
	int ndone = 0, err = -EADDRNOTAVAIL;

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

			r = setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr,
				       sizeof(mr));
		} else {
			struct ipv6_mreq mr = {
				.ipv6mr_multiaddr = addr->in6.sin6_addr,
				.ipv6mr_interface = ifindex,
			};

			r = setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mr,
				       sizeof(mr));
		}
		if (r) {
			err = -errno;
			continue;
		}
		done[ndone++] = ifindex;
	}
	return ndone ? ndone : err;
}

/* The group's socket, joined and watched. */
static int group_open(struct uroce_nic *nic, struct udp_priv *p,
		      const union uroce_sockaddr *addr, int *out)
{
	int fd, err = udp_group_socket(addr, p->mux.port, &fd);

	if (err)
		return err;
	err = group_join(nic, fd, addr);
	if (err >= 0)
		err = udp_rx_watch(p, fd, RX_UDP);
	if (err < 0) {
		close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

/* Closing leaves the group.  Not under mcast_lock: the receiver may wait
 * for it while it holds the section we wait for. */
static void group_close(struct udp_priv *p, int fd)
{
	udp_rx_unwatch(p, fd);
	udp_rx_quiesce(p);
	close(fd);
}

int udp_mcast_member(struct uroce_nic *nic, unsigned slot,
		     const union uroce_sockaddr *addr, bool join)
{
	struct udp_priv *p = nic->net_priv;
	struct udp_mcast_group *g;
	int err = 0, gone = -1;

	if (slot >= UROCE_MAX_SLOTS)
		return -EINVAL;
	pthread_mutex_lock(&p->mcast_lock);
	g = group_find(p, addr);
	if (join && !g) {
		int fd;

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
		err = group_open(nic, p, addr, &fd);
		if (err)
			goto out;
		g = &p->mcast[p->nmcast++];
		memset(g, 0, sizeof(*g));
		g->addr = *addr;
		g->fd = fd;
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
		gone = g->fd;
		*g = p->mcast[--p->nmcast];
	}
out:
	pthread_mutex_unlock(&p->mcast_lock);
	if (gone >= 0)
		group_close(p, gone);
	return err;
}

void udp_mcast_drop_slot(struct uroce_nic *nic, unsigned slot)
{
	struct udp_priv *p = nic->net_priv;

	for (;;) {
		int gone = -1;

		pthread_mutex_lock(&p->mcast_lock);
		for (unsigned i = 0; i < p->nmcast && gone < 0; i++) {
			struct udp_mcast_group *g = &p->mcast[i];

			g->slots[slot / 64] &= ~(1ull << (slot % 64));
			if (no_members(g)) {
				gone = g->fd;
				*g = p->mcast[--p->nmcast];
			}
		}
		pthread_mutex_unlock(&p->mcast_lock);
		if (gone < 0)
			return;
		group_close(p, gone);
	}
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
			uroce_mux_fwd_send(nic, slot, rx);
	}
	pthread_mutex_unlock(&p->mcast_lock);
	if (!g)
		STAT_INC(nic, rx_unknown_qp);
	return ours;
}

int udp_mcast_join(struct uroce_nic *nic, const union uroce_sockaddr *group)
{
	struct udp_priv *p = nic->net_priv;

	if (p->mux.svc_fd >= 0)
		return uroce_mux_svc_mcast(&p->mux, group, true);
	return udp_mcast_member(nic, nic->slot, group, true);
}

void udp_mcast_leave(struct uroce_nic *nic, const union uroce_sockaddr *group)
{
	struct udp_priv *p = nic->net_priv;

	if (p->mux.svc_fd >= 0)
		uroce_mux_svc_mcast(&p->mux, group, false);
	else
		udp_mcast_member(nic, nic->slot, group, false);
}

/* At close, when nothing receives any more. */
void udp_mcast_close(struct udp_priv *p)
{
	for (unsigned i = 0; i < p->nmcast; i++)
		close(p->mcast[i].fd);
	free(p->mcast);
	p->mcast = NULL;
	p->nmcast = p->mcast_cap = 0;
	pthread_mutex_destroy(&p->mcast_lock);
}
