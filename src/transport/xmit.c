/* The last step of every outgoing packet: ICRC, then the network backend. */
#include <arpa/inet.h>
#include <string.h>

#include "net/icrc.h"
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
 * The ICRC covers the IPv4 identification and flags, which the kernel fills
 * in.  The backend sends from unconnected sockets with IP_PMTUDISC_DO, for
 * which Linux emits DF with identification 0 (ip_select_ident), so that is
 * what we compute over; the segments of a GSO run get 0, 1, 2, ...
 */
static void put_icrcs(struct uroce_qp *qp, struct uroce_txpkt *pkts,
		      unsigned n)
{
	struct uroce_nic *nic = qp->nic;
	unsigned run_end = 0, run_start = 0;

	for (unsigned i = 0; i < n; i++) {
		struct uroce_txpkt *p = &pkts[i];

		if (i == run_end) {
			run_start = i;
			run_end = i + (nic->gso ? uroce_gso_run(p, n - i) : 1);
		}
		struct iovec *tail = &p->iov[p->niov - 1];
		size_t pad = tail->iov_len - ICRC_LEN;
		struct uroce_icrc_ip ip = {
			.family = p->dst->sa.sa_family,
			.src = uroce_sockaddr_ip(p->src),
			.dst = uroce_sockaddr_ip(p->dst),
			.sport = qp->sport,
			.dport = ntohs(p->dst->in4.sin_port),
			.ip_id = (uint16_t)(i - run_start),
			.df = true,
		};

		tail->iov_len = pad;
		uroce_icrc_put(p->trailer + pad,
			       uroce_icrc_compute(&ip, p->iov, p->niov));
		tail->iov_len = pad + ICRC_LEN;
	}
}

/*
 * Packets to the peer: how many went.  Only those that go on the wire need
 * their ICRCs (unless icrcs_done): the same-host ring, memory no wire
 * passes through, carries none that anyone checks, which saves the
 * receiver as much CPU as the copy out of the ring costs.
 */
static int send_pkts(struct uroce_qp *qp, struct uroce_txpkt *pkts,
		     unsigned n, bool icrcs_done)
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
			int more, r;

			if (!icrcs_done)
				put_icrcs(qp, &pkts[sent], 1);
			r = nic->net->xmit(nic, qp->tx, &pkts[sent], 1);
			if (r <= 0)
				break;
			sent++;
			more = uroce_sh_xmit(qp, &pkts[sent], n - sent);
			sent += more > 0 ? more : 0;
		}
		return sent;
	}
	if (!icrcs_done)
		put_icrcs(qp, pkts, n);
	/* a UD QP has a socket per address family; the caller batches by it */
	sent = nic->net->xmit(nic, pkts[0].dst->sa.sa_family == AF_INET6 &&
				   qp->tx6 >= 0 ? qp->tx6 : qp->tx, pkts, n);
	return sent;
}

/*
 * UROCE_FAULTS's send side.  A lost packet counts as sent, as one the
 * network lost would; the packets between losses leave as they would have,
 * and a corrupted one alone, its ICRC computed before the bit is flipped.
 * A busy link takes nothing from its packet on, as a full socket would not.
 * The faults are drawn again for a packet the socket did not take.
 */
static int xmit_with_faults(struct uroce_qp *qp, struct uroce_txpkt *pkts,
			    unsigned n)
{
	struct uroce_faults *f = &qp->nic->faults;
	unsigned start = 0;

	for (unsigned i = 0; i <= n; i++) {
		enum uroce_tx_fault fault = i < n ? uroce_faults_tx(f)
						  : UROCE_TX_PASS;
		int r;

		if (i < n && fault == UROCE_TX_PASS)
			continue;
		if (i > start) {
			put_icrcs(qp, &pkts[start], i - start);
			r = send_pkts(qp, &pkts[start], i - start, true);
			if (r < (int)(i - start))
				return r > 0 || start ? (int)start + (r > 0 ? r : 0)
						      : r;
		}
		if (fault == UROCE_TX_BUSY)
			return (int)i;
		start = i + 1;
		if (fault == UROCE_TX_CORRUPT) {
			put_icrcs(qp, &pkts[i], 1);
			uroce_faults_corrupt_tx(f, &pkts[i]);
			r = send_pkts(qp, &pkts[i], 1, true);
			if (r < 1)
				return i ? (int)i : r;
		}
	}
	return (int)n;
}

int uroce_xmit(struct uroce_qp *qp, struct uroce_txpkt *pkts, unsigned n)
{
	if (qp->nic->faults.cfg.tx)
		return xmit_with_faults(qp, pkts, n);
	return send_pkts(qp, pkts, n, false);
}
