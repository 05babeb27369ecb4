/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top: `loaderctl top`, a refreshing table for people that answers "is a
 * training process waiting for data, and what is the limit"
 * (docs/operations.md, "loaderctl top"). Every --interval seconds it takes
 * the daemon's status JSON (loaderd.status/1, parsed with jansson) and
 * prints, from the difference with the previous one, a header (version,
 * uptime, workers and how many were busy), a row per pipeline (batches/s
 * and samples/s over its clients) and a row per client (batches/s from
 * `released`, the share of the interval it waited for data from
 * `data_wait_s`, the wait its client library measured, and what limits
 * it: its own training, or the stage of its pipeline that took the most
 * time over the interval, from the stages' histograms). On a terminal the screen is
 * cleared and redrawn; otherwise, or with --once or --iterations N, the
 * snapshots follow one another as plain text.
 */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/loaderctl.h"
#include "client/loaderd.h"

#define TOP_WAITING_PCT 5.0 /* a client that waited more is limited by the loader */

struct top_opts {
	const char *socket;
	double interval_s;
	long iterations; /* 0: until SIGINT */
};

static json_t *top_fetch(const char *socket)
{
	char *text;
	char err[4096];
	if (ldr_status_json(socket, &text, err, sizeof err) < 0) {
		ctl_error("top: %s", err);
		return NULL;
	}
	json_error_t jerr;
	json_t *doc = json_loads(text, 0, &jerr);
	free(text);
	if (!doc) {
		ctl_error("top: the daemon's status is not JSON: line %d: %s", jerr.line, jerr.text);
		return NULL;
	}
	const char *schema = json_string_value(json_object_get(doc, "schema"));
	if (!schema || strcmp(schema, "loaderd.status/1") != 0) {
		ctl_error("top: the daemon's status has schema %s; this loaderctl reads loaderd.status/1",
			  schema ? schema : "(none)");
		json_decref(doc);
		return NULL;
	}
	return doc;
}

static double num(json_t *obj, const char *key)
{
	return json_number_value(json_object_get(obj, key));
}

static const char *str(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "?";
}

/* The item of list whose `key` equals that of item, or NULL. */
static json_t *find_by(json_t *list, const char *key, json_t *item)
{
	json_t *want = json_object_get(item, key);
	size_t i;
	json_t *x;
	json_array_foreach(list, i, x) {
		if (json_equal(json_object_get(x, key), want))
			return x;
	}
	return NULL;
}

/* Batches a client released per second since prev (-1: no earlier figure). */
static double client_rate(json_t *c, json_t *prev, double dt)
{
	json_t *p = prev ? find_by(json_object_get(prev, "clients"), "id", c) : NULL;
	if (!p || dt <= 0)
		return -1;
	double d = num(c, "released") - num(p, "released");
	return d < 0 ? 0 : d / dt;
}

/* The share of the interval a client waited for data (its library's
 * measure, data_wait_s), in percent; on the first snapshot (or a new
 * client) the share of its time attached (wait_pct). */
static double client_wait_pct(json_t *c, json_t *prev, double dt)
{
	json_t *p = prev ? find_by(json_object_get(prev, "clients"), "id", c) : NULL;
	if (!p || dt <= 0)
		return num(c, "wait_pct");
	double pct = (num(c, "data_wait_s") - num(p, "data_wait_s")) * 100.0 / dt;
	return pct < 0 ? 0 : pct > 100 ? 100 : pct;
}

/* The stages that can limit a pipeline, as its status names them; the
 * workers' stages run on every worker at once. The staging wait is left
 * out: a batch waits there for the batches before it, the effect of a
 * limit elsewhere. */
static const struct {
	const char *name, *shown;
	bool workers;
} top_stages[] = {
	{"read", "read (workers)", true},         {"decode", "decode (workers)", true},
	{"transform", "transform (workers)", true}, {"gpu_decode", "GPU decode", false},
	{"copy", "pinned copy", false},           {"h2d", "device copy", false},
};

/* The stage of pipeline `name` that took the most time since prev (or in
 * all, on the first snapshot), the workers' divided among them; NULL when
 * none took any. A read's time includes its wait for a CPU busy with
 * other samples: the workers' read is the limit only where they spent
 * more of their time waiting for reads than working, or did no other
 * work. */
static const char *pipeline_limit(json_t *doc, json_t *prev, const char *name)
{
	json_t *pl = NULL, *pp = NULL, *x;
	size_t i;
	json_array_foreach(json_object_get(doc, "pipelines"), i, x)
		if (strcmp(str(x, "name"), name) == 0)
			pl = x;
	if (prev)
		json_array_foreach(json_object_get(prev, "pipelines"), i, x)
			if (strcmp(str(x, "name"), name) == 0)
				pp = x;
	json_t *st = json_object_get(pl, "stages"), *pst = json_object_get(pp, "stages");
	json_t *ws = json_object_get(doc, "workers");
	double workers = (double)json_array_size(ws), busy = 0, io = 0;
	json_array_foreach(ws, i, x) {
		busy += num(x, "busy_ratio");
		io += num(x, "io_wait_ratio");
	}
	const char *best = NULL;
	double most = 0, cpu = 0;
	for (size_t k = 0; k < sizeof(top_stages) / sizeof(top_stages[0]); k++) {
		double s = num(json_object_get(st, top_stages[k].name), "sum_s");
		if (pst)
			s -= num(json_object_get(pst, top_stages[k].name), "sum_s");
		if (top_stages[k].workers && workers > 0)
			s /= workers;
		bool read = strcmp(top_stages[k].name, "read") == 0;
		if (top_stages[k].workers && !read)
			cpu += s;
		if (read && io < busy) /* judged after the CPU stages */
			continue;
		if (s > most) {
			most = s;
			best = top_stages[k].shown;
		}
	}
	if (!best && cpu == 0 && io < busy) {
		double s = num(json_object_get(st, "read"), "sum_s");
		if (pst)
			s -= num(json_object_get(pst, "read"), "sum_s");
		if (s > 0)
			best = top_stages[0].shown;
	}
	return best;
}

/* What limits a client: one that does not wait for data, its own
 * training; one that waits, its pipeline's slowest stage (else the
 * workers, before any stage has a figure). */
static const char *client_limit(json_t *doc, json_t *prev, json_t *c, double wait_pct)
{
	if (wait_pct <= TOP_WAITING_PCT)
		return "the training";
	const char *stage = pipeline_limit(doc, prev, str(c, "pipeline"));
	return stage ? stage : "workers";
}

static void top_header(FILE *out, json_t *doc, json_t *prev)
{
	json_t *daemon = json_object_get(doc, "daemon");
	json_t *workers = json_object_get(doc, "workers");
	(void)prev;
	fprintf(out, "loaderd %s pid %lld uptime %.1fs  workers %zu, %.0f%% busy", str(daemon, "version"),
		(long long)num(daemon, "pid"), num(daemon, "uptime_s"), json_array_size(workers),
		100.0 * num(doc, "workers_busy_ratio"));
	json_t *a = json_object_get(doc, "workers_auto");
	if (a) {
		fprintf(out, "  (workers = auto: wants %lld of %lld..%lld", (long long)num(a, "count"),
			(long long)num(a, "min"), (long long)num(a, "max"));
		if (json_object_get(a, "held"))
			fprintf(out, "; held: %s", str(a, "held"));
		fputc(')', out);
	}
	fputc('\n', out);
	/* scans: start-up's (the daemon is starting), or pipelines being added */
	size_t i;
	json_t *scan;
	json_array_foreach(json_object_get(doc, "scans"), i, scan)
		fprintf(out, "%s: pipeline %s: %s: %lld %s so far, %.1f s\n",
			json_object_get(doc, "starting") ? "starting" : "adding", str(scan, "pipeline"),
			str(scan, "what"), (long long)num(scan, "count"), str(scan, "unit"),
			num(scan, "seconds"));
}

static void top_pipelines(FILE *out, json_t *doc, json_t *prev, double dt)
{
	fprintf(out, "\n%-20s %10s %12s %8s\n", "PIPELINE", "BATCHES/S", "SAMPLES/S", "CLIENTS");
	size_t i, j;
	json_t *pl, *c;
	json_array_foreach(json_object_get(doc, "pipelines"), i, pl) {
		const char *name = str(pl, "name");
		double rate = 0;
		int clients = 0;
		bool known = prev != NULL;
		json_array_foreach(json_object_get(doc, "clients"), j, c) {
			if (strcmp(str(c, "pipeline"), name) != 0)
				continue;
			clients++;
			double r = client_rate(c, prev, dt);
			if (r < 0)
				known = false;
			else
				rate += r;
		}
		if (known)
			fprintf(out, "%-20s %10.1f %12.1f %8d\n", name, rate, rate * num(pl, "batch_size"),
				clients);
		else
			fprintf(out, "%-20s %10s %12s %8d\n", name, "-", "-", clients);
	}
}

static void top_clients(FILE *out, json_t *doc, json_t *prev, double dt)
{
	fprintf(out, "\n%-6s %-8s %-16s %-9s %10s %6s  %-19s  %s\n", "CLIENT", "PID", "PIPELINE",
		"RANK", "BATCHES/S", "WAIT%", "LIMIT", "NAME");
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(doc, "clients"), i, c) {
		char rank[32], rate[32];
		snprintf(rank, sizeof rank, "%lld/%lld", (long long)num(c, "rank"),
			 (long long)num(c, "world"));
		double r = client_rate(c, prev, dt);
		if (r < 0)
			snprintf(rate, sizeof rate, "-");
		else
			snprintf(rate, sizeof rate, "%.1f", r);
		double wait = client_wait_pct(c, prev, dt);
		fprintf(out, "%-6lld %-8lld %-16s %-9s %10s %6.1f  %-19s  %s\n", (long long)num(c, "id"),
			(long long)num(c, "pid"), str(c, "pipeline"), rank, rate, wait,
			client_limit(doc, prev, c, wait), str(c, "name"));
	}
}

