/* SPDX-License-Identifier: Apache-2.0 */
/*
 * consume: `loaderctl consume` (loaderctl.h). Attaches exactly like a
 * training process (host delivery, or device delivery with --device),
 * receives, checks off and releases batches until its epochs or batches are
 * done or it is stopped, then prints a summary and the resumable position.
 * With --dump it writes a line per row (epoch, batch, sample, CRC-32C), the
 * reference the tests check delivered bytes with; device batches are copied
 * back to compute the same CRCs.
 *
 * Once attached, every exit prints the summary and the position, also after
 * an error (the daemon's ERROR, its death, a protocol error, a dump that
 * cannot be written), so that the operator can resume. The position is the
 * one after the last released batch, and the dump files hold exactly the
 * batches it counts: a batch's lines are written whole (write(2), no stdio
 * buffer) before it is released, and cut off the files again when it turns
 * out not to be consumed; a write that fails is cut back to the last whole
 * batch and the batch is not released.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "loaderctl.h"
#include "loaderd.h"

#define DUMP_LINE_MAX 96 /* "EPOCH BATCH SAMPLE CRC\n": 4 numbers of at most 20 digits */

struct consume_opts {
	const char *socket;
	/* what ldr_attach gets, in struct ldr_attach_opts's order */
	const char *pipeline;
	uint64_t rank, world, depth;
	const char *resume;
	const char *name;
	const char *device;
	const char *split;
	const char *group;
	uint64_t group_size;
	/* what to do once attached */
	uint64_t epochs;  /* 0: not given */
	uint64_t batches; /* 0: not given */
	uint64_t step_ms;
	uint64_t attach_timeout_ms; /* 0: the library's default */
	const char *dump;
	const char *dump_data;
	bool quiet;
	bool stages; /* print the per-call breakdown (stderr) at the end */
};

struct consume_stats {
	uint64_t epochs; /* epochs whose last batch was delivered */
	uint64_t batches;
	uint64_t samples;
	uint64_t bytes;
	double call_s; /* inside ldr_next + ldr_stream_wait + ldr_release */
	double next_s, wait_s, release_s; /* each of the three alone */
};

/* Parses consume's options from argv[first..]; 0, or an exit code. */
static int consume_parse(int argc, char **argv, int first, struct consume_opts *o)
{
	const struct ctl_option specs[] = {
		{ "--quiet", .flag = &o->quiet },
		{ "--stages", .flag = &o->stages },
		{ "--pipeline", .string = &o->pipeline },
		{ "--resume", .string = &o->resume },
		{ "--dump", .string = &o->dump },
		{ "--dump-data", .string = &o->dump_data },
		{ "--name", .string = &o->name },
		{ "--device", .string = &o->device },
		{ "--split", .string = &o->split },
		{ "--group", .string = &o->group },
		{ "--group-size", .number = &o->group_size, .min = 1, .max = 64 },
		{ "--rank", .number = &o->rank, .max = UINT32_MAX - 1 },
		{ "--world", .number = &o->world, .min = 1, .max = UINT32_MAX },
		{ "--depth", .number = &o->depth, .max = UINT32_MAX },
		{ "--epochs", .number = &o->epochs, .min = 1, .max = UINT64_MAX },
		{ "--batches", .number = &o->batches, .min = 1, .max = UINT64_MAX },
		{ "--step-ms", .number = &o->step_ms, .max = 86400000 },
		{ "--attach-timeout-ms", .number = &o->attach_timeout_ms, .min = 1, .max = INT32_MAX },
	};
	int r = ctl_parse_options(argc, argv, first, specs, sizeof specs / sizeof specs[0]);
	if (r != 0)
		return r;
	if (!o->pipeline)
		return ctl_usage_error("consume needs --pipeline NAME");
	if (o->group_size > 1 && !o->group)
		return ctl_usage_error("--group-size %" PRIu64 " needs --group ID", o->group_size);
	if (o->group && o->group_size < 2)
		return ctl_usage_error("--group needs --group-size N, N >= 2");
	if (o->dump_data && !o->dump)
		return ctl_usage_error("--dump-data needs --dump (its lines say which sample each row is)");
	if (o->epochs && o->batches)
		return ctl_usage_error("options '--epochs' and '--batches' exclude each other");
	if (!o->epochs && !o->batches)
		o->epochs = 1;
	return 0;
}

