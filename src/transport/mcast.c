/*
 * UD multicast (IBTA 10.5.2.5, Annex A17.7): QPs attached to a multicast
 * GID each get a copy of every datagram sent to it, DestQP 0xFFFFFF.  The
 * MGID is an IP multicast address (IPv6, or IPv4 mapped as ::ffff:a.b.c.d);
 * the link joins the IP group when the first QP of the process attaches
 * and leaves it with the last.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "net/gid.h"
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

struct uroce_mcast_group {
	union ibv_gid mgid;
	unsigned nqps;
	struct uroce_qp *qps[UROCE_MAX_MCAST_QP_ATTACH];
};

/* IPv6 multicast (ff00::/8), or IPv4 multicast (224.0.0.0/4) mapped. */
bool uroce_gid_is_multicast(const union ibv_gid *gid)
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };

	if (gid->raw[0] == 0xff)
		return true;
	return !memcmp(gid->raw, v4mapped, sizeof(v4mapped)) &&
	       (gid->raw[12] & 0xF0) == 0xE0;
}

static struct uroce_mcast_group *group_find(struct uroce_nic *nic,
					    const union ibv_gid *mgid)
{
	for (unsigned i = 0; i < nic->mcast.n; i++)
		if (!memcmp(&nic->mcast.groups[i].mgid, mgid, sizeof(*mgid)))
			return &nic->mcast.groups[i];
	return NULL;
}

static int group_qp(const struct uroce_mcast_group *g,
		    const struct uroce_qp *qp)
{
	for (unsigned i = 0; i < g->nqps; i++)
		if (g->qps[i] == qp)
			return (int)i;
	return -1;
}

/* A new group: the link joins first, so that a failure leaves no trace. */
static int group_add(struct uroce_nic *nic, const union ibv_gid *mgid,
		     struct uroce_mcast_group **out)
{
	union uroce_sockaddr addr;
	int err;

	if (nic->mcast.n == UROCE_MAX_MCAST_GRP)
		return ENOMEM;
	if (nic->mcast.n == nic->mcast.cap) {
		unsigned cap = nic->mcast.cap ? 2 * nic->mcast.cap : 4;
		struct uroce_mcast_group *g;

		/* the receiver reads the table under rx_lock */
		pthread_mutex_lock(&nic->rx_lock);
		g = realloc(nic->mcast.groups, cap * sizeof(*g));
		if (g) {
			nic->mcast.groups = g;
			nic->mcast.cap = cap;
		}
		pthread_mutex_unlock(&nic->rx_lock);
		if (!g)
			return ENOMEM;
	}
	uroce_gid_to_sockaddr(mgid, 0, &addr);
	err = nic->net->mcast_join(nic, &addr);
	if (err)
		return -err;
	pthread_mutex_lock(&nic->rx_lock);
	*out = &nic->mcast.groups[nic->mcast.n++];
	memset(*out, 0, sizeof(**out));
	(*out)->mgid = *mgid;
	pthread_mutex_unlock(&nic->rx_lock);
	return 0;
}

/* Takes qp out of group g (mcast.lock held); the last QP out leaves. */
static void group_remove(struct uroce_nic *nic, struct uroce_mcast_group *g,
			 unsigned k)
{
	struct uroce_qp *qp = g->qps[k];
	bool last;

	pthread_mutex_lock(&nic->rx_lock);
	g->qps[k] = g->qps[--g->nqps];
	last = !g->nqps;
	qp->mcast_groups--;
	nic->mcast.attached--;
	pthread_mutex_unlock(&nic->rx_lock);
	if (!last)
		return;
	union uroce_sockaddr addr;

	uroce_gid_to_sockaddr(&g->mgid, 0, &addr);
	nic->net->mcast_leave(nic, &addr);
	pthread_mutex_lock(&nic->rx_lock);
	*g = nic->mcast.groups[--nic->mcast.n];
	pthread_mutex_unlock(&nic->rx_lock);
}

int uroce_mcast_attach(struct uroce_qp *qp, const union ibv_gid *mgid)
{
	struct uroce_nic *nic = qp->nic;
	struct uroce_mcast_group *g;
	int err = 0;

	if (qp->ibqpx.qp_base.qp_type != IBV_QPT_UD ||
	    !uroce_gid_is_multicast(mgid))
		return EINVAL;
	pthread_mutex_lock(&nic->mcast.lock);
	g = group_find(nic, mgid);
	if (g && group_qp(g, qp) >= 0)
		goto out;	/* attached already: as the kernel, no error */
	if ((g && g->nqps == UROCE_MAX_MCAST_QP_ATTACH) ||
	    nic->mcast.attached == UROCE_MAX_TOTAL_MCAST_QP_ATTACH) {
		err = ENOMEM;
		goto out;
	}
	if (!g && (err = group_add(nic, mgid, &g)))
		goto out;
	pthread_mutex_lock(&nic->rx_lock);
	g->qps[g->nqps++] = qp;
	qp->mcast_groups++;
	nic->mcast.attached++;
	pthread_mutex_unlock(&nic->rx_lock);
out:
	pthread_mutex_unlock(&nic->mcast.lock);
	return err;
}

int uroce_mcast_detach(struct uroce_qp *qp, const union ibv_gid *mgid)
{
	struct uroce_nic *nic = qp->nic;
	struct uroce_mcast_group *g;
	int k = -1;

	pthread_mutex_lock(&nic->mcast.lock);
	g = group_find(nic, mgid);
	if (g)
		k = group_qp(g, qp);
	if (k >= 0)
		group_remove(nic, g, (unsigned)k);
	pthread_mutex_unlock(&nic->mcast.lock);
	/* the kernel's answer for a group the QP is not attached to */
	return k >= 0 ? 0 : EINVAL;
}

void uroce_mcast_detach_all(struct uroce_qp *qp)
{
	struct uroce_nic *nic = qp->nic;

	pthread_mutex_lock(&nic->mcast.lock);
	for (unsigned i = nic->mcast.n; qp->mcast_groups && i-- > 0;) {
		int k = group_qp(&nic->mcast.groups[i], qp);

		if (k >= 0)
			group_remove(nic, &nic->mcast.groups[i], (unsigned)k);
	}
	pthread_mutex_unlock(&nic->mcast.lock);
}

/* The sender is this QP itself: its DETH names it and it came from one of
 * our addresses. */
static bool from_self(struct uroce_nic *nic, const struct uroce_qp *qp,
		      const struct uroce_pkt *pkt)
{
	const uint8_t *deth = pkt->bth + ib_opcodes[pkt->opcode].deth;
	union ibv_gid src;

	if (deth_sqpn(deth) != qp->ibqpx.qp_base.qp_num)
		return false;
	uroce_sockaddr_to_gid(&pkt->rx->src, &src);
	return uroce_gid_find(nic, &src) >= 0;
}

void uroce_mcast_rx(struct uroce_nic *nic, struct uroce_pkt *pkt)
{
	struct uroce_mcast_group *g;
	union ibv_gid mgid;

	uroce_sockaddr_to_gid(&pkt->rx->dst, &mgid);
	g = group_find(nic, &mgid);
	if (!g) {
		STAT_INC(nic, rx_unknown_qp);
		return;
	}
	for (unsigned i = 0; i < g->nqps; i++) {
		struct uroce_qp *qp = g->qps[i];

		if (qp->block_self_mcast && from_self(nic, qp, pkt))
			continue;
		pkt->qp = qp;
		STAT_INC(nic, mcast_rx);
		uroce_resp_rx(qp, pkt);
	}
}
