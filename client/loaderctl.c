/*
 * loaderctl: the operator's command-line client of loaderd.
 *
 *   loaderctl [--socket PATH] status
 *   loaderctl [--socket PATH] reload
 *   loaderctl [--socket PATH] consume --pipeline NAME [...]
 *   loaderctl [--socket PATH] peek --pipeline NAME [--batch N] [--columns C] --out FILE.png
 *
 * `consume` (consume.c) attaches exactly like a training process (host
 * delivery, or device delivery with --device), so it is both a load
 * generator and the reference consumer the tests check delivered bytes with
 * (--dump; on a GPU each batch is copied back to compute the same CRCs).
 * `peek` attaches the same way (host delivery) and writes one batch of an
 * image pipeline as a PNG contact sheet, rendered by peek.c. This file
 * holds main, the usage text, the option parser and the stop flag the
 * commands share (loaderctl.h), `status`, `reload` and `peek`. Exit codes: 0 success,
 * 1 an error (message on stderr starting "loaderctl: "), 2 a usage error.
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

#include "loaderctl.h"
#include "loaderd.h"
#include "peek.h"

struct peek_opts {
	const char *socket;
	const char *pipeline;
	const char *out;
	uint64_t batch;
	uint64_t columns; /* 0: the default */
};

volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

int install_stop_handlers(void)
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

static const char usage_text[] =
	"Usage: loaderctl [--socket PATH] status | reload\n"
	"       loaderctl [--socket PATH] consume --pipeline NAME [--device DEV] [--rank R] [--world W]\n"
	"                 [--epochs N | --batches N] [--resume TOKEN] [--dump FILE [--dump-data FILE]]\n"
	"                 [--depth D] [--step-ms MS] [--name NAME] [--quiet]\n"
	"       loaderctl [--socket PATH] peek --pipeline NAME [--batch N] [--columns C] --out FILE.png\n"
	"       loaderctl --help | --version\n"
	"\n"
	"  status     print the daemon's status\n"
	"  reload     make the daemon re-read its configuration file and print what\n"
	"             changed (live: workers and log_level); a file with errors, or one\n"
	"             changing anything else, is refused and nothing changes (exit 1)\n"
	"  consume    attach to a pipeline like a training process and consume batches\n"
	"             (default: one epoch); prints a summary and the resumable position;\n"
	"             --device N|GPU-UUID receives the batches on that GPU;\n"
	"             --dump FILE writes a line per row (epoch, batch, sample, CRC-32C);\n"
	"             --dump-data FILE the rows' bytes, every tensor's in turn, in that order\n"
	"  peek       write batch N (default 0) of epoch 0 of an image pipeline as a PNG\n"
	"             contact sheet: a tile per image, its label under it; --columns C\n"
	"             (default ceil(sqrt(batch)), at most 16); float images are shown with\n"
	"             each channel stretched from the batch's min..max to 0..255\n";

int usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("loaderctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'loaderctl --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

double now_s(void)
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

int parse_options(int argc, char **argv, int first, const struct option_spec *specs,
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

/* status and reload: one control request, its text on stdout. */
static int run_control(const char *socket, bool reload)
{
	char *text;
	char err[1280];
	int r = reload ? ldr_reload(socket, &text, err, sizeof err)
		       : ldr_status(socket, &text, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "loaderctl: %s%s\n", reload ? "reload: " : "", err);
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
		return usage_error("no command given (status, reload, consume or peek)");
	if (strcmp(argv[i], "status") == 0 || strcmp(argv[i], "reload") == 0) {
		if (i + 1 < argc)
			return usage_error(strncmp(argv[i + 1], "--", 2) == 0 ? "unknown option '%s'" :
					   "unexpected argument '%s'", argv[i + 1]);
		return run_control(socket, strcmp(argv[i], "reload") == 0);
	}
	if (strcmp(argv[i], "consume") == 0)
		return consume_command(argc, argv, i + 1, socket);
	if (strcmp(argv[i], "peek") == 0) {
		struct peek_opts o = { .socket = socket };
		int r = parse_peek(argc, argv, i + 1, &o);
		return r != 0 ? r : run_peek(&o);
	}
	return usage_error("unknown command '%s' (status, reload, consume or peek)", argv[i]);
}
