/*
 * The port's identity on the link: its GID table, drawn from the host's
 * addresses, and the node GUID (net/gid.c).  Converting between GIDs and
 * socket addresses is in net/link.h.
 */
#ifndef UROCE_NET_GID_H
#define UROCE_NET_GID_H

#include <infiniband/verbs.h>
#include <stdint.h>

struct uroce_nic;

/* Fill nic->gids from the host's addresses (honours UROCE_ADDRS). */
int uroce_gids_discover(struct uroce_nic *nic);
/* Append the RoCE v1 twins of the v2 GIDs whose interfaces carry them. */
void uroce_gids_add_roce1(struct uroce_nic *nic);
/* The index of gid in the port's table (of its type), or -1. */
int uroce_gid_find(const struct uroce_nic *nic, const union ibv_gid *gid);
int uroce_gid_find_type(const struct uroce_nic *nic, const union ibv_gid *gid,
			enum ibv_gid_type type);
/* Largest path MTU in bytes that the link of GID index gid carries. */
uint32_t uroce_gid_path_mtu(struct uroce_nic *nic, unsigned gid);
/* The node GUID every uroce process of a host reports. */
__be64 uroce_node_guid(void);

#endif
