/*
 * Address handles, and building one from a received UD message.
 *
 * On RoCE a peer is named by its GID alone, so every AH needs a GRH; the GID
 * is resolved to the UDP destination once, here, rather than per send.
 *
 * The UD receive path leaves 40 bytes of GRH at the start of each receive
 * buffer, as RoCE devices do: a real IPv6 header for IPv6, and for IPv4 the
 * 20-byte IPv4 header in the last 20 of those bytes (what rxe writes and
 * rdma-core's ibv_init_ah_from_wc parses).
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/gid.h"
#include "net/ip_header.h"
#include "verbs/ops.h"

enum {
	GRH_IPV4_OFF = 20,	/* IPv4 header inside the 40-byte GRH area */
	IPV4_TOS = 1,		/* offsets inside the IPv4 header */
	IPV4_TTL = 8,
	IPV4_SADDR = 12,
	IPV4_DADDR = 16,
};

UROCE_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *ibpd,
					  struct ibv_ah_attr *attr)
{
	struct uroce_nic *nic;
	struct uroce_ah *ah;
	int err;

	if (!ibpd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	nic = to_uctx(ibpd->context)->nic;
	if (!attr->is_global || attr->port_num != 1 ||
	    attr->grh.sgid_index >= nic->num_gids) {
		errno = EINVAL;
		return NULL;
	}
	if (!uroce_nic_take(&nic->used.ah, UROCE_MAX_AH)) {
		errno = ENOMEM;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		atomic_fetch_sub(&nic->used.ah, 1);
		errno = ENOMEM;
		return NULL;
	}
	uroce_gid_to_sockaddr(&attr->grh.dgid, nic->cfg->udp_port, &ah->dst);
	/* an IPv4 source cannot reach an IPv6 destination or the reverse */
	uroce_gid_to_sockaddr(&nic->gids[attr->grh.sgid_index].gid,
			      nic->cfg->udp_port, &ah->src);
	if (ah->src.sa.sa_family != ah->dst.sa.sa_family) {
		free(ah);
		atomic_fetch_sub(&nic->used.ah, 1);
		errno = EINVAL;
		return NULL;
	}
	ah->gid_type = nic->gids[attr->grh.sgid_index].type;
	/* a link with addresses of its own learns the peer's now, as a
	 * RoCE driver resolves an AH's destination MAC */
	err = uroce_link_resolve(nic, ah->gid_type, &ah->src, &ah->dst);
	if (err) {
		free(ah);
		atomic_fetch_sub(&nic->used.ah, 1);
		errno = -err;
		return NULL;
	}
	ah->attr = *attr;
	ah->mtu = uroce_gid_path_mtu(nic, attr->grh.sgid_index);
	ah->ibah.context = ibpd->context;
	ah->ibah.pd = ibpd;
	uroce_pd_hold(ibpd, 1);
	return &ah->ibah;
}

UROCE_EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
	struct uroce_ah *ah;

	if (!ibah)
		return EINVAL;
	ah = to_uah(ibah);
	uroce_pd_hold(ibah->pd, -1);
	atomic_fetch_sub(&to_uctx(ibah->context)->nic->used.ah, 1);
	free(ah);
	return 0;
}

static void gid_from_ipv4(union ibv_gid *gid, const uint8_t *addr)
{
	memset(gid, 0, sizeof(*gid));
	gid->raw[10] = 0xff;
	gid->raw[11] = 0xff;
	memcpy(&gid->raw[12], addr, 4);
}

/* Which header the receive path left in the GRH area: 6, 4, or -1.  A
 * version-6 first word is IPv6 unless the last 20 bytes happen to be a valid
 * IPv4 header; rdma-core decides the same way, so AHs built by either from
 * the same buffer agree. */
