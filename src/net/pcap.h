/*
 * Packet capture (UROCE_PCAP): every RoCEv2 datagram a process sends or
 * receives, written to a pcap file as the Ethernet/IP/UDP frame it was on
 * the wire, so that Wireshark decodes it and its ICRC can be verified.
 */
#ifndef UROCE_PCAP_H
#define UROCE_PCAP_H

#include <stdbool.h>

#include "uroce.h"

struct uroce_pcap;

/* Creates (truncates) the file; "%p" in path stands for the process id.
 * NULL, after a message on stderr, if it cannot. */
struct uroce_pcap *uroce_pcap_open(const char *path);
/* Reports on stderr how many packets could not be written, if any. */
void uroce_pcap_close(struct uroce_pcap *pc);
/* Ends the file while packets may still be on their way to it (they are
 * then left out); the object stays valid until uroce_pcap_close. */
void uroce_pcap_stop(struct uroce_pcap *pc);
/* The file's name ("%p" expanded). */
const char *uroce_pcap_path(const struct uroce_pcap *pc);

/* One frame each; false if it could not be written (the caller counts the
 * drop).  pkt->dst/src and sport give the addresses and ports, ip_id the
 * IPv4 identification the packet leaves with. */
bool uroce_pcap_tx(struct uroce_pcap *pc, const struct uroce_txpkt *pkt,
		   uint16_t sport, uint16_t ip_id);
bool uroce_pcap_rx(struct uroce_pcap *pc, const struct uroce_rxpkt *rx);
/* Held from before a send until its packets are captured, so that no answer
 * to them is captured first (the lock is the one every frame takes). */
void uroce_pcap_hold(struct uroce_pcap *pc);
void uroce_pcap_release(struct uroce_pcap *pc);

#endif
