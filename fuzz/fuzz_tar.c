/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tar: libFuzzer harness for the tar shard reader (daemon/source/tarshard.c),
 * which reads archives nobody vetted at every start. The input is one
 * shard, given to tar_scan as /proc/self/fd/N of a memfd. Any input may be
 * refused, but a refusal must carry a message and a documented code, and
 * an accepted index must describe members inside the file: every entry's
 * data range within it, every name and the shard's path inside the names,
 * the shard covering every sample. Any breach aborts (ASan/UBSan catch the
 * rest).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/source/tarshard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_index(const struct image_index *ix, size_t size)
{
	if (ix->n == 0 || ix->n_shards != 1 || ix->shards[0].first_sample != 0 ||
	    ix->shards[0].n_samples != ix->n || ix->shards[0].path_offset >= ix->paths_bytes ||
	    ix->paths[ix->paths_bytes - 1] != '\0')
		abort();
	for (uint64_t i = 0; i < ix->n; i++) {
		const struct arena_image *e = &ix->entries[i];
		if (e->shard != 0 || e->path_offset >= ix->paths_bytes || e->data_offset > size ||
		    e->file_bytes > size - e->data_offset || e->data_offset % 512 != 0)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("shard", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	if (size && write(fd, data, size) != (ssize_t)size)
		abort();
	char path[64], err[1024] = "";
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct image_index ix;
	int rc = tar_scan(path, &ix, err, sizeof(err));
	close(fd);
	if (rc < 0) {
		if (err[0] == '\0' || (rc != -EINVAL && rc != -ENOENT && rc != -ENOMEM))
			abort();
		return 0;
	}
	check_index(&ix, size);
	image_index_free(&ix);
	return 0;
}
