/* SPDX-License-Identifier: Apache-2.0 */
/*
 * workerprobe: is worker_program a loaderd worker of this version? Asked
 * once before loaderd creates anything (and by --check-config), so that a
 * missing or wrong program is a clear error at start instead of workers
 * that never come up while clients wait.
 *
 * The program is run as `PROGRAM --probe` (worker/worker.h) with stdin
 * /dev/null, stdout and stderr captured, in a process group of its own,
 * and must print exactly "loaderd-worker VERSION arena N" (this build's
 * LOADERD_VERSION and ARENA_VERSION) and exit 0 within the timeout.
 * A program without a '/' is looked up in $PATH, as the worker pool's
 * exec does.
 */
#ifndef LDR_DAEMON_WORKERPROBE_H
#define LDR_DAEMON_WORKERPROBE_H

#include <stddef.h>

#define WORKER_PROBE_TIMEOUT_MS 5000

/*
 * Runs the probe. 0 when the program answered as expected; else -errno
 * with why saying what happened, without the program's name (the caller
 * names it): "No such file or directory", "not a regular file (a
 * directory)", "not executable (mode 0644)", "exited with code 1", "was
 * killed by signal 11 (Segmentation fault)", "printed \"...\", not a
 * loaderd worker's answer", "is loaderd-worker 0.0.9 (arena 2), but this
 * loaderd is 0.1.0 (arena 3)", "gave no answer within 5.0 s (killed)",
 * each with the first line the program wrote to stderr, if any.
 */
int worker_probe(const char *program, int timeout_ms, char *why, size_t why_cap);

#endif