/* A dump file (--dump, --dump-data), written a batch at a time. */
struct dump_file {
	const char *path;
	int fd;              /* -1: not asked for, or closed */
	uint8_t *buf;        /* the batch being prepared */
	size_t len, cap;
	off_t before, size;  /* the file's size before and after the last batch written */
};

static int dump_open(struct dump_file *d, const char *path)
{
	d->path = path;
	d->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	return d->fd < 0 ? ctl_error("%s: %s", path, strerror(errno)) : 0;
}

/* Room for n more bytes of the batch being prepared, or NULL. */
static uint8_t *dump_reserve(struct dump_file *d, size_t n)
{
	if (d->cap - d->len < n) {
		size_t cap = d->cap ? d->cap : 4096;
		while (cap - d->len < n)
			cap *= 2;
		uint8_t *grown = realloc(d->buf, cap);
		if (!grown) {
			ctl_error("out of memory");
			return NULL;
		}
		d->buf = grown;
		d->cap = cap;
	}
	return d->buf + d->len;
}

/* Writes the prepared batch whole. A failed write is cut back off the
 * file (a file that cannot be cut, a device or a pipe, keeps what went
 * out); 0, or -1 after printing the reason. */
static int dump_write(struct dump_file *d)
{
	size_t at = 0;
	while (at < d->len) {
		ssize_t n = write(d->fd, d->buf + at, d->len - at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ctl_error("writing %s: %s", d->path, n < 0 ? strerror(errno) : "nothing written");
			if (at > 0 && ftruncate(d->fd, d->size) < 0)
				ctl_error("%s: cannot cut the partly written batch off: %s", d->path,
					  strerror(errno));
			d->len = 0;
			return -1;
		}
		at += (size_t)n;
	}
	d->before = d->size;
	d->size += (off_t)d->len;
	d->len = 0;
	return 0;
}

/* Cuts the last batch written off the file again: it was not consumed. */
static void dump_unwrite(struct dump_file *d)
{
	if (d->fd < 0 || d->size == d->before)
		return;
	if (ftruncate(d->fd, d->before) < 0)
		ctl_error("%s: cannot cut off the last batch, which was not released: %s", d->path,
			  strerror(errno));
	d->size = d->before;
}

/* Closes the file (once); 0, or -1 after printing the reason. */
static int dump_close(struct dump_file *d)
{
	int rc = 0;
	if (d->fd >= 0 && close(d->fd) < 0)
		rc = ctl_error("%s: %s", d->path, strerror(errno));
	d->fd = -1;
	free(d->buf);
	d->buf = NULL;
	d->len = d->cap = 0;
	return rc;
}

