/*
 * UROCE_PCAP: a pcap file (LINKTYPE_ETHERNET, nanosecond timestamps) of
 * every RoCEv2 datagram this process sends and receives.
 *
 * A UDP socket never sees the IP and UDP headers, so they are rebuilt here,
 * with the fields the ICRC covers exactly as the kernel sends them:
 * - sent over IPv4: identification 0 (k for segment k of a UDP GSO run)
 *   and DF (unconnected DF sockets, see transport/xmit.c), TOS 0 and the
 *   default TTL (uroce sets neither);
 * - sent over IPv6: traffic class 0, flow label 0 (the kernel may put a
 *   flow hash there; the ICRC masks it), the default hop limit;
 * - received: the TOS / traffic class the socket reported; over IPv4 the
 *   identification recovered from the ICRC (net/icrc.c; 0 if the ICRC
 *   is bad) with DF;
 * - always the UDP checksum computed as the kernel (or the NIC) does: uroce
 *   sends with checksums, which UDP GSO requires.
 *   The TTL / hop limit of received packets is not reported by the socket
 *   and is written as this host's default.  The ICRC masks TOS, TTL, flow
 *   label and both checksums, so none of these guesses can break it.
 * The Ethernet addresses are made up: 02:00 followed by the last four bytes
 * of the IP address (locally administered, so never taken for real ones).
 *
 * Each frame is written with one pwritev under a lock, so frames from the
 * engine and application threads never interleave and the file is complete
 * up to the last frame even if the process is killed.  A frame that does not
 * fit (disk full) is cut off again and reported as dropped.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/icrc.h"
#include "net/ip_header.h"
#include "net/pcap.h"

enum {
	PCAP_MAGIC_NS = 0xa1b23c4d,	/* nanosecond-resolution timestamps */
	PCAP_SNAPLEN = 65535,		/* frames are at most MTU-sized */
	LINKTYPE_ETHERNET = 1,
	ETH_HDR = 14,
	UDP_HDR = 8,
	FRAME_HDR_MAX = ETH_HDR + UROCE_IP6_HDR + UDP_HDR,
	DEFAULT_TTL = 64,		/* if the kernel will not say */
};

struct pcap_file_hdr {
	uint32_t magic;
	uint16_t major, minor;
	int32_t thiszone;
	uint32_t sigfigs, snaplen, linktype;
};

struct pcap_rec_hdr {
	uint32_t sec, nsec, caplen, len;
};

struct uroce_pcap {
	pthread_mutex_t lock;
	int fd;
	off_t off;		/* end of the last complete frame */
	unsigned long drops;
	uint8_t ttl4, hops6;	/* what the kernel puts in our packets */
	char path[PATH_MAX];
};

/* The hop limit a new socket of family would send with. */
static uint8_t default_ttl(int family)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int level = family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6;
	int name = family == AF_INET ? IP_TTL : IPV6_UNICAST_HOPS;
	socklen_t len = sizeof(int);
	int ttl = -1;

	if (fd >= 0) {
		if (getsockopt(fd, level, name, &ttl, &len))
			ttl = -1;
		close(fd);
	}
	return ttl > 0 && ttl < 256 ? ttl : DEFAULT_TTL;
}

/* path with every "%p" replaced by the process id; false if too long. */
static bool expand_path(char *out, size_t size, const char *path)
{
	size_t n = 0;

	for (const char *s = path; *s; s++) {
		int w;

		if (s[0] == '%' && s[1] == 'p') {
			w = snprintf(out + n, size - n, "%d", (int)getpid());
			s++;
		} else {
			w = snprintf(out + n, size - n, "%c", *s);
		}
		if (w < 0 || (size_t)w >= size - n)
			return false;
		n += w;
	}
	return n > 0;
}

struct uroce_pcap *uroce_pcap_open(const char *path)
{
	const struct pcap_file_hdr h = {
		.magic = PCAP_MAGIC_NS, .major = 2, .minor = 4,
		.snaplen = PCAP_SNAPLEN, .linktype = LINKTYPE_ETHERNET,
	};
	struct uroce_pcap *pc = calloc(1, sizeof(*pc));
	pthread_mutexattr_t recursive;

