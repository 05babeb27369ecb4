/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderctl.h: loaderctl's internals, shared by loaderctl.c (main, the
 * usage text, option parsing, the stop flag, status, peek and the
 * dispatch) and consume.c (the consume command). Nothing else includes it;
 * it is not part of the client library.
 *
 * Exit codes, for every command: 0 success, 1 an error (message on stderr
 * starting "loaderctl: "), CTL_EXIT_USAGE a usage error.
 */
#ifndef LDR_CLIENT_LOADERCTL_H
#define LDR_CLIENT_LOADERCTL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTL_EXIT_USAGE 2
#define CTL_WAIT_MS 1000 /* bounds how long a stop request waits to be seen */

/* Set by SIGINT/SIGTERM once ctl_install_stop_handlers() has run; commands
 * poll it between waits of at most CTL_WAIT_MS. */
extern volatile sig_atomic_t ctl_stop_requested;

/* Sets ctl_stop_requested on SIGINT and SIGTERM (without SA_RESTART, so a
 * blocked wait returns EINTR); 0, or -1 after printing the reason. */
/* `loaderctl metrics` (metrics.c): the status in Prometheus's text format
 * on stdout. Returns the exit code. */
int ctl_metrics_run(const char *socket);

/* `loaderctl top` (top.c): parses its options from argv[first..] and
 * refreshes a table of rates until SIGINT or its iterations; the exit code. */
int ctl_top_command(int argc, char **argv, int first, const char *socket);
int ctl_install_stop_handlers(void);

/* Monotonic clock, in seconds. */
double ctl_now_s(void);

/* Prints "loaderctl: " and the message, then a newline, to stderr;
 * returns -1. */
int ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "loaderctl: " and the message, then the --help hint, to stderr;
 * returns CTL_EXIT_USAGE. */
int ctl_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* An option of a command: a flag, a non-empty string or a number in
 * [min, max], whichever destination is set. */
struct ctl_option {
	const char *name;
	bool *flag;
	const char **string;
	uint64_t *number;
	uint64_t min, max;
};

/* Parses argv[first..] against specs; 0, or an exit code. */
int ctl_parse_options(int argc, char **argv, int first, const struct ctl_option *specs,
		      size_t n_specs);

/* `loaderctl consume` (consume.c): parses its options from argv[first..]
 * and runs it against the daemon at socket (NULL: the default); the exit
 * code. */
int consume_command(int argc, char **argv, int first, const char *socket);

#endif
