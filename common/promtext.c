/* SPDX-License-Identifier: Apache-2.0 */
/*
 * promtext: the daemon's status (its JSON, schema loaderd.status/1) in
 * the Prometheus text exposition format: what `loaderctl metrics` prints
 * and what the daemon serves at GET /metrics (metrics_listen), one
 * renderer for both. One table says which status field becomes which
 * metric: its name (loaderd_..., `_total` for counters, base units
 * `_seconds` and `_bytes`), type, help, and the labels of the list it
 * comes from (worker, pipeline, client, rank, gpu). A row of type
 * histogram reads a pipeline's "stages" object: one Prometheus histogram
 * per stage (label stage), its buckets made cumulative with the bounds of
 * common/hist.h. The JSON is parsed with jansson. docs/operations.md ("Metrics") lists the metrics, and
 * docs/grafana/loaderd.json charts them (a test holds its expressions
 * to this table's names).
 */
#include "common/promtext.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "common/hist.h"

/* Where a metric's samples come from: one object, or each item of a list. */
enum metric_from {
	FROM_STATUS, /* the document's own members */
	FROM_DAEMON, FROM_ARENA, FROM_ERRORS, FROM_CONFIG, FROM_INDEX, FROM_CONNECTIONS,
	FROM_WORKERS, FROM_PIPELINES, FROM_CLIENTS, FROM_CLIENT_DEVICES, FROM_GPUS, FROM_DECODE,
	FROM_METRICS,
};

struct metric {
	const char *name;
	const char *type; /* counter, gauge or histogram */
	const char *help;
	enum metric_from from;
	const char *field;   /* the status field (a number or a boolean) */
	double scale;        /* to the metric's base unit */
	const char *extra;   /* a constant label of this sample, or NULL */
};

/* Samples of one metric that differ by a constant label (the stages, the
 * decode's where) share a name: consecutive rows, one HELP and TYPE. */
