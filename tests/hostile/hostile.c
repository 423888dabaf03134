/*
 * hostile.<case>: what a peer that does not play by the rules cannot do to
 * a uroce target (issue #11, item 2).  See hostile.h for the processes.
 *
 * For every attack the test checks (a) the answer on the wire against the
 * IBTA rule cited at the check, (b) that the target's memory is exactly
 * what was legitimately written (every MR sits between guard pages), (c)
 * the target's counters, and (d) that the attacked QP is in the state the
 * spec gives it and that a legitimate uroce peer still passes traffic.
 *
 * A remote access error or invalid request ends the responder's RC QP
 * (IBTA 9.9.3, responder class B/C errors: NAK, then the QP goes to the
 * Error state, as uroce's responder.c and rxe have it), so such attacks
 * each run on a QP of their own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attacker.h"

/* ---- counters ----------------------------------------------------------- */

struct counter {
	const char *name;
	unsigned long min, max;
};

#define ANY ~0ul

struct hcase {
	const char *name;
	void (*run)(struct atk *a);
	bool cm;		/* the peer also connects through rdma_cm */
	struct counter want[6];
};

static const struct hcase cases[] = {
	{ "va_overflow", case_va_overflow, false,
	  { { "access_errors", 4, 4 } } },
	{ "write_beyond", case_write_beyond, false,
	  { { "access_errors", 3, 3 } } },
	{ "read_beyond", case_read_beyond, false,
	  { { "access_errors", 2, 2 } } },
	{ "zero_length", case_zero_length, false,
	  { { "access_errors", 0, 0 } } },
	{ "atomic_unaligned", case_atomic_unaligned, false,
	  { { "access_errors", 0, 0 } } },
	{ "atomic_no_access", case_atomic_no_access, false,
	  { { "access_errors", 2, 2 } } },
	{ "dereg", case_dereg, false, { { "access_errors", 2, 2 } } },
	{ "rereg", case_rereg, false, { { "access_errors", 2, 2 } } },
	{ "mw", case_mw, false, { { "access_errors", 6, 6 } } },
	{ "other_pd", case_other_pd, false, { { "access_errors", 2, 2 } } },
	{ "wrong_source_ip", case_wrong_source_ip, false,
	  { { "rx_bad_source", 2, 2 } } },
	{ "wrong_source_port", case_wrong_source_port, false,
	  { { "rx_duplicate", 1, ANY } } },
	{ "wrong_dest_qpn", case_wrong_dest_qpn, false,
	  { { "rx_unknown_qp", 1, 1 }, { "rx_malformed", 1, 1 } } },
	{ "psn_replay", case_psn_replay, false,
	  { { "rx_duplicate", 3, ANY } } },
	{ "read_flood", case_read_flood, false,
	  { { "rx_duplicate", 2, ANY } } },
	{ "flood", case_flood, false,
	  { { "seq_naks_sent", 1, 1 }, { "rx_bad_icrc", 1, ANY },
	    { "rx_unknown_qp", 1, ANY }, { "rx_out_of_window", 1, ANY } } },
	{ "cm_flood", case_cm_flood, true,
	  { { "mad_backlog_drops", 1, CM_FLOOD } } },
	{ "rkey_guess", case_rkey_guess, false,
	  { { "access_errors", KEY_GUESSES, KEY_GUESSES },
	    { "rx_bad_state", KEY_GUESSES, KEY_GUESSES } } },
};

/* The target's stderr: its counters, as UROCE_DEBUG=1 prints them when the
 * device closes ("uroce: slot N: name value"), checked against want. */
