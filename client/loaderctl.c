/* SPDX-License-Identifier: Apache-2.0 */
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
#include "common/suggest.h"

struct ctl_peek_opts {
	const char *socket;
	const char *pipeline;
	const char *out;
	uint64_t batch;
	uint64_t columns; /* 0: the default */
};

volatile sig_atomic_t ctl_stop_requested;

static void ctl_on_stop_signal(int sig)
{
	(void)sig;
	ctl_stop_requested = 1;
}

int ctl_install_stop_handlers(void)
{
	struct sigaction sa = { .sa_handler = ctl_on_stop_signal };
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: a blocked wait returns EINTR and the loop sees the flag. */
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		return ctl_error("sigaction: %s", strerror(errno));
	return 0;
}

static const char ctl_usage_text[] =
	"Usage: loaderctl [--socket PATH] status [--json] | metrics | reload\n"
	"       loaderctl [--socket PATH] top [--interval S] [--once | --iterations N]\n"
	"       loaderctl [--socket PATH] consume --pipeline NAME [--device DEV] [--rank R] [--world W]\n"
	"                 [--epochs N | --batches N] [--resume TOKEN] [--dump FILE [--dump-data FILE]]\n"
	"                 [--split train|valid|test] [--group ID --group-size N]\n"
	"                 [--depth D] [--step-ms MS] [--name NAME] [--quiet] [--stages]\n"
	"                 [--attach-timeout-ms MS]\n"
	"       loaderctl [--socket PATH] peek --pipeline NAME [--batch N] [--columns C] --out FILE.png\n"
	"       loaderctl --help | --version\n"
	"\n"
	"  status     print the daemon's status; --json: as one JSON document\n"
	"             (schema loaderd.status/1), every worker, pipeline and client\n"
	"  metrics    print the status in Prometheus's text exposition format (for\n"
	"             node_exporter's textfile collector)\n"
	"  top        a table refreshed every --interval seconds (default 1): per\n"
	"             pipeline and client, batches/s, the share of time a client\n"
	"             waited for data and what limits it; plain snapshots one after\n"
	"             another when stdout is not a terminal or with --once/--iterations\n"
	"  reload     make the daemon re-read its configuration file and print what\n"
	"             changed (live: workers, min_workers, worker_cpu_budget and\n"
	"             log_level); a file with errors, or one changing anything else,\n"
	"             is refused and nothing changes (exit 1)\n"
	"  consume    attach to a pipeline like a training process and consume batches\n"
	"             (default: one epoch); prints a summary and the resumable position;\n"
	"             --device N|GPU-UUID receives the batches on that GPU;\n"
	"             --dump FILE writes a line per row (epoch, batch, sample, CRC-32C);\n"
	"             --dump-data FILE the rows' bytes, every tensor's in turn, in that order;\n"
	"             --split NAME streams that split of a megatron pipeline with `split`;\n"
	"             --group ID --group-size N joins a group of N clients (the tensor-\n"
	"             parallel ranks of one data-parallel rank) that receive the same\n"
	"             batches from one read; --rank/--world are then the data-parallel ones\n"
	"  peek       write batch N (default 0) of epoch 0 of an image pipeline as a PNG\n"
	"             contact sheet: a tile per image, its label under it; --columns C\n"
	"             (default ceil(sqrt(batch)), at most 16); float images are shown with\n"
	"             each channel stretched from the batch's min..max to 0..255\n";

static void ctl_vreport(const char *fmt, va_list ap)
{
	fputs("loaderctl: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int ctl_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ctl_vreport(fmt, ap);
	va_end(ap);
	return -1;
}

int ctl_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ctl_vreport(fmt, ap);
	va_end(ap);
	fputs("Try 'loaderctl --help' for more information.\n", stderr);
	return CTL_EXIT_USAGE;
}

double ctl_now_s(void)
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
static int ctl_take_value(int argc, char **argv, int *i, const char *name, const char **value)
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
		ctl_usage_error("option '%s' needs a value", name);
		return -1;
	}
	*value = argv[++*i];
	return 1;
}