static const struct metric metrics[] = {
	{"loaderd_uptime_seconds", "gauge", "Seconds since the daemon started.", FROM_DAEMON, "uptime_s", 1, NULL},
	{"loaderd_arena_bytes", "gauge", "Size of the shared-memory arena.", FROM_ARENA, "bytes", 1, NULL},
	{"loaderd_staging_slots", "gauge", "Staging slots of the arena.", FROM_ARENA, "staging_slots", 1, NULL},
	{"loaderd_staging_slot_bytes", "gauge", "Bytes of one staging slot.", FROM_ARENA, "slot_bytes", 1, NULL},
	{"loaderd_staging_slots_in_use", "gauge", "Staging slots in use.", FROM_ARENA, "in_use", 1, NULL},
	{"loaderd_staging_slot_share", "gauge", "Staging slots one client may hold.", FROM_ARENA, "share", 1, NULL},
	{"loaderd_worker_items_total", "counter", "Items a worker has done.", FROM_WORKERS, "items", 1, NULL},
	{"loaderd_worker_inflight_items", "gauge", "Items a worker holds now.", FROM_WORKERS, "inflight", 1, NULL},
	{"loaderd_worker_restarts_total", "counter", "Times a worker was restarted.", FROM_WORKERS, "restarts", 1, NULL},
	{"loaderd_worker_busy_ratio", "gauge", "Share of the last second a worker was busy, by its own clock.", FROM_WORKERS, "busy_ratio", 1, NULL},
	{"loaderd_worker_io_wait_ratio", "gauge", "Share of the last second a worker waited for reads with items in hand.", FROM_WORKERS, "io_wait_ratio", 1, NULL},
	{"loaderd_workers_busy_ratio", "gauge", "The workers' mean share of the last second busy.", FROM_STATUS, "workers_busy_ratio", 1, NULL},
	{"loaderd_stage_seconds", "histogram", "Latency of a pipeline's stage: per sample (read, decode, transform) or per batch.", FROM_PIPELINES, "stages", 1, NULL},
	{"loaderd_pipeline_samples", "gauge", "Samples of a pipeline's epoch.", FROM_PIPELINES, "samples", 1, NULL},
	{"loaderd_pipeline_batch_size", "gauge", "Rows of a pipeline's batch.", FROM_PIPELINES, "batch_size", 1, NULL},
	{"loaderd_client_epoch", "gauge", "The epoch a client is in.", FROM_CLIENTS, "epoch", 1, NULL},
	{"loaderd_client_batches_sent_total", "counter", "Batches sent to a client.", FROM_CLIENTS, "sent", 1, NULL},
	{"loaderd_client_batches_released_total", "counter", "Batches a client released.", FROM_CLIENTS, "released", 1, NULL},
	{"loaderd_client_batches_in_flight", "gauge", "Batches started for a client and not released.", FROM_CLIENTS, "in_flight", 1, NULL},
	{"loaderd_client_staging_slots", "gauge", "Staging slots a client has in use.", FROM_CLIENTS, "staging", 1, NULL},
	{"loaderd_client_wait_seconds_total", "counter", "Time a client's calls waited for a batch.", FROM_CLIENTS, "wait_ms", 1e-3, NULL},
	{"loaderd_client_data_wait_seconds_total", "counter", "Time a client's calls for a batch waited, none being ready, as its client library measured it.", FROM_CLIENTS, "data_wait_s", 1, NULL},
	{"loaderd_client_ready_wait_seconds_total", "counter", "Time a client's batches waited complete in staging before being handed on.", FROM_CLIENTS, "ready_wait_s", 1, NULL},
	{"loaderd_client_bytes_total", "counter", "Bytes of the batches a client released.", FROM_CLIENTS, "bytes", 1, NULL},
	{"loaderd_client_gpu_share", "gauge", "Share of a client's JPEGs its GPU's engines may take.", FROM_CLIENTS, "gpu_share", 1, NULL},
	{"loaderd_client_stage_seconds", "gauge", "Mean time of a batch's stage for a client.", FROM_CLIENTS, "fill_us", 1e-6, "stage=\"fill\""},
	{"loaderd_client_stage_seconds", "gauge", NULL, FROM_CLIENTS, "order_us", 1e-6, "stage=\"order\""},
	{"loaderd_client_stage_seconds", "gauge", NULL, FROM_CLIENTS, "gpu_us", 1e-6, "stage=\"gpu\""},
	{"loaderd_client_stage_seconds", "gauge", NULL, FROM_CLIENTS, "held_us", 1e-6, "stage=\"held\""},
	{"loaderd_client_device_copied_bytes_total", "counter", "Bytes copied to a device client's GPU.", FROM_CLIENT_DEVICES, "bytes_moved", 1, NULL},
	{"loaderd_gpu_clients", "gauge", "Device clients on a GPU.", FROM_GPUS, "clients", 1, NULL},
	{"loaderd_gpu_device_bytes", "gauge", "Device memory the daemon holds on a GPU.", FROM_GPUS, "device_bytes", 1, NULL},
	{"loaderd_gpu_decode_bytes", "gauge", "Device memory of a GPU's JPEG decoding.", FROM_GPUS, "decode_bytes", 1, NULL},
	{"loaderd_gpu_decoders", "gauge", "JPEG decoder processes for a GPU.", FROM_GPUS, "decoders", 1, NULL},
	{"loaderd_decode_images_total", "counter", "Images of a pipeline's device clients, by where they were decoded.", FROM_DECODE, "images_gpu", 1, "where=\"gpu\""},
	{"loaderd_decode_images_total", "counter", NULL, FROM_DECODE, "images_cpu", 1, "where=\"cpu\""},
	{"loaderd_decode_images_total", "counter", NULL, FROM_DECODE, "images_fallback", 1, "where=\"fallback\""},
	{"loaderd_decode_images_total", "counter", NULL, FROM_DECODE, "images_bad", 1, "where=\"bad\""},
	{"loaderd_read_errors_total", "counter", "Samples that could not be read.", FROM_ERRORS, "read", 1, NULL},
	{"loaderd_bad_images_total", "counter", "Images that could not be decoded.", FROM_ERRORS, "bad_images", 1, NULL},
	{"loaderd_substituted_samples_total", "counter", "Bad samples replaced by others.", FROM_ERRORS, "substituted", 1, NULL},
	{"loaderd_config_workers", "gauge", "Workers configured.", FROM_CONFIG, "workers", 1, NULL},
	{"loaderd_reloads_total", "counter", "Reloads applied.", FROM_CONFIG, "reloads", 1, NULL},
	{"loaderd_reloads_refused_total", "counter", "Reloads refused.", FROM_CONFIG, "refused", 1, NULL},
	{"loaderd_runtime_index_bytes", "gauge", "Bytes of the runtime index.", FROM_INDEX, "bytes", 1, NULL},
	{"loaderd_runtime_index_taken_bytes", "gauge", "Bytes of the runtime index taken.", FROM_INDEX, "taken_bytes", 1, NULL},
	{"loaderd_pipelines_draining", "gauge", "Removed pipelines still draining.", FROM_INDEX, "draining", 1, NULL},
	{"loaderd_connections_handshaking", "gauge", "Connections without a first frame.", FROM_CONNECTIONS, "handshaking", 1, NULL},
	{"loaderd_connections_timed_out_total", "counter", "Connections closed for sending no first frame in time.", FROM_CONNECTIONS, "timed_out", 1, NULL},
	{"loaderd_connections_evicted_total", "counter", "Connections closed to make room.", FROM_CONNECTIONS, "evicted", 1, NULL},
	{"loaderd_connections_unidentified_total", "counter", "Connections refused for want of peer credentials.", FROM_CONNECTIONS, "unidentified", 1, NULL},
	{"loaderd_connections_shed_total", "counter", "Connections refused for want of a descriptor.", FROM_CONNECTIONS, "shed", 1, NULL},
	{"loaderd_accept_pauses_total", "counter", "Episodes of accept failing.", FROM_CONNECTIONS, "accept_pauses", 1, NULL},
	{"loaderd_metrics_scrapes_total", "counter", "Requests for the metrics answered (GET or HEAD /metrics).", FROM_METRICS, "scrapes", 1, NULL},
	{"loaderd_metrics_refused_total", "counter", "Requests and connections of the metrics endpoint refused.", FROM_METRICS, "refused", 1, NULL},
};

