/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zygote: the contract between the master (daemon/pool/zygote.h) and the
 * worker zygote, `loaderd-worker --zygote`, the one process every worker
 * is forked from.
 *
 * Why it exists: the arena is sealed against every new writable mapping
 * (shm/arena.h, arena_seal_writes), so that no client, root included, can
 * ever write what another client receives. A process exec'd after the
 * seal could only map it read-only; a writable mapping made before the
 * seal survives fork. So the master starts the zygote once, with
 * fork+exec, before the seal; the zygote maps the arena read-write and
 * says so; the master seals; every worker from then on (the first ones,
 * respawns, those a reload adds) is a fork of the zygote without exec,
 * which inherits the mapping and runs the worker's loop (worker/worker.h)
 * at once. Like PostgreSQL's postmaster forking its backends, which
 * inherit its shared memory.
 *
 * The master starts it as
 *
 *   loaderd-worker --zygote --parent PID
 *
 * with these descriptors (everything else closed):
 *   0      /dev/null
 *   1, 2   the master's stdout and stderr (the journal under systemd)
 *   3      the arena, read-write and not yet sealed against writes
 *   4      SOCK_SEQPACKET, requests: the master asks, the zygote answers,
 *          strictly in turn (one struct zygote_fork, one struct
 *          zygote_forked); first of all the zygote sends struct
 *          zygote_ready once it holds its mapping
 *   5      SOCK_SEQPACKET, exits: the zygote tells, the master only
 *          reads (one struct zygote_exit per worker it reaped)
 *
 * The zygote is single-threaded and small: no CUDA, no io_uring, no
 * thread, nothing of the arena's contents read beyond its header, nothing
 * written. It ignores SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGUSR1 and
 * SIGUSR2 (the master, not a stray signal, ends it), dies with the
 * master (PR_SET_PDEATHSIG), and exits 0 when its request socket reaches
 * end of file. Its workers die with it (PR_SET_PDEATHSIG too). It cannot
 * be started again after the seal: no new process can get a writable
 * mapping then; the master treats its end as fatal (daemon/pool/zygote.h).
 *
 * A forked worker: its fds are the two eventfds that came with the
 * request (SCM_RIGHTS, command doorbell then completion doorbell), 0, 1
 * and 2; the zygote's sockets and arena fd are closed; its signal
 * dispositions and mask are a worker's (worker/worker.h); its parent is
 * the zygote. Exit codes are those of worker/worker.h.
 *
 * Exit codes of the zygote itself before it is ready: those of
 * worker/worker.h (64: bad arguments or descriptors; 65: fd 3 is not an
 * arena it can map read-write; 71: a system call failed).
 *
 * For tests of the master's supervision only: when the zygote's
 * environment has LOADERD_WORKER_FAULT=WHICH:CODE[:PATH], each worker
 * WHICH names (an index, or "all") exits CODE at start instead of running
 * (only while PATH exists, when PATH is given). loaderd never sets it.
 */
#ifndef LDR_WORKER_ZYGOTE_H
#define LDR_WORKER_ZYGOTE_H

#include <stdint.h>

#define ZYGOTE_FD_ARENA 3
#define ZYGOTE_FD_REQUESTS 4
#define ZYGOTE_FD_EXITS 5

#define ZYGOTE_MAGIC 0x5a59474cu /* "LGYZ" */

/* zygote -> master on fd 4, once: the mapping is made; the master may seal. */
struct zygote_ready {
	uint32_t magic;
	uint32_t arena_version; /* ARENA_VERSION of its build */
	int32_t pid;
	uint32_t n_workers_max; /* ring pairs in the arena it mapped */
};

/* master -> zygote on fd 4: fork worker `index`, with two eventfds
 * (SCM_RIGHTS, exactly two: command doorbell, completion doorbell). */
struct zygote_fork {
	uint32_t magic;
	uint32_t index; /* < n_workers_max; not a worker of the zygote's now */
};

/* zygote -> master on fd 4, the answer to each zygote_fork: rc 0 and the
 * worker's pid, with a pidfd of it (SCM_RIGHTS) when the kernel has
 * pidfd_open; or rc -errno (-EINVAL: a bad request; -EBUSY: that index
 * has a live worker; fork's error). */
struct zygote_forked {
	uint32_t magic;
	uint32_t index;
	int32_t rc;
	int32_t pid;
};

/* zygote -> master on fd 5: worker `index`, pid `pid`, has ended and
 * been reaped; wait_status as waitpid(2) gives it. */
struct zygote_exit {
	uint32_t magic;
	uint32_t index;
	int32_t pid;
	int32_t wait_status;
};

_Static_assert(sizeof(struct zygote_ready) == 16, "zygote_ready layout");
_Static_assert(sizeof(struct zygote_fork) == 8, "zygote_fork layout");
_Static_assert(sizeof(struct zygote_forked) == 16, "zygote_forked layout");
_Static_assert(sizeof(struct zygote_exit) == 16, "zygote_exit layout");

#endif
