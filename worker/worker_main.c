/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loaderd-worker: the worker processes (worker/worker.h). This file is
 * start-up only: arguments (and the --probe answer), the --zygote mode
 * handed to zygote.c (worker/zygote.h), and for an exec'd worker the tie
 * to the master's life and the arena's attach; then the event loop
 * (worker/reader.h). Exit codes are the contract of worker.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/log.h"
#include "shm/arena.h"
#include "worker/reader.h"
#include "worker/worker.h"
#include "worker/worker_start.h"

struct worker_args {
	uint32_t index;
	pid_t parent;
};

/* A decimal number in [min, max] with nothing around it. */
static int worker_parse_number(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
	if (text == NULL || text[0] < '0' || text[0] > '9')
		return -EINVAL;
	errno = 0;
	char *end = NULL;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int worker_parse_args(int argc, char **argv, struct worker_args *out)
{
	bool have_index = false;
	bool have_parent = false;
	for (int i = 1; i < argc; i += 2) {
		const char *value = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t v;
		if (strcmp(argv[i], "--index") == 0 && !have_index) {
			if (worker_parse_number(value, 0, ARENA_WORKERS_MAX - 1, &v) < 0) {
				log_error("--index: expected a worker index below %d", ARENA_WORKERS_MAX);
				return -EINVAL;
			}
			out->index = (uint32_t)v;
			have_index = true;
		} else if (strcmp(argv[i], "--parent") == 0 && !have_parent) {
			if (worker_parse_number(value, 1, INT32_MAX, &v) < 0) {
				log_error("--parent: expected a process id");
				return -EINVAL;
			}
			out->parent = (pid_t)v;
			have_parent = true;
		} else {
			log_error("unexpected argument \"%s\"", argv[i]);
			return -EINVAL;
		}
	}
	if (!have_index || !have_parent) {
		log_error("usage: loaderd-worker --zygote --parent PID (started by loaderd), "
			  "loaderd-worker --index N --parent PID, or loaderd-worker --probe");
		return -EINVAL;
	}
	return 0;
}

static void worker_on_sigterm(int sig)
{
	(void)sig;
	_exit(WORKER_EXIT_OK);
}

/* SIGTERM ends the worker at once and cleanly: an item in hand is simply
 * lost, and the master re-issues whatever a worker did not complete.
 * SIGINT and SIGHUP reach workers too when the master runs on a terminal
 * (same process group); the master decides what they mean and tells the
 * workers through their rings. */
int worker_signals_setup(void)
{
	struct sigaction sa = {.sa_handler = worker_on_sigterm};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) < 0)
		return -errno;
	sa.sa_handler = SIG_IGN;
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGHUP, &sa, NULL) < 0 ||
	    sigaction(SIGPIPE, &sa, NULL) < 0)
		return -errno;
	/* A forked worker inherits the zygote's: SIGUSR1 and SIGUSR2 ignored,
	 * SIGCHLD blocked. */
	sa.sa_handler = SIG_DFL;
	if (sigaction(SIGUSR1, &sa, NULL) < 0 || sigaction(SIGUSR2, &sa, NULL) < 0)
		return -errno;
	sigset_t none;
	sigemptyset(&none);
	return sigprocmask(SIG_SETMASK, &none, NULL) < 0 ? -errno : 0;
}

int worker_tie_to_parent(pid_t parent)
{
	/* Checking the parent afterwards closes the race where it died before
	 * the request took effect. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		return -errno;
	return getppid() != parent ? 1 : 0;
}

int worker_serve(struct arena *a, uint32_t index, int cmd_fd, int done_fd)
{
	return reader_run(a, index, cmd_fd, done_fd) < 0 ? WORKER_EXIT_SYSTEM : WORKER_EXIT_OK;
}

/* `loaderd-worker --probe`: the master runs this before it starts (and for
 * --check-config) to learn that worker_program is a loaderd worker of its
 * own version. One line on stdout, nothing else touched (worker.h). */
static int worker_answer_probe(void)
{
	printf("loaderd-worker %s arena %d\n", LOADERD_VERSION, ARENA_VERSION);
	return fflush(stdout) == 0 && !ferror(stdout) ? WORKER_EXIT_OK : WORKER_EXIT_SYSTEM;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--probe") == 0)
		return worker_answer_probe();
	log_init("loaderd-worker", LOG_LEVEL_INFO);
	if (argc > 1 && strcmp(argv[1], "--zygote") == 0) {
		uint64_t parent;
		if (argc != 4 || strcmp(argv[2], "--parent") != 0 ||
		    worker_parse_number(argv[3], 1, INT32_MAX, &parent) < 0) {
			log_error("usage: loaderd-worker --zygote --parent PID (started by loaderd)");
			return WORKER_EXIT_USAGE;
		}
		return zygote_run((pid_t)parent);
	}
	struct worker_args args = {0};
	if (worker_parse_args(argc, argv, &args) < 0)
		return WORKER_EXIT_USAGE;
	char ident[32];
	snprintf(ident, sizeof(ident), "loaderd-worker[%" PRIu32 "]", args.index);
	log_init(ident, LOG_LEVEL_INFO);

	int err = worker_signals_setup();
	if (err < 0) {
		log_error("sigaction: %s", strerror(-err));
		return WORKER_EXIT_SYSTEM;
	}
	/* Die with the master. */
	err = worker_tie_to_parent(args.parent);
	if (err < 0) {
		log_error("prctl(PR_SET_PDEATHSIG): %s", strerror(-err));
		return WORKER_EXIT_SYSTEM;
	}
	if (err > 0)
		return WORKER_EXIT_OK;

	if (fcntl(WORKER_FD_CMD, F_GETFD) < 0 || fcntl(WORKER_FD_DONE, F_GETFD) < 0) {
		log_error("fds %d and %d must be the master's eventfds", WORKER_FD_CMD,
			  WORKER_FD_DONE);
		return WORKER_EXIT_USAGE;
	}
	struct arena arena = {.fd = -1};
	err = arena_attach(WORKER_FD_ARENA, true, &arena);
	if (err == -EPERM && arena_writes_sealed(WORKER_FD_ARENA)) {
		log_error("fd %d: the arena is sealed against new writable mappings; a worker of a "
			  "running loaderd is forked by its zygote (loaderd-worker --zygote), never "
			  "exec'd", WORKER_FD_ARENA);
		return WORKER_EXIT_ARENA;
	}
	if (err < 0) {
		log_error("fd %d is not a loaderd arena: %s", WORKER_FD_ARENA, strerror(-err));
		return WORKER_EXIT_ARENA;
	}
	if (args.index >= arena.hdr->n_workers_max) {
		log_error("--index %" PRIu32 ": the arena has rings for %" PRIu32 " workers",
			  args.index, arena.hdr->n_workers_max);
		arena_close(&arena);
		return WORKER_EXIT_USAGE;
	}

	int code = worker_serve(&arena, args.index, WORKER_FD_CMD, WORKER_FD_DONE);
	arena_close(&arena);
	return code;
}
