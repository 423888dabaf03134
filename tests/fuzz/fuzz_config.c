/*
 * The configuration parser (src/config.c, compiled into this harness so
 * that it can load the configuration again for every input): the file that
 * UROCE_CONFIG names and the environment variables, with any bytes.
 *
 * Input: the file's contents, then, separated by NUL bytes, the value of
 * each variable in the order of config.c's settings table (a variable past
 * the end of the input is unset).
 *
 * Oracles: the sanitizers; whatever the input, every setting ends up in
 * its documented range: a bad value is ignored, never half taken; and the
 * same file with every line commented out gives what an empty file gives.
 */
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../src/config.c"
#include "input.h"

static int memfd;
/* uroce's warnings, one per bad value, would drown libFuzzer's output:
 * stderr is /dev/null while the configuration loads, and the sanitizers
 * report to the real one. */
static int stderr_fd, null_fd;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char path[64];

	(void)argc;
	(void)argv;
	memfd = memfd_create("fuzz_config", MFD_CLOEXEC);
	FUZZ_CHECK(memfd >= 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	setenv("UROCE_CONFIG", path, 1);
	stderr_fd = dup(2);
	null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	FUZZ_CHECK(stderr_fd >= 0 && null_fd >= 0);
	__sanitizer_set_report_fd((void *)(intptr_t)stderr_fd);
	return 0;
}

/* Every item of a comma list is an address. */
static bool addrs_ok(const char *list)
{
	char copy[sizeof(cfg.addrs)], *save, *tok;

	strcpy(copy, list);
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned char bin[sizeof(struct in6_addr)];

		if (inet_pton(AF_INET, tok, bin) != 1 &&
		    inet_pton(AF_INET6, tok, bin) != 1)
			return false;
	}
	return true;
}

static bool prob_ok(double p)
{
	return p >= 0.0 && p <= 1.0;
}

/* Each side's faults share one draw: their probabilities add up to 1 at
 * most, and a side is on when one of them is set. */
static bool faults_ok(const struct uroce_faults_cfg *f)
{
	double rx[] = { f->drop, f->dup, f->reorder, f->corrupt, f->delay };
	double tx[] = { f->tx_drop, f->tx_corrupt };
	double rx_sum = 0, tx_sum = 0;

	for (size_t i = 0; i < ARRAY_SIZE(rx); i++) {
		if (!prob_ok(rx[i]))
			return false;
		rx_sum += rx[i];
	}
	for (size_t i = 0; i < ARRAY_SIZE(tx); i++) {
		if (!prob_ok(tx[i]))
			return false;
		tx_sum += tx[i];
	}
	return rx_sum <= 1 && tx_sum <= 1 && f->rx == (rx_sum > 0) &&
	       f->tx == (tx_sum > 0) && f->enabled == (f->rx || f->tx);
}

static void load(const uint8_t *file, size_t len)
{
	FUZZ_CHECK(ftruncate(memfd, 0) == 0);
	FUZZ_CHECK(pwrite(memfd, file, len, 0) == (ssize_t)len);
	memset(&cfg, 0, sizeof(cfg));
	dup2(null_fd, 2);
	load_config();
	dup2(stderr_fd, 2);
}

/* Field by field would miss settings added later; both were zeroed before
 * loading, padding included. */
static bool same(const struct uroce_config *a, const struct uroce_config *b)
{
	return !memcmp(a, b, sizeof(*a));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t commented[2 * 65536];
	const uint8_t *end = data + size;
	const uint8_t *nul = memchr(data, 0, size);
	size_t flen = nul ? (size_t)(nul - data) : size, clen = 0;
	const uint8_t *at = nul ? nul + 1 : end;
	static struct uroce_config empty;
	char value[1100];

	if (flen > sizeof(commented) / 2)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(settings); i++) {
		const uint8_t *stop;
		size_t n;

		if (at >= end) {
			unsetenv(settings[i].var);
			continue;
		}
		stop = memchr(at, 0, end - at);
		n = (stop ? stop : end) - at;
		if (n >= sizeof(value))
			n = sizeof(value) - 1;
		memcpy(value, at, n);
		value[n] = '\0';
		setenv(settings[i].var, value, 1);
		at = stop ? stop + 1 : end;
	}

	load(NULL, 0);
	memcpy(&empty, &cfg, sizeof(cfg));
	for (size_t i = 0; i < flen; i++) {
		if (i == 0 || data[i - 1] == '\n')
			commented[clen++] = '#';
		commented[clen++] = data[i];
	}
	load(commented, clen);
	FUZZ_CHECK(same(&cfg, &empty));

	load(data, flen);
	FUZZ_CHECK(cfg.udp_port >= 1);
	FUZZ_CHECK(cfg.max_mtu >= IBV_MTU_256 && cfg.max_mtu <= IBV_MTU_4096);
	FUZZ_CHECK(memchr(cfg.addrs, 0, sizeof(cfg.addrs)));
	FUZZ_CHECK(addrs_ok(cfg.addrs));
	FUZZ_CHECK(cfg.window >= 1 && cfg.window < 1u << 23);
	FUZZ_CHECK(cfg.rate_mbps >= 1 && cfg.rate_mbps <= 400000);
	FUZZ_CHECK(faults_ok(&cfg.faults));
	FUZZ_CHECK(cfg.debug >= 0 && cfg.debug <= 1000);
	FUZZ_CHECK(memchr(cfg.pcap, 0, sizeof(cfg.pcap)));
	return 0;
}
