/*
 * fuzz_config: libFuzzer harness for the configuration parser
 * (daemon/config.c). The input becomes the content of an in-memory file
 * (memfd) that config_load reads through /proc/self/fd/N, the way it reads
 * any other path.
 *
 * Any input may be refused, but a refusal must carry a message; an accepted
 * one must satisfy the limits config.h promises. Any breach aborts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct config cfg; /* large: not on the stack */

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
		if (p->kind != SOURCE_RAW && p->kind != SOURCE_TOKENS && !image)
			abort();
		if (image && (p->transform[0] == '\0' || p->max_decode_ms >= c->worker_timeout_ms))
			abort(); /* required, and the watchdog must outlast a decode */
		if (p->batch_size < 1 || p->chunk > WORK_CHUNK_MAX)
			abort();
		if (config_pipeline(c, p->name) != p)
			abort(); /* names are unique */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
	err[0] = '\0';
	rc = config_load(path, &cfg, err, sizeof(err));
	if (rc < 0 && (err[0] == '\0' || !memchr(err, '\0', sizeof(err))))
		abort();
	if (rc == 0)
		check_accepted(&cfg);
	close(fd);
	return 0;
}
