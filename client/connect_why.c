/* SPDX-License-Identifier: Apache-2.0 */
/* connect_why: why the daemon's socket could not be reached (connect_why.h). */
#include "connect_why.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define WHY_PIDS_MAX 4 /* loaderd processes described */

/* buf's text grows by printf; cut at cap. */
struct why_text {
	char *buf;
	size_t cap, len;
};

__attribute__((format(printf, 2, 3)))
static void why_add(struct why_text *t, const char *fmt, ...)
{
	if (t->len + 1 >= t->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->len = t->len + (size_t)n < t->cap ? t->len + (size_t)n : t->cap - 1;
}

/* Reads at most cap - 1 bytes of a small file; the count, or -1. */
static ssize_t why_read(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	return (ssize_t)n;
}

/* The path of the listening Unix socket with this inode, from
 * PROC/net/unix ("Num RefCount Protocol Flags Type St Inode Path";
 * listening: flag __SO_ACCEPTCON, 0x10000), into out. */
static bool why_listening_path(const char *proc_root, unsigned long inode, char *out, size_t cap)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/net/unix", proc_root);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char line[PATH_MAX + 128];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long flags, ino;
		unsigned type, state;
		int at = 0;
		if (sscanf(line, "%*x: %*x %*x %lx %x %x %lu %n", &flags, &type, &state, &ino, &at) < 4 ||
		    ino != inode || !(flags & 0x10000) || at == 0 || line[at] != '/')
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(out, cap, "%s", line + at);
		found = true;
	}
	fclose(f);
	return found;
}

/* Where process pid listens: one of its fds a listening Unix socket with
 * a path. false when its fds cannot be read (another user's) or none. */
static bool why_pid_socket(const char *proc_root, const char *pid, char *out, size_t cap)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/%s/fd", proc_root, pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		char link[PATH_MAX + 300], target[64];
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		unsigned long inode;
		if (sscanf(target, "socket:[%lu]", &inode) == 1)
			found = why_listening_path(proc_root, inode, out, cap);
	}
	closedir(d);
	return found;
}

/* The `socket = PATH` of a config file, when it can be read: the line's
 * value, as the daemon would take it (comments after whitespace cut). */
static bool why_config_socket(const char *file, char *out, size_t cap)
{
	FILE *f = fopen(file, "re");
	if (!f)
		return false;
	char line[PATH_MAX + 64];
	bool daemon = false, found = false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '[') {
			daemon = strncmp(s, "[daemon]", 8) == 0;
			continue;
		}
		if (!daemon || strncmp(s, "socket", 6) != 0)
			continue;
		s += 6;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s != '=' && *s != ':')
			continue;
		s++;
		while (*s == ' ' || *s == '\t')
			s++;
		size_t n = strcspn(s, "\n");
		for (size_t i = 1; i < n; i++)
			if (s[i] == ';' && isspace((unsigned char)s[i - 1]))
				n = i;
		while (n > 0 && isspace((unsigned char)s[n - 1]))
			n--;
		if (n > 0) {
			snprintf(out, cap, "%.*s", (int)n, s);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/* One loaderd process, described: where it listens, when that can be
 * seen, in where; else what its command line says, in how. */
static void why_one(const char *proc_root, const char *pid, char *where, size_t where_cap,
		    char *how, size_t how_cap)
{
	where[0] = how[0] = '\0';
	if (why_pid_socket(proc_root, pid, where, where_cap))
		return;
	/* Another user's daemon: its command line is readable, its fds are not. */
	char path[PATH_MAX], cmd[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s/cmdline", proc_root, pid);
	ssize_t len = why_read(path, cmd, sizeof(cmd));
	const char *config = NULL;
	for (ssize_t i = 0; len > 0 && i < len; i += (ssize_t)strlen(cmd + i) + 1) {
		const char *next = cmd + i + strlen(cmd + i) + 1;
		if ((strcmp(cmd + i, "--config") == 0 || strcmp(cmd + i, "-c") == 0) && next < cmd + len)
			config = next;
		else if (strncmp(cmd + i, "--config=", 9) == 0)
			config = cmd + i + 9;
	}
	if (config && why_config_socket(config, where, where_cap))
		snprintf(how, how_cap, " (the socket of its --config %s)", config);
	else if (config)
		snprintf(how, how_cap, " with --config %s, on the socket set there (or by its "
			 "$LOADERD_SOCKET, or its default)", config);
	else
		snprintf(how, how_cap, " on the socket its $LOADERD_SOCKET or its default names");
}

/* The loaderd processes of this machine (their comm is "loaderd"), and
 * where each listens when that can be seen. */
static void why_processes(struct why_text *t, const char *proc_root)
{
	DIR *d = opendir(proc_root);
	if (!d) {
		why_add(t, " (%s cannot be read to see whether a loaderd runs)", proc_root);
		return;
	}
	unsigned n = 0;
	bool some_where = false;
	char first[PATH_MAX] = "";
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]) || strspn(e->d_name, "0123456789") !=
		    strlen(e->d_name))
			continue;
		char path[PATH_MAX], comm[64];
		snprintf(path, sizeof(path), "%s/%s/comm", proc_root, e->d_name);
		if (why_read(path, comm, sizeof(comm)) <= 0 || strcmp(comm, "loaderd\n") != 0)
			continue;
		if (n++ >= WHY_PIDS_MAX)
			continue;
		char where[PATH_MAX], how[PATH_MAX + 128];
		why_one(proc_root, e->d_name, where, sizeof(where), how, sizeof(how));
		why_add(t, "%s pid %s%s%s%s", n == 1 ? " loaderd is running here:" : ";", e->d_name,
			where[0] ? " listening on " : "", where, how);
		if (where[0] && !some_where) {
			some_where = true;
			snprintf(first, sizeof(first), "%s", where);
		}
	}
	closedir(d);
	if (n > WHY_PIDS_MAX)
		why_add(t, "; and %u more", n - WHY_PIDS_MAX);
	if (n == 0)
		why_add(t, " no loaderd process is running on this machine: start it (systemctl start "
			"loaderd, or loaderd --config FILE)");
	else if (some_where && n == 1)
		why_add(t, "; to use it: --socket %s or LOADERD_SOCKET=%s", first, first);
	else if (some_where)
		why_add(t, "; connect to yours with --socket PATH or LOADERD_SOCKET=PATH");
}