/* Decimal digits only, no sign, in [min, max]; else a usage error (-1). */
static int ctl_parse_number(const char *name, const char *text, uint64_t min, uint64_t max,
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
	ctl_usage_error("option '%s': '%s' is not a number", name, text);
	return -1;
out_of_range:
	ctl_usage_error("option '%s': %s is out of range (%" PRIu64 "..%" PRIu64 ")", name, text, min,
			max);
	return -1;
}

int ctl_parse_options(int argc, char **argv, int first, const struct ctl_option *specs,
		      size_t n_specs)
{
	for (int i = first; i < argc; i++) {
		int r = 0;
		for (size_t k = 0; k < n_specs && r == 0; k++) {
			const struct ctl_option *sp = &specs[k];
			const char *value;
			if (sp->flag) {
				r = strcmp(argv[i], sp->name) == 0;
				if (r)
					*sp->flag = true;
				continue;
			}
			r = ctl_take_value(argc, argv, &i, sp->name, &value);
			if (r == 1 && sp->string && value[0] == '\0')
				return ctl_usage_error("option '%s' needs a non-empty value", sp->name);
			if (r == 1 && sp->string)
				*sp->string = value;
			if (r == 1 && sp->number &&
			    ctl_parse_number(sp->name, value, sp->min, sp->max, sp->number) < 0)
				return CTL_EXIT_USAGE;
		}
		if (r < 0)
			return CTL_EXIT_USAGE;
		if (r == 0 && strncmp(argv[i], "--", 2) == 0) {
			struct suggest sg;
			suggest_init(&sg, argv[i], strcspn(argv[i], "="));
			for (size_t k = 0; k < n_specs; k++)
				suggest_offer(&sg, specs[k].name);
			if (suggest_best(&sg))
				return ctl_usage_error("unknown option '%s'; did you mean '%s'?", argv[i],
						       suggest_best(&sg));
			return ctl_usage_error("unknown option '%s'", argv[i]);
		}
		if (r == 0)
			return ctl_usage_error("unexpected argument '%s'", argv[i]);
	}
	return 0;
}

/* Parses peek's options from argv[first..]; 0, or an exit code. */
static int ctl_peek_parse(int argc, char **argv, int first, struct ctl_peek_opts *o)
{
	const struct ctl_option specs[] = {
		{ "--pipeline", .string = &o->pipeline },
		{ "--out", .string = &o->out },
		{ "--batch", .number = &o->batch, .max = UINT64_MAX },
		{ "--columns", .number = &o->columns, .min = 1, .max = 4096 },
	};
	int r = ctl_parse_options(argc, argv, first, specs, sizeof specs / sizeof specs[0]);
	if (r != 0)
		return r;
	if (!o->pipeline || !o->out)
		return ctl_usage_error("peek needs --pipeline NAME and --out FILE.png");
	return 0;
}

/* Takes batches 0..o->batch into *b (releasing the others) and finds the
 * images of the last; each batch is checked, so a pipeline without images
 * fails at its first. 0, or -1 after printing the reason. */
static int ctl_peek_fetch(struct ldr_client *c, const struct ctl_peek_opts *o, struct ldr_batch *b,
			  struct peek_image *img)
{
	uint64_t n = ldr_batches_in_epoch(c, 0);
	if (o->batch >= n)
		return ctl_error("pipeline %s has %" PRIu64 " batches per epoch; there is no batch %"
				 PRIu64, o->pipeline, n, o->batch);
	for (uint64_t k = 0;; k++) {
		int r;
		while ((r = ldr_next(c, b, CTL_WAIT_MS)) == -ETIMEDOUT || r == -EINTR)
			if (ctl_stop_requested)
				goto stopped;
		if (r < 0)
			return ctl_error("%s", ldr_error(c));
		r = peek_find_image(b, img);
		if (r == -ENOENT || r == -EINVAL)
			return ctl_error(r == -ENOENT ?
					 "pipeline %s has no image tensor; peek shows image pipelines" :
					 "pipeline %s: its image tensor is not [B,3,H,W] or [B,H,W,3] "
					 "of uint8, float16 or float32", o->pipeline);
		if (k == o->batch)
			return 0;
		if (ldr_release(c, b) < 0)
			return ctl_error("%s", ldr_error(c));
		if (ctl_stop_requested)
			goto stopped;
	}
stopped:
	return ctl_error("peek interrupted");
}

