/*
 * Run-time configuration.  uroce is loaded into programs we do not control
 * (ibv_devinfo, perftest, ...), so the only way to tune it is the environment
 * and, for settings shared by many runs, a small file named by UROCE_CONFIG.
 * A bad value never aborts the host program: it is reported once on stderr and
 * ignored, leaving the value the setting would have had without it.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uroce.h"

static struct uroce_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

/* Where a value came from, for warnings the user can act on. */
struct origin {
	const char *file;	/* NULL: the environment */
	unsigned line;
};

static void warn_bad(const struct origin *o, const char *var, const char *key,
		     const char *value, const char *why)
{
	/* Written directly: uroce_log() depends on the configuration being
	 * loaded, and warnings must appear whatever UROCE_DEBUG says. */
	if (o->file)
		fprintf(stderr, "uroce: %s:%u: ignoring %s = \"%s\": %s\n",
			o->file, o->line, key, value, why);
	else
		fprintf(stderr, "uroce: ignoring %s=\"%s\": %s\n", var, value,
			why);
}

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* A whole decimal (or 0x hex) number in [min, max]; strtoull alone would
 * accept a sign and trailing garbage. */
static bool parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!isdigit((unsigned char)*s))
		return false;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v < min || v > max)
		return false;
	*out = v;
	return true;
}

static bool parse_prob(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0.0 || v > 1.0)
		return false;
	*out = v;
	return true;
}

/* Each parser checks the whole value and only then stores it, so that a bad
 * value leaves the previous one in place.  It returns NULL or the reason. */

static const char *set_port(struct uroce_config *c, const char *v)
{
	uint64_t port;

	if (!parse_u64(v, 1, 65535, &port))
		return "expected a UDP port number 1..65535";
	c->udp_port = port;
	return NULL;
}

static const char *set_mtu(struct uroce_config *c, const char *v)
{
	static const struct {
		uint64_t bytes;
		enum ibv_mtu mtu;
	} mtus[] = {
		{ 256, IBV_MTU_256 },   { 512, IBV_MTU_512 },
		{ 1024, IBV_MTU_1024 }, { 2048, IBV_MTU_2048 },
		{ 4096, IBV_MTU_4096 },
	};
	uint64_t bytes;

	if (parse_u64(v, 0, UINT64_MAX, &bytes)) {
		for (size_t i = 0; i < ARRAY_SIZE(mtus); i++) {
			if (mtus[i].bytes == bytes) {
				c->max_mtu = mtus[i].mtu;
				return NULL;
			}
		}
	}
	return "expected 256, 512, 1024, 2048 or 4096";
}

static const char *set_addrs(struct uroce_config *c, const char *v)
{
	char list[sizeof(c->addrs)], out[sizeof(c->addrs)] = "";
	char *save, *tok;
	size_t len = 0;

	if (strlen(v) >= sizeof(list))
		return "list too long";
	strcpy(list, v);
	/* Normalise to "a,b,c" so that gid.c can split on commas alone. */
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		unsigned char bin[sizeof(struct in6_addr)];
		char *a = trim(tok);

		if (!*a)
			continue;
		if (inet_pton(AF_INET, a, bin) != 1 &&
		    inet_pton(AF_INET6, a, bin) != 1)
			return "expected a comma-separated list of IPv4/IPv6 addresses";
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s",
					len ? "," : "", a);
	}
	strcpy(c->addrs, out);
	return NULL;
}

static const char *set_window(struct uroce_config *c, const char *v)
{
	uint64_t w;

	/* IBTA 9.7.1: at most 2^23 - 1 PSNs may be outstanding, otherwise the
	 * responder can no longer tell a duplicate from a future packet. */
	if (!parse_u64(v, 1, (1u << 23) - 1, &w))
		return "expected a packet count 1..8388607";
	c->window = w;
	return NULL;
}

static const char *set_rate(struct uroce_config *c, const char *v)
{
	double gbps;
	char *end;

	errno = 0;
	gbps = strtod(v, &end);
	while (*end == ' ' || *end == '\t')
		end++;
	if (errno || end == v || *end || !(gbps >= 0.001 && gbps <= 400))
		return "expected a link rate in Gbit/s, 0.001..400";
	c->rate_mbps = (unsigned)(gbps * 1000 + 0.5);
	return NULL;
}

