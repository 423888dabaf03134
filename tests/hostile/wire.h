/*
 * The attacker's own RoCEv2: it builds and parses packets from the IBTA
 * layouts (vol. 1 ch. 9, Annex A17) with none of uroce's code, computes the
 * ICRC with zlib's CRC-32, and talks over plain UDP sockets on loopback.
 */
#ifndef UROCE_HOSTILE_WIRE_H
#define UROCE_HOSTILE_WIRE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	/* the RoCEv2 port of these tests (UROCE_PORT, set by CMakeLists.txt):
	 * their own, which no per-host service holds */
	ROCE_PORT = 4893,
	W_BTH = 12,
	W_RETH = 16,
	W_AETH = 4,
	W_ATOMIC_ETH = 28,
	W_DETH = 8,
	W_ICRC = 4,
	W_MAX_PKT = 4096 + 128,

	/* BTH opcodes (IBTA 9.2) */
	OP_WRITE_FIRST = 0x06,
	OP_WRITE_ONLY = 0x0A,
	OP_READ_REQ = 0x0C,
	OP_READ_RESP_FIRST = 0x0D,
	OP_READ_RESP_MIDDLE = 0x0E,
	OP_READ_RESP_LAST = 0x0F,
	OP_READ_RESP_ONLY = 0x10,
	OP_ACK = 0x11,
	OP_ATOMIC_ACK = 0x12,
	OP_CMP_SWAP = 0x13,
	OP_FETCH_ADD = 0x14,
	OP_SEND_ONLY_INV = 0x17,
	OP_UC_WRITE_ONLY = 0x2A,
	OP_UD_SEND_ONLY = 0x64,

	/* AETH syndromes (IBTA 9.3.5) */
	AETH_ACK_NO_CREDIT = 0x1F,
	NAK_PSN_SEQ = 0x60,
	NAK_INVALID_REQ = 0x61,
	NAK_REMOTE_ACCESS = 0x62,
};

/* A packet being built or received: the BTH and what follows, with room for
 * the ICRC. */
struct w_pkt {
	uint8_t b[W_MAX_PKT];
	size_t len;
};

/* A parsed response. */
struct w_resp {
	uint8_t opcode;
	uint32_t dqpn, psn;
	bool has_aeth;
	uint8_t syndrome;
	uint32_t msn;
	uint64_t atomic_orig;
	size_t paylen;
	const uint8_t *payload;
};

void w_put16(uint8_t *p, uint16_t v);
void w_put32(uint8_t *p, uint32_t v);
void w_put64(uint8_t *p, uint64_t v);
uint32_t w_get32(const uint8_t *p);
uint64_t w_get64(const uint8_t *p);

/* Starts a request: BTH with AckReq set and the default P_Key. */
void w_bth(struct w_pkt *k, uint8_t opcode, uint32_t dqpn, uint32_t psn);
void w_reth(struct w_pkt *k, uint64_t va, uint32_t rkey, uint32_t len);
void w_atomic_eth(struct w_pkt *k, uint64_t va, uint32_t rkey,
		  uint64_t swap_add, uint64_t compare);
void w_append(struct w_pkt *k, const void *data, size_t len);
/* Pads the payload to 4 bytes (BTH PadCnt) and appends the ICRC for a
 * datagram from src to dst. */
void w_seal(struct w_pkt *k, const struct sockaddr_in *src,
	    const struct sockaddr_in *dst);
/* The ICRC over the UDP payload p (without its 4 ICRC bytes) of an IPv4
 * datagram with identification ip_id and DF. */
uint32_t w_icrc(const struct sockaddr_in *src, const struct sockaddr_in *dst,
		uint16_t ip_id, const uint8_t *p, size_t len);

/* A UDP socket bound to ip:port (SO_REUSEPORT: the RoCEv2 port is shared
 * with the uroce processes of this user, which bind the wildcard address). */
int w_socket(const char *ip, uint16_t port);
struct sockaddr_in w_addr(const char *ip, uint16_t port);
void w_send(int fd, const struct w_pkt *k, const struct sockaddr_in *dst);
/* Waits up to ms for a datagram; false if none came.  The caller fails on
 * what it does not expect; the ICRC is checked here (a bad one fails). */
bool w_recv(int fd, struct w_pkt *k, struct w_resp *r, unsigned ms);
/* Drops whatever is queued on fd. */
void w_drain(int fd);

#endif