static int grh_ip_version(const uint8_t *b)
{
	const uint8_t *ip4 = b + GRH_IPV4_OFF;
	bool v4 = ip4[0] >> 4 == 4;

	if (b[0] >> 4 != 6)
		return v4 ? 4 : -1;
	if (v4 && (ip4[0] & 0x0f) == 5 && uroce_ip4_header_sum(ip4) == 0xffff)
		return 4;
	return 6;
}

/* The reply goes from the address the message was sent to (one of our GIDs)
 * back to its source.  Returns 0 or an errno value. */
static int ah_from_ipv4(const struct uroce_nic *nic, const uint8_t *ip4,
			struct ibv_ah_attr *ah_attr)
{
	union ibv_gid ours;
	uint32_t daddr;
	int idx;

	memcpy(&daddr, ip4 + IPV4_DADDR, sizeof(daddr));
	/* a multicast destination is no GID of ours to answer from */
	if (IN_CLASSD(ntohl(daddr)))
		return EINVAL;
	gid_from_ipv4(&ours, ip4 + IPV4_DADDR);
	idx = uroce_gid_find(nic, &ours);
	if (idx < 0)
		return EINVAL;
	gid_from_ipv4(&ah_attr->grh.dgid, ip4 + IPV4_SADDR);
	ah_attr->grh.sgid_index = (uint8_t)idx;
	ah_attr->grh.hop_limit = ip4[IPV4_TTL];
	ah_attr->grh.traffic_class = ip4[IPV4_TOS];
	return 0;
}

static int ah_from_ipv6(const struct uroce_nic *nic, const struct ibv_grh *grh,
			struct ibv_ah_attr *ah_attr)
{
	uint32_t vtf = be32toh(grh->version_tclass_flow);
	int idx;

	if (grh->dgid.raw[0] == 0xff)
		return EINVAL;
	/* RoCE v1's GRH (next header: a BTH) is answered from the v1 GID */
	if (grh->next_hdr != IPPROTO_UDP && grh->next_hdr != UROCE_GRH_NEXT_BTH)
		return EPROTONOSUPPORT;
	idx = uroce_gid_find_type(nic, &grh->dgid,
				  grh->next_hdr == UROCE_GRH_NEXT_BTH ?
					  IBV_GID_TYPE_ROCE_V1 :
					  IBV_GID_TYPE_ROCE_V2);
	if (idx < 0)
		return EINVAL;
	ah_attr->grh.dgid = grh->sgid;
	ah_attr->grh.sgid_index = (uint8_t)idx;
	ah_attr->grh.hop_limit = grh->hop_limit;
	ah_attr->grh.traffic_class = (vtf >> 20) & 0xff;
	ah_attr->grh.flow_label = vtf & 0xfffff;
	return 0;
}

/* Returns 0, or -1 with errno set: the man page's convention for this verb
 * (not the errno-valued return of most int verbs). */
UROCE_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context,
				     uint8_t port_num, struct ibv_wc *wc,
				     struct ibv_grh *grh,
				     struct ibv_ah_attr *ah_attr)
{
	const struct uroce_nic *nic;
	int err;

	if (!context || !wc || !ah_attr || port_num != 1 ||
	    ((wc->wc_flags & IBV_WC_GRH) && !grh)) {
		errno = EINVAL;
		return -1;
	}
	nic = to_uctx(context)->nic;
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	/* Without a GRH there is no address to answer to; the attributes
	 * are still what the message carried, as in rdma-core, and
	 * ibv_create_ah refuses them. */
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah_attr->is_global = 1;
	switch (grh_ip_version((const uint8_t *)grh)) {
	case 4:
		err = ah_from_ipv4(nic, (const uint8_t *)grh + GRH_IPV4_OFF,
				   ah_attr);
		break;
	case 6:
		err = ah_from_ipv6(nic, grh, ah_attr);
		break;
	default:
		err = EPROTONOSUPPORT;
		break;
	}
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

UROCE_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd,
						  struct ibv_wc *wc,
						  struct ibv_grh *grh,
						  uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}
