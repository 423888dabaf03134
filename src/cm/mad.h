/*
 * Communication Management MADs (IBTA vol. 1 ch. 12, and 13.4 for the MAD
 * header) as they travel on QP1: a 24-byte MAD header and 232 bytes of CM
 * payload.  Offsets below are from the start of the CM payload; a field
 * narrower than a byte is given by its byte and bit mask.
 */
#ifndef UROCE_CM_MAD_H
#define UROCE_CM_MAD_H

#include <stdint.h>

#include "transport/hdr.h"

enum {
	MAD_LEN = 256,
	MAD_HDR_LEN = 24,
	CM_PAYLOAD_LEN = MAD_LEN - MAD_HDR_LEN,

	MAD_BASE_VERSION = 1,
	MAD_CLASS_CM = 0x07,
	MAD_CLASS_VERSION_CM = 2,
	MAD_METHOD_GET = 0x01,
	MAD_METHOD_SEND = 0x03,
	MAD_METHOD_GET_RESP = 0x81,
	MAD_STATUS_UNSUPPORTED = 0x000C,	/* method/attribute combination */

	GSI_QPN = 1,
	GSI_QKEY = 0x80010000,
};

/* MAD header */
enum {
	MADH_BASE_VERSION = 0,
	MADH_CLASS = 1,
	MADH_CLASS_VERSION = 2,
	MADH_METHOD = 3,
	MADH_STATUS = 4,
	MADH_TID = 8,
	MADH_ATTR_ID = 16,
	MADH_ATTR_MOD = 20,
};

enum cm_attr {
	CM_ATTR_CLASS_PORT_INFO = 0x0001,
	CM_ATTR_REQ = 0x0010,
	CM_ATTR_MRA = 0x0011,
	CM_ATTR_REJ = 0x0012,
	CM_ATTR_REP = 0x0013,
	CM_ATTR_RTU = 0x0014,
	CM_ATTR_DREQ = 0x0015,
	CM_ATTR_DREP = 0x0016,
	CM_ATTR_SIDR_REQ = 0x0017,
	CM_ATTR_SIDR_REP = 0x0018,
};

/* REQ */
enum {
	REQ_LOCAL_COMM_ID = 0,
	REQ_SERVICE_ID = 8,
	REQ_LOCAL_CA_GUID = 16,
	REQ_LOCAL_QKEY = 28,
	REQ_LOCAL_QPN = 32,		/* 24 bits */
	REQ_RESP_RESOURCES = 35,
	REQ_LOCAL_EECN = 36,
	REQ_INIT_DEPTH = 39,
	REQ_REMOTE_EECN = 40,
	REQ_BYTE43 = 43,	/* remote CM response timeout, transport, E2E */
	REQ_STARTING_PSN = 44,		/* 24 bits */
	REQ_BYTE47 = 47,	/* local CM response timeout, retry count */
	REQ_PKEY = 48,
	REQ_BYTE50 = 50,	/* path MTU, RDC exists, RNR retry count */
	REQ_BYTE51 = 51,	/* max CM retries, SRQ, extended transport */
	REQ_PRIMARY_LOCAL_LID = 52,
	REQ_PRIMARY_REMOTE_LID = 54,
	REQ_PRIMARY_LOCAL_GID = 56,
	REQ_PRIMARY_REMOTE_GID = 72,
	REQ_FLOW_LABEL = 88,	/* flow label(20) resv(6) packet rate(6) */
	REQ_TRAFFIC_CLASS = 92,
	REQ_HOP_LIMIT = 93,
	REQ_BYTE94 = 94,	/* SL, subnet local */
	REQ_BYTE95 = 95,	/* local ACK timeout */
	REQ_ALTERNATE_PATH = 96,	/* 44 bytes, zero on RoCE */
	REQ_PRIVATE_DATA = 140,
	REQ_PRIVATE_DATA_LEN = 92,
};

