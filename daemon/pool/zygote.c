/* SPDX-License-Identifier: Apache-2.0 */
/* zygote: start, ask and watch the worker zygote (daemon/pool/zygote.h). */
#include "daemon/pool/zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fdpass.h"
#include "common/log.h"
#include "daemon/pool/spawnattr.h"
#include "worker/zygote.h"

extern char **environ;

struct zygote {
	uv_loop_t *loop;
	struct zygote_ops ops;
	char program[4096];
	pid_t pid;          /* 0 once reaped */
	int req_fd;         /* requests and answers, in turn */
	int exits_fd;       /* exit reports, read on the loop */
	uint32_t timeout_ms;
	bool closing;       /* zygote_close: its end is asked for */
	uv_poll_t exits_poll;
};

/* How a process ended, as a log line says it. */
static void describe_status(int status, char *buf, size_t cap)
{
	if (WIFSIGNALED(status))
		snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, cap, "exit code %d", WEXITSTATUS(status));
}

/* Reaps the zygote (it has exited, or is about to: its sockets closed). */
static void reap(struct zygote *z, char *how, size_t cap)
{
	int status = 0;
	pid_t w;
	while ((w = waitpid(z->pid, &status, 0)) < 0 && errno == EINTR)
		;
	if (w == z->pid)
		describe_status(status, how, cap);
	else
		snprintf(how, cap, "ended (status lost: %s)", strerror(errno));
	z->pid = 0;
}

/* Starts `program --zygote --parent PID` with its descriptors (worker/zygote.h):
 * default signal handling and mask, the master's process group (a terminal's
 * signals reach it, and it ignores them). */
static int spawn(struct zygote *z, int arena_fd, int req_child, int exits_child)
{
	/* Above the descriptors they become, so no dup2 clobbers another's
	 * source, and none is already in place (dup2 onto itself would keep
	 * CLOEXEC). */
	int src[3] = {arena_fd, req_child, exits_child};
	int high[3] = {-1, -1, -1};
	int rc = 0;
	for (int i = 0; i < 3 && rc == 0; i++) {
		high[i] = fcntl(src[i], F_DUPFD_CLOEXEC, ZYGOTE_FD_EXITS + 1);
		if (high[i] < 0)
			rc = errno;
	}
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	if (rc != 0)
		goto close_high;
	if ((rc = posix_spawn_file_actions_init(&fa)) != 0)
		goto close_high;
	if ((rc = pool_spawnattr_init(&attr, false)) != 0)
		goto destroy_actions;
	char parent[24];
	snprintf(parent, sizeof(parent), "%d", (int)getpid());
	char *argv[] = {z->program, "--zygote", "--parent", parent, NULL};
	if ((rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) != 0 ||
	    (rc = posix_spawn_file_actions_adddup2(&fa, high[0], ZYGOTE_FD_ARENA)) != 0 ||
	    (rc = posix_spawn_file_actions_adddup2(&fa, high[1], ZYGOTE_FD_REQUESTS)) != 0 ||
	    (rc = posix_spawn_file_actions_adddup2(&fa, high[2], ZYGOTE_FD_EXITS)) != 0)
		goto destroy_attr;
	rc = posix_spawn(&z->pid, z->program, &fa, &attr, argv, environ);
destroy_attr:
	posix_spawnattr_destroy(&attr);
destroy_actions:
	posix_spawn_file_actions_destroy(&fa);
close_high:
	for (int i = 0; i < 3; i++)
		if (high[i] >= 0)
			close(high[i]);
	if (rc != 0)
		z->pid = 0;
	return -rc;
}

/* Lowers the zygote's priority to nice, before it forks any worker: each
 * worker inherits it. Never raises it (a daemon started at a higher nice
 * value keeps its workers there); one that cannot be set is said once. */
