/*
 * Walking a resolved scatter/gather list at a byte offset: the requester
 * gathers packet payloads from it, the responder and the completer scatter
 * received payloads into it.
 */
#include <string.h>

#include "transport/transport.h"

unsigned uroce_sge_gather(struct iovec *iov, const struct uroce_sge *sge,
			  uint32_t num_sge, uint32_t offset, uint32_t len)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < num_sge && len; i++) {
		uint32_t take;

		if (offset >= sge[i].length) {
			offset -= sge[i].length;
			continue;
		}
		take = sge[i].length - offset;
		if (take > len)
			take = len;
		iov[n].iov_base = sge[i].addr + offset;
		iov[n].iov_len = take;
		n++;
		len -= take;
		offset = 0;
	}
	return n;
}

void uroce_sge_scatter(const struct uroce_sge *sge, uint32_t num_sge,
		       uint32_t offset, const uint8_t *data, uint32_t len)
{
	struct iovec iov[UROCE_MAX_SGE];
	unsigned n = uroce_sge_gather(iov, sge, num_sge, offset, len);

	DMA_BEGIN();
	for (unsigned i = 0; i < n; i++) {
		memcpy(iov[i].iov_base, data, iov[i].iov_len);
		data += iov[i].iov_len;
	}
	DMA_END();
}
