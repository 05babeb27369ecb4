/* SPDX-License-Identifier: Apache-2.0 */
/* memavail: memory available to the arena, from /proc and cgroup v2 (memavail.h). */
#include "daemon/memavail.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/errtext.h"

/* The start of a small text file, NUL-terminated; false when it cannot be
 * read. */
static bool memavail_read_text(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == cap - 1)
			break;
	}
	close(fd);
	buf[len] = '\0';
	return len > 0;
}

/* The line after the one at line, or NULL at the end of the text. */
static const char *memavail_next_line(const char *line)
{
	const char *nl = strchr(line, '\n');
	return nl && nl[1] ? nl + 1 : NULL;
}

/* A decimal number followed by optional spaces and one newline. */
static bool memavail_parse_number(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	while (*s == ' ')
		s++;
	if (*s == '\n')
		s++;
	*out = v;
	return *s == '\0';
}

/* A limit of bytes, described by fmt: kept when it is the lowest so far. */
static void memavail_offer(struct memavail *out, uint64_t bytes, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void memavail_offer(struct memavail *out, uint64_t bytes, const char *fmt, ...)
{
	if (bytes >= out->bytes)
		return;
	out->bytes = bytes;
	va_list ap;
	va_start(ap, fmt);
	verrtext(out->source, sizeof(out->source), 0, fmt, ap);
	va_end(ap);
}

static void memavail_from_meminfo(const char *path, struct memavail *out)
{
	char text[8192];
	if (!memavail_read_text(path, text, sizeof(text)))
		return;
	for (const char *line = text; line; line = memavail_next_line(line)) {
		unsigned long long kb;
		char unit[4];
		if (strncmp(line, "MemAvailable:", 13) == 0 &&
		    sscanf(line + 13, "%llu %3s", &kb, unit) == 2 && strcmp(unit, "kB") == 0 &&
		    kb <= UINT64_MAX / 1024) {
			memavail_offer(out, (uint64_t)kb * 1024, "MemAvailable in %s", path);
			return;
		}
	}
}

/* One cgroup (dir, "" for the root of the hierarchy): memory.max minus
 * memory.current, when memory.max is a number. */
static void memavail_from_cgroup_dir(const char *root, const char *dir, struct memavail *out)
{
	char path[PATH_MAX], text[64];
	uint64_t max, current = 0;
	if (snprintf(path, sizeof(path), "%s%s/memory.max", root, dir) >= (int)sizeof(path) ||
	    !memavail_read_text(path, text, sizeof(text)) || !memavail_parse_number(text, &max))
		return; /* absent, or "max": no limit here */
	if (snprintf(path, sizeof(path), "%s%s/memory.current", root, dir) < (int)sizeof(path) &&
	    memavail_read_text(path, text, sizeof(text)))
		memavail_parse_number(text, &current);
	memavail_offer(out, max > current ? max - current : 0,
		       "cgroup %s: memory.max %" PRIu64 " - memory.current %" PRIu64 " (%s%s)",
		       dir[0] ? dir : "/", max, current, root, dir);
}

/* The process's cgroup v2 ("0::PATH" in /proc/self/cgroup) and each of its
 * ancestors, up to the hierarchy's root. */
static void memavail_from_cgroup(const char *self_cgroup, const char *root, struct memavail *out)
{
	char text[4096];
	if (!memavail_read_text(self_cgroup, text, sizeof(text)))
		return;
	const char *line = text;
	while (line && strncmp(line, "0::", 3) != 0)
		line = memavail_next_line(line);
	if (!line || line[3] != '/')
		return; /* cgroup v1 only */
	char dir[PATH_MAX];
	size_t len = strcspn(line + 3, "\n");
	if (len >= sizeof(dir))
		return;
	memcpy(dir, line + 3, len);
	dir[len] = '\0';
	while (len > 0 && dir[len - 1] == '/') /* "/" is the root: "" below */
		dir[--len] = '\0';
	for (;;) {
		memavail_from_cgroup_dir(root, dir, out);
		char *slash = strrchr(dir, '/');
		if (!slash)
			break;
		*slash = '\0';
	}
}

void memavail_read(const struct memavail_paths *paths, struct memavail *out)
{
	out->bytes = UINT64_MAX;
	snprintf(out->source, sizeof(out->source), "no limit known");
	memavail_from_meminfo(paths->meminfo, out);
	memavail_from_cgroup(paths->self_cgroup, paths->cgroup_root, out);
}