/* Sleeps step_ms (a simulated training step), cut short by a stop request. */
static void consume_step_sleep(uint64_t step_ms)
{
	struct timespec ts = { .tv_sec = (time_t)(step_ms / 1000),
			       .tv_nsec = (long)(step_ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !ctl_stop_requested)
		;
}

/* One dump line per row: the CRC-32C of the row of every tensor, chained;
 * with data, the row's bytes of every tensor too, in tensor order. Device
 * batches are copied back first (into *copy, grown as needed). The batch
 * goes to both files whole, or to neither; 0, or -1 after printing the
 * reason. */
static int dump_batch(struct dump_file *dump, struct dump_file *data_f, struct ldr_client *c,
		      const struct ldr_batch *b, uint8_t **copy, size_t *copy_cap)
{
	const uint8_t *data[LDR_TENSORS_MAX];
	size_t total = 0;
	for (unsigned t = 0; t < b->n_tensors; t++)
		total += b->tensors[t].bytes;
	if (b->on_device && total > *copy_cap) {
		uint8_t *grown = realloc(*copy, total);
		if (!grown)
			return ctl_error("out of memory");
		*copy = grown;
		*copy_cap = total;
	}
	size_t at = 0;
	for (unsigned t = 0; t < b->n_tensors; t++) {
		data[t] = b->tensors[t].data;
		if (!b->on_device)
			continue;
		if (ldr_copy_to_host(c, b, t, *copy + at) < 0)
			return ctl_error("%s", ldr_error(c));
		data[t] = *copy + at;
		at += b->tensors[t].bytes;
	}
	if (!dump_reserve(dump, (size_t)b->rows * DUMP_LINE_MAX) ||
	    (data_f->fd >= 0 && !dump_reserve(data_f, total)))
		return -1;
	for (unsigned row = 0; row < b->rows; row++) {
		uint32_t crc = 0;
		for (unsigned t = 0; t < b->n_tensors; t++) {
			size_t row_bytes = b->tensors[t].bytes / b->rows;
			crc = crc32c(crc, data[t] + row * row_bytes, row_bytes);
			if (data_f->fd >= 0) {
				memcpy(data_f->buf + data_f->len, data[t] + row * row_bytes, row_bytes);
				data_f->len += row_bytes;
			}
		}
		dump->len += (size_t)snprintf((char *)dump->buf + dump->len, DUMP_LINE_MAX,
					      "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu32 "\n",
					      b->epoch, b->index, ldr_sample_index(c, b, row), crc);
	}
	if (dump_write(dump) < 0) {
		data_f->len = 0;
		return -1;
	}
	if (data_f->fd >= 0 && dump_write(data_f) < 0) {
		dump_unwrite(dump);
		return -1;
	}
	return 0;
}

/* Releases b; true when the position now counts it. A release that fails
 * may still have counted it (the batch is done with even when the daemon
 * is gone): the position says which. */
static bool consume_release(struct ldr_client *c, const struct ldr_batch *b, int *rc)
{
	char after[LDR_POSITION_MAX], now[LDR_POSITION_MAX];
	if (ldr_position_after(c, b, after, sizeof after) < 0)
		after[0] = '\0';
	*rc = ldr_release(c, b);
	if (*rc == 0)
		return true;
	return after[0] && ldr_position(c, now, sizeof now) == 0 && strcmp(now, after) == 0;
}

/* Receives, checks off and releases batches until done or stopped;
 * 0, or -1 after printing the reason. */
static int consume_loop(struct ldr_client *c, const struct consume_opts *o, struct dump_file *dump,
			struct dump_file *dump_data, struct consume_stats *st)
{
	double last_progress = ctl_now_s();
	struct consume_stats at_progress = *st;
	uint8_t *copy = NULL;
	size_t copy_cap = 0;
	int rc = -1;
	while (!ctl_stop_requested) {
		struct ldr_batch b;
		double t0 = ctl_now_s();
		int r = ldr_next(c, &b, CTL_WAIT_MS);
		double t1 = ctl_now_s();
		st->next_s += t1 - t0;
		if (r == -ETIMEDOUT || r == -EINTR)
			continue;
		/* Device batches are used on the legacy default stream: it waits
		 * for the copy, and the release is recorded behind that wait. */
		if (r == 0 && b.on_device)
			r = ldr_stream_wait(c, &b, NULL);
		double t2 = ctl_now_s();
		st->wait_s += t2 - t1;
		st->call_s += t2 - t0;
		if (r < 0) {
			ctl_error("%s", ldr_error(c));
			goto free_copy;
		}
		/* Dumped, then released: a batch the position counts is in the dump. */
		if (dump->fd >= 0 && dump_batch(dump, dump_data, c, &b, &copy, &copy_cap) < 0)
			goto free_copy;
		if (o->step_ms)
			consume_step_sleep(o->step_ms);
		uint64_t bytes = 0;
		for (unsigned t = 0; t < b.n_tensors; t++)
			bytes += b.tensors[t].bytes;
		t0 = ctl_now_s();
		bool consumed = consume_release(c, &b, &r);
		st->release_s += ctl_now_s() - t0;
		st->call_s += ctl_now_s() - t0;
		if (consumed) {
			st->batches++;
			st->samples += b.rows;
			st->bytes += bytes;
			st->epochs += b.last_in_epoch ? 1 : 0;
		} else {
			dump_unwrite(dump);
			dump_unwrite(dump_data);
		}
		if (r < 0) {
			ctl_error("%s", ldr_error(c));
			goto free_copy;
		}

		double now = ctl_now_s();
		if (!o->quiet && now - last_progress >= 1.0) {
			double dt = now - last_progress;
			fprintf(stderr, "consume: epoch %" PRIu64 " batch %" PRIu64
				": %.1f batches/s, %.0f samples/s, %.1f MB/s\n", b.epoch, b.index,
				(double)(st->batches - at_progress.batches) / dt,
				(double)(st->samples - at_progress.samples) / dt,
				(double)(st->bytes - at_progress.bytes) / dt / 1e6);
			last_progress = now;
			at_progress = *st;
		}
		if ((o->batches && st->batches >= o->batches) || (o->epochs && st->epochs >= o->epochs))
			break;
	}
	/* Device delivery: done means every copy has landed. */
	if (ldr_synchronize(c) < 0) {
		ctl_error("%s", ldr_error(c));
		goto free_copy;
	}
	rc = 0;
free_copy:
	free(copy);
	return rc;
}

/* The two stdout lines: the summary and the position after the last
 * released batch; 0, or -1 after printing the reason. */
static int consume_print_summary(struct ldr_client *c, const struct consume_opts *o,
				 const struct consume_stats *st, double seconds)
{
	char token[LDR_POSITION_MAX];
	if (ldr_position(c, token, sizeof token) < 0)
		return ctl_error("no position to report");
	double per_s = seconds > 0 ? 1.0 / seconds : 0.0;
	printf("consume: pipeline=%s rank=%" PRIu64 " world=%" PRIu64 " epochs=%" PRIu64
	       " batches=%" PRIu64 " samples=%" PRIu64 " bytes=%" PRIu64 " seconds=%.3f"
	       " batches_per_s=%.1f samples_per_s=%.1f MB_per_s=%.1f device=%s call_us=%.1f\n",
	       o->pipeline, o->rank, o->world, st->epochs, st->batches, st->samples, st->bytes,
	       seconds, (double)st->batches * per_s, (double)st->samples * per_s,
	       (double)st->bytes * per_s / 1e6, ldr_device_uuid(c)[0] ? ldr_device_uuid(c) : "host",
	       st->batches ? st->call_s * 1e6 / (double)st->batches : 0.0);
	printf("position: %s\n", token);
	if (o->stages && st->batches) {
		double per = 1e6 / (double)st->batches;
		fprintf(stderr, "consume: stages next_us %.1f stream_wait_us %.1f release_us %.1f "
			"(means per batch)\n", st->next_s * per, st->wait_s * per, st->release_s * per);
	}
	return fflush(stdout) == 0 ? 0 : -1;
}

static int consume_run(const struct consume_opts *o)
{
	struct ldr_client *c;
	struct consume_stats st = { 0 };
	struct dump_file dump = { .fd = -1 }, dump_data = { .fd = -1 };
	int rc = 1;
	/* before attaching: a bad path should not cost the daemon a client */
	if ((o->dump && dump_open(&dump, o->dump) < 0) ||
	    (o->dump_data && dump_open(&dump_data, o->dump_data) < 0))
		goto close_dump;
	if (ldr_connect(o->socket, &c) < 0) {
		ctl_error("%s", ldr_error(c));
		goto close_client;
	}
	struct ldr_attach_opts ao = {
		.pipeline = o->pipeline, .rank = (unsigned)o->rank, .world = (unsigned)o->world,
		.depth = (unsigned)o->depth, .resume = o->resume,
		.client_name = o->name ? o->name : "consume", .device = o->device, .split = o->split,
		.group = o->group, .group_size = (unsigned)o->group_size,
	};
	ldr_set_attach_timeout(c, (int)o->attach_timeout_ms);
	if (ldr_attach(c, &ao) < 0) {
		ctl_error("%s", ldr_error(c));
		goto close_client;
	}

	/* Attached: from here on every exit prints the two lines. */
	double start = ctl_now_s();
	bool failed = ctl_install_stop_handlers() < 0 || consume_loop(c, o, &dump, &dump_data, &st) < 0;
	double seconds = ctl_now_s() - start;
	failed |= dump_close(&dump_data) < 0;
	failed |= dump_close(&dump) < 0;
	failed |= consume_print_summary(c, o, &st, seconds) < 0;
	rc = failed ? 1 : 0;
close_client:
	ldr_close(c);
close_dump:
	dump_close(&dump);
	dump_close(&dump_data);
	return rc;
}

int consume_command(int argc, char **argv, int first, const char *socket)
{
	struct consume_opts o = { .socket = socket, .world = 1 };
	int r = consume_parse(argc, argv, first, &o);
	if (r != 0)
		return r;
	return consume_run(&o);
}
