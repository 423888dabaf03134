/*
 * Same-host packet rings (segment.h): the link between two uroce processes
 * of one host for the packets of their RC QPs.  A sender copies each
 * packet into its ring in the receiver's segment; the receiver's poller
 * (an application thread polling a CQ, or the engine) takes them with its
 * datagrams.  When the receiver's application is not polling, the sender
 * writes its engine's eventfd, as a datagram's arrival would wake it.
 */
#include <string.h>
#include <unistd.h>

#include "samehost/segment.h"
#include "transport/transport.h"

/* How often a producer that finds a ring full looks whether its reader
 * is still alive. */
#define SH_FULL_PROBE_NS 1000000ull

static uint64_t align_up(uint64_t v)
{
	return (v + SH_RING_ALIGN - 1) & ~(uint64_t)(SH_RING_ALIGN - 1);
}

static void put_addr(uint8_t *out, const union uroce_sockaddr *a)
{
	if (a->sa.sa_family == AF_INET)
		memcpy(out, &a->in4.sin_addr, 4);
	else
		memcpy(out, &a->in6.sin6_addr, 16);
}

bool uroce_sh_ringed(const struct uroce_qp *qp)
{
	return qp->sh_peer && qp->sh_peer->ring &&
	       !uroce_sh_peer_wire_only(qp);
}

int uroce_sh_xmit(struct uroce_qp *qp, struct uroce_txpkt *pkts, unsigned n)
{
	struct uroce_sh_peer *peer = qp->sh_peer;
	struct sh_ring *ring = peer->ring;
	uint64_t head, tail, now, bytes = 0;
	unsigned i;

	if (!ring || uroce_sh_peer_wire_only(qp))
		return -1;
	pthread_mutex_lock(&peer->ring_lock);
	head = atomic_load_explicit(&ring->head, memory_order_relaxed);
	tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
	/* a consumer that has not caught up with a reset yet (segment.c
	 * restarts a dead producer's ring): nothing of ours is in it */
	if (head - tail > SH_RING_DATA)
		tail = head;
	for (i = 0; i < n; i++) {
		const struct uroce_txpkt *p = &pkts[i];
		uint64_t entry = align_up(sizeof(struct sh_ring_pkt) + p->len);
		uint64_t off = head % SH_RING_DATA, room = SH_RING_DATA - off;
		struct sh_ring_pkt *e;
		uint8_t *d;

		if (entry > room) {
			/* entries never straddle the end */
			if (SH_RING_DATA - (head - tail) < room + entry)
				break;
			((struct sh_ring_pkt *)&ring->data[off])->len =
				SH_RING_WRAP;
			head += room;
			off = 0;
		} else if (SH_RING_DATA - (head - tail) < entry) {
			break;
		}
		e = (struct sh_ring_pkt *)&ring->data[off];
		e->len = p->len;
		e->sport = qp->sport;
		e->family = (uint8_t)p->dst->sa.sa_family;
		put_addr(e->src, p->src);
		put_addr(e->dst, p->dst);
		d = e->data;
		for (unsigned k = 0; k < p->niov; k++) {
			memcpy(d, p->iov[k].iov_base, p->iov[k].iov_len);
			d += p->iov[k].iov_len;
		}
		head += entry;
		bytes += p->len;
	}
	atomic_store_explicit(&ring->head, head, memory_order_release);
	pthread_mutex_unlock(&peer->ring_lock);
	if (i < n) {
		/* A full ring whose reader is gone never drains, and its QPs
		 * would wait for it for ever: their packets go on the wire
		 * instead, where the peer's silence ends them as between
		 * hosts.  Looked at once a millisecond at most. */
		uint64_t t = uroce_now_ns();

		if (t - atomic_load(&peer->full_probe_ns) >= SH_FULL_PROBE_NS) {
			atomic_store(&peer->full_probe_ns, t);
			if (!i && uroce_sh_peer_gone(peer))
				return -1;
		}
	}
	if (!i)
		return 0;
	atomic_fetch_add_explicit(&qp->nic->stats.tx_packets, i,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&qp->nic->stats.samehost_ring_tx, i,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&qp->nic->stats.tx_bytes, bytes,
				  memory_order_relaxed);
	/* the packets are visible before we look whether anyone polls */
	atomic_thread_fence(memory_order_seq_cst);
	now = uroce_now_ns();
	if (now - atomic_load(&peer->seg->app_poll_ns) >= UROCE_ENGINE_DEFER_NS) {
		uint64_t one = 1;

		if (write(peer->doorbell, &one, sizeof(one)) < 0) {
			/* saturated: a wake-up is pending anyway */
		}
	}
	return (int)i;
}