/* Sleeps s seconds, or until SIGINT/SIGTERM. */
static void top_sleep(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
	while (!ctl_stop_requested && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int top_run(const struct top_opts *o, bool redraw)
{
	if (ctl_install_stop_handlers() < 0)
		return 1;
	json_t *prev = NULL;
	double prev_t = 0;
	int rc = 0;
	for (long n = 0; !ctl_stop_requested && (o->iterations == 0 || n < o->iterations); n++) {
		if (n > 0)
			top_sleep(o->interval_s);
		if (ctl_stop_requested)
			break;
		json_t *doc = top_fetch(o->socket);
		double t = ctl_now_s();
		if (!doc) {
			rc = 1;
			break;
		}
		if (redraw)
			fputs("\033[H\033[2J", stdout);
		else if (n > 0)
			fputc('\n', stdout);
		double dt = prev ? t - prev_t : 0;
		top_header(stdout, doc, prev);
		top_pipelines(stdout, doc, prev, dt);
		top_clients(stdout, doc, prev, dt);
		if (fflush(stdout) != 0) {
			rc = 1;
			json_decref(doc);
			break;
		}
		json_decref(prev);
		prev = doc;
		prev_t = t;
	}
	json_decref(prev);
	return rc;
}

int ctl_top_command(int argc, char **argv, int first, const char *socket)
{
	struct top_opts o = { .socket = socket, .interval_s = 1.0 };
	bool once = false;
	for (int i = first; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--once") == 0) {
			once = true;
			continue;
		}
		if (strcmp(a, "--interval") != 0 && strcmp(a, "--iterations") != 0)
			return ctl_usage_error(strncmp(a, "--", 2) == 0 ? "top: unknown option '%s'" :
					       "top: unexpected argument '%s'", a);
		if (i + 1 >= argc)
			return ctl_usage_error("top: option '%s' needs a value", a);
		const char *v = argv[++i];
		char *end;
		errno = 0;
		if (strcmp(a, "--interval") == 0) {
			o.interval_s = strtod(v, &end);
			if (errno || end == v || *end || !(o.interval_s >= 0.05 && o.interval_s <= 3600))
				return ctl_usage_error("top: --interval '%s' is not a number of seconds in 0.05..3600", v);
		} else {
			o.iterations = strtol(v, &end, 10);
			if (errno || end == v || *end || o.iterations < 1)
				return ctl_usage_error("top: --iterations '%s' is not a count of 1 or more", v);
		}
	}
	if (once)
		o.iterations = 1;
	bool redraw = o.iterations == 0 && isatty(STDOUT_FILENO);
	return top_run(&o, redraw);
}