static const char *set_faults(struct uroce_config *c, const char *v)
{
	struct uroce_faults_cfg f = c->faults;
	char list[256], *save, *tok;

	if (strlen(v) >= sizeof(list))
		return "value too long";
	strcpy(list, v);
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *key, *val;
		bool ok;

		if (!eq)
			return "expected key=value items (drop, dup, reorder, "
			       "corrupt, delay, tx_drop, tx_corrupt, tx_busy, seed)";
		*eq = '\0';
		key = trim(tok);
		val = trim(eq + 1);
		if (!strcmp(key, "drop"))
			ok = parse_prob(val, &f.drop);
		else if (!strcmp(key, "dup"))
			ok = parse_prob(val, &f.dup);
		else if (!strcmp(key, "reorder"))
			ok = parse_prob(val, &f.reorder);
		else if (!strcmp(key, "corrupt"))
			ok = parse_prob(val, &f.corrupt);
		else if (!strcmp(key, "delay"))
			ok = parse_prob(val, &f.delay);
		else if (!strcmp(key, "tx_drop"))
			ok = parse_prob(val, &f.tx_drop);
		else if (!strcmp(key, "tx_corrupt"))
			ok = parse_prob(val, &f.tx_corrupt);
		else if (!strcmp(key, "tx_busy"))
			ok = parse_prob(val, &f.tx_busy);
		else if (!strcmp(key, "seed"))
			ok = parse_u64(val, 0, UINT64_MAX, &f.seed);
		else
			return "unknown key (expected drop, dup, reorder, corrupt, "
			       "delay, tx_drop, tx_corrupt, tx_busy, seed)";
		if (!ok)
			return "probabilities must be 0..1 and seed an unsigned integer";
	}
	/* each side's faults share one draw, split among them */
	if (f.drop + f.dup + f.reorder + f.corrupt + f.delay > 1)
		return "receive probabilities add up to more than 1";
	if (f.tx_drop + f.tx_corrupt + f.tx_busy > 1)
		return "send probabilities add up to more than 1";
	f.rx = f.drop > 0 || f.dup > 0 || f.reorder > 0 || f.corrupt > 0 ||
	       f.delay > 0;
	f.tx = f.tx_drop > 0 || f.tx_corrupt > 0 || f.tx_busy > 0;
	f.enabled = f.rx || f.tx;
	c->faults = f;
	return NULL;
}

static const char *set_debug(struct uroce_config *c, const char *v)
{
	uint64_t d;

	if (!parse_u64(v, 0, 1000, &d))
		return "expected a non-negative integer (0 = off)";
	c->debug = (int)d;
	return NULL;
}

static const char *set_pcap(struct uroce_config *c, const char *v)
{
	if (strlen(v) >= sizeof(c->pcap))
		return "path too long";
	strcpy(c->pcap, v);
	return NULL;
}

static const char *set_engine(struct uroce_config *c, const char *v)
{
	if (!strcmp(v, "spin"))
		c->spin = true;
	else if (!strcmp(v, "sleep"))
		c->spin = false;
	else
		return "expected sleep or spin";
	return NULL;
}

static const char *set_wait_poll(struct uroce_config *c, const char *v)
{
	uint64_t us;

	if (!parse_u64(v, 0, UROCE_WAIT_POLL_MAX_US, &us))
		return "expected microseconds, 0 (sleep at once) to 1000";
	c->wait_poll_ns = us * 1000;
	return NULL;
}

/* "1" or "0" into *flag; false for anything else */
static bool set_flag(bool *flag, const char *v)
{
	if (strcmp(v, "1") && strcmp(v, "0"))
		return false;
	*flag = v[0] == '1';
	return true;
}

static const char *set_shm(struct uroce_config *c, const char *v)
{
	return set_flag(&c->shm, v) ? NULL
		: "expected 1 (same-host path) or 0 (always UDP)";
}

static const char *set_tx_hold(struct uroce_config *c, const char *v)
{
	return set_flag(&c->tx_hold, v) ? NULL
		: "expected 1 (batch requests behind unacknowledged ones) or 0 (send each at once)";
}

static const char *set_roce_v1(struct uroce_config *c, const char *v)
{
	return set_flag(&c->roce_v1, v) ? NULL
		: "expected 1 (RoCE v1 GIDs beside the v2 ones) or 0 (RoCE v2 only)";
}

/* as the kernel's default_roce_mode; v1 brings the v1 GIDs along */
static const char *set_cm_roce(struct uroce_config *c, const char *v)
{
	if (strcmp(v, "v1") && strcmp(v, "v2"))
		return "expected v1 or v2 (the RoCE version rdma_cm connects over)";
	c->cm_roce_v1 = v[1] == '1';
	c->roce_v1 |= c->cm_roce_v1;
	return NULL;
}

static const char *set_service(struct uroce_config *c, const char *v)
{
	if (!strcmp(v, "none")) {
		c->service[0] = '\0';
		return NULL;
	}
	if (v[0] != '/')
		return "expected the service's directory (an absolute path) or none";
	if (strlen(v) >= sizeof(c->service))
		return "path too long";
	strcpy(c->service, v);
	return NULL;
}