/* REP */
enum {
	REP_LOCAL_COMM_ID = 0,
	REP_REMOTE_COMM_ID = 4,
	REP_LOCAL_QKEY = 8,
	REP_LOCAL_QPN = 12,
	REP_LOCAL_EECN = 16,
	REP_STARTING_PSN = 20,
	REP_RESP_RESOURCES = 24,
	REP_INIT_DEPTH = 25,
	REP_BYTE26 = 26,	/* target ACK delay, failover, E2E */
	REP_BYTE27 = 27,	/* RNR retry count, SRQ */
	REP_LOCAL_CA_GUID = 28,
	REP_PRIVATE_DATA = 36,
	REP_PRIVATE_DATA_LEN = 196,
};

/* the messages that carry just the two comm IDs ahead of their data */
enum {
	MSG_LOCAL_COMM_ID = 0,
	MSG_REMOTE_COMM_ID = 4,

	RTU_PRIVATE_DATA = 8,
	RTU_PRIVATE_DATA_LEN = 224,

	REJ_BYTE8 = 8,		/* message rejected (2 bits, high) */
	REJ_BYTE9 = 9,		/* reject info length (7 bits, high) */
	REJ_REASON = 10,
	REJ_ARI = 12,
	REJ_ARI_LEN = 72,
	REJ_PRIVATE_DATA = 84,
	REJ_PRIVATE_DATA_LEN = 148,

	MRA_BYTE8 = 8,		/* message MRAed (2 bits, high) */
	MRA_BYTE9 = 9,		/* service timeout (5 bits, high) */
	MRA_PRIVATE_DATA = 10,
	MRA_PRIVATE_DATA_LEN = 222,

	DREQ_REMOTE_QPN = 8,
	DREQ_PRIVATE_DATA = 12,
	DREQ_PRIVATE_DATA_LEN = 220,

	DREP_PRIVATE_DATA = 8,
	DREP_PRIVATE_DATA_LEN = 224,
};

/* SIDR */
enum {
	SIDR_REQ_REQUEST_ID = 0,
	SIDR_REQ_PKEY = 4,
	SIDR_REQ_SERVICE_ID = 8,
	SIDR_REQ_PRIVATE_DATA = 16,
	SIDR_REQ_PRIVATE_DATA_LEN = 216,

	SIDR_REP_REQUEST_ID = 0,
	SIDR_REP_STATUS = 4,
	SIDR_REP_QPN = 8,
	SIDR_REP_SERVICE_ID = 12,
	SIDR_REP_QKEY = 20,
	SIDR_REP_PRIVATE_DATA = 96,
	SIDR_REP_PRIVATE_DATA_LEN = 136,
};

/* Message Rejected / MRAed */
enum { CM_MSG_REQ = 0, CM_MSG_REP = 1, CM_MSG_OTHER = 2 };
enum { CM_EXT_TRANSPORT_XRC = 1 };	/* REQ byte 51, with transport 3 */

/* Bit fields: the value under mask in byte p[off]. */
static inline unsigned mad_bits(const uint8_t *p, unsigned off, uint8_t mask)
{
	return (p[off] & mask) >> __builtin_ctz(mask);
}

static inline void mad_set_bits(uint8_t *p, unsigned off, uint8_t mask,
				unsigned v)
{
	p[off] = (p[off] & ~mask) | ((v << __builtin_ctz(mask)) & mask);
}

static inline uint16_t mad_be16(const uint8_t *p, unsigned off)
{
	return p[off] << 8 | p[off + 1];
}

static inline void mad_put_be16(uint8_t *p, unsigned off, uint16_t v)
{
	p[off] = v >> 8;
	p[off + 1] = v;
}

static inline uint32_t mad_be24(const uint8_t *p, unsigned off)
{
	return (uint32_t)p[off] << 16 | p[off + 1] << 8 | p[off + 2];
}

static inline void mad_put_be24(uint8_t *p, unsigned off, uint32_t v)
{
	p[off] = v >> 16;
	p[off + 1] = v >> 8;
	p[off + 2] = v;
}

static inline uint32_t mad_be32(const uint8_t *p, unsigned off)
{
	return get_be32(p + off);
}

static inline void mad_put_be32(uint8_t *p, unsigned off, uint32_t v)
{
	put_be32(p + off, v);
}

static inline uint64_t mad_be64(const uint8_t *p, unsigned off)
{
	return get_be64(p + off);
}

static inline void mad_put_be64(uint8_t *p, unsigned off, uint64_t v)
{
	put_be64(p + off, v);
}

#endif
