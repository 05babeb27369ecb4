/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zygote: `loaderd-worker --zygote`, the fork server every worker is a
 * fork of (worker/zygote.h is the contract). It maps the arena read-write
 * before the master seals it against new writable mappings, then forks a
 * worker for each request; each child inherits that mapping and runs the
 * worker's loop without exec. The zygote reaps its children and tells the
 * master how each ended.
 *
 * Deliberately a fork without exec (docs/style.md, habit 7, says when): the
 * zygote is single-threaded, holds no lock, no CUDA, no io_uring, and its
 * only descriptors are those of worker/zygote.h, which the child closes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fdpass.h"
#include "common/log.h"
#include "shm/arena.h"
#include "worker/worker.h"
#include "worker/worker_start.h"
#include "worker/zygote.h"

struct zygote {
	struct arena arena;
	pid_t self;
	int sigfd;                      /* SIGCHLD, blocked and read here */
	pid_t live[ARENA_WORKERS_MAX];  /* the worker of each index, 0: none */
};

/* LOADERD_WORKER_FAULT (worker/zygote.h): the exit code worker `index`
 * must exit with at start, or -1 to run. For tests only. */
static int zygote_fault(uint32_t index)
{
	const char *spec = getenv("LOADERD_WORKER_FAULT");
	if (spec == NULL || *spec == '\0')
		return -1;
	char which[16];
	int code = 0, used = 0;
	if (sscanf(spec, "%15[^:]:%d%n", which, &code, &used) != 2 || code < 0 || code > 255)
		return -1;
	if (strcmp(which, "all") != 0 && strtoul(which, NULL, 10) != index)
		return -1;
	if (spec[used] == ':' && access(spec + used + 1, F_OK) != 0)
		return -1;
	return code;
}

/* The forked worker: shed the zygote's descriptors and signal state, then
 * serve. Never returns. */
static void zygote_child(struct zygote *z, uint32_t index, int cmd_fd, int done_fd)
{
	close(ZYGOTE_FD_REQUESTS);
	close(ZYGOTE_FD_EXITS);
	close(z->sigfd);
	char ident[32];
	snprintf(ident, sizeof(ident), "loaderd-worker[%" PRIu32 "]", index);
	log_init(ident, LOG_LEVEL_INFO);
	int err = worker_signals_setup();
	if (err < 0) {
		log_error("sigaction: %s", strerror(-err));
		exit(WORKER_EXIT_SYSTEM);
	}
	err = worker_tie_to_parent(z->self);
	if (err < 0) {
		log_error("prctl(PR_SET_PDEATHSIG): %s", strerror(-err));
		exit(WORKER_EXIT_SYSTEM);
	}
	if (err > 0) /* the zygote is gone, and the master with it */
		exit(WORKER_EXIT_OK);
	int fault = zygote_fault(index);
	if (fault >= 0)
		exit(fault);
	exit(worker_serve(&z->arena, index, cmd_fd, done_fd));
}

/* Receives one request: the message and exactly two descriptors. 1 with
 * a request, 0 at end of file, -errno; a request with the wrong fds
 * comes back as rc -EINVAL in *bad (its fds closed). */
