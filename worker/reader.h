/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reader: the worker's event loop. It pops struct work_cmd from the
 * worker's command ring, reads each sample of an item from the pipeline's
 * data file straight into its row of the staging slot (io_uring, every read
 * of the items in hand in flight at once; pread when io_uring cannot be set
 * up), widens token rows in place, and posts one struct work_done per item.
 *
 * Contract with the master (worker/worker.h, shm/layout.h):
 * - The first completion is {item_id 0, WORK_STATUS_READY}, with
 *   WORK_FLAG_NO_URING when reads go through pread.
 * - A command the worker cannot honour (pipeline, count, sample index or
 *   destination out of range; unknown op) fails that item with -EINVAL and
 *   bad_row naming the row; nothing is written outside the slot it names.
 * - A read error fails the item with that -errno; end of file before a
 *   sample is complete fails it with -ENODATA and detail = bytes of that
 *   sample read; a data file (or image, or tar shard) that is not a
 *   regular file any more fails it with REGFILE_NOT_REGULAR (-ESPIPE,
 *   common/regfile.h), never blocking the worker. bad_row is the lowest
 *   failing row of the item.
 * - An image row that fails (no replacement could be used, or
 *   on_error = fail) reports the status of the sample the command named
 *   (not of its last replacement) and detail = WORKER_DETAIL_IMAGE | the
 *   number of replacements tried (worker/worker.h). An item that fails
 *   before any image row (its pipeline unusable) has detail 0.
 * - A completion is posted only once no read of the item is in flight, so
 *   the master may reuse the slot as soon as it sees it.
 * - WORK_EXIT: completes the items already in hand, takes no further
 *   command, and returns.
 * - No more than RING_ENTRIES items are held at once; further commands stay
 *   in the ring until an item completes.
 */
#ifndef LDR_WORKER_READER_H
#define LDR_WORKER_READER_H

#include <stdint.h>

#include "shm/arena.h"

/* Serves worker `index` of arena `a` until WORK_EXIT. cmd_fd and done_fd are
 * the eventfds of worker.h (either may be non-blocking). Returns 0 when told
 * to exit, or -errno after a failure of a system call the loop cannot work
 * without (logged here). */
int reader_run(struct arena *a, uint32_t index, int cmd_fd, int done_fd);

#endif
