/* The BTH opcode table: which headers each opcode carries (IBTA 9.2, 9.3). */
#ifndef UROCE_OPCODE_H
#define UROCE_OPCODE_H

#include <stdint.h>

enum ib_opcode {
	/* transport service prefixes */
	IB_OPC_RC = 0x00,
	IB_OPC_UC = 0x20,
	IB_OPC_RD = 0x40,
	IB_OPC_UD = 0x60,
	IB_OPC_CNP = 0x80,
	IB_OPC_XRC = 0xA0,

	/* operation suffixes */
	IB_OP_SEND_FIRST = 0x00,
	IB_OP_SEND_MIDDLE = 0x01,
	IB_OP_SEND_LAST = 0x02,
	IB_OP_SEND_LAST_IMM = 0x03,
	IB_OP_SEND_ONLY = 0x04,
	IB_OP_SEND_ONLY_IMM = 0x05,
	IB_OP_WRITE_FIRST = 0x06,
	IB_OP_WRITE_MIDDLE = 0x07,
	IB_OP_WRITE_LAST = 0x08,
	IB_OP_WRITE_LAST_IMM = 0x09,
	IB_OP_WRITE_ONLY = 0x0A,
	IB_OP_WRITE_ONLY_IMM = 0x0B,
	IB_OP_READ_REQ = 0x0C,
	IB_OP_READ_RESP_FIRST = 0x0D,
	IB_OP_READ_RESP_MIDDLE = 0x0E,
	IB_OP_READ_RESP_LAST = 0x0F,
	IB_OP_READ_RESP_ONLY = 0x10,
	IB_OP_ACK = 0x11,
	IB_OP_ATOMIC_ACK = 0x12,
	IB_OP_CMP_SWAP = 0x13,
	IB_OP_FETCH_ADD = 0x14,
	IB_OP_SEND_LAST_INV = 0x16,
	IB_OP_SEND_ONLY_INV = 0x17,
	IB_OP_FLUSH = 0x1C,		/* memory placement extensions (IBTA 1.5) */
	IB_OP_ATOMIC_WRITE = 0x1D,
};

/* Header presence and role of an opcode. */
enum ib_opcode_mask {
	OPM_RETH = 1 << 0,
	OPM_AETH = 1 << 1,
	OPM_ATMETH = 1 << 2,
	OPM_ATMACK = 1 << 3,
	OPM_IMMDT = 1 << 4,
	OPM_IETH = 1 << 5,
	OPM_DETH = 1 << 6,
	OPM_PAYLOAD = 1 << 7,		/* may carry payload */
	OPM_REQ = 1 << 8,		/* handled by the responder */
	OPM_RESP = 1 << 9,		/* handled by the completer */
	OPM_FIRST = 1 << 10,
	OPM_MIDDLE = 1 << 11,
	OPM_LAST = 1 << 12,
	OPM_ONLY = OPM_FIRST | OPM_LAST,
	OPM_SEND = 1 << 13,
	OPM_WRITE = 1 << 14,
	OPM_READ = 1 << 15,
	OPM_ATOMIC = 1 << 16,
	OPM_COMP = 1 << 17,		/* consumes a receive WQE at the responder */
	OPM_XRCETH = 1 << 18,		/* XRC request: names the target's SRQ */
	OPM_FETH = 1 << 19,		/* FLUSH: placement type and selectivity */
	OPM_FLUSH = 1 << 20,
	OPM_ATOMIC_WRITE = 1 << 21,
};

struct ib_opcode_info {
	const char *name;
	uint32_t mask;			/* 0: opcode not valid */
	uint8_t hdr_len;		/* BTH + every extension header */
	/* offsets from the BTH start; 0 = absent */
	uint8_t feth, reth, aeth, atmeth, atmack, immdt, ieth, deth;
};

extern const struct ib_opcode_info ib_opcodes[256];

#endif
