/* See input.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input.h"

void fuzz_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
	abort();
}

uint8_t fuzz_u8(struct fuzz_in *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

uint16_t fuzz_u16(struct fuzz_in *in)
{
	uint16_t hi = fuzz_u8(in);

	return hi << 8 | fuzz_u8(in);
}

void fuzz_bytes(struct fuzz_in *in, uint8_t *out, size_t n)
{
	size_t k = n < in->left ? n : in->left;

	memcpy(out, in->p, k);
	memset(out + k, 0, n - k);
	in->p += k;
	in->left -= k;
}
