/*
 * loaderctl: the operator's command-line client of loaderd.
 *
 *   loaderctl [--socket PATH] status
 *   loaderctl [--socket PATH] consume --pipeline NAME [...]
 *   loaderctl [--socket PATH] peek --pipeline NAME [--batch N] [--columns C] --out FILE.png
 *
 * `consume` attaches exactly like a training process (host delivery, or
 * device delivery with --device), so it is both a load generator and the
 * reference consumer the tests check delivered bytes with (--dump; on a
 * GPU each batch is copied back to compute the same CRCs). `peek` attaches
 * the same way (host delivery) and writes one batch of an image pipeline
 * as a PNG contact sheet, rendered by peek.c. Exit codes: 0 success, 1 an
 * error (message on stderr starting "loaderctl: "), 2 a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/crc32c.h"
#include "loaderd.h"
#include "peek.h"

#define EXIT_USAGE 2
#define DUMP_BUFFER_BYTES (1u << 20)
#define NEXT_WAIT_MS 1000 /* bounds how long a stop request waits to be seen */

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

struct peek_opts {
	const char *socket;
	const char *pipeline;
	const char *out;
	uint64_t batch;
	uint64_t columns; /* 0: the default */
};

struct consume_stats {
	uint64_t epochs; /* epochs whose last batch was delivered */
	uint64_t batches;
	uint64_t samples;
	uint64_t bytes;
	double call_s; /* inside ldr_next + ldr_stream_wait + ldr_release */
};

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static const char usage_text[] =
	"Usage: loaderctl [--socket PATH] status\n"
	"       loaderctl [--socket PATH] consume --pipeline NAME [--device DEV] [--rank R] [--world W]\n"
	"                 [--epochs N | --batches N] [--resume TOKEN] [--dump FILE [--dump-data FILE]]\n"
	"                 [--depth D] [--step-ms MS] [--name NAME] [--quiet]\n"
	"       loaderctl [--socket PATH] peek --pipeline NAME [--batch N] [--columns C] --out FILE.png\n"
	"       loaderctl --help | --version\n"
	"\n"
	"  status     print the daemon's status\n"
	"  consume    attach to a pipeline like a training process and consume batches\n"
	"             (default: one epoch); prints a summary and the resumable position;\n"
	"             --device N|GPU-UUID receives the batches on that GPU;\n"
	"             --dump FILE writes a line per row (epoch, batch, sample, CRC-32C);\n"
	"             --dump-data FILE the rows' bytes, every tensor's in turn, in that order\n"
	"  peek       write batch N (default 0) of epoch 0 of an image pipeline as a PNG\n"
	"             contact sheet: a tile per image, its label under it; --columns C\n"
	"             (default ceil(sqrt(batch)), at most 16); float images are shown with\n"
	"             each channel stretched from the batch's min..max to 0..255\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("loaderctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'loaderctl --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * If argv[*i] is option `name` ("--name VALUE" or "--name=VALUE"), stores
 * its value and advances *i past it: returns 1. Returns 0 when argv[*i] is
 * another option, -1 (after the usage message) when the value is missing.
 */
static int take_value(int argc, char **argv, int *i, const char *name, const char **value)
{
	const char *arg = argv[*i];
	size_t len = strlen(name);
	if (strncmp(arg, name, len) != 0)
		return 0;
	if (arg[len] == '=') {
		*value = arg + len + 1;
		return 1;
	}
	if (arg[len] != '\0')
		return 0;
	if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0) {
		usage_error("option '%s' needs a value", name);
		return -1;
	}
	*value = argv[++*i];
	return 1;
}

/* Decimal digits only, no sign, in [min, max]; else a usage error (-1). */
static int parse_number(const char *name, const char *text, uint64_t min, uint64_t max,
			uint64_t *out)
{
	uint64_t v = 0;
	const char *s = text;
	if (*s == '\0')
		goto bad;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			goto bad;
		uint64_t d = (uint64_t)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			goto out_of_range;
		v = v * 10 + d;
	}
	if (v < min || v > max)
		goto out_of_range;
	*out = v;
	return 0;
