/*
 * consume: `loaderctl consume` (loaderctl.h). Attaches exactly like a
 * training process (host delivery, or device delivery with --device),
 * receives, checks off and releases batches until its epochs or batches are
 * done or it is stopped, then prints a summary and the resumable position.
 * With --dump it writes a line per row (epoch, batch, sample, CRC-32C), the
 * reference the tests check delivered bytes with; device batches are copied
 * back to compute the same CRCs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/crc32c.h"
#include "loaderctl.h"
#include "loaderd.h"

#define DUMP_BUFFER_BYTES (1u << 20)

struct consume_opts {
	const char *socket;
	const char *pipeline;
	const char *resume;
	const char *dump;
	const char *dump_data;
	const char *name;
	const char *device;
	uint64_t rank;
	uint64_t world;
	uint64_t depth;
	uint64_t epochs;  /* 0: not given */
	uint64_t batches; /* 0: not given */
	uint64_t step_ms;
	bool quiet;
};

struct consume_stats {
	uint64_t epochs; /* epochs whose last batch was delivered */
	uint64_t batches;
	uint64_t samples;
	uint64_t bytes;
	double call_s; /* inside ldr_next + ldr_stream_wait + ldr_release */
};

/* Parses consume's options from argv[first..]; 0, or an exit code. */
static int parse_consume(int argc, char **argv, int first, struct consume_opts *o)
{
	const struct option_spec specs[] = {
		{ "--quiet", .flag = &o->quiet },
		{ "--pipeline", .string = &o->pipeline },
		{ "--resume", .string = &o->resume },
		{ "--dump", .string = &o->dump },
		{ "--dump-data", .string = &o->dump_data },
		{ "--name", .string = &o->name },
		{ "--device", .string = &o->device },
		{ "--rank", .number = &o->rank, .max = UINT32_MAX - 1 },
		{ "--world", .number = &o->world, .min = 1, .max = UINT32_MAX },
		{ "--depth", .number = &o->depth, .max = UINT32_MAX },
		{ "--epochs", .number = &o->epochs, .min = 1, .max = UINT64_MAX },
		{ "--batches", .number = &o->batches, .min = 1, .max = UINT64_MAX },
		{ "--step-ms", .number = &o->step_ms, .max = 86400000 },
	};
	int r = parse_options(argc, argv, first, specs, sizeof specs / sizeof specs[0]);
	if (r != 0)
		return r;
	if (!o->pipeline)
		return usage_error("consume needs --pipeline NAME");
	if (o->dump_data && !o->dump)
		return usage_error("--dump-data needs --dump (its lines say which sample each row is)");
	if (o->epochs && o->batches)
		return usage_error("options '--epochs' and '--batches' exclude each other");
	if (!o->epochs && !o->batches)
		o->epochs = 1;
	return 0;
}

