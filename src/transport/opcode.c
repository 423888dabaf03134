#include "transport/opcode.h"
#include "transport/hdr.h"

/* Extension header order within a packet (IBTA 9.2): BTH, XRCETH or DETH,
 * FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH. */
#define HDRS(m) (BTH_LEN + ((m) & OPM_DETH ? DETH_LEN : 0) +                  \
		 ((m) & OPM_XRCETH ? XRCETH_LEN : 0) +                         \
		 ((m) & OPM_FETH ? FETH_LEN : 0) +                             \
		 ((m) & OPM_RETH ? RETH_LEN : 0) +                             \
		 ((m) & OPM_ATMETH ? ATMETH_LEN : 0) +                         \
		 ((m) & OPM_AETH ? AETH_LEN : 0) +                             \
		 ((m) & OPM_ATMACK ? ATMACK_LEN : 0) +                         \
		 ((m) & OPM_IMMDT ? IMMDT_LEN : 0) +                           \
		 ((m) & OPM_IETH ? IETH_LEN : 0))
#define OFF_DETH(m) ((m) & OPM_DETH ? BTH_LEN : 0)
#define AT_FETH(m) (BTH_LEN + ((m) & OPM_DETH ? DETH_LEN : 0) +               \
		    ((m) & OPM_XRCETH ? XRCETH_LEN : 0))
#define AT_RETH(m) (AT_FETH(m) + ((m) & OPM_FETH ? FETH_LEN : 0))
#define AT_ATMETH(m) (AT_RETH(m) + ((m) & OPM_RETH ? RETH_LEN : 0))
#define AT_AETH(m) (AT_ATMETH(m) + ((m) & OPM_ATMETH ? ATMETH_LEN : 0))
#define AT_ATMACK(m) (AT_AETH(m) + ((m) & OPM_AETH ? AETH_LEN : 0))
#define AT_IMMDT(m) (AT_ATMACK(m) + ((m) & OPM_ATMACK ? ATMACK_LEN : 0))
#define AT_IETH(m) (AT_IMMDT(m) + ((m) & OPM_IMMDT ? IMMDT_LEN : 0))

#define OP(code, nm, m)                                                        \
	[code] = {                                                             \
		.name = nm, .mask = (m), .hdr_len = HDRS(m),                   \
		.deth = OFF_DETH(m),                                           \
		.feth = (m) & OPM_FETH ? AT_FETH(m) : 0,                       \
		.reth = (m) & OPM_RETH ? AT_RETH(m) : 0,                       \
		.atmeth = (m) & OPM_ATMETH ? AT_ATMETH(m) : 0,                 \
		.aeth = (m) & OPM_AETH ? AT_AETH(m) : 0,                       \
		.atmack = (m) & OPM_ATMACK ? AT_ATMACK(m) : 0,                 \
		.immdt = (m) & OPM_IMMDT ? AT_IMMDT(m) : 0,                    \
		.ieth = (m) & OPM_IETH ? AT_IETH(m) : 0,                       \
	}

#define SEND_OPS(base, pfx, extra)                                             \
	OP(base | IB_OP_SEND_FIRST, pfx "_SEND_FIRST",                         \
	   extra | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_FIRST | OPM_COMP),   \
	OP(base | IB_OP_SEND_MIDDLE, pfx "_SEND_MIDDLE",                       \
	   extra | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_MIDDLE | OPM_COMP),  \
	OP(base | IB_OP_SEND_LAST, pfx "_SEND_LAST",                           \
	   extra | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_LAST | OPM_COMP),    \
	OP(base | IB_OP_SEND_LAST_IMM, pfx "_SEND_LAST_WITH_IMMEDIATE",        \
	   extra | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_LAST | OPM_COMP |    \
	   OPM_IMMDT),                                                         \
	OP(base | IB_OP_SEND_ONLY, pfx "_SEND_ONLY",                           \
	   extra | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_ONLY | OPM_COMP),    \
	OP(base | IB_OP_SEND_ONLY_IMM, pfx "_SEND_ONLY_WITH_IMMEDIATE",        \
	   extra | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_ONLY | OPM_COMP |    \
	   OPM_IMMDT)

#define WRITE_OPS(base, pfx, extra)                                            \
	OP(base | IB_OP_WRITE_FIRST, pfx "_RDMA_WRITE_FIRST",                  \
	   extra | OPM_REQ | OPM_WRITE | OPM_PAYLOAD | OPM_FIRST | OPM_RETH),  \
	OP(base | IB_OP_WRITE_MIDDLE, pfx "_RDMA_WRITE_MIDDLE",                \
	   extra | OPM_REQ | OPM_WRITE | OPM_PAYLOAD | OPM_MIDDLE),            \
	OP(base | IB_OP_WRITE_LAST, pfx "_RDMA_WRITE_LAST",                    \
	   extra | OPM_REQ | OPM_WRITE | OPM_PAYLOAD | OPM_LAST),              \
	OP(base | IB_OP_WRITE_LAST_IMM, pfx "_RDMA_WRITE_LAST_WITH_IMMEDIATE", \
	   extra | OPM_REQ | OPM_WRITE | OPM_PAYLOAD | OPM_LAST | OPM_IMMDT |  \
	   OPM_COMP),                                                          \
	OP(base | IB_OP_WRITE_ONLY, pfx "_RDMA_WRITE_ONLY",                    \
	   extra | OPM_REQ | OPM_WRITE | OPM_PAYLOAD | OPM_ONLY | OPM_RETH),   \
	OP(base | IB_OP_WRITE_ONLY_IMM, pfx "_RDMA_WRITE_ONLY_WITH_IMMEDIATE", \
	   extra | OPM_REQ | OPM_WRITE | OPM_PAYLOAD | OPM_ONLY | OPM_RETH |   \
	   OPM_IMMDT | OPM_COMP)

