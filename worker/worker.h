/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker: the contract between the master and a loaderd-worker process.
 *
 * Every worker of a running master is a fork, without exec, of the worker
 * zygote (worker/zygote.h, `loaderd-worker --zygote`), which the master
 * starts once with fork+exec before it seals the arena against every new
 * writable mapping (shm/arena.h): a fork inherits the zygote's writable
 * mapping, a process exec'd after the seal could not make one. Such a
 * worker gets its two eventfds with the fork request, not as fds 4 and 5,
 * and its parent is the zygote; otherwise it is the worker below.
 *
 * The same loop can also be started with fork+exec, as
 *
 *   loaderd-worker --index N --parent PID
 *
 * on an arena not sealed against writes (tests drive it so; on a sealed
 * one it exits 65, saying why).
 *
 * Before anything (at start, and for `loaderd --check-config`) the master runs
 *
 *   loaderd-worker --probe
 *
 * which prints exactly one line, "loaderd-worker VERSION arena N\n"
 * (LOADERD_VERSION and ARENA_VERSION of its build), and exits 0, touching
 * nothing else: no arena, no descriptor beyond stdout. The master refuses
 * a worker_program that answers anything else (daemon/pool/workerprobe.h).
 *
 * An exec'd worker gets these inherited descriptors (everything else is
 * closed):
 *   0      /dev/null
 *   1, 2   the master's stdout and stderr (the journal under systemd)
 *   3      the arena (shm/arena.h), mapped read-write
 *   4      eventfd: the master wrote a command into ring "cmd" of worker N
 *   5      eventfd: the worker wrote a completion into ring "done" of worker N
 *
 * A worker is a stateless executor: it pops struct work_cmd from its
 * command ring, produces the samples into the staging slot the command
 * names (reads through io_uring, every read of the items in hand in flight
 * at once; pread when io_uring is unavailable), and pushes one struct
 * work_done per item. Its first completion is WORK_STATUS_READY. It never
 * calls CUDA and links no CUDA library. A failure on one sample (read error,
 * short file) fails that item, never the process.
 *
 * Exit codes, which the master's supervision reads:
 */
#ifndef LDR_WORKER_WORKER_H
#define LDR_WORKER_WORKER_H

#define WORKER_FD_ARENA 3
#define WORKER_FD_CMD 4
#define WORKER_FD_DONE 5

/* work_done.detail of a failed image row: this flag, or'ed with the number
 * of replacements tried (worker/reader.h). */
#define WORKER_DETAIL_IMAGE (1ull << 32)
/* work_done.detail of an item failed on a document-shuffled megatron
 * pipeline's .idx (its open, or -ESTALE: not the file checked at start),
 * not on the data file (worker/token_rows.c). */
#define WORKER_DETAIL_INDEX (1ull << 33)

enum worker_exit {
	WORKER_EXIT_OK = 0,      /* told to exit (WORK_EXIT), or the master is gone */
	WORKER_EXIT_USAGE = 64,  /* bad arguments: fatal, never respawned */
	WORKER_EXIT_ARENA = 65,  /* the arena is not a valid one: fatal, never respawned */
	WORKER_EXIT_SYSTEM = 71, /* a system call it cannot work without failed: respawned with back-off */
};

#endif
