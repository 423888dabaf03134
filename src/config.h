/*
 * uroce's settings, read once from the environment and UROCE_CONFIG
 * (config.c).
 */
#ifndef UROCE_CONFIG_H
#define UROCE_CONFIG_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

struct uroce_faults_cfg {
	double drop;		/* probability a received datagram is dropped */
	double dup;		/* ... is delivered twice */
	double reorder;		/* ... is held back behind the next one */
	double corrupt;		/* ... has one bit flipped, for the ICRC to catch */
	double delay;		/* ... is held back behind 1..64 later ones */
	double tx_drop;		/* probability a transmitted packet is lost */
	double tx_corrupt;	/* ... leaves with a bit of its headers or ICRC
				 * flipped */
	double tx_busy;		/* ... finds the link busy, which then takes
				 * nothing for UROCE_FAULT_BUSY_NS */
	uint64_t seed;
	bool rx, tx;		/* some receive / send side fault is set */
	bool enabled;		/* either: also keeps the same-host path off */
};

struct uroce_config {
	uint16_t udp_port;		/* UROCE_PORT, default 4791 */
	enum ibv_mtu max_mtu;		/* UROCE_MTU (256..4096), default 4096 */
	char addrs[512];		/* UROCE_ADDRS: comma list; empty = all */
	unsigned window;		/* UROCE_WINDOW: packets in flight per QP */
	unsigned rate_mbps;		/* UROCE_RATE: link rate, Mbit/s */
	struct uroce_faults_cfg faults;	/* UROCE_FAULTS=drop=0.02,dup=..,reorder=..,seed=7 */
	int debug;			/* UROCE_DEBUG=1: log drops to stderr */
	char pcap[256];			/* UROCE_PCAP: capture file; empty = off */
	bool spin;			/* UROCE_ENGINE=spin: never sleep */
	uint64_t wait_poll_ns;		/* UROCE_WAIT_POLL_US: longest poll
					 * before ibv_get_cq_event sleeps */
	bool shm;			/* UROCE_SHM=0: no same-host path */
	bool tx_hold;			/* UROCE_TX_HOLD=0: no request batching */
	bool roce_v1;			/* UROCE_ROCE_V1=1: RoCE v1 GIDs too */
	bool cm_roce_v1;		/* UROCE_RDMA_CM_ROCE=v1: rdma_cm's
					 * default RoCE mode */
	char service[200];		/* UROCE_SERVICE: uroced's directory;
					 * empty = none (single-user mode) */
};

/* Loaded once from the environment (and the file named by UROCE_CONFIG). */
const struct uroce_config *uroce_config(void);
/* A fault injection setting as UROCE_FAULTS takes it: NULL, or why not. */
const char *uroce_faults_parse(const char *spec, struct uroce_faults_cfg *out);

#endif