	if (!pc)
		goto fail;
	if (!expand_path(pc->path, sizeof(pc->path), path)) {
		errno = ENAMETOOLONG;
		goto fail;
	}
	pc->fd = open(pc->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (pc->fd < 0)
		goto fail;
	if (pwrite(pc->fd, &h, sizeof(h), 0) != sizeof(h)) {
		if (errno == 0)
			errno = ENOSPC;
		close(pc->fd);
		goto fail;
	}
	pc->off = sizeof(h);
	pc->ttl4 = default_ttl(AF_INET);
	pc->hops6 = default_ttl(AF_INET6);
	pthread_mutexattr_init(&recursive);
	pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&pc->lock, &recursive);
	pthread_mutexattr_destroy(&recursive);
	return pc;
fail:
	/* Like a bad setting: reported, and the program runs on without. */
	fprintf(stderr, "uroce: cannot write capture UROCE_PCAP=%s: %s\n", path,
		strerror(errno));
	free(pc);
	return NULL;
}

void uroce_pcap_stop(struct uroce_pcap *pc)
{
	pthread_mutex_lock(&pc->lock);
	if (pc->fd >= 0) {
		if (pc->drops)
			fprintf(stderr, "uroce: %lu packets missing from "
				"capture %s\n", pc->drops, pc->path);
		close(pc->fd);
		pc->fd = -1;
	}
	pthread_mutex_unlock(&pc->lock);
}

const char *uroce_pcap_path(const struct uroce_pcap *pc)
{
	return pc->path;
}

void uroce_pcap_close(struct uroce_pcap *pc)
{
	if (!pc)
		return;
	uroce_pcap_stop(pc);
	pthread_mutex_destroy(&pc->lock);
	free(pc);
}

/* ---- frame headers ------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

/* One's complement sum of len bytes, continuing sum; odd tells whether an
 * odd number of bytes came before (so this chunk starts mid-word). */
static uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t len,
			 bool *odd)
{
	for (size_t i = 0; i < len; i++, *odd = !*odd)
		sum += *odd ? p[i] : p[i] << 8;
	return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xFFFF) + (sum >> 16);
	return ~sum;
}

struct frame_ip {
	const union uroce_sockaddr *src, *dst;	/* addresses and ports */
	uint16_t ip_id;
	uint8_t tos, ttl;
};

static const uint8_t *ip_bytes(const union uroce_sockaddr *sa)
{
	return sa->sa.sa_family == AF_INET ? (const uint8_t *)&sa->in4.sin_addr
					   : (const uint8_t *)&sa->in6.sin6_addr;
}

static uint16_t sa_port(const union uroce_sockaddr *sa)
{
	return ntohs(sa->sa.sa_family == AF_INET ? sa->in4.sin_port
						 : sa->in6.sin6_port);
}

static void fake_mac(uint8_t *mac, const union uroce_sockaddr *sa)
{
	size_t alen = sa->sa.sa_family == AF_INET ? 4 : 16;

	mac[0] = 0x02;
	mac[1] = 0x00;
	memcpy(mac + 2, ip_bytes(sa) + alen - 4, 4);
}

/* Ethernet + IP + UDP headers of a frame carrying paylen bytes of UDP
 * payload (iov); returns their length. */
static size_t build_headers(uint8_t *f, const struct frame_ip *ip,
			    const struct iovec *iov, unsigned niov,
			    size_t paylen)
{
	bool v4 = ip->src->sa.sa_family == AF_INET;
	uint16_t udp_len = UDP_HDR + paylen;
	uint8_t *h = f + ETH_HDR, *u;

	fake_mac(f, ip->dst);
	fake_mac(f + 6, ip->src);
	put16(f + 12, v4 ? 0x0800 : 0x86DD);
	u = h + uroce_ip_header(h, &(struct uroce_ip_fields){
			.src = ip->src, .dst = ip->dst, .payload = udp_len,
			.id = ip->ip_id, .tos = ip->tos, .ttl = ip->ttl });
	put16(u, sa_port(ip->src));
	put16(u + 2, sa_port(ip->dst));
	put16(u + 4, udp_len);
	put16(u + 6, 0);
	{
		/* pseudo header: addresses, length, next header */
		uint8_t ph[4] = { 0, 0, 0, IPPROTO_UDP };
		bool odd = false;
		uint32_t sum = v4 ? csum_add(0, h + 12, 8, &odd)
				  : csum_add(0, h + 8, 32, &odd);
		uint16_t c;

		sum += udp_len;
		sum = csum_add(sum, ph, sizeof(ph), &odd);
		sum = csum_add(sum, u, UDP_HDR, &odd);
		for (unsigned i = 0; i < niov; i++)
			sum = csum_add(sum, iov[i].iov_base, iov[i].iov_len,
				       &odd);
		c = csum_fold(sum);
		put16(u + 6, c ? c : 0xFFFF);	/* 0 means "none" (RFC 768) */
	}
	return u + UDP_HDR - f;
}