/* READ, atomics and their responses: RC and XRC only. */
#define RDMA_OPS(base, pfx, extra)                                             \
	OP(base | IB_OP_READ_REQ, pfx "_RDMA_READ_REQUEST",                    \
	   extra | OPM_REQ | OPM_READ | OPM_ONLY | OPM_RETH),                  \
	OP(base | IB_OP_READ_RESP_FIRST, pfx "_RDMA_READ_RESPONSE_FIRST",      \
	   OPM_RESP | OPM_READ | OPM_PAYLOAD | OPM_FIRST | OPM_AETH),          \
	OP(base | IB_OP_READ_RESP_MIDDLE, pfx "_RDMA_READ_RESPONSE_MIDDLE",    \
	   OPM_RESP | OPM_READ | OPM_PAYLOAD | OPM_MIDDLE),                    \
	OP(base | IB_OP_READ_RESP_LAST, pfx "_RDMA_READ_RESPONSE_LAST",        \
	   OPM_RESP | OPM_READ | OPM_PAYLOAD | OPM_LAST | OPM_AETH),           \
	OP(base | IB_OP_READ_RESP_ONLY, pfx "_RDMA_READ_RESPONSE_ONLY",        \
	   OPM_RESP | OPM_READ | OPM_PAYLOAD | OPM_ONLY | OPM_AETH),           \
	OP(base | IB_OP_ACK, pfx "_ACKNOWLEDGE",                               \
	   OPM_RESP | OPM_ONLY | OPM_AETH),                                    \
	OP(base | IB_OP_ATOMIC_ACK, pfx "_ATOMIC_ACKNOWLEDGE",                 \
	   OPM_RESP | OPM_ATOMIC | OPM_ONLY | OPM_AETH | OPM_ATMACK),          \
	OP(base | IB_OP_CMP_SWAP, pfx "_COMPARE_SWAP",                         \
	   extra | OPM_REQ | OPM_ATOMIC | OPM_ONLY | OPM_ATMETH),              \
	OP(base | IB_OP_FETCH_ADD, pfx "_FETCH_ADD",                           \
	   extra | OPM_REQ | OPM_ATOMIC | OPM_ONLY | OPM_ATMETH)

const struct ib_opcode_info ib_opcodes[256] = {
	SEND_OPS(IB_OPC_RC, "RC", 0),
	WRITE_OPS(IB_OPC_RC, "RC", 0),
	RDMA_OPS(IB_OPC_RC, "RC", 0),
	OP(IB_OPC_RC | IB_OP_SEND_LAST_INV, "RC_SEND_LAST_WITH_INVALIDATE",
	   OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_LAST | OPM_COMP | OPM_IETH),
	OP(IB_OPC_RC | IB_OP_SEND_ONLY_INV, "RC_SEND_ONLY_WITH_INVALIDATE",
	   OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_ONLY | OPM_COMP | OPM_IETH),
	/* RC only, as Soft-RoCE: both are answered by a zero-length READ
	 * response and use a responder resource, as a READ does */
	OP(IB_OPC_RC | IB_OP_FLUSH, "RC_FLUSH",
	   OPM_REQ | OPM_FLUSH | OPM_ONLY | OPM_FETH | OPM_RETH),
	OP(IB_OPC_RC | IB_OP_ATOMIC_WRITE, "RC_ATOMIC_WRITE",
	   OPM_REQ | OPM_ATOMIC_WRITE | OPM_ONLY | OPM_RETH | OPM_PAYLOAD),

	SEND_OPS(IB_OPC_UC, "UC", 0),
	WRITE_OPS(IB_OPC_UC, "UC", 0),

	OP(IB_OPC_UD | IB_OP_SEND_ONLY, "UD_SEND_ONLY",
	   OPM_DETH | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_ONLY | OPM_COMP),
	OP(IB_OPC_UD | IB_OP_SEND_ONLY_IMM, "UD_SEND_ONLY_WITH_IMMEDIATE",
	   OPM_DETH | OPM_REQ | OPM_SEND | OPM_PAYLOAD | OPM_ONLY | OPM_COMP |
	   OPM_IMMDT),

	/* XRC requests carry the XRCETH; its responses are RC's, renumbered */
	SEND_OPS(IB_OPC_XRC, "XRC", OPM_XRCETH),
	WRITE_OPS(IB_OPC_XRC, "XRC", OPM_XRCETH),
	RDMA_OPS(IB_OPC_XRC, "XRC", OPM_XRCETH),
};