static void check_counters(FILE *log, const struct hcase *c)
{
	char line[512];
	unsigned long got[6] = { 0 };

	rewind(log);
	for (int i = 0; i < 100000 && fgets(line, sizeof(line), log); i++) {
		char name[64];
		unsigned long v;
		unsigned slot;

		fputs(line, stdout);
		if (sscanf(line, "uroce: slot %u: %63s %lu", &slot, name, &v) != 3)
			continue;
		for (int k = 0; k < 6 && c->want[k].name; k++)
			if (!strcmp(name, c->want[k].name))
				got[k] = v;
	}
	for (int k = 0; k < 6 && c->want[k].name; k++)
		if (got[k] < c->want[k].min || got[k] > c->want[k].max)
			h_fail("target counter %s = %lu, want %lu..%lu",
			       c->want[k].name, got[k], c->want[k].min,
			       c->want[k].max);
}

/* ---- processes ---------------------------------------------------------- */

static const struct h_test proc_test = { .name = "hostile", .nroles = 2,
					 .deadline_s = DEADLINE_S };

static _Noreturn void uroce_role(int role, int ctl, int link, bool cm)
{
	struct h_proc p = { .t = &proc_test, .role = role };

	alarm(DEADLINE_S);
	h_open(&p);
	if (role == 0)
		target_main(&p, ctl, link);
	else
		peer_main(&p, link, cm);
	h_close(&p);
	exit(0);
}

/* The attacker: no verbs, only sockets. */
static _Noreturn void attacker(const struct hcase *c, int ctl)
{
	struct atk a = { .ctl = ctl, .next_psn = 0xFFFFF0 };
	struct reply done;

	alarm(DEADLINE_S);
	a.fd = w_socket(ATK_IP, ROCE_PORT);
	a.self = w_addr(ATK_IP, ROCE_PORT);
	a.target = w_addr(TARGET_IP, ROCE_PORT);
	c->run(&a);
	h_send(a.ctl, &(struct cmd){ .op = C_DONE }, sizeof(struct cmd));
	h_recv(a.ctl, &done, sizeof(done));
	exit(0);
}

static bool reap(pid_t pid, const char *who)
{
	int status;

	/* every child has an alarm of its own: this returns */
	if (waitpid(pid, &status, 0) != pid)
		return false;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return true;
	fprintf(stderr, "%s (pid %d) %s %d\n", who, (int)pid,
		WIFEXITED(status) ? "exited with status" : "died of signal",
		WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	return false;
}

int main(int argc, char **argv)
{
	const struct hcase *c = NULL;
	int ctl[2], link[2];
	FILE *log = tmpfile();
	pid_t target, peer, atk;
	bool ok;

	for (size_t i = 0; argc == 2 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name))
			c = &cases[i];
	if (!c) {
		fprintf(stderr, "usage: %s <case>\n", argv[0]);
		return 2;
	}
	if (!log || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, link)) {
		perror("tmpfile/socketpair");
		return 1;
	}
	/* the uroce processes get the settings the test needs: everything on
	 * UDP, and the target's counters printed when its device closes */
	setenv("UROCE_SHM", "0", 1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	fflush(NULL);
	target = fork();
	if (target == 0) {
		close(ctl[0]);
		close(link[1]);
		if (dup2(fileno(log), STDERR_FILENO) < 0 ||
		    setenv("UROCE_DEBUG", "1", 1))
			_exit(1);
		uroce_role(0, ctl[1], link[0], c->cm);
	}
	peer = fork();
	if (peer == 0) {
		close(ctl[0]);
		close(ctl[1]);
		close(link[0]);
		uroce_role(1, -1, link[1], c->cm);
	}
	atk = fork();
	if (atk == 0) {
		close(ctl[1]);
		close(link[0]);
		close(link[1]);
		attacker(c, ctl[0]);
	}
	if (target < 0 || peer < 0 || atk < 0) {
		perror("fork");
		return 1;
	}
	close(ctl[0]);
	close(ctl[1]);
	close(link[0]);
	close(link[1]);
	ok = reap(atk, "attacker");
	ok = reap(target, "target") && ok;
	ok = reap(peer, "peer") && ok;
	if (!ok) {
		/* the target's failure, if it was the first, is in its log */
		check_counters(log, &(struct hcase){ 0 });
		return 1;
	}
	check_counters(log, c);
	printf("PASS hostile.%s\n", c->name);
	return 0;
}