static bool write_frame(struct uroce_pcap *pc, const struct frame_ip *ip,
			const struct iovec *payload, unsigned niov)
{
	struct iovec iov[2 + UROCE_TX_IOV];
	uint8_t frame[FRAME_HDR_MAX];
	struct pcap_rec_hdr rec;
	struct timespec ts;
	size_t paylen = 0, total;
	ssize_t w;

	for (unsigned i = 0; i < niov; i++)
		paylen += payload[i].iov_len;
	iov[0] = (struct iovec){ &rec, sizeof(rec) };
	iov[1] = (struct iovec){ frame,
				 build_headers(frame, ip, payload, niov,
					       paylen) };
	memcpy(iov + 2, payload, niov * sizeof(*payload));
	rec.len = rec.caplen = iov[1].iov_len + paylen;
	total = sizeof(rec) + rec.len;

	pthread_mutex_lock(&pc->lock);
	if (pc->fd < 0) {
		/* stopped (uroce_pcap_stop) while this packet was on its way */
		pthread_mutex_unlock(&pc->lock);
		return true;
	}
	/* stamped under the lock: the file stays in time order */
	clock_gettime(CLOCK_REALTIME, &ts);
	rec.sec = ts.tv_sec;
	rec.nsec = ts.tv_nsec;
	w = pwritev(pc->fd, iov, 2 + niov, pc->off);
	if (w == (ssize_t)total) {
		pc->off += total;
		pthread_mutex_unlock(&pc->lock);
		return true;
	}
	/* A partial frame would make the rest of the file unreadable.  The
	 * next frame overwrites it anyway, should truncating fail. */
	if (w > 0 && ftruncate(pc->fd, pc->off))
		uroce_log("capture %s: %s", pc->path, strerror(errno));
	pc->drops++;
	pthread_mutex_unlock(&pc->lock);
	return false;
}

bool uroce_pcap_tx(struct uroce_pcap *pc, const struct uroce_txpkt *pkt,
		   uint16_t sport, uint16_t ip_id)
{
	union uroce_sockaddr src = *pkt->src;
	bool v4 = pkt->dst->sa.sa_family == AF_INET;
	struct frame_ip ip = {
		.src = &src,
		.dst = pkt->dst,
		.ip_id = ip_id,
		.ttl = v4 ? pc->ttl4 : pc->hops6,
	};

	if (v4)
		src.in4.sin_port = htons(sport);
	else
		src.in6.sin6_port = htons(sport);
	return write_frame(pc, &ip, pkt->iov, pkt->niov);
}

bool uroce_pcap_rx(struct uroce_pcap *pc, const struct uroce_rxpkt *rx)
{
	bool v4 = rx->src.sa.sa_family == AF_INET;
	struct frame_ip ip = {
		.src = &rx->src,
		.dst = &rx->dst,
		.tos = rx->tos,
		.ttl = v4 ? pc->ttl4 : pc->hops6,
	};
	struct iovec iov = { rx->data, rx->len };

	if (v4) {
		const struct uroce_icrc_ip icrc = {
			.family = AF_INET,
			.src = &rx->src.in4.sin_addr,
			.dst = &rx->dst.in4.sin_addr,
			.sport = ntohs(rx->src.in4.sin_port),
			.dport = ntohs(rx->dst.in4.sin_port),
		};

		if (!uroce_icrc_check(&icrc, rx->data, rx->len, &ip.ip_id))
			ip.ip_id = 0;
	}
	return write_frame(pc, &ip, &iov, 1);
}

void uroce_pcap_hold(struct uroce_pcap *pc)
{
	pthread_mutex_lock(&pc->lock);
}

void uroce_pcap_release(struct uroce_pcap *pc)
{
	pthread_mutex_unlock(&pc->lock);
}