bad:
	usage_error("option '%s': '%s' is not a number", name, text);
	return -1;
out_of_range:
	usage_error("option '%s': %s is out of range (%" PRIu64 "..%" PRIu64 ")", name, text, min, max);
	return -1;
}

/* An option of a command: a flag, a non-empty string or a number in
 * [min, max], whichever destination is set. */
struct option_spec {
	const char *name;
	bool *flag;
	const char **string;
	uint64_t *number;
	uint64_t min, max;
};

/* Parses argv[first..] against specs; 0, or an exit code. */
static int parse_options(int argc, char **argv, int first, const struct option_spec *specs,
			 size_t n_specs)
{
	for (int i = first; i < argc; i++) {
		int r = 0;
		for (size_t k = 0; k < n_specs && r == 0; k++) {
			const struct option_spec *sp = &specs[k];
			const char *value;
			if (sp->flag) {
				r = strcmp(argv[i], sp->name) == 0;
				if (r)
					*sp->flag = true;
				continue;
			}
			r = take_value(argc, argv, &i, sp->name, &value);
			if (r == 1 && sp->string && value[0] == '\0')
				return usage_error("option '%s' needs a non-empty value", sp->name);
			if (r == 1 && sp->string)
				*sp->string = value;
			if (r == 1 && sp->number &&
			    parse_number(sp->name, value, sp->min, sp->max, sp->number) < 0)
				return EXIT_USAGE;
		}
		if (r < 0)
			return EXIT_USAGE;
		if (r == 0)
			return usage_error(strncmp(argv[i], "--", 2) == 0 ? "unknown option '%s'" :
					   "unexpected argument '%s'", argv[i]);
	}
	return 0;
}

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

