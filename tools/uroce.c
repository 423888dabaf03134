/*
 * uroce: look into the running uroce processes of this host, as `rdma
 * statistic` and ibdump do for a NIC in hardware (src/control.h has the
 * protocol).  A process answers only its own user and root.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#define UROCE_CTL_NO_INTERNALS
#include "control.h"

enum { MAX_PROCS = 4096 };

static void usage(FILE *f)
{
	fputs("usage: uroce stat [--json] [-w [-i SECONDS] [-n COUNT]] [PID...]\n"
	      "       uroce capture PID FILE|stop\n"
	      "       uroce faults PID SPEC|off\n"
	      "\n"
	      "stat     the uroce processes you may see (your own; root: all) in\n"
	      "         this network namespace, or the PIDs given: mode, slot,\n"
	      "         capture and fault injection, the counters that are not\n"
	      "         zero, and each QP with its type, state, peer and PSNs.\n"
	      "         --json prints a JSON array of the processes, with every\n"
	      "         counter; -w refreshes every -i seconds (default 1),\n"
	      "         -n times (default: until interrupted).\n"
	      "capture  makes process PID write every RoCEv2 packet it sends\n"
	      "         and receives to FILE (pcap, written by the process, so\n"
	      "         a path it may write; \"%p\" is its pid), or stop.  While\n"
	      "         it captures, its same-host traffic goes on the wire.\n"
	      "faults   sets PID's fault injection on received packets, SPEC as\n"
	      "         UROCE_FAULTS (e.g. drop=0.01,seed=7), or off.\n"
	      "\n"
	      "Only the owner of a process, or root, may do any of it.\n", f);
}

/* One request to pid; the reply's body in *out (malloc'd).  0, or -1
 * after a message unless quiet. */
static int request(long pid, const char *req, char **out, bool quiet)
{
	struct timeval timeout = { UROCE_CTL_TIMEOUT_MS / 1000,
				   UROCE_CTL_TIMEOUT_MS % 1000 * 1000 };
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	struct ucred uc;
	socklen_t ulen = sizeof(uc), len;
	size_t size = 0, cap = 4096;
	char *buf = malloc(cap), *nl;
	int fd, n;

	n = snprintf(un.sun_path + 1, sizeof(un.sun_path) - 1,
		     UROCE_CTL_PREFIX "%ld", pid);
	len = offsetof(struct sockaddr_un, sun_path) + 1 + n;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!buf || fd < 0 || connect(fd, (struct sockaddr *)&un, len)) {
		if (!quiet)
			fprintf(stderr, "uroce: process %ld: %s\n", pid,
				errno == ECONNREFUSED ? "not a uroce process"
						      : strerror(errno));
		goto fail;
	}
	/* the name is anybody's to take: the listener must be that pid */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ulen) ||
	    uc.pid != pid) {
		if (!quiet)
			fprintf(stderr, "uroce: process %ld: its control name "
				"is held by process %d\n", pid, (int)uc.pid);
		goto fail;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
	/* a process that refuses us answers without reading: its answer
	 * is what to show, whatever became of the request */
	n = strlen(req);
	if (send(fd, req, n, MSG_NOSIGNAL) == n)
		send(fd, "\n", 1, MSG_NOSIGNAL);
	for (;;) {
		ssize_t r;

		if (size + 1 == cap) {
			char *b = realloc(buf, cap *= 2);

			if (!b)
				goto io;
			buf = b;
		}
		r = read(fd, buf + size, cap - 1 - size);
		if (r < 0)
			goto io;
		if (r == 0)
			break;
		size += r;
	}
	buf[size] = '\0';
	close(fd);
	nl = strchr(buf, '\n');
	if (!nl || strncmp(buf, "ok\n", 3)) {
		if (!quiet)
			fprintf(stderr, "uroce: process %ld: %.*s\n", pid,
				nl ? (int)(nl - buf) : (int)size, buf);
		free(buf);
		return -1;
	}
	memmove(buf, nl + 1, size - (nl + 1 - buf) + 1);
	*out = buf;
	return 0;
io:
	if (!quiet && (errno == EAGAIN || errno == EWOULDBLOCK))
		fprintf(stderr, "uroce: process %ld: no answer within %d s "
			"(stopped, or too busy)\n", pid,
			UROCE_CTL_TIMEOUT_MS / 1000);
	else if (!quiet)
		fprintf(stderr, "uroce: process %ld: %s\n", pid,
			strerror(errno));
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	return -1;
}

/* The pids of the control names in this network namespace. */
static int find_processes(long *pids, int max)
{
	FILE *f = fopen("/proc/net/unix", "re");
	char line[512];
	int n = 0;

	if (!f)
		return 0;
	while (n < max && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, " @" UROCE_CTL_PREFIX);
		char *end;
		long pid;

		if (!at)
			continue;
		pid = strtol(at + 2 + strlen(UROCE_CTL_PREFIX), &end, 10);
		if (pid > 0 && (*end == '\n' || *end == '\0'))
			pids[n++] = pid;
	}
	fclose(f);
	return n;
}

/* ---- the answer to stat, read with json-c ----------------------------- */

