/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_config: libFuzzer harness for the configuration parser
 * (daemon/config/config.c). The input becomes the content of an in-memory file
 * (memfd) that config_load reads through /proc/self/fd/N, the way it reads
 * any other path.
 *
 * Any input may be refused, but a refusal must carry its problems, each
 * naming the file and its line, in line order; an accepted one must satisfy
 * the limits config.h promises (a blend's members included). Any breach
 * aborts.
 *
 * The same input, up to its first NUL byte, is then a client's declared
 * pipeline (config_declare, HELLO's declaration): refused with a message
 * naming the client's pid, or a pipeline within the same limits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct config cfg, defaults; /* large: not on the stack */
static struct pipeline_cfg declared;
static char text[PROTO_DECLARE_MAX];

/* A blend: 2..CONFIG_BLEND_MAX token sources, positive finite weights,
 * each path a string inside member_paths; the pipeline's kind and path
 * its first member's. */
static void check_members(const struct pipeline_cfg *p)
{
	if (p->n_members == 0)
		return;
	if (p->n_members < 2 || p->n_members > CONFIG_BLEND_MAX || p->direct)
		abort();
	for (uint32_t m = 0; m < p->n_members; m++) {
		const struct config_member *mb = &p->members[m];
		if (mb->kind != SOURCE_MEGATRON && mb->kind != SOURCE_LLMC && mb->kind != SOURCE_TOKENS)
			abort();
		if (!(mb->weight > 0) || !isfinite(mb->weight) || mb->path_at >= sizeof(p->member_paths))
			abort();
		const char *path = p->member_paths + mb->path_at;
		size_t len = strnlen(path, sizeof(p->member_paths) - mb->path_at);
		if (len == 0 || len == sizeof(p->member_paths) - mb->path_at || len >= ARENA_PATH_MAX)
			abort();
	}
	if (p->kind != p->members[0].kind || strcmp(p->path, p->member_paths + p->members[0].path_at))
		abort();
}

static void check_accepted(const struct config *c)
{
	if (c->n_pipelines > ARENA_PIPELINES_MAX)
		abort();
	for (size_t i = 0; i < c->n_pipelines; i++) {
		const struct pipeline_cfg *p = &c->pipelines[i];
		size_t name_len = strnlen(p->name, sizeof(p->name));
		if (name_len == 0 || name_len == sizeof(p->name))
			abort();
		if (strnlen(p->path, sizeof(p->path)) == sizeof(p->path))
			abort();
		bool image = p->kind == SOURCE_IMAGEFOLDER || p->kind == SOURCE_TAR;
		if (p->kind != SOURCE_RAW && p->kind != SOURCE_TOKENS && p->kind != SOURCE_MEGATRON &&
		    p->kind != SOURCE_LLMC && !image)
			abort();
		check_members(p);
		if (image && (p->transform[0] == '\0' || p->max_decode_ms >= c->worker_timeout_ms))
			abort(); /* required, and the watchdog must outlast a decode */
		if (p->batch_size < 1 || p->chunk > WORK_CHUNK_MAX)
			abort();
		if (config_pipeline(c, p->name) != p)
			abort(); /* names are unique */
	}
}

/* A refusal's problems: at least one, each "PATH:LINE: ..." (or "PATH:
 * ..." for the file as a whole), kept in line order, at most
 * CONFIG_PROBLEMS_MAX; their text in any buffer terminated. */
static void check_problems(const struct config_problems *pr, const char *path)
{
	static char text[4096];
	size_t path_len = strlen(path);
	if (pr->n == 0 || pr->kept > pr->n || pr->kept > CONFIG_PROBLEMS_MAX)
		abort();
	for (unsigned i = 0; i < pr->kept; i++) {
		if (!pr->text[i] || strncmp(pr->text[i], path, path_len) != 0 ||
		    pr->text[i][path_len] != ':' || (i && pr->line[i] < pr->line[i - 1]))
			abort();
		if (pr->line[i] > 0 && atoi(pr->text[i] + path_len + 1) != pr->line[i])
			abort();
	}
	for (size_t cap = 1; cap <= sizeof(text); cap *= 4) {
		config_problems_text(pr, "; ", text, cap);
		if (!memchr(text, '\0', cap) || (cap > 1 && pr->kept && text[0] == '\0'))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct config_problems problems;
	char path[64], err[1024];
	size_t done = 0;
	int fd, rc;

	fd = memfd_create("fuzz_config", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	while (done < size) {
		ssize_t n = write(fd, data + done, size - done);
		if (n <= 0)
			abort();
		done += (size_t)n;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rc = config_load_problems(path, &cfg, &problems);
	if (rc < 0)
		check_problems(&problems, path);
	else if (problems.n != 0)
		abort();
	if (rc == 0)
		check_accepted(&cfg);
	config_problems_free(&problems);
	/* config_load: the same answer, the problems as text */
	err[0] = '\0';
	if (config_load(path, &cfg, err, sizeof(err)) != rc)
		abort();
	if (rc < 0 && (err[0] == '\0' || !memchr(err, '\0', sizeof(err))))
		abort();
	close(fd);

	size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
	memcpy(text, data, n);
	text[n] = '\0';
	config_defaults(&defaults);
	err[0] = '\0';
	rc = config_declare(&defaults, "d.fuzz", text, 4242, &declared, err, sizeof(err));
	if (rc < 0 && (!strstr(err, "client pid 4242") || !memchr(err, '\0', sizeof(err))))
		abort();
	if (rc == 0) {
		defaults.n_pipelines = 1;
		defaults.pipelines[0] = declared;
		check_accepted(&defaults);
	}
	return 0;
}