/* A label value: backslash, quote and newline escaped (the format's rule). */
static void put_label(FILE *out, const char *name, const char *value, bool *first)
{
	fprintf(out, "%s%s=\"", *first ? "" : ",", name);
	*first = false;
	for (const char *p = value; *p; p++) {
		if (*p == '\\' || *p == '"')
			fprintf(out, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", out);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

static void put_label_int(FILE *out, const char *name, json_t *v, bool *first)
{
	char text[32];
	snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	put_label(out, name, text, first);
}

/* The identifying labels of a list's item. */
static void put_labels(FILE *out, enum metric_from from, json_t *item, json_t *owner, bool *first)
{
	switch (from) {
	case FROM_WORKERS: put_label_int(out, "worker", json_object_get(item, "index"), first); break;
	case FROM_PIPELINES: put_label(out, "pipeline", json_string_value(json_object_get(item, "name")), first); break;
	case FROM_CLIENT_DEVICES:
		put_label(out, "gpu", json_string_value(json_object_get(item, "gpu")), first);
		item = owner; /* then the device's client */
		__attribute__((fallthrough));
	case FROM_CLIENTS: /* its name and pid: loaderd_client_info's alone */
		put_label_int(out, "client", json_object_get(item, "id"), first);
		put_label(out, "pipeline", json_string_value(json_object_get(item, "pipeline")), first);
		put_label_int(out, "rank", json_object_get(item, "rank"), first);
		break;
	case FROM_GPUS: put_label_int(out, "gpu", json_object_get(item, "index"), first); break;
	case FROM_DECODE:
		put_label(out, "pipeline", json_string_value(json_object_get(item, "pipeline")), first);
		put_label_int(out, "gpu", json_object_get(item, "gpu"), first);
		break;
	default: break;
	}
}

/* A number as the exposition format writes it: integers whole. */
static void put_value(FILE *out, double x)
{
	if (x == (double)(long long)x && x < 9007199254740992.0 && x > -9007199254740992.0)
		fprintf(out, "%lld", (long long)x); /* counts as integers */
	else
		fprintf(out, "%.15g", x);
}

/* One sample's labels, `a="x",b="y"` or "": those of the list item
 * comes from, then stage= (a histogram's) and the row's constant label;
 * NULL when out of memory. */
static char *sample_labels(const struct metric *m, json_t *item, json_t *owner, const char *stage)
{
	char *labels = NULL;
	size_t len = 0;
	FILE *l = open_memstream(&labels, &len);
	if (!l)
		return NULL;
	bool first = true;
	put_labels(l, m->from, item, owner, &first);
	if (stage)
		put_label(l, "stage", stage, &first);
	if (m->extra)
		fprintf(l, "%s%s", first ? "" : ",", m->extra);
	fclose(l);
	return labels;
}

/* A histogram row: for each stage of item's field (an object of stages,
 * each with buckets, count and sum_s), NAME_bucket for every bound and
 * +Inf (cumulative), NAME_sum and NAME_count. */
static void put_histograms(FILE *out, const struct metric *m, json_t *item)
{
	json_t *stages = json_object_get(item, m->field);
	const char *stage;
	json_t *st;
	json_object_foreach(stages, stage, st) {
		char *labels = sample_labels(m, item, NULL, stage);
		if (!labels)
			return;
		json_t *buckets = json_object_get(st, "buckets");
		uint64_t cum = 0;
		for (size_t i = 0; i < HIST_BUCKETS; i++) {
			cum += (uint64_t)json_integer_value(json_array_get(buckets, i));
			char le[32];
			if (i < HIST_FINITE)
				snprintf(le, sizeof(le), "%.9g", (double)HIST_BOUND_NS(i) / 1e9);
			else
				snprintf(le, sizeof(le), "+Inf");
			fprintf(out, "%s_bucket{%s,le=\"%s\"} %llu\n", m->name, labels, le,
				(unsigned long long)cum);
		}
		fprintf(out, "%s_sum{%s} ", m->name, labels);
		put_value(out, json_number_value(json_object_get(st, "sum_s")) * m->scale);
		fprintf(out, "\n%s_count{%s} %llu\n", m->name, labels, (unsigned long long)cum);
		free(labels);
	}
}

static void put_sample(FILE *out, const struct metric *m, json_t *item, json_t *owner)
{
	if (strcmp(m->type, "histogram") == 0) {
		put_histograms(out, m, item);
		return;
	}
	json_t *v = json_object_get(item, m->field);
	if (!json_is_number(v) && !json_is_boolean(v))
		return; /* not in this item (a field only some have) */
	double x = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
	char *labels = sample_labels(m, item, owner, NULL);
	if (!labels)
		return;
	bool any = labels[0] != '\0';
	fprintf(out, "%s%s%s%s ", m->name, any ? "{" : "", labels, any ? "}" : "");
	put_value(out, x * m->scale);
	fputc('\n', out);
	free(labels);
}

static json_t *section(json_t *doc, enum metric_from from)
{
	if (from == FROM_STATUS)
		return doc;
	static const char *const keys[] = {
		[FROM_DAEMON] = "daemon", [FROM_ARENA] = "arena", [FROM_ERRORS] = "errors",
		[FROM_CONFIG] = "config", [FROM_INDEX] = "runtime_index",
		[FROM_CONNECTIONS] = "connections", [FROM_WORKERS] = "workers",
		[FROM_PIPELINES] = "pipelines", [FROM_CLIENTS] = "clients",
		[FROM_CLIENT_DEVICES] = "clients", [FROM_GPUS] = "gpus", [FROM_DECODE] = "decode",
		[FROM_METRICS] = "metrics",
	};
	json_t *s = json_object_get(doc, keys[from]);
	return from == FROM_DECODE ? json_object_get(s, "pipelines") : s;
}

/* Writes the metrics of the status document doc to out. */
static void metrics_write(FILE *out, json_t *doc)
{
	json_t *info = json_object_get(doc, "daemon");
	fputs("# HELP loaderd_info The daemon's version and pid.\n# TYPE loaderd_info gauge\n", out);
	bool first = true;
	fputs("loaderd_info{", out);
	put_label(out, "version", json_string_value(json_object_get(info, "version")), &first);
	put_label_int(out, "pid", json_object_get(info, "pid"), &first);
	fputs("} 1\n", out);
	fprintf(out, "# HELP loaderd_device_delivery Whether device delivery works (1) or not (0).\n"
		"# TYPE loaderd_device_delivery gauge\nloaderd_device_delivery %d\n",
		json_is_true(json_object_get(json_object_get(doc, "delivery"), "device")));
	for (size_t k = 0; k < sizeof(metrics) / sizeof(metrics[0]); k++) {
		const struct metric *m = &metrics[k];
		if (m->help)
			fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
		json_t *s = section(doc, m->from);
		if (!json_is_array(s)) {
			put_sample(out, m, s, NULL);
			continue;
		}
		size_t i;
		json_t *item;
		json_array_foreach(s, i, item) {
			if (m->from == FROM_CLIENT_DEVICES)
				put_sample(out, m, json_object_get(item, "device"), item);
			else
				put_sample(out, m, item, NULL);
		}
	}
	fputs("# HELP loaderd_client_info A client's name and pid, by its id.\n"
	      "# TYPE loaderd_client_info gauge\n", out);
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(doc, "clients"), i, c) {
		first = true;
		fputs("loaderd_client_info{", out);
		put_label_int(out, "client", json_object_get(c, "id"), &first);
		put_label(out, "name", json_string_value(json_object_get(c, "name")), &first);
		put_label_int(out, "pid", json_object_get(c, "pid"), &first);
		fputs("} 1\n", out);
	}
	json_t *conn = json_object_get(doc, "connections");
	fprintf(out, "# HELP loaderd_accepting Whether the daemon accepts connections (1) or has paused (0).\n"
		"# TYPE loaderd_accepting gauge\nloaderd_accepting %d\n",
		strcmp(json_string_value(json_object_get(conn, "accepting")) ?: "", "yes") == 0);
}

int promtext_render(const char *json, size_t len, FILE *out, char *why, size_t cap)
{
	json_error_t jerr;
	json_t *doc = json_loadb(json, len, 0, &jerr);
	if (!doc)
		return errtext(why, cap, -EINVAL, "the daemon's status is not JSON: line %d: %s",
			       jerr.line, jerr.text);
	const char *schema = json_string_value(json_object_get(doc, "schema"));
	if (!schema || strcmp(schema, PROMTEXT_SCHEMA) != 0) {
		errtext(why, cap, -EINVAL, "the daemon's status has schema %s; this renderer reads "
			PROMTEXT_SCHEMA, schema ? schema : "(none)");
		json_decref(doc);
		return -EINVAL;
	}
	metrics_write(out, doc);
	json_decref(doc);
	return 0;
}