static void lower_priority(const struct zygote *z, int nice)
{
	errno = 0;
	int now = getpriority(PRIO_PROCESS, (id_t)z->pid);
	if (now == -1 && errno != 0) {
		log_warning("the workers run at their normal priority: getpriority of the worker "
			    "zygote (pid %d): %s", (int)z->pid, strerror(errno));
		return;
	}
	if (now >= nice)
		return;
	if (setpriority(PRIO_PROCESS, (id_t)z->pid, nice) < 0)
		log_warning("the workers run at nice %d, not %d (worker_nice): setpriority of the "
			    "worker zygote (pid %d): %s", now, nice, (int)z->pid, strerror(errno));
}

/* Waits until fd is readable, at most timeout_ms. 0, -ETIMEDOUT or -errno. */
static int wait_readable(int fd, uint32_t timeout_ms)
{
	uint64_t deadline = clock_mono_ns() / 1000000 + timeout_ms;
	for (;;) {
		uint64_t now = clock_mono_ns() / 1000000;
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int n = poll(&pfd, 1, (int)(deadline - now));
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static void zygote_gone(struct zygote *z)
{
	uv_poll_stop(&z->exits_poll);
	char how[128], why[4096 + 512];
	reap(z, how, sizeof(how));
	snprintf(why, sizeof(why), "the worker zygote (%s --zygote) %s; no worker can be started "
		 "again: only a process mapped before the arena was sealed can write it, and it "
		 "was that process", z->program, how);
	if (!z->closing)
		z->ops.lost(z->ops.ctx, why);
}

/* Exit reports, and the zygote's end (end of file on its socket). */
static void on_exits(uv_poll_t *h, int status, int events)
{
	struct zygote *z = h->data;
	(void)status; /* an error shows in recv */
	(void)events;
	for (;;) {
		struct zygote_exit ex;
		ssize_t n = recv(z->exits_fd, &ex, sizeof(ex), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			zygote_gone(z);
			return;
		}
		if (n != (ssize_t)sizeof(ex) || ex.magic != ZYGOTE_MAGIC) {
			log_warning("the worker zygote sent a malformed exit report; ignored");
			continue;
		}
		z->ops.exited(z->ops.ctx, ex.index, ex.pid, ex.wait_status);
		if (z->closing || z->pid == 0)
			return;
	}
}

int zygote_start(uv_loop_t *loop, const char *program, int arena_fd, uint32_t timeout_ms,
		 int nice, const struct zygote_ops *ops, struct zygote **out, char *err,
		 size_t err_cap)
{
	struct zygote *z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	z->loop = loop;
	z->ops = *ops;
	z->timeout_ms = timeout_ms;
	z->req_fd = z->exits_fd = -1;
	snprintf(z->program, sizeof(z->program), "%s", program);
	int req[2], exits[2];
	int rc;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, req) < 0) {
		rc = -errno;
		snprintf(err, err_cap, "socketpair: %s", strerror(errno));
		goto free_zygote;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, exits) < 0) {
		rc = -errno;
		snprintf(err, err_cap, "socketpair: %s", strerror(errno));
		goto close_req;
	}
	rc = spawn(z, arena_fd, req[1], exits[1]);
	close(req[1]);
	close(exits[1]);
	z->req_fd = req[0];
	z->exits_fd = exits[0];
	if (rc < 0) {
		snprintf(err, err_cap, "the worker zygote: %s --zygote: %s", program, strerror(-rc));
		goto close_ours;
	}
	lower_priority(z, nice);
	struct zygote_ready ready;
	ssize_t n = 0;
	rc = wait_readable(z->req_fd, timeout_ms);
	if (rc == 0) {
		while ((n = recv(z->req_fd, &ready, sizeof(ready), 0)) < 0 && errno == EINTR)
			;
		if (n != (ssize_t)sizeof(ready) || ready.magic != ZYGOTE_MAGIC ||
		    ready.pid != (int32_t)z->pid)
			rc = -ECHILD;
	}
	if (rc < 0) {
		char how[128];
		if (rc == -ETIMEDOUT)
			kill(z->pid, SIGKILL);
		else if (n > 0) /* a process that answers wrongly */
			kill(z->pid, SIGKILL);
		reap(z, how, sizeof(how));
		if (rc == -ETIMEDOUT)
			snprintf(err, err_cap, "the worker zygote (%s --zygote) was not ready %u ms after "
				 "its start (worker_timeout_ms); killed", program, timeout_ms);
		else if (n > 0)
			snprintf(err, err_cap, "the worker zygote (%s --zygote) answered as no "
				 "loaderd-worker of this version would; killed", program);
		else
			snprintf(err, err_cap, "the worker zygote (%s --zygote) %s before it was ready",
				 program, how);
		goto close_ours;
	}
	fcntl(z->exits_fd, F_SETFL, fcntl(z->exits_fd, F_GETFL) | O_NONBLOCK);
	uv_poll_init(loop, &z->exits_poll, z->exits_fd);
	z->exits_poll.data = z;
	uv_poll_start(&z->exits_poll, UV_READABLE | UV_DISCONNECT, on_exits);
	*out = z;
	return 0;
