#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A client can read the arena but change nothing in it, whoever it runs as.

A hostile client attaches by hand (HELLO over SOCK_SEQPACKET, as
proto/PROTOCOL.md describes it) and takes the arena descriptor WELCOME
carries. It then tries everything that would hurt the daemon or another
client: mapping it writable, mprotect to writable, write(2) and pwrite,
ftruncate to zero and to twice the size (the SIGBUS of every mapper),
punching a hole, adding seals, fchmod, then reopening it read-write
through /proc/self/fd and mapping, writing, truncating that; and it looks
for the arena among the descriptors and mappings of the daemon's own
processes (the master, the zygote, the workers: /proc/PID/fd/N and
/proc/PID/map_files, which root and the daemon's own user may open) and
tries to map each writable. Whatever writable mapping it gets, it fills
the staging slots with garbage for a second and a half. As root the
attack runs twice: as root, the daemon's own user here (which may chmod
and reopen everything, and is stopped by the arena's seal alone), and as
uid 65534 in the daemon's group through a socket of mode 0666 (which may
not even reopen it). Meanwhile a consumer reads the pipeline with --dump:
every sample's bytes must match the file (CRC32C of each), the daemon and
its workers must stay up, and a second consumer afterwards must get
correct data too.
"""

import array
import ctypes
import json
import mmap
import os
import socket
import struct
import subprocess
import sys
import time

# The hostile client runs from a copy of this file, as another user, with
# nothing but the standard library.
HOSTILE = len(sys.argv) == 4 and sys.argv[1] == "--hostile"
if not HOSTILE:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness  # noqa: E402
    from harness import check  # noqa: E402

MAGIC, VERSION = 0x4452444C, 7
HELLO, WELCOME = 1, 2
N, RECORD, BATCH = 4096, 256, 32
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x1, 0x2


def hello_frame(pipeline):
    def string(text):
        return struct.pack("<H", len(text)) + text.encode()
    payload = (struct.pack("<IIII", 0, 0, 1, 2) + bytes(16) + string(pipeline)
               + string("hostile") + string("") + string("") + string("")
               + struct.pack("<II", 1, 0) + bytes(4))  # no group, no flags
    return struct.pack("<IHHIIQ", MAGIC, VERSION, HELLO, 0, len(payload), 1) + payload


def attempt(results, name, fn):
    """Runs one attack; records "refused: ERRNAME" or "succeeded"."""
    try:
        fn()
        results[name] = "succeeded"
    except OSError as e:
        results[name] = "refused: %s" % (os.strerror(e.errno) if e.errno else e)


def arena_entries(pid, folder):
    """The entries of /proc/PID/FOLDER (fd or map_files) that are the
    arena; a folder this user may not list gives none."""
    base = "/proc/%d/%s" % (pid, folder)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    found = []
    for name in names:
        try:
            if os.readlink(os.path.join(base, name)).startswith("/memfd:loaderd-arena"):
                found.append(os.path.join(base, name))
        except OSError:
            pass
    return found


def scribble(view):
    """What an attacker does with a writable mapping: overwrite every byte
    past the header, over and over, for a while."""
    junk = b"\xa5" * (len(view) - 4096)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        view[4096:] = junk


def hostile(socket_path, pids):
    """Attaches, takes the arena fd and tries to change the arena, by it
    and by the daemon's processes' (pids); prints a JSON object attack ->
    outcome. Runs in its own process."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(socket_path)
    s.send(hello_frame("p"))
    data, anc, _, _ = s.recvmsg(70000, socket.CMSG_SPACE(4))
    fds = [fd for level, kind, raw in anc if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
           for fd in array.array("i", raw[:len(raw) - len(raw) % 4])]
    ftype = struct.unpack_from("<H", data, 6)[0]
    if ftype != WELCOME or len(fds) != 1:
        print(json.dumps({"error": "expected WELCOME with one fd, got type %d and %d fds"
                                   % (ftype, len(fds))}))
        return
    fd = fds[0]
    size = os.fstat(fd).st_size
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    results = {"uid": os.getuid(), "size": size, "mode": "%o" % (os.fstat(fd).st_mode & 0o7777)}

    def check_errno(rc):
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    def map_and_scribble(target):
        scribble(mmap.mmap(target, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))

    attempt(results, "mmap_write", lambda: map_and_scribble(fd))
    # A read-only mapping works; mprotect must not make it writable.
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        print(json.dumps({"error": "a read-only mapping of the arena failed"}))
        return
    attempt(results, "mprotect_write", lambda: check_errno(
        libc.mprotect(base, size, mmap.PROT_READ | mmap.PROT_WRITE)))
    attempt(results, "pwrite", lambda: os.pwrite(fd, b"\xff" * 64, size - 64))
    attempt(results, "write", lambda: os.write(fd, b"\xff" * 64))
    attempt(results, "ftruncate_zero", lambda: os.ftruncate(fd, 0))
    attempt(results, "ftruncate_grow", lambda: os.ftruncate(fd, size * 2))
    attempt(results, "punch_hole", lambda: check_errno(
        libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, size)))
    F_ADD_SEALS, F_SEAL_WRITE = 1033, 0x8
    attempt(results, "add_seals", lambda: fcntl_call(libc, fd, F_ADD_SEALS, F_SEAL_WRITE))
    attempt(results, "fchmod", lambda: os.fchmod(fd, 0o666))

    def reopened(path, then):
        rw = os.open(path, os.O_RDWR)
        results["reopened_rw"] = True
        try:
            then(rw)
        finally:
            os.close(rw)
    results["reopened_rw"] = False
    own = "/proc/self/fd/%d" % fd
    # the seals refuse even a read-write descriptor
    attempt(results, "reopen_rw_truncate", lambda: reopened(own, lambda rw: os.ftruncate(rw, 0)))
    attempt(results, "reopen_rw_mmap_write", lambda: reopened(own, map_and_scribble))
    attempt(results, "reopen_rw_pwrite", lambda: reopened(
        own, lambda rw: os.pwrite(rw, b"\xff" * 64, size - 64)))
    attempt(results, "reopen_rw_punch_hole", lambda: reopened(own, lambda rw: check_errno(
        libc.fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, size))))
    # The daemon's processes' own descriptors and mappings of the arena.
    routes = []
    for pid in pids:
        routes += arena_entries(pid, "fd") + arena_entries(pid, "map_files")
    results["daemon_routes"] = len(routes)
    for path in routes:
        attempt(results, "daemon " + path, lambda: reopened(path, map_and_scribble))
    results["still_size"] = os.fstat(fd).st_size
    print(json.dumps(results))


