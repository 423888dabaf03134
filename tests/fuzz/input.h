/*
 * What every harness uses: its oracle check, and reading commands and bytes
 * out of the fuzz input.
 */
#ifndef UROCE_FUZZ_INPUT_H
#define UROCE_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

/* A harness's oracle: prints the reason and aborts, which libFuzzer reports
 * as a crash, with the input that caused it. */
#define FUZZ_CHECK(cond)                                                       \
	do {                                                                   \
		if (!(cond))                                                   \
			fuzz_fail(__FILE__, __LINE__, #cond);                  \
	} while (0)
void fuzz_fail(const char *file, int line, const char *what)
	__attribute__((noreturn));

/* Input reading: each take returns 0 once the input is used up. */
struct fuzz_in {
	const uint8_t *p;
	size_t left;
};
uint8_t fuzz_u8(struct fuzz_in *in);
uint16_t fuzz_u16(struct fuzz_in *in);
/* Copies up to n bytes into out, zero-fills the rest. */
void fuzz_bytes(struct fuzz_in *in, uint8_t *out, size_t n);

#endif