/* Where clients look when given no path (common/paths.h), and how to
 * give one. */
static void why_default(struct why_text *t, bool path_given)
{
	const char *env = getenv("LOADERD_SOCKET");
	why_add(t, ". %s; without one, clients connect to $LOADERD_SOCKET, else (not as root) "
		"$XDG_RUNTIME_DIR/loaderd.sock if a socket is there, else /run/loaderd/loaderd.sock, "
		"and loaderd listens where [daemon] socket = says (else $LOADERD_SOCKET, else "
		"/run/loaderd/loaderd.sock as root, $XDG_RUNTIME_DIR/loaderd.sock otherwise); name a "
		"path with LOADERD_SOCKET=PATH, loaderctl --socket PATH or Loader(..., socket=PATH)",
		path_given ? "This path was given" : env && *env ? "This path is $LOADERD_SOCKET's" :
		"This path is the default ($LOADERD_SOCKET is not set)");
}

static const char *why_kind(mode_t mode)
{
	return S_ISREG(mode) ? "a regular file" : S_ISDIR(mode) ? "a directory" :
	       S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device" :
	       S_ISBLK(mode) ? "a block device" : S_ISLNK(mode) ? "a symbolic link" : "not a socket";
}

/* Whether the caller is in group gid (its primary or a supplementary). */
static bool why_in_group(gid_t gid)
{
	if (getegid() == gid)
		return true;
	gid_t groups[256];
	int n = getgroups(256, groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

static void why_denied(struct why_text *t, const struct stat *st)
{
	char gbuf[1024], pbuf[1024], gname[64], uname[64];
	struct group gr, *g = NULL;
	struct passwd pw, *u = NULL;
	getgrgid_r(st->st_gid, &gr, gbuf, sizeof(gbuf), &g);
	getpwuid_r(st->st_uid, &pw, pbuf, sizeof(pbuf), &u);
	if (g)
		snprintf(gname, sizeof(gname), "%s", g->gr_name);
	else
		snprintf(gname, sizeof(gname), "%u", (unsigned)st->st_gid);
	if (u)
		snprintf(uname, sizeof(uname), "%s", u->pw_name);
	else
		snprintf(uname, sizeof(uname), "%u", (unsigned)st->st_uid);
	why_add(t, "the socket's owner is %s, its group %s, its mode %04o; this process runs as uid "
		"%u, ", uname, gname, (unsigned)(st->st_mode & 07777), (unsigned)geteuid());
	if (st->st_uid == geteuid())
		why_add(t, "its owner, but the mode does not let the owner write: set socket_mode = "
			"0660 in the daemon's [daemon] section");
	else if (why_in_group(st->st_gid))
		why_add(t, "in group %s, but the mode does not let the group write: set socket_mode = "
			"0660 in the daemon's [daemon] section", gname);
	else
		why_add(t, "not in group %s: add the user to it (usermod -aG %s USER, then log in "
			"again), or set socket_group in the daemon's [daemon] section to a group the "
			"user is in", gname, gname);
}

void connect_why(const char *proc_root, const char *path, bool path_given, int code, char *buf,
		 size_t cap)
{
	struct why_text t = {buf, cap, 0};
	if (cap == 0)
		return;
	buf[0] = '\0';
	struct stat st;
	int st_rc = stat(path, &st) == 0 ? 0 : -errno;
	switch (code) {
	case -ENOENT:
	case -ENOTDIR:
		why_add(&t, "nothing at %s;", path);
		why_processes(&t, proc_root);
		why_default(&t, path_given);
		break;
	case -ECONNREFUSED:
		if (st_rc == 0 && !S_ISSOCK(st.st_mode)) {
			why_add(&t, "%s is %s, not a socket (not the daemon's socket path?)", path,
				why_kind(st.st_mode));
			why_default(&t, path_given);
			break;
		}
		why_add(&t, "a socket is at %s but nothing listens on it: the loaderd that made it "
			"stopped or died (a start replaces this stale socket);", path);
		why_processes(&t, proc_root);
		break;
	case -EACCES:
	case -EPERM:
		if (st_rc == -EACCES) {
			why_add(&t, "a directory on the way to %s may not be searched by this user "
				"(uid %u): the daemon makes its directory mode 0755 at start; check the "
				"modes of the directories above the socket", path, (unsigned)geteuid());
			break;
		}
		if (st_rc == 0)
			why_denied(&t, &st);
		break;
	default:
		break;
	}
}