/* Parses peek's options from argv[first..]; 0, or an exit code. */
static int parse_peek(int argc, char **argv, int first, struct peek_opts *o)
{
	const struct option_spec specs[] = {
		{ "--pipeline", .string = &o->pipeline },
		{ "--out", .string = &o->out },
		{ "--batch", .number = &o->batch, .max = UINT64_MAX },
		{ "--columns", .number = &o->columns, .min = 1, .max = 4096 },
	};
	int r = parse_options(argc, argv, first, specs, sizeof specs / sizeof specs[0]);
	if (r != 0)
		return r;
	if (!o->pipeline || !o->out)
		return usage_error("peek needs --pipeline NAME and --out FILE.png");
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

static int install_stop_handlers(void)
{
	struct sigaction sa = { .sa_handler = on_stop_signal };
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: a blocked wait returns EINTR and the loop sees the flag. */
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
		fprintf(stderr, "loaderctl: sigaction: %s\n", strerror(errno));
		return -1;
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

/* Takes batches 0..o->batch into *b (releasing the others) and finds the
 * images of the last; each batch is checked, so a pipeline without images
 * fails at its first. 0, or -1 after printing the reason. */
static int peek_fetch(struct ldr_client *c, const struct peek_opts *o, struct ldr_batch *b,
		      struct peek_image *img)
{
	uint64_t n = ldr_batches_in_epoch(c, 0);
	if (o->batch >= n) {
		fprintf(stderr, "loaderctl: pipeline %s has %" PRIu64 " batches per epoch; there is "
			"no batch %" PRIu64 "\n", o->pipeline, n, o->batch);
		return -1;
	}
	for (uint64_t k = 0;; k++) {
		int r;
		while ((r = ldr_next(c, b, NEXT_WAIT_MS)) == -ETIMEDOUT || r == -EINTR)
			if (stop_requested)
				goto stopped;
		if (r < 0) {
			fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
			return -1;
		}
		r = peek_find_image(b, img);
		if (r == -ENOENT || r == -EINVAL) {
			fprintf(stderr, r == -ENOENT ?
				"loaderctl: pipeline %s has no image tensor; peek shows image pipelines\n" :
				"loaderctl: pipeline %s: its image tensor is not [B,3,H,W] or [B,H,W,3] "
				"of uint8, float16 or float32\n", o->pipeline);
			return -1;
		}
		if (k == o->batch)
			return 0;
		if (ldr_release(c, b) < 0) {
			fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
			return -1;
		}
		if (stop_requested)
			goto stopped;
	}
stopped:
	fprintf(stderr, "loaderctl: peek interrupted\n");
	return -1;
}

static int run_peek(const struct peek_opts *o)
{
	struct peek_output out;
	struct ldr_client *c;
	struct ldr_batch b;
	struct peek_image img;
	struct peek_sheet sheet;
	char err[512];
	int rc = 1;
	/* The signal handlers first: a stop must still remove the temporary file. */
	if (install_stop_handlers() < 0)
		return 1;
	if (peek_output_open(&out, o->out, err, sizeof err) < 0) { /* before attaching */
		fprintf(stderr, "loaderctl: %s\n", err);
		return 1;
	}
	struct ldr_attach_opts ao = { .pipeline = o->pipeline, .client_name = "peek" };
	if (ldr_connect(o->socket, &c) < 0 || ldr_attach(c, &ao) < 0) {
		fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
		goto close_client;
	}
	if (peek_fetch(c, o, &b, &img) < 0)
		goto close_client;
	if (peek_layout(&img, (unsigned)o->columns, &sheet) < 0) {
		fprintf(stderr, "loaderctl: pipeline %s: a sheet of %u images %ux%u is over %u "
			"pixels a side; try --columns\n", o->pipeline, img.count, img.width,
			img.height, PEEK_SHEET_MAX);
		goto close_client;
	}
	if (peek_output_commit(&out, &img, &sheet, err, sizeof err) < 0) {
		fprintf(stderr, "loaderctl: %s\n", err);
		goto close_client;
	}
	if (ldr_release(c, &b) < 0) {
		fprintf(stderr, "loaderctl: %s\n", ldr_error(c));
		goto close_client;
	}
	printf("peek: pipeline %s batch %" PRIu64 ": %u images %ux%u -> %s (%ux%u tiles)\n",
	       o->pipeline, o->batch, img.count, img.width, img.height, o->out, sheet.columns,
	       sheet.tile_rows);
	rc = fflush(stdout) == 0 ? 0 : 1;
close_client:
	ldr_close(c);
	peek_output_discard(&out);
	return rc;
}

static int run_status(const char *socket)
{
	char *text;
	char err[1280];
	if (ldr_status(socket, &text, err, sizeof err) < 0) {
		fprintf(stderr, "loaderctl: %s\n", err);
		return 1;
	}
	size_t len = strlen(text);
	fputs(text, stdout);
	if (len == 0 || text[len - 1] != '\n')
		fputc('\n', stdout);
	free(text);
	return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *socket = NULL;
	int i = 1;
	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		int r;
		if (strcmp(argv[i], "--help") == 0) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("loaderctl %s\n", LOADERD_VERSION);
			return 0;
		}
		r = take_value(argc, argv, &i, "--socket", &socket);
		if (r < 0)
			return EXIT_USAGE;
		if (r == 0)
			return usage_error("unknown option '%s'", argv[i]);
		if (socket[0] == '\0')
			return usage_error("option '--socket' needs a non-empty value");
	}
	if (i >= argc)
		return usage_error("no command given (status, consume or peek)");
	if (strcmp(argv[i], "status") == 0) {
		if (i + 1 < argc)
			return usage_error(strncmp(argv[i + 1], "--", 2) == 0 ? "unknown option '%s'" :
					   "unexpected argument '%s'", argv[i + 1]);
		return run_status(socket);
	}
	if (strcmp(argv[i], "consume") == 0) {
		struct consume_opts o = { .socket = socket, .world = 1 };
		int r = parse_consume(argc, argv, i + 1, &o);
		if (r != 0)
			return r;
		return run_consume(&o);
	}
	if (strcmp(argv[i], "peek") == 0) {
		struct peek_opts o = { .socket = socket };
		int r = parse_peek(argc, argv, i + 1, &o);
		return r != 0 ? r : run_peek(&o);
	}
	return usage_error("unknown command '%s' (status, consume or peek)", argv[i]);
}