static const struct setting {
	const char *var;	/* environment variable */
	const char *key;	/* key in the UROCE_CONFIG file */
	const char *(*set)(struct uroce_config *c, const char *value);
} settings[] = {
	{ "UROCE_PORT", "port", set_port },
	{ "UROCE_MTU", "mtu", set_mtu },
	{ "UROCE_ADDRS", "addrs", set_addrs },
	{ "UROCE_WINDOW", "window", set_window },
	{ "UROCE_RATE", "rate", set_rate },
	{ "UROCE_FAULTS", "faults", set_faults },
	{ "UROCE_DEBUG", "debug", set_debug },
	{ "UROCE_PCAP", "pcap", set_pcap },
	{ "UROCE_ENGINE", "engine", set_engine },
	{ "UROCE_WAIT_POLL_US", "wait_poll_us", set_wait_poll },
	{ "UROCE_SHM", "shm", set_shm },
	{ "UROCE_TX_HOLD", "tx_hold", set_tx_hold },
	{ "UROCE_SERVICE", "service", set_service },
	{ "UROCE_ROCE_V1", "roce_v1", set_roce_v1 },
	{ "UROCE_RDMA_CM_ROCE", "rdma_cm_roce", set_cm_roce },
};

static void apply(const struct setting *s, const char *value,
		  const struct origin *o)
{
	char buf[1024], *v;
	const char *why;

	if (strlen(value) >= sizeof(buf)) {
		warn_bad(o, s->var, s->key, "...", "value too long");
		return;
	}
	strcpy(buf, value);
	v = trim(buf);
	why = s->set(&cfg, v);
	if (why)
		warn_bad(o, s->var, s->key, v, why);
}

static void load_file(const char *path)
{
	struct origin o = { .file = path };
	char line[1200];
	FILE *f = fopen(path, "re");

	if (!f) {
		fprintf(stderr, "uroce: cannot read UROCE_CONFIG=%s: %s\n", path,
			strerror(errno));
		return;
	}
	for (;;) {
		char *hash, *eq, *key;
		const struct setting *s = NULL;

		memset(line, 0, sizeof(line));
		if (!fgets(line, sizeof(line), f))
			break;
		o.line++;
		/* A line longer than the buffer is skipped whole: its rest
		 * read as a line of its own would turn the tail of a long
		 * comment into a setting.  The newline is looked for in the
		 * whole buffer, as a NUL byte may come before it. */
		if (!memchr(line, '\n', sizeof(line) - 1) && !feof(f)) {
			int c;

			while ((c = getc(f)) != EOF && c != '\n')
				;
			fprintf(stderr, "uroce: %s:%u: line too long\n", path,
				o.line);
			continue;
		}
		hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		key = trim(line);
		if (!*key)
			continue;
		eq = strchr(key, '=');
		if (!eq) {
			fprintf(stderr, "uroce: %s:%u: expected \"key = value\"\n",
				path, o.line);
			continue;
		}
		*eq = '\0';
		key = trim(key);
		for (size_t i = 0; i < ARRAY_SIZE(settings); i++)
			if (!strcmp(settings[i].key, key))
				s = &settings[i];
		if (!s) {
			fprintf(stderr, "uroce: %s:%u: unknown key \"%s\"\n", path,
				o.line, key);
			continue;
		}
		apply(s, eq + 1, &o);
	}
	fclose(f);
}

static void load_config(void)
{
	const struct origin env = { 0 };
	const char *path = getenv("UROCE_CONFIG");

	cfg.udp_port = UROCE_UDP_PORT;
	cfg.max_mtu = IBV_MTU_4096;
	cfg.window = UROCE_DEFAULT_WINDOW;
	cfg.shm = true;
	cfg.wait_poll_ns = UROCE_WAIT_POLL_US * 1000ull;
	cfg.tx_hold = true;
	strcpy(cfg.service, UROCE_SERVICE_DIR);
	cfg.rate_mbps = UROCE_DEFAULT_RATE_MBPS;
	/* A fixed default seed keeps fault runs reproducible unless asked. */
	cfg.faults.seed = 1;

	if (path && *path)
		load_file(path);
	/* The environment overrides the file; an empty variable counts as
	 * unset, as a shell's "VAR= cmd" is usually meant. */
	for (size_t i = 0; i < ARRAY_SIZE(settings); i++) {
		const char *v = getenv(settings[i].var);

		if (v && *v)
			apply(&settings[i], v, &env);
	}
}

const struct uroce_config *uroce_config(void)
{
	pthread_once(&cfg_once, load_config);
	return &cfg;
}

void uroce_log(const char *fmt, ...)
{
	char line[512];
	int n;
	va_list ap;

	if (!uroce_config()->debug)
		return;
	n = snprintf(line, sizeof(line), "uroce: ");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	/* One stdio call per line, so that lines from the engine thread and
	 * application threads never interleave mid-line. */
	strcat(line, "\n");
	fputs(line, stderr);
}

uint64_t uroce_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *uroce_faults_parse(const char *spec, struct uroce_faults_cfg *out)
{
	/* what UROCE_FAULTS would give on its own: the default seed */
	struct uroce_config c = { .faults = { .seed = 1 } };
	const char *why = set_faults(&c, spec);

	if (!why)
		*out = c.faults;
	return why;
}