static void get_addr(union uroce_sockaddr *a, int family, const uint8_t *ip,
		     uint16_t port)
{
	memset(a, 0, sizeof(*a));
	if (family == AF_INET) {
		a->in4.sin_family = AF_INET;
		a->in4.sin_port = htons(port);
		memcpy(&a->in4.sin_addr, ip, 4);
	} else {
		a->in6.sin6_family = AF_INET6;
		a->in6.sin6_port = htons(port);
		memcpy(&a->in6.sin6_addr, ip, 16);
	}
}

int uroce_sh_recv(struct uroce_nic *nic, struct uroce_rxpkt *pkts,
		  unsigned max)
{
	struct uroce_sh *sh = nic->sh;
	struct sh_seg *seg = sh ? sh->seg : NULL;
	unsigned n = 0;

	if (!seg)
		return 0;
	for (unsigned w = 0; w < SH_MASK_WORDS && n < max; w++) {
		uint64_t mask = atomic_load_explicit(&seg->ring_mask[w],
						     memory_order_acquire);

		while (mask && n < max && sh->ndone < SH_RECV_RINGS) {
			unsigned slot = w * 64 + __builtin_ctzll(mask);
			struct sh_ring *ring = &seg->rings[slot];
			uint64_t tail = atomic_load_explicit(
				&ring->tail, memory_order_relaxed);
			uint64_t head = atomic_load_explicit(
				&ring->head, memory_order_acquire);
			unsigned first = n;

			mask &= mask - 1;
			if (head == tail)
				continue;
			if (head - tail > SH_RING_DATA) {
				/* restarted by a new producer */
				atomic_store(&ring->tail, head);
				continue;
			}
			while (tail != head && n < max) {
				uint64_t off = tail % SH_RING_DATA;
				const struct sh_ring_pkt *e =
					(const void *)&ring->data[off];
				uint32_t len = e->len;
				uint64_t entry;

				if (len == SH_RING_WRAP) {
					tail += SH_RING_DATA - off;
					continue;
				}
				entry = align_up(sizeof(*e) + len);
				/* a producer that wrote nonsense loses its
				 * ring's contents, nothing else */
				if (len > UROCE_RX_BUF ||
				    (e->family != AF_INET &&
				     e->family != AF_INET6) ||
				    entry > SH_RING_DATA - off ||
				    entry > head - tail) {
					STAT_INC(nic, rx_malformed);
					tail = head;
					break;
				}
				pkts[n] = (struct uroce_rxpkt){
					.data = (uint8_t *)e->data,
					.len = len,
				};
				get_addr(&pkts[n].src, e->family, e->src,
					 e->sport);
				get_addr(&pkts[n].dst, e->family, e->dst,
					 nic->cfg->udp_port);
				n++;
				tail += entry;
			}
			if (n > first || tail != atomic_load_explicit(
						  &ring->tail,
						  memory_order_relaxed)) {
				sh->done[sh->ndone].ring = ring;
				sh->done[sh->ndone].tail = tail;
				sh->ndone++;
			}
		}
	}
	return (int)n;
}

void uroce_sh_recv_done(struct uroce_nic *nic)
{
	struct uroce_sh *sh = nic->sh;

	if (!sh)
		return;
	for (unsigned i = 0; i < sh->ndone; i++)
		atomic_store_explicit(&sh->done[i].ring->tail, sh->done[i].tail,
				      memory_order_release);
	sh->ndone = 0;
}

/* Sockets are looked at on one receive call in SOCKETS_EVERY while the
 * rings gave packets within the last RING_ACTIVE_CALLS calls (counted, not
 * timed: a clock read costs as much as the rest of an empty poll). */
enum { SOCKETS_EVERY = 8, RING_ACTIVE_CALLS = 4096 };

bool uroce_sh_sockets_due(struct uroce_nic *nic, bool ring_data)
{
	struct uroce_sh *sh = nic->sh;

	if (!sh || !sh->seg)
		return true;
	if (ring_data)
		sh->quiet_calls = 0;
	else if (sh->quiet_calls >= RING_ACTIVE_CALLS)
		return true;
	else
		sh->quiet_calls++;
	return ++sh->rx_calls % SOCKETS_EVERY == 0;
}

void uroce_sh_set_wire_only(struct uroce_nic *nic, bool on)
{
	atomic_store(&nic->wire_only, on);
	if (nic->sh && nic->sh->seg)
		atomic_store(&nic->sh->seg->wire_only, on);
}

bool uroce_sh_has_rings(struct uroce_nic *nic)
{
	struct sh_seg *seg = nic->sh ? nic->sh->seg : NULL;

	for (unsigned w = 0; seg && w < SH_MASK_WORDS; w++)
		if (atomic_load_explicit(&seg->ring_mask[w],
					 memory_order_relaxed))
			return true;
	return false;
}

void uroce_sh_note_poll(struct uroce_nic *nic, uint64_t ns)
{
	if (nic->sh && nic->sh->seg)
		atomic_store_explicit(&nic->sh->seg->app_poll_ns, ns,
				      memory_order_relaxed);
}
