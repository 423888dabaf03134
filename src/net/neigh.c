/*
 * Neighbour resolution as an RNIC driver does it for RoCE: the kernel's
 * table (rtnetlink RTM_GETNEIGH), and when it has no usable entry, a
 * datagram to the neighbour's discard port, which makes the kernel send an
 * ARP request or neighbour solicitation; then the table again.
 */
#include <errno.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/neigh.h"

enum {
	DISCARD_PORT = 9,
	NL_BUF = 32768,
	PROBE_EVERY_MS = 200,
	POLL_MS = 2,
};

int uroce_if_hwtype(unsigned ifindex)
{
	struct ifreq ifr = { 0 };
	int fd, type = -1;

	if (!if_indextoname(ifindex, ifr.ifr_name))
		return -1;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (!ioctl(fd, SIOCGIFHWADDR, &ifr))
		type = ifr.ifr_hwaddr.sa_family;
	close(fd);
	return type;
}

static bool neigh_matches(const struct nlmsghdr *nh, unsigned ifindex,
			  const union uroce_sockaddr *ip,
			  uint8_t mac[UROCE_ETH_ALEN])
{
	const struct ndmsg *nd = NLMSG_DATA(nh);
	const void *want = uroce_sockaddr_ip(ip);
	size_t want_len = ip->sa.sa_family == AF_INET ? 4 : 16;
	int left = (int)nh->nlmsg_len - (int)NLMSG_LENGTH(sizeof(*nd));
	bool dst_ok = false, mac_ok = false;

	if (nh->nlmsg_type != RTM_NEWNEIGH || left < 0 ||
	    nd->ndm_ifindex != (int)ifindex || nd->ndm_family != ip->sa.sa_family ||
	    !(nd->ndm_state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY |
			       NUD_PROBE | NUD_PERMANENT | NUD_NOARP)))
		return false;
	for (const struct rtattr *a = (const struct rtattr *)((const char *)nd +
							     NLMSG_ALIGN(sizeof(*nd)));
	     RTA_OK(a, left); a = RTA_NEXT(a, left)) {
		if (a->rta_type == NDA_DST && RTA_PAYLOAD(a) == want_len)
			dst_ok = !memcmp(RTA_DATA(a), want, want_len);
		else if (a->rta_type == NDA_LLADDR &&
			 RTA_PAYLOAD(a) == UROCE_ETH_ALEN) {
			memcpy(mac, RTA_DATA(a), UROCE_ETH_ALEN);
			mac_ok = true;
		}
	}
	return dst_ok && mac_ok;
}

/* One look at the kernel's table: 0 found, -ENOENT not (yet), -errno. */
static int neigh_lookup(int nl, unsigned ifindex,
			const union uroce_sockaddr *ip,
			uint8_t mac[UROCE_ETH_ALEN])
{
	struct {
		struct nlmsghdr nh;
		struct ndmsg nd;
	} req = {
		.nh = { .nlmsg_len = sizeof(req), .nlmsg_type = RTM_GETNEIGH,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.nd = { .ndm_family = ip->sa.sa_family,
			.ndm_ifindex = (int)ifindex },
	};
	static _Thread_local char buf[NL_BUF]
		__attribute__((aligned(NLMSG_ALIGNTO)));
	int found = -ENOENT;

	if (send(nl, &req, sizeof(req), 0) < 0)
		return -errno;
	for (;;) {
		ssize_t len = recv(nl, buf, sizeof(buf), 0);

		if (len < 0)
			return errno == EINTR ? found : -errno;
		for (struct nlmsghdr *nh = (struct nlmsghdr *)buf;
		     NLMSG_OK(nh, (size_t)len); nh = NLMSG_NEXT(nh, len)) {
			if (nh->nlmsg_type == NLMSG_DONE)
				return found;
			if (nh->nlmsg_type == NLMSG_ERROR)
				return found == -ENOENT ? -EIO : found;
			if (found && neigh_matches(nh, ifindex, ip, mac))
				found = 0;
		}
	}
}

/* A datagram that makes the kernel resolve ip: nobody listens on the
 * discard port, so at worst the neighbour answers with an ICMP error. */
static void neigh_probe(const union uroce_sockaddr *self,
			const union uroce_sockaddr *ip)
{
	union uroce_sockaddr to = *ip, from = *self;
	int fd = socket(ip->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	socklen_t len = ip->sa.sa_family == AF_INET ? sizeof(to.in4)
						    : sizeof(to.in6);

	if (fd < 0)
		return;
	from.in4.sin_port = 0;	/* same offset in both families */
	to.in4.sin_port = htons(DISCARD_PORT);
	if (!bind(fd, &from.sa, len))
		(void)!sendto(fd, NULL, 0, MSG_DONTWAIT, &to.sa, len);
	close(fd);
}

int uroce_neigh_resolve(unsigned ifindex, const union uroce_sockaddr *self,
			const union uroce_sockaddr *ip,
			uint8_t mac[UROCE_ETH_ALEN], unsigned timeout_ms)
{
	const struct timespec pause = { 0, POLL_MS * 1000000L };
	int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	int err = -ENOENT;

	if (nl < 0)
		return -errno;
	for (unsigned waited = 0; err == -ENOENT && waited <= timeout_ms;
	     waited += POLL_MS) {
		err = neigh_lookup(nl, ifindex, ip, mac);
		if (err != -ENOENT)
			break;
		if (waited % PROBE_EVERY_MS == 0)
			neigh_probe(self, ip);
		nanosleep(&pause, NULL);
	}
	close(nl);
	return err == -ENOENT ? -EHOSTUNREACH : err;
}