close_ours:
	close(z->exits_fd);
	close(z->req_fd);
	free(z);
	return rc;
close_req:
	close(req[0]);
	close(req[1]);
free_zygote:
	free(z);
	return rc;
}

/* Reads the answer to a request: the message and an optional pidfd. */
static int receive_answer(struct zygote *z, struct zygote_forked *ans, int *pidfd)
{
	int fds[FDPASS_MAX], flags;
	size_t n_fds;
	ssize_t n = fdpass_recv(z->req_fd, ans, sizeof(*ans), fds, &n_fds, &flags);
	if (n < 0)
		return (int)n;
	if (n == 0)
		return -EPIPE;
	bool bad = n != (ssize_t)sizeof(*ans) || ans->magic != ZYGOTE_MAGIC || n_fds > 1;
	*pidfd = !bad && n_fds == 1 ? fds[0] : -1;
	for (size_t i = *pidfd >= 0 ? 1 : 0; i < n_fds; i++)
		close(fds[i]);
	return bad ? -EPROTO : 0;
}

int zygote_fork(struct zygote *z, uint32_t index, int cmd_efd, int done_efd, pid_t *pid,
		int *pidfd)
{
	if (z->pid == 0 || z->closing)
		return -EPIPE;
	struct zygote_fork req = {.magic = ZYGOTE_MAGIC, .index = index};
	const int fds[2] = {cmd_efd, done_efd};
	ssize_t n = fdpass_send(z->req_fd, &req, sizeof(req), fds, 2);
	if (n < 0)
		return n == -ECONNRESET ? -EPIPE : (int)n;
	int rc = wait_readable(z->req_fd, z->timeout_ms);
	struct zygote_forked ans;
	if (rc == 0)
		rc = receive_answer(z, &ans, pidfd);
	if (rc == -ETIMEDOUT || rc == -EPROTO) {
		/* It is stuck or broken: its end comes through on_exits. */
		log_error("the worker zygote (pid %d) %s; killing it", (int)z->pid,
			  rc == -EPROTO ? "answered malformed" : "did not answer a fork request in time");
		kill(z->pid, SIGKILL);
		return rc;
	}
	if (rc < 0)
		return rc;
	if (ans.rc < 0 || ans.pid <= 0 || ans.index != index) {
		if (*pidfd >= 0)
			close(*pidfd);
		*pidfd = -1;
		return ans.rc < 0 ? ans.rc : -EPROTO;
	}
	*pid = ans.pid;
	return 0;
}

pid_t zygote_pid(const struct zygote *z)
{
	return z ? z->pid : 0;
}

static void on_poll_closed(uv_handle_t *h)
{
	struct zygote *z = h->data;
	close(z->exits_fd);
	free(z);
}

void zygote_close(struct zygote *z)
{
	if (!z || z->closing)
		return;
	z->closing = true;
	close(z->req_fd);
	z->req_fd = -1;
	if (z->pid > 0) {
		/* Its workers have exited (pool_stop is done): nothing of value is
		 * left in it. */
		char how[128];
		kill(z->pid, SIGKILL);
		reap(z, how, sizeof(how));
	}
	uv_poll_stop(&z->exits_poll);
	uv_close((uv_handle_t *)&z->exits_poll, on_poll_closed);
}