/* Sleeps step_ms (a simulated training step), cut short by a stop request. */
static void step_sleep(uint64_t step_ms)
{
	struct timespec ts = { .tv_sec = (time_t)(step_ms / 1000),
			       .tv_nsec = (long)(step_ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !stop_requested)
		;
}

/* One dump line per row: the CRC-32C of the row of every tensor, chained;
 * with data, the row's bytes of every tensor too, in tensor order. Device
 * batches are copied back first (into *copy, grown as needed). */
static int dump_batch(FILE *f, FILE *data_f, struct ldr_client *c, const struct ldr_batch *b,
		      uint8_t **copy, size_t *copy_cap)
{
	const uint8_t *data[LDR_TENSORS_MAX];
	size_t total = 0;
	for (unsigned t = 0; t < b->n_tensors; t++)
		total += b->tensors[t].bytes;
	if (b->on_device && total > *copy_cap) {
		uint8_t *grown = realloc(*copy, total);
		if (!grown) {
			fprintf(stderr, "loaderctl: out of memory\n");
			return -1;
		}
		*copy = grown;
		*copy_cap = total;
	}
	size_t at = 0;
	for (unsigned t = 0; t < b->n_tensors; t++) {
		data[t] = b->tensors[t].data;
		if (!b->on_device)
			continue;
		if (ldr_copy_to_host(c, b, t, *copy + at) < 0) {
			fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
			return -1;
		}
		data[t] = *copy + at;
		at += b->tensors[t].bytes;
	}
	for (unsigned row = 0; row < b->rows; row++) {
		uint32_t crc = 0;
		for (unsigned t = 0; t < b->n_tensors; t++) {
			size_t row_bytes = b->tensors[t].bytes / b->rows;
			crc = crc32c(crc, data[t] + row * row_bytes, row_bytes);
			if (data_f && fwrite(data[t] + row * row_bytes, 1, row_bytes, data_f) != row_bytes) {
				fprintf(stderr, "loaderctl: writing --dump-data: %s\n", strerror(errno));
				return -1;
			}
		}
		fprintf(f, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu32 "\n", b->epoch, b->index,
			ldr_sample_index(c, b, row), crc);
	}
	return 0;
}

/* Receives, checks off and releases batches until done or stopped;
 * 0, or -1 after printing the reason. */
static int consume_loop(struct ldr_client *c, const struct consume_opts *o, FILE *dump,
			FILE *dump_data, struct consume_stats *st)
{
	double last_progress = now_s();
	struct consume_stats at_progress = *st;
	uint8_t *copy = NULL;
	size_t copy_cap = 0;
	int rc = -1;
	while (!stop_requested) {
		struct ldr_batch b;
		double t0 = now_s();
		int r = ldr_next(c, &b, NEXT_WAIT_MS);
		if (r == -ETIMEDOUT || r == -EINTR)
			continue;
		/* Device batches are used on the legacy default stream: it waits
		 * for the copy, and the release is recorded behind that wait. */
		if (r == 0 && b.on_device)
			r = ldr_stream_wait(c, &b, NULL);
		st->call_s += now_s() - t0;
		if (r < 0) {
			fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
			goto free_copy;
		}
		if (dump && dump_batch(dump, dump_data, c, &b, &copy, &copy_cap) < 0)
			goto free_copy;
		if (o->step_ms)
			step_sleep(o->step_ms);
		uint64_t bytes = 0;
		for (unsigned t = 0; t < b.n_tensors; t++)
			bytes += b.tensors[t].bytes;
		t0 = now_s();
		r = ldr_release(c, &b);
		st->call_s += now_s() - t0;
		if (r < 0) {
			fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
			goto free_copy;
		}
		st->batches++;
		st->samples += b.rows;
		st->bytes += bytes;
		st->epochs += b.last_in_epoch ? 1 : 0;

		double now = now_s();
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
		fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
		goto free_copy;
	}
	rc = 0;
free_copy:
	free(copy);
	return rc;
}

static int run_consume(const struct consume_opts *o)
{
	struct ldr_client *c;
	struct consume_stats st = { 0 };
	FILE *dump = NULL, *dump_data = NULL;
	int rc = 1;
	if (o->dump) { /* before attaching: a bad path should not cost the daemon a client */
		dump = fopen(o->dump, "we");
		if (!dump || setvbuf(dump, NULL, _IOFBF, DUMP_BUFFER_BYTES) != 0) {
			fprintf(stderr, "loaderctl: %s: %s\n", o->dump, strerror(errno));
			goto close_dump;
		}
	}
	if (o->dump_data && !(dump_data = fopen(o->dump_data, "we"))) {
		fprintf(stderr, "loaderctl: %s: %s\n", o->dump_data, strerror(errno));
		goto close_dump;
	}
	if (ldr_connect(o->socket, &c) < 0) {
		fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
		goto close_client;
	}
	struct ldr_attach_opts ao = {
		.pipeline = o->pipeline, .rank = (unsigned)o->rank, .world = (unsigned)o->world,
		.depth = (unsigned)o->depth, .resume = o->resume,
		.client_name = o->name ? o->name : "consume", .device = o->device,
	};
	if (ldr_attach(c, &ao) < 0) {
		fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
		goto close_client;
	}
	if (install_stop_handlers() < 0)
		goto close_client;

	double start = now_s();
	if (consume_loop(c, o, dump, dump_data, &st) < 0)
		goto close_client;
	double seconds = now_s() - start;

	if (dump_data) {
		int r = fclose(dump_data);
		dump_data = NULL;
		if (r != 0) {
			fprintf(stderr, "loaderctl: %s: %s\n", o->dump_data, strerror(errno));
			goto close_client;
		}
	}
	if (dump) {
		int r = fclose(dump);
		dump = NULL;
		if (r != 0) {
			fprintf(stderr, "loaderctl: %s: %s\n", o->dump, strerror(errno));
			goto close_client;
		}
	}
	char token[LDR_POSITION_MAX];
	if (ldr_position(c, token, sizeof token) < 0) {
		fprintf(stderr, "loaderctl: no position to report\n");
		goto close_client;
	}
	double per_s = seconds > 0 ? 1.0 / seconds : 0.0;
	printf("consume: pipeline=%s rank=%" PRIu64 " world=%" PRIu64 " epochs=%" PRIu64
	       " batches=%" PRIu64 " samples=%" PRIu64 " bytes=%" PRIu64 " seconds=%.3f"
	       " batches_per_s=%.1f samples_per_s=%.1f MB_per_s=%.1f device=%s call_us=%.1f\n",
	       o->pipeline, o->rank, o->world, st.epochs, st.batches, st.samples, st.bytes,
	       seconds, (double)st.batches * per_s, (double)st.samples * per_s,
	       (double)st.bytes * per_s / 1e6, ldr_device_uuid(c)[0] ? ldr_device_uuid(c) : "host",
	       st.batches ? st.call_s * 1e6 / (double)st.batches : 0.0);
	printf("position: %s\n", token);
	rc = fflush(stdout) == 0 ? 0 : 1;
close_client:
	ldr_close(c);
close_dump:
	if (dump)
		fclose(dump);
	if (dump_data)
		fclose(dump_data);
	return rc;
}

int consume_command(int argc, char **argv, int first, const char *socket)
{
	struct consume_opts o = { .socket = socket, .world = 1 };
	int r = parse_consume(argc, argv, first, &o);
	if (r != 0)
		return r;
	return run_consume(&o);
}
