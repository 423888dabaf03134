/*
 * What every packet passes on its way to and from a link, whichever link it
 * is: fault injection (UROCE_FAULTS, `uroce faults`), then the link's
 * ICRC, which only the link can compute and check (it covers the headers
 * the link writes).
 */
#include <errno.h>

#include "nic.h"

/* The link a transmit handle belongs to, and the handle it knows. */
static const struct uroce_net_ops *tx_link(struct uroce_nic *nic, int *tx)
{
	if (*tx >= UROCE_TX_ROCE1) {
		*tx -= UROCE_TX_ROCE1;
		return nic->roce1;
	}
	return nic->net;
}

/* The link that carries GIDs of type, or NULL if this process has none. */
static const struct uroce_net_ops *type_link(const struct uroce_nic *nic,
					     enum ibv_gid_type type)
{
	return type == IBV_GID_TYPE_ROCE_V2 ? nic->net : nic->roce1;
}

bool uroce_link_has(const struct uroce_nic *nic, enum ibv_gid_type type)
{
	return type_link(nic, type);
}

int uroce_link_tx_open(struct uroce_nic *nic, enum ibv_gid_type type,
		       int family, uint16_t sport)
{
	const struct uroce_net_ops *link = type_link(nic, type);
	int tx;

	if (!link)
		return -EAFNOSUPPORT;
	tx = link->tx_open(nic, family, sport);
	return tx < 0 || link == nic->net ? tx : tx + UROCE_TX_ROCE1;
}

void uroce_link_tx_close(struct uroce_nic *nic, int tx)
{
	const struct uroce_net_ops *link = tx_link(nic, &tx);

	link->tx_close(nic, tx);
}

int uroce_link_steer(struct uroce_nic *nic, int tx,
		     const union uroce_sockaddr *self,
		     const union uroce_sockaddr *peer, uint16_t peer_sport)
{
	const struct uroce_net_ops *link = tx_link(nic, &tx);

	return link->steer ? link->steer(nic, tx, self, peer, peer_sport) : 0;
}

int uroce_link_resolve(struct uroce_nic *nic, enum ibv_gid_type type,
		       const union uroce_sockaddr *self,
		       const union uroce_sockaddr *peer)
{
	const struct uroce_net_ops *link = type_link(nic, type);

	if (!link)
		return -EAFNOSUPPORT;
	return link->resolve ? link->resolve(nic, self, peer) : 0;
}

int uroce_link_rx_fds(struct uroce_nic *nic, int *fds, int max)
{
	int n = nic->net->rx_fds(nic, fds, max);

	if (nic->roce1 && n < max)
		n += nic->roce1->rx_fds(nic, fds + n, max - n);
	return n;
}

uint8_t uroce_link_rx_grh(struct uroce_nic *nic, const struct uroce_rxpkt *rx,
			  uint8_t *grh)
{
	return (rx->roce1 ? nic->roce1 : nic->net)->rx_grh(rx, grh);
}

/*
 * UROCE_FAULTS's send side.  A lost packet counts as sent, as one the
 * network lost would; the packets between losses leave as they would have,
 * and a corrupted one alone, its ICRC computed before the bit is flipped.
 * A busy link takes nothing from its packet on, as a full socket would not.
 * The faults are drawn again for a packet the socket did not take.
 */
static int xmit_with_faults(struct uroce_nic *nic,
			    const struct uroce_net_ops *link, int tx,
			    struct uroce_txpkt *pkts, unsigned n)
{
	struct uroce_faults *f = &nic->faults;
	unsigned start = 0;

	for (unsigned i = 0; i <= n; i++) {
		enum uroce_tx_fault fault = i < n ? uroce_faults_tx(f)
						  : UROCE_TX_PASS;
		int r;

		if (i < n && fault == UROCE_TX_PASS)
			continue;
		if (i > start) {
			link->seal(nic, tx, &pkts[start], i - start);
			r = link->xmit(nic, tx, &pkts[start], i - start);
			if (r < (int)(i - start))
				return r > 0 || start ? (int)start + (r > 0 ? r : 0)
						      : r;
		}
		if (fault == UROCE_TX_BUSY)
			return (int)i;
		start = i + 1;
		if (fault == UROCE_TX_CORRUPT) {
			link->seal(nic, tx, &pkts[i], 1);
			uroce_faults_corrupt_tx(f, &pkts[i]);
			r = link->xmit(nic, tx, &pkts[i], 1);
			if (r < 1)
				return i ? (int)i : r;
		}
	}
	return (int)n;
}

int uroce_link_xmit_unfaulted(struct uroce_nic *nic, int tx,
			      struct uroce_txpkt *pkts, unsigned n)
{
	const struct uroce_net_ops *link = tx_link(nic, &tx);

	link->seal(nic, tx, pkts, n);
	return link->xmit(nic, tx, pkts, n);
}

int uroce_link_xmit(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n)
{
	int handle = tx;
	const struct uroce_net_ops *link = tx_link(nic, &handle);

	if (nic->faults.cfg.tx)
		return xmit_with_faults(nic, link, handle, pkts, n);
	return uroce_link_xmit_unfaulted(nic, tx, pkts, n);
}

unsigned uroce_link_rx_verify(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
			      unsigned n)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < n; i++) {
		const struct uroce_net_ops *link =
			pkts[i].roce1 ? nic->roce1 : nic->net;

		/* a RoCE v1 frame uroced handed on, for a QP of a process
		 * that has no v1 link, is no packet of ours */
		if (!link) {
			STAT_INC(nic, rx_malformed);
			continue;
		}
		if (!link->icrc_ok(nic, &pkts[i])) {
			STAT_INC(nic, rx_bad_icrc);
			continue;
		}
		if (kept != i)
			pkts[kept] = pkts[i];
		kept++;
	}
	return kept;
}

int uroce_link_recv(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		    unsigned max, bool *drained)
{
	int n = nic->net->recv(nic, pkts, max, drained);

	if (nic->roce1 && n >= 0 && (unsigned)n < max) {
		bool drained1 = false;
		int n1 = nic->roce1->recv(nic, pkts + n, max - (unsigned)n,
					  &drained1);

		if (n1 > 0)
			n += n1;
		*drained = *drained && drained1;
	}
	/* 0 from here means nothing was there, not that all was dropped */
	if (n <= 0) {
		*drained |= !n;
		return n;
	}
	/* faults first: a corrupted packet must fail the check */
	if (nic->faults.cfg.rx)
		n = uroce_faults_apply(&nic->faults, pkts, n, (int)max);
	return (int)uroce_link_rx_verify(nic, pkts, (unsigned)n);
}