static int ctl_peek_run(const struct ctl_peek_opts *o)
{
	struct peek_output out;
	struct ldr_client *c;
	struct ldr_batch b;
	struct peek_image img;
	struct peek_sheet sheet;
	char err[512];
	int rc = 1;
	/* The signal handlers first: a stop must still remove the temporary file. */
	if (ctl_install_stop_handlers() < 0)
		return 1;
	if (peek_output_open(&out, o->out, err, sizeof err) < 0) { /* before attaching */
		ctl_error("%s", err);
		return 1;
	}
	struct ldr_attach_opts ao = { .pipeline = o->pipeline, .client_name = "peek" };
	if (ldr_connect(o->socket, &c) < 0 || ldr_attach(c, &ao) < 0) {
		ctl_error("%s", ldr_error(c));
		goto close_client;
	}
	if (ctl_peek_fetch(c, o, &b, &img) < 0)
		goto close_client;
	if (peek_layout(&img, (unsigned)o->columns, &sheet) < 0) {
		ctl_error("pipeline %s: a sheet of %u images %ux%u is over %u pixels a side; try "
			  "--columns", o->pipeline, img.count, img.width, img.height, PEEK_SHEET_MAX);
		goto close_client;
	}
	if (peek_output_commit(&out, &img, &sheet, err, sizeof err) < 0) {
		ctl_error("%s", err);
		goto close_client;
	}
	if (ldr_release(c, &b) < 0) {
		ctl_error("%s", ldr_error(c));
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
static int ctl_control_run(const char *socket, bool reload, bool json)
{
	char *text;
	char err[4096]; /* a connect failure's explanation (client/connect_why.h) */
	int r = reload ? ldr_reload(socket, &text, err, sizeof err)
		: json ? ldr_status_json(socket, &text, err, sizeof err)
		       : ldr_status(socket, &text, err, sizeof err);
	if (r < 0) {
		ctl_error("%s%s", reload ? "reload: " : "", err);
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
			fputs(ctl_usage_text, stdout);
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("loaderctl %s\n", LOADERD_VERSION);
			return 0;
		}
		r = ctl_take_value(argc, argv, &i, "--socket", &socket);
		if (r < 0)
			return CTL_EXIT_USAGE;
		if (r == 0)
			return ctl_usage_error("unknown option '%s'", argv[i]);
		if (socket[0] == '\0')
			return ctl_usage_error("option '--socket' needs a non-empty value");
	}
	if (i >= argc)
		return ctl_usage_error("no command given (status, metrics, top, reload, consume or peek)");
	if (strcmp(argv[i], "status") == 0 || strcmp(argv[i], "reload") == 0) {
		bool reload = strcmp(argv[i], "reload") == 0;
		bool json = !reload && i + 1 < argc && strcmp(argv[i + 1], "--json") == 0;
		i += json;
		if (i + 1 < argc)
			return ctl_usage_error(strncmp(argv[i + 1], "--", 2) == 0 ? "unknown option '%s'" :
					       "unexpected argument '%s'", argv[i + 1]);
		return ctl_control_run(socket, reload, json);
	}
	if (strcmp(argv[i], "metrics") == 0) {
		if (i + 1 < argc)
			return ctl_usage_error(strncmp(argv[i + 1], "--", 2) == 0 ? "unknown option '%s'" :
					       "unexpected argument '%s'", argv[i + 1]);
		return ctl_metrics_run(socket);
	}
	if (strcmp(argv[i], "top") == 0)
		return ctl_top_command(argc, argv, i + 1, socket);
	if (strcmp(argv[i], "consume") == 0)
		return consume_command(argc, argv, i + 1, socket);
	if (strcmp(argv[i], "peek") == 0) {
		struct ctl_peek_opts o = { .socket = socket };
		int r = ctl_peek_parse(argc, argv, i + 1, &o);
		return r != 0 ? r : ctl_peek_run(&o);
	}
	static const char *const commands[] = {"status", "metrics", "top", "reload", "consume", "peek", NULL};
	const char *best = suggest_among(argv[i], strlen(argv[i]), commands);
	if (best)
		return ctl_usage_error("unknown command '%s'; did you mean '%s'? (status, metrics, top, reload, "
				       "consume or peek)", argv[i], best);
	return ctl_usage_error("unknown command '%s' (status, metrics, top, reload, consume or peek)", argv[i]);
}
