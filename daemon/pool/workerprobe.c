/* SPDX-License-Identifier: Apache-2.0 */
/* workerprobe: run `worker_program --probe` and judge its answer (workerprobe.h). */
#include "daemon/pool/workerprobe.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errtext.h"
#include "common/escape.h"
#include "common/regfile.h"
#include "shm/layout.h"
#include "daemon/pool/spawnattr.h"

#define PROBE_KEEP_BYTES 512 /* of each stream; more is read and dropped */
#define PROBE_QUOTE_BYTES 100 /* of a line quoted in a message */
#define PROBE_SLICE_MS 20    /* poll slice when the kernel has no pidfd */

extern char **environ;

/* One of the probe's output streams, read through a pipe. */
struct probe_capture {
	int fd;
	bool eof;
	size_t len;
	char buf[PROBE_KEEP_BYTES + 1];
};

static int64_t probe_now_ms(void)
{
	return (int64_t)clock_mono_ms();
}

/* The first line of text (up to PROBE_QUOTE_BYTES of it), quoted and
 * escaped (common/escape.h), "..." marking a cut. */
static void probe_quote_line(const char *text, size_t len, char *out, size_t cap)
{
	const char *nl = memchr(text, '\n', len);
	size_t n = nl ? (size_t)(nl - text) : len;
	char shown[ESCAPE_SIZE(PROBE_QUOTE_BYTES)];
	escape_bytes(text, n < PROBE_QUOTE_BYTES ? n : PROBE_QUOTE_BYTES, shown, sizeof(shown));
	snprintf(out, cap, "\"%s%s\"", shown, n > PROBE_QUOTE_BYTES ? "..." : "");
}

/* path, when it is an executable regular file; why says what it is not. */
static int probe_check_file(const char *path, char *why, size_t why_cap)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		int code = errno;
		return errtext(why, why_cap, -code, "%s", strerror(code));
	}
	if (!S_ISREG(st.st_mode))
		return errtext(why, why_cap, -EACCES, "not a regular file (%s)",
			       regfile_kind(st.st_mode));
	if (!(st.st_mode & 0111) || access(path, X_OK) < 0)
		return errtext(why, why_cap, -EACCES, "not executable (mode %04o)",
			       (unsigned)(st.st_mode & 07777));
	return 0;
}

/* The file exec would run: program itself when it has a '/', else the
 * first executable regular file of that name in $PATH (execvp's rule). */
static int probe_resolve(const char *program, char *path, size_t cap, char *why, size_t why_cap)
{
	if (strchr(program, '/')) {
		if ((size_t)snprintf(path, cap, "%s", program) >= cap)
			return errtext(why, why_cap, -ENAMETOOLONG, "%s", strerror(ENAMETOOLONG));
		return probe_check_file(path, why, why_cap);
	}
	const char *dirs = getenv("PATH");
	if (!dirs || !*dirs)
		dirs = "/bin:/usr/bin"; /* execvp's default */
	char first[PATH_MAX + 256] = "";
	for (const char *d = dirs;;) {
		size_t len = strcspn(d, ":");
		int n = snprintf(path, cap, "%.*s%s%s", (int)len, len ? d : ".", "/", program);
		char reason[128];
		if (n > 0 && (size_t)n < cap) {
			int rc = probe_check_file(path, reason, sizeof(reason));
			if (rc == 0)
				return 0;
			if (rc != -ENOENT && rc != -ENOTDIR && !first[0])
				snprintf(first, sizeof(first), "%s: %s", path, reason);
		}
		if (d[len] == '\0')
			break;
		d += len + 1;
	}
	if (first[0])
		return errtext(why, why_cap, -EACCES, "no executable file of that name in $PATH (%s)",
			       first);
	return errtext(why, why_cap, -ENOENT, "not found in $PATH (%.200s)", dirs);
}

/* Starts `program --probe` from path: stdin /dev/null, stdout and stderr
 * into the pipes, default signal handling (loaderd ignores SIGPIPE), a
 * process group of its own so that a timeout can kill all of it. */
static int probe_spawn(const char *program, const char *path, int out_fd, int err_fd, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	int rc = posix_spawn_file_actions_init(&fa);
	if (rc != 0)
		return -rc;
	rc = pool_spawnattr_init(&attr, true);
	if (rc != 0)
		goto destroy_actions;
	char *argv[] = {(char *)program, "--probe", NULL};
	if ((rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) != 0 ||
	    (rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1)) != 0 ||
	    (rc = posix_spawn_file_actions_adddup2(&fa, err_fd, 2)) != 0)
		goto destroy_attr;
	rc = posix_spawn(pid, path, &fa, &attr, argv, environ);
destroy_attr:
	posix_spawnattr_destroy(&attr);
destroy_actions:
	posix_spawn_file_actions_destroy(&fa);
	return -rc;
}

static void probe_capture_read(struct probe_capture *c)
{
	char chunk[4096];
	ssize_t n = read(c->fd, chunk, sizeof(chunk));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		c->eof = true;
		return;
	}
	size_t keep = (size_t)n < PROBE_KEEP_BYTES - c->len ? (size_t)n : PROBE_KEEP_BYTES - c->len;
	memcpy(c->buf + c->len, chunk, keep);
	c->len += keep;
	c->buf[c->len] = '\0';
}

/* Reads both streams until the probe has exited and they are drained, or
 * until the deadline (then its process group is killed: false). A stream
 * still open once the probe has exited and gone quiet is held by a process
 * it left behind: what was read is taken. *status_known is false when the
 * exit status was lost (SIGCHLD ignored, so the kernel reaped it). */
