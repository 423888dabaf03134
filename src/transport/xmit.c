/* The last step of every outgoing packet: the same-host ring or the link. */
#include <string.h>

#include "samehost/samehost.h"
#include "transport/hdr.h"
#include "transport/opcode.h"
#include "transport/transport.h"

void uroce_pkt_finish(struct uroce_qp *qp, struct uroce_txpkt *p,
		      unsigned hdr_len, unsigned npay, uint32_t paylen)
{
	unsigned pad = (4 - (paylen & 3)) & 3;

	p->dst = &qp->peer;
	p->src = &qp->self;
	p->ud_roce1 = false;
	p->iov[0].iov_base = p->hdr;
	p->iov[0].iov_len = hdr_len;
	memset(p->trailer, 0, sizeof(p->trailer));
	p->iov[1 + npay].iov_base = p->trailer;
	p->iov[1 + npay].iov_len = pad + ICRC_LEN;
	p->niov = npay + 2;
	p->len = hdr_len + paylen + pad + ICRC_LEN;
	p->hdr[1] |= pad << 4;
}

/*
 * Packets to the peer: how many went.  The link seals what goes on a wire;
 * the same-host ring, memory no wire passes through, carries no ICRC, which
 * saves the receiver as much CPU as the copy out of the ring costs.
 */
int uroce_xmit(struct uroce_qp *qp, struct uroce_txpkt *pkts, unsigned n)
{
	struct uroce_nic *nic = qp->nic;
	int sent;

	if (qp->sh_peer && (sent = uroce_sh_xmit(qp, pkts, n)) >= 0) {
		/* A full ring holds requests back (the requester waits and
		 * resends), but a response cannot wait: an ACK lost now is
		 * resent only after the peer's ACK timeout, if the QP still
		 * exists then.  It goes by UDP, which a same-host peer
		 * receives as well (its ICRC check takes any IP ID). */
		while ((unsigned)sent < n &&
		       (ib_opcodes[bth_opcode(pkts[sent].hdr)].mask &
			OPM_RESP)) {
			int more, r = uroce_link_xmit(nic, qp->tx, &pkts[sent], 1);

			if (r <= 0)
				break;
			sent++;
			more = uroce_sh_xmit(qp, &pkts[sent], n - sent);
			sent += more > 0 ? more : 0;
		}
		return sent;
	}
	/* a UD QP has a socket per address family and one for RoCE v1; the
	 * caller batches by them */
	return uroce_link_xmit(nic, pkts[0].ud_roce1 ? qp->tx1
				    : pkts[0].dst->sa.sa_family == AF_INET6 &&
					      qp->tx6 >= 0 ? qp->tx6
							   : qp->tx,
			       pkts, n);
}
