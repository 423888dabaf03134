/*
 * InfiniBand transport headers as RoCEv2 carries them (IBTA vol. 1 ch. 9):
 * one getter/setter pair per field, all big-endian on the wire.
 */
#ifndef UROCE_HDR_H
#define UROCE_HDR_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

enum {
	BTH_LEN = 12,
	RETH_LEN = 16,
	AETH_LEN = 4,
	ATMETH_LEN = 28,
	ATMACK_LEN = 8,
	IMMDT_LEN = 4,
	IETH_LEN = 4,
	DETH_LEN = 8,
	XRCETH_LEN = 4,
	FETH_LEN = 4,
	ICRC_LEN = 4,
};

#define PSN_MASK 0xFFFFFFu
#define QPN_MASK 0xFFFFFFu
/* QP1, the General Services Interface: management datagrams (the CM) */
#define QPN_GSI 1u

static inline uint32_t get_be32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return be32toh(v);
}
static inline void put_be32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}
static inline uint64_t get_be64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return be64toh(v);
}
static inline void put_be64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

/* BTH: opcode | SE M Pad(2) TVer(4) | P_Key | FECN BECN resv6 | DestQP(24) |
 *      AckReq resv7 | PSN(24) */
static inline uint8_t bth_opcode(const uint8_t *b) { return b[0]; }
static inline int bth_se(const uint8_t *b) { return b[1] >> 7; }
static inline int bth_migreq(const uint8_t *b) { return (b[1] >> 6) & 1; }
static inline int bth_pad(const uint8_t *b) { return (b[1] >> 4) & 3; }
static inline int bth_tver(const uint8_t *b) { return b[1] & 0xF; }
static inline uint16_t bth_pkey(const uint8_t *b) { return b[2] << 8 | b[3]; }
static inline int bth_fecn(const uint8_t *b) { return b[4] >> 7; }
static inline int bth_becn(const uint8_t *b) { return (b[4] >> 6) & 1; }
static inline uint32_t bth_qpn(const uint8_t *b) { return get_be32(b + 4) & QPN_MASK; }
static inline int bth_ackreq(const uint8_t *b) { return b[8] >> 7; }
static inline void bth_set_ackreq(uint8_t *b) { b[8] |= 0x80; }
static inline uint32_t bth_psn(const uint8_t *b) { return get_be32(b + 8) & PSN_MASK; }

static inline void bth_init(uint8_t *b, uint8_t opcode, int se, int pad,
			    uint16_t pkey, uint32_t qpn, int ackreq, uint32_t psn)
{
	b[0] = opcode;
	/* MigReq 1: with no alternate path a QP is in the Migrated state,
	 * which RoCE NICs signal this way (the public ICRC vectors carry it;
	 * rxe sends 0 and ignores it).  TVer 0. */
	b[1] = (se ? 0x80 : 0) | 0x40 | (pad & 3) << 4;
	b[2] = pkey >> 8;
	b[3] = pkey;
	put_be32(b + 4, qpn & QPN_MASK);
	put_be32(b + 8, (psn & PSN_MASK) | (ackreq ? 0x80000000u : 0));
}

/* RETH: VA(64) R_Key(32) DMA length(32) */
static inline uint64_t reth_va(const uint8_t *h) { return get_be64(h); }
static inline uint32_t reth_rkey(const uint8_t *h) { return get_be32(h + 8); }
static inline uint32_t reth_len(const uint8_t *h) { return get_be32(h + 12); }
static inline void reth_set(uint8_t *h, uint64_t va, uint32_t rkey, uint32_t len)
{
	put_be64(h, va);
	put_be32(h + 8, rkey);
	put_be32(h + 12, len);
}

/* FETH: reserved(26) selectivity level(2) placement type(4) */
enum { FETH_PLT_GLOBAL = 1, FETH_PLT_PERSISTENT = 2 };
enum { FETH_SEL_RANGE = 0, FETH_SEL_MR = 1 };
static inline uint8_t feth_plt(const uint8_t *h) { return h[3] & 0xF; }
static inline uint8_t feth_sel(const uint8_t *h) { return (h[3] >> 4) & 3; }
static inline void feth_set(uint8_t *h, uint8_t plt, uint8_t sel)
{
	put_be32(h, (uint32_t)(sel & 3) << 4 | (plt & 0xF));
}

/* AETH: syndrome(8) MSN(24) */
static inline uint8_t aeth_syndrome(const uint8_t *h) { return h[0]; }
static inline uint32_t aeth_msn(const uint8_t *h) { return get_be32(h) & 0xFFFFFF; }
static inline void aeth_set(uint8_t *h, uint8_t syndrome, uint32_t msn)
{
	put_be32(h, (uint32_t)syndrome << 24 | (msn & 0xFFFFFF));
}

enum aeth_type {
	AETH_ACK = 0x00,
	AETH_RNR_NAK = 0x20,
	AETH_NAK = 0x60,
	AETH_TYPE_MASK = 0x60,
};
enum aeth_nak_code {
	AETH_NAK_PSN_SEQ = 0,
	AETH_NAK_INVALID_REQ = 1,
	AETH_NAK_REM_ACCESS = 2,
	AETH_NAK_REM_OP = 3,
	AETH_NAK_INVALID_RD_REQ = 4,
};
/* Credit count code 31: no end-to-end credits are advertised (C9-152). */
#define AETH_ACK_UNLIMITED (AETH_ACK | 0x1F)

/* AtomicETH: VA(64) R_Key(32) Swap/Add(64) Compare(64) */
static inline uint64_t atmeth_va(const uint8_t *h) { return get_be64(h); }
static inline uint32_t atmeth_rkey(const uint8_t *h) { return get_be32(h + 8); }
static inline uint64_t atmeth_swap_add(const uint8_t *h) { return get_be64(h + 12); }
static inline uint64_t atmeth_compare(const uint8_t *h) { return get_be64(h + 20); }
static inline void atmeth_set(uint8_t *h, uint64_t va, uint32_t rkey,
			      uint64_t swap_add, uint64_t compare)
{
	put_be64(h, va);
	put_be32(h + 8, rkey);
	put_be64(h + 12, swap_add);
	put_be64(h + 20, compare);
}

/* AtomicAckETH: original remote value(64) */
static inline uint64_t atmack_orig(const uint8_t *h) { return get_be64(h); }
static inline void atmack_set(uint8_t *h, uint64_t v) { put_be64(h, v); }

/* DETH: Q_Key(32) resv(8) SrcQP(24) */
static inline uint32_t deth_qkey(const uint8_t *h) { return get_be32(h); }
static inline uint32_t deth_sqpn(const uint8_t *h) { return get_be32(h + 4) & QPN_MASK; }
static inline void deth_set(uint8_t *h, uint32_t qkey, uint32_t sqpn)
{
	put_be32(h, qkey);
	put_be32(h + 4, sqpn & QPN_MASK);
}

/* 24-bit PSN arithmetic: a - b as a signed distance in (-2^23, 2^23]. */
static inline int32_t psn_diff(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8) >> 8;
}
static inline uint32_t psn_add(uint32_t psn, uint32_t n)
{
	return (psn + n) & PSN_MASK;
}

#endif