static bool probe_collect(pid_t pid, int timeout_ms, struct probe_capture c[2], int *status, bool *status_known)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* -1: poll in slices instead */
	int64_t deadline = probe_now_ms() + timeout_ms;
	bool exited = false, in_time = true;
	*status_known = false;
	for (;;) {
		if (!exited) {
			pid_t w = waitpid(pid, status, WNOHANG);
			if (w == pid || (w < 0 && errno == ECHILD)) {
				exited = true;
				*status_known = w == pid;
			}
		}
		if (exited && c[0].eof && c[1].eof)
			break;
		int64_t left = deadline - probe_now_ms();
		if (left <= 0) {
			in_time = exited;
			break;
		}
		struct pollfd pfd[3];
		struct probe_capture *of[3] = {NULL, NULL, NULL};
		nfds_t k = 0;
		for (int i = 0; i < 2; i++)
			if (!c[i].eof) {
				of[k] = &c[i];
				pfd[k++] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
			}
		if (!exited && pidfd >= 0)
			pfd[k++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
		int wait_ms = exited ? 0 : pidfd >= 0 ? (int)left :
			      (int)(left < PROBE_SLICE_MS ? left : PROBE_SLICE_MS);
		int n = poll(pfd, k, wait_ms);
		if (n < 0 && errno != EINTR)
			break;
		if (n == 0 && exited)
			break;
		for (nfds_t i = 0; n > 0 && i < k; i++)
			if (of[i] && pfd[i].revents)
				probe_capture_read(of[i]);
	}
	if (!in_time) { /* the leader is not reaped yet: its group id is still ours */
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
		while (waitpid(pid, status, 0) < 0 && errno == EINTR)
			;
	}
	if (pidfd >= 0)
		close(pidfd);
	return in_time;
}

/* The verdict on a probe that ran: 0 or -errno with why. */
static int probe_judge(const struct probe_capture *out, const struct probe_capture *err, bool in_time, int status,
		       bool status_known, int timeout_ms, char *why, size_t cap)
{
	char expected[96], said[PROBE_QUOTE_BYTES * 4 + 64] = "";
	snprintf(expected, sizeof(expected), "loaderd-worker %s arena %d\n", LOADERD_VERSION,
		 ARENA_VERSION);
	if (err->len > 0) {
		char q[PROBE_QUOTE_BYTES * 4 + 8];
		probe_quote_line(err->buf, err->len, q, sizeof(q));
		snprintf(said, sizeof(said), "; its stderr: %s", q);
	}
	if (!in_time)
		return errtext(why, cap, -ETIMEDOUT, "gave no answer to --probe within %d.%d s (killed)%s",
			       timeout_ms / 1000, timeout_ms % 1000 / 100, said);
	if (status_known && WIFSIGNALED(status))
		return errtext(why, cap, -ECHILD, "was killed by signal %d (%s) when run with --probe%s",
			       WTERMSIG(status), strsignal(WTERMSIG(status)), said);
	if (status_known && WIFEXITED(status) && WEXITSTATUS(status) != 0)
		return errtext(why, cap, -ECHILD, "exited with code %d when run with --probe (not a "
			       "loaderd worker, or a broken one)%s", WEXITSTATUS(status), said);
	if (out->len == strlen(expected) && memcmp(out->buf, expected, out->len) == 0)
		return 0;
	char version[32], arena[16], mine[16];
	snprintf(mine, sizeof(mine), "%d", ARENA_VERSION);
	if (out->len > 0 && sscanf(out->buf, "loaderd-worker %31s arena %15[0-9]", version, arena) == 2 &&
	    (strcmp(version, LOADERD_VERSION) != 0 || strcmp(arena, mine) != 0))
		return errtext(why, cap, -EPROTO, "is loaderd-worker %s (arena %s), but this loaderd is "
			       "%s (arena %d): install the worker of the same build", version, arena,
			       LOADERD_VERSION, ARENA_VERSION);
	if (out->len == 0)
		return errtext(why, cap, -EPROTO, "printed nothing when run with --probe (not a loaderd "
			       "worker)%s", said);
	char q[PROBE_QUOTE_BYTES * 4 + 8];
	probe_quote_line(out->buf, out->len, q, sizeof(q));
	const char *nl = memchr(out->buf, '\n', out->len);
	expected[strlen(expected) - 1] = '\0';
	return errtext(why, cap, -EPROTO, "printed %s%s when run with --probe, not a loaderd "
		       "worker's answer (\"%s\")%s", q,
		       nl && nl + 1 < out->buf + out->len ? " and more" : "", expected, said);
}

int worker_probe(const char *program, int timeout_ms, char *why, size_t why_cap)
{
	char path[PATH_MAX];
	int rc = probe_resolve(program, path, sizeof(path), why, why_cap);
	if (rc < 0)
		return rc;
	struct probe_capture c[2] = {{.fd = -1}, {.fd = -1}};
	int out[2] = {-1, -1}, err[2] = {-1, -1};
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
		rc = errtext(why, why_cap, -errno, "cannot make a pipe: %s", strerror(errno));
		goto close_pipes;
	}
	pid_t pid;
	rc = probe_spawn(program, path, out[1], err[1], &pid);
	close(out[1]);
	close(err[1]);
	out[1] = err[1] = -1;
	if (rc < 0) {
		errtext(why, why_cap, rc, "cannot run it: %s", strerror(-rc));
		goto close_pipes;
	}
	c[0].fd = out[0];
	c[1].fd = err[0];
	int status = 0;
	bool known;
	bool in_time = probe_collect(pid, timeout_ms, c, &status, &known);
	rc = probe_judge(&c[0], &c[1], in_time, status, known, timeout_ms, why, why_cap);
close_pipes:
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
	}
	return rc;
}
