/*
 * What every packet passes on its way to and from a link, whichever link it
 * is: fault injection (UROCE_FAULTS, `uroce faults`), then the link's
 * ICRC, which only the link can compute and check (it covers the headers
 * the link writes).
 */
#include "nic.h"

/*
 * UROCE_FAULTS's send side.  A lost packet counts as sent, as one the
 * network lost would; the packets between losses leave as they would have,
 * and a corrupted one alone, its ICRC computed before the bit is flipped.
 * A busy link takes nothing from its packet on, as a full socket would not.
 * The faults are drawn again for a packet the socket did not take.
 */
static int xmit_with_faults(struct uroce_nic *nic, int tx,
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
			nic->net->seal(nic, tx, &pkts[start], i - start);
			r = nic->net->xmit(nic, tx, &pkts[start], i - start);
			if (r < (int)(i - start))
				return r > 0 || start ? (int)start + (r > 0 ? r : 0)
						      : r;
		}
		if (fault == UROCE_TX_BUSY)
			return (int)i;
		start = i + 1;
		if (fault == UROCE_TX_CORRUPT) {
			nic->net->seal(nic, tx, &pkts[i], 1);
			uroce_faults_corrupt_tx(f, &pkts[i]);
			r = nic->net->xmit(nic, tx, &pkts[i], 1);
			if (r < 1)
				return i ? (int)i : r;
		}
	}
	return (int)n;
}

int uroce_link_xmit(struct uroce_nic *nic, int tx, struct uroce_txpkt *pkts,
		    unsigned n)
{
	if (nic->faults.cfg.tx)
		return xmit_with_faults(nic, tx, pkts, n);
	nic->net->seal(nic, tx, pkts, n);
	return nic->net->xmit(nic, tx, pkts, n);
}

unsigned uroce_link_rx_verify(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
			      unsigned n)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!nic->net->icrc_ok(nic, &pkts[i])) {
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