static int zygote_receive(struct zygote_fork *req, int fds[2], bool *bad)
{
	int got[FDPASS_MAX], flags;
	size_t n_got;
	ssize_t n = fdpass_recv(ZYGOTE_FD_REQUESTS, req, sizeof(*req), got, &n_got, &flags);
	if (n < 0)
		return n == -EAGAIN ? -EAGAIN : (int)n;
	if (n == 0)
		return 0;
	*bad = n != (ssize_t)sizeof(*req) || (flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	       req->magic != ZYGOTE_MAGIC || n_got != 2;
	if (*bad) {
		for (size_t i = 0; i < n_got; i++)
			close(got[i]);
		return 1;
	}
	fds[0] = got[0];
	fds[1] = got[1];
	return 1;
}

/* Answers a request; a pidfd goes with it when there is one. */
static int zygote_answer(const struct zygote_forked *ans, int pidfd)
{
	ssize_t n = fdpass_send(ZYGOTE_FD_REQUESTS, ans, sizeof(*ans), &pidfd, pidfd >= 0 ? 1 : 0);
	return n < 0 ? (int)n : 0;
}

/* One request: fork the worker it names and answer. 0, or -errno when the
 * master can no longer be answered. */
static int zygote_handle_request(struct zygote *z)
{
	struct zygote_fork req;
	int fds[2] = {-1, -1};
	bool bad = false;
	int rc = zygote_receive(&req, fds, &bad);
	if (rc == -EAGAIN)
		return 0;
	if (rc <= 0)
		return rc == 0 ? -EPIPE : rc;
	struct zygote_forked ans = {.magic = ZYGOTE_MAGIC, .index = bad ? 0 : req.index};
	int pidfd = -1;
	if (bad || req.index >= z->arena.hdr->n_workers_max) {
		ans.rc = -EINVAL;
	} else if (z->live[req.index] != 0) {
		ans.rc = -EBUSY;
	} else {
		pid_t pid = fork();
		if (pid == 0)
			zygote_child(z, req.index, fds[0], fds[1]);
		if (pid < 0) {
			ans.rc = -errno;
		} else {
			z->live[req.index] = pid;
			ans.pid = pid;
			/* Not reaped before this, so the pid is still this child's. */
			pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		}
	}
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	rc = zygote_answer(&ans, pidfd);
	if (pidfd >= 0)
		close(pidfd);
	return rc;
}

/* Reaps every child that has ended and tells the master. 0 or -errno when
 * the master can no longer be told. */
static int zygote_reap(struct zygote *z)
{
	struct signalfd_siginfo si;
	while (read(z->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		;
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0)
			return 0;
		struct zygote_exit ex = {.magic = ZYGOTE_MAGIC, .index = UINT32_MAX, .pid = pid,
					 .wait_status = status};
		for (uint32_t i = 0; i < ARENA_WORKERS_MAX; i++) {
			if (z->live[i] == pid) {
				z->live[i] = 0;
				ex.index = i;
				break;
			}
		}
		while (send(ZYGOTE_FD_EXITS, &ex, sizeof(ex), MSG_NOSIGNAL) < 0) {
			if (errno != EINTR)
				return -errno;
		}
	}
}

/* Signals: a stray SIGTERM or the terminal's SIGINT/SIGHUP must not end
 * it (the master does, by closing the request socket); SIGCHLD is read
 * through a signalfd. */
static int zygote_signals_setup(struct zygote *z)
{
	struct sigaction sa = {.sa_handler = SIG_IGN};
	sigemptyset(&sa.sa_mask);
	static const int ignored[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGUSR1, SIGUSR2};
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		if (sigaction(ignored[i], &sa, NULL) < 0)
			return -errno;
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
		return -errno;
	z->sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	return z->sigfd < 0 ? -errno : 0;
}

int zygote_run(pid_t parent)
{
	log_init("loaderd-worker[zygote]", LOG_LEVEL_INFO);
	static struct zygote z; /* the children's copy is what they serve from */
	z.self = getpid();
	z.sigfd = -1;
	int err = zygote_signals_setup(&z);
	if (err < 0) {
		log_error("signals: %s", strerror(-err));
		return WORKER_EXIT_SYSTEM;
	}
	err = worker_tie_to_parent(parent);
	if (err < 0) {
		log_error("prctl(PR_SET_PDEATHSIG): %s", strerror(-err));
		return WORKER_EXIT_SYSTEM;
	}
	if (err > 0)
		return WORKER_EXIT_OK;
	int type = 0;
	socklen_t len = sizeof(type);
	if (getsockopt(ZYGOTE_FD_REQUESTS, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
	    type != SOCK_SEQPACKET || getsockopt(ZYGOTE_FD_EXITS, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
	    type != SOCK_SEQPACKET) {
		log_error("fds %d and %d must be the master's sockets", ZYGOTE_FD_REQUESTS,
			  ZYGOTE_FD_EXITS);
		return WORKER_EXIT_USAGE;
	}
	err = arena_attach(ZYGOTE_FD_ARENA, true, &z.arena);
	if (err < 0) {
		log_error("fd %d: cannot map the arena read-write: %s%s", ZYGOTE_FD_ARENA,
			  strerror(-err), err == -EPERM ? " (sealed against writes already)" : "");
		return WORKER_EXIT_ARENA;
	}
	/* The mapping is what is inherited; the descriptor is not needed. */
	close(z.arena.fd);
	z.arena.fd = -1;
	struct zygote_ready ready = {.magic = ZYGOTE_MAGIC, .arena_version = ARENA_VERSION,
				     .pid = z.self, .n_workers_max = z.arena.hdr->n_workers_max};
	if (send(ZYGOTE_FD_REQUESTS, &ready, sizeof(ready), MSG_NOSIGNAL) < 0)
		return WORKER_EXIT_OK; /* the master is gone */

	for (;;) {
		struct pollfd pfd[2] = {{.fd = ZYGOTE_FD_REQUESTS, .events = POLLIN},
					{.fd = z.sigfd, .events = POLLIN}};
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_error("poll: %s", strerror(errno));
			return WORKER_EXIT_SYSTEM;
		}
		/* Exits first: a request for an index whose worker has just
		 * ended finds it free. */
		if (pfd[1].revents && zygote_reap(&z) < 0)
			break;
		if (pfd[0].revents && zygote_handle_request(&z) < 0)
			break;
	}
	/* The master closed its end, or is gone: workers still here die with
	 * the zygote (their PR_SET_PDEATHSIG). */
	return WORKER_EXIT_OK;
}