def fcntl_call(libc, fd, cmd, arg):
    if libc.fcntl(fd, cmd, arg) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def run_hostile(env, d, as_user):
    """Runs hostile() in a child process, as uid 65534 in the daemon's group
    when as_user (from a copy of this script in the test directory, which
    that user can reach)."""
    def drop():
        os.setgroups([os.getgid()])
        os.setgid(65534)
        os.setuid(65534)
    script = env.path("hostile.py")
    if not os.path.exists(script):
        with open(os.path.abspath(__file__)) as src, open(script, "w") as dst:
            dst.write(src.read())
        os.chmod(script, 0o644)
        os.chmod(env.dir, 0o711)
    r = subprocess.run([sys.executable, script, "--hostile", d.socket, json.dumps(daemon_pids(d))],
                       capture_output=True, text=True, timeout=30,
                       preexec_fn=drop if as_user else None)
    check(r.returncode == 0, "the hostile client failed: %s" % r.stderr)
    out = json.loads(r.stdout)
    check("error" not in out, "hostile client: %s" % out.get("error"))
    return out


def daemon_pids(d):
    """The daemon's processes: the master, the zygote (its child that is
    not a worker) and the workers."""
    pids = {d.proc.pid} | {w["pid"] for w in d.status()["workers"] if w["pid"]}
    for task in os.listdir("/proc/%d/task" % d.proc.pid):
        with open("/proc/%d/task/%s/children" % (d.proc.pid, task)) as f:
            pids |= {int(p) for p in f.read().split()}
    return sorted(pids)


def body(env):
    data = env.make_raw("records.bin", N, RECORD, seed=7)
    expected = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("iso", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                   "batch_size": BATCH}},
                     socket_mode="0666", staging_slots=8, workers=2)
    d = env.start_daemon(cfg)
    dump = env.path("during.dump")
    consumer = env.spawn_loaderctl(harness.consume_args(
        d.socket, "p", epochs=3, dump=dump, extra=["--quiet", "--step-ms", "5"]))

    # Another user first: root's own try may chmod the object (root may),
    # which would loosen it for the tries after.
    pids = daemon_pids(d)
    check(len(pids) >= 3, "expected the master and two workers at least, found %s" % pids)
    tries = []
    if os.getuid() == 0:
        tries.append(("uid 65534", run_hostile(env, d, True)))
    else:
        print("not root: the attack as another user is skipped")
    tries.append(("root" if os.getuid() == 0 else "this user", run_hostile(env, d, False)))
    must_fail = ["mmap_write", "mprotect_write", "pwrite", "write", "ftruncate_zero",
                 "ftruncate_grow", "punch_hole", "add_seals", "reopen_rw_truncate",
                 "reopen_rw_mmap_write", "reopen_rw_pwrite", "reopen_rw_punch_hole"]
    for who, out in tries:
        for name in must_fail + [k for k in out if k.startswith("daemon /proc/")]:
            check(out[name].startswith("refused"),
                  "a client running as %s could %s the arena: %s" % (who, name, out))
        check(out["still_size"] == out["size"], "%s changed the arena's size: %s" % (who, out))
        print("%s: %d routes through the daemon's processes, all refused; fchmod %s, reopened "
              "read-write: %s" % (who, out["daemon_routes"], out["fchmod"], out["reopened_rw"]))
        if who == "root":
            # Root reaches the master's own descriptor (and the mappings):
            # the seal alone stops it.
            check(out["daemon_routes"] >= 1 and out["reopened_rw"],
                  "root found no way to the arena through the daemon's processes: %s" % out)
        if who == "uid 65534":
            check(out["mode"] == "400", "the arena's mode is %s, not 400: %s" % (out["mode"], out))
            check(out["fchmod"].startswith("refused") and not out["reopened_rw"],
                  "another user could chmod or reopen the arena read-write: %s" % out)

    rc, outp, err = harness.finish(consumer, 60, "consumer during the attacks")
    check(rc == 0, "the consumer failed during the attacks (%d): %s" % (rc, err))
    rows = harness.read_dump(dump)
    check(len(rows) == 3 * N, "consumer got %d rows, expected %d" % (len(rows), 3 * N))
    harness.check_dump_crcs(rows, expected, "consumer during the attacks")
    check(d.alive(), "loaderd died during the attacks")
    st = d.status()
    check(all(w["restarts"] == 0 for w in st["workers"]),
          "a worker died during the attacks: %s" % st["workers"])
    after = env.path("after.dump")
    harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1, "dump": after}])
    harness.check_dump_crcs(harness.read_dump(after), expected, "consumer after the attacks")
    d.stop()


if __name__ == "__main__":
    if HOSTILE:
        hostile(sys.argv[2], json.loads(sys.argv[3]))
        sys.exit(0)
    harness.run_test("test_arena_isolation", body)