static struct json_object *get(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static unsigned long num(struct json_object *o, const char *key)
{
	return (unsigned long)json_object_get_uint64(get(o, key));
}

static const char *str(struct json_object *o, const char *key)
{
	const char *s = json_object_get_string(get(o, key));

	return json_object_is_type(get(o, key), json_type_string) && s[0] ? s
									   : "-";
}

static void print_human(struct json_object *p)
{
	struct json_object *qps = get(p, "qps");
	int col = 2, shown = 0;

	printf("pid %lu  %s  uid %lu  port %lu  slot %lu  %s  capture %s  "
	       "faults %s\n", num(p, "pid"), str(p, "program"), num(p, "uid"),
	       num(p, "port"), num(p, "slot"), str(p, "mode"),
	       str(p, "capture"), str(p, "faults"));
	if (strcmp(str(p, "roce_v1"), "off") && strcmp(str(p, "roce_v1"), "-"))
		printf(" RoCE v1: %s\n", str(p, "roce_v1"));
	printf(" ");
	json_object_object_foreach(get(p, "counters"), name, value) {
		char item[96];
		int n;

		if (!json_object_get_uint64(value))
			continue;
		n = snprintf(item, sizeof(item), " %s %llu", name,
			     (unsigned long long)json_object_get_uint64(value));
		if (col + n > 78) {
			printf("\n ");
			col = 2;
		}
		fputs(item, stdout);
		col += n;
		shown++;
	}
	if (!shown)
		printf(" every counter 0");
	printf("\n  %-9s %-7s %-5s %-26s %-9s %-9s %-9s %-9s %5s %s\n", "QPN",
	       "TYPE", "STATE", "PEER", "DEST_QPN", "SQ_PSN", "UNACKED",
	       "RQ_PSN", "WQES", "SAME-HOST");
	for (size_t i = 0; i < json_object_array_length(qps); i++) {
		struct json_object *q = json_object_array_get_idx(qps, i);
		char dest[16] = "-";

		if (get(q, "dest_qpn"))
			snprintf(dest, sizeof(dest), "%#lx",
				 num(q, "dest_qpn"));
		printf("  %#-9lx %-7s %-5s %-26s %-9s %#-9lx %#-9lx %#-9lx %5lu "
		       "%s\n", num(q, "qpn"), str(q, "type"), str(q, "state"),
		       str(q, "peer"), dest, num(q, "sq_psn"),
		       num(q, "unacked_psn"), num(q, "rq_psn"),
		       num(q, "outstanding_wqes"),
		       json_object_get_boolean(get(q, "same_host")) ? "yes"
								     : "no");
	}
}

static int stat_once(long *pids, int n, bool explicit, bool json)
{
	int shown = 0, failed = 0;

	if (json)
		printf("[");
	for (int i = 0; i < n; i++) {
		struct json_object *v = NULL;
		char *body;

		if (request(pids[i], "stat", &body, !explicit)) {
			failed++;
			continue;
		}
		if (json) {
			printf("%s%s", shown ? ",\n" : "\n", body);
		} else if ((v = json_tokener_parse(body)) &&
			   json_object_is_type(v, json_type_object)) {
			if (shown)
				printf("\n");
			print_human(v);
		} else {
			fprintf(stderr, "uroce: process %ld: unreadable "
				"answer\n", pids[i]);
			failed++;
		}
		json_object_put(v);
		free(body);
		shown++;
	}
	if (json)
		printf("]\n");
	else if (!shown && !explicit)
		printf("no uroce process that you may see\n");
	fflush(stdout);
	return explicit && failed ? 1 : 0;
}

static int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "watch", no_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ 0 },
	};
	static long pids[MAX_PROCS];
	bool json = false, watch = false;
	double interval = 1;
	long count = -1;
	int opt, n = 0, status = 0;

	while ((opt = getopt_long(argc, argv, "jwi:n:", opts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			json = true;
			break;
		case 'w':
			watch = true;
			break;
		case 'i':
			interval = atof(optarg);
			if (interval <= 0) {
				fprintf(stderr, "uroce: -i takes seconds > 0\n");
				return 2;
			}
			break;
		case 'n':
			count = atol(optarg);
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	for (int i = optind; i < argc && n < MAX_PROCS; i++) {
		char *end;

		pids[n++] = strtol(argv[i], &end, 10);
		if (*end || pids[n - 1] <= 0) {
			fprintf(stderr, "uroce: not a pid: %s\n", argv[i]);
			return 2;
		}
	}
	for (long round = 0; count < 0 || round < (watch ? count : 1);
	     round++) {
		struct timespec pause = { (time_t)interval,
					  (long)((interval - (time_t)interval) *
						 1e9) };
		int found = optind < argc ? n : find_processes(pids, MAX_PROCS);

		if (watch && !json && isatty(STDOUT_FILENO))
			printf("\033[H\033[2J");
		status = stat_once(pids, found, optind < argc, json);
		if (!watch)
			break;
		if (count < 0 || round + 1 < count)
			nanosleep(&pause, NULL);
	}
	return status;
}

/* capture and faults: one request, "ok" or why not */
static int cmd_set(const char *what, int argc, char **argv)
{
	char req[UROCE_CTL_REQ_MAX], *body, *end;
	long pid;

	if (argc != 3) {
		usage(stderr);
		return 2;
	}
	pid = strtol(argv[1], &end, 10);
	if (*end || pid <= 0) {
		fprintf(stderr, "uroce: not a pid: %s\n", argv[1]);
		return 2;
	}
	if (snprintf(req, sizeof(req), "%s %s", what, argv[2]) >=
	    (int)sizeof(req)) {
		fprintf(stderr, "uroce: too long: %s\n", argv[2]);
		return 2;
	}
	if (request(pid, req, &body, false))
		return 1;
	free(body);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "capture"))
		return cmd_set("capture", argc - 1, argv + 1);
	if (!strcmp(argv[1], "faults"))
		return cmd_set("faults", argc - 1, argv + 1);
	fprintf(stderr, "uroce: unknown command %s\n", argv[1]);
	usage(stderr);
	return 2;
}
