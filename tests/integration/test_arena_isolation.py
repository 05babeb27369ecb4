#!/usr/bin/env python3
"""A client can read the arena but change nothing in it.

A hostile client attaches by hand (HELLO over SOCK_SEQPACKET, as
proto/PROTOCOL.md describes it) and takes the arena descriptor WELCOME
carries. It then tries everything that would hurt the daemon or another
client: mapping it writable, mprotect to writable, write(2), ftruncate to
zero and to twice the size (the SIGBUS of every mapper), punching a hole,
fchmod, and reopening it read-write through /proc/self/fd. As root the
attack runs twice: as root (which may reopen it read-write, but the seals
still stop any change of size) and as uid 65534 through a socket of mode
0666 (which may do none of it). Meanwhile a consumer reads the pipeline
with --dump: every sample's CRC must match the file, the daemon and its
workers must stay up, and a second consumer afterwards must get correct
data too.
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

# The hostile client runs from a copy of this file, as another user, with
# nothing but the standard library.
HOSTILE = len(sys.argv) == 3 and sys.argv[1] == "--hostile"
if not HOSTILE:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness  # noqa: E402
    from harness import check  # noqa: E402

MAGIC, VERSION = 0x4452444C, 5
HELLO, WELCOME = 1, 2
N, RECORD, BATCH = 4096, 256, 32
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x1, 0x2


def hello_frame(pipeline):
    def string(text):
        return struct.pack("<H", len(text)) + text.encode()
    payload = (struct.pack("<IIII", 0, 0, 1, 2) + bytes(16) + string(pipeline)
               + string("hostile") + string("") + string("") + string("")
               + struct.pack("<I", 1))  # no group
    return struct.pack("<IHHIIQ", MAGIC, VERSION, HELLO, 0, len(payload), 1) + payload


def attempt(results, name, fn):
    """Runs one attack; records "refused: ERRNAME" or "succeeded"."""
    try:
        fn()
        results[name] = "succeeded"
    except OSError as e:
        results[name] = "refused: %s" % (os.strerror(e.errno) if e.errno else e)


def hostile(socket_path):
    """Attaches, takes the arena fd and tries to change the arena; prints
    a JSON object attack -> outcome. Runs in its own process."""
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

    attempt(results, "mmap_write", lambda: mmap.mmap(fd, size, mmap.MAP_SHARED,
                                                      mmap.PROT_READ | mmap.PROT_WRITE))
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
    attempt(results, "write", lambda: os.pwrite(fd, b"\xff" * 64, size - 64))
    attempt(results, "ftruncate_zero", lambda: os.ftruncate(fd, 0))
    attempt(results, "ftruncate_grow", lambda: os.ftruncate(fd, size * 2))
    attempt(results, "punch_hole", lambda: check_errno(
        libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, size)))
    attempt(results, "fchmod", lambda: os.fchmod(fd, 0o666))

    def reopen_and_truncate():
        rw = os.open("/proc/self/fd/%d" % fd, os.O_RDWR)
        results["reopened_rw"] = True
        try:
            os.ftruncate(rw, 0)  # the seals refuse even a read-write descriptor
        finally:
            os.close(rw)
    results["reopened_rw"] = False
    attempt(results, "reopen_rw_truncate", reopen_and_truncate)
    results["still_size"] = os.fstat(fd).st_size
    print(json.dumps(results))


def run_hostile(env, socket_path, as_user):
    """Runs hostile() in a child process, as uid 65534 when as_user (from a
    copy of this script in the test directory, which that user can reach)."""
    def drop():
        os.setgid(65534)
        os.setuid(65534)
    script = env.path("hostile.py")
    if not os.path.exists(script):
        with open(os.path.abspath(__file__)) as src, open(script, "w") as dst:
            dst.write(src.read())
        os.chmod(script, 0o644)
        os.chmod(env.dir, 0o711)
    r = subprocess.run([sys.executable, script, "--hostile", socket_path],
                       capture_output=True, text=True, timeout=30,
                       preexec_fn=drop if as_user else None)
    check(r.returncode == 0, "the hostile client failed: %s" % r.stderr)
    out = json.loads(r.stdout)
    check("error" not in out, "hostile client: %s" % out.get("error"))
    return out


def body(env):
    data = env.make_raw("records.bin", N, RECORD, seed=7)
    expected = harness.raw_sample_crcs(data, RECORD)
    cfg = env.config("iso", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                   "batch_size": BATCH}},
                     socket_mode="0666", staging_slots=8)
    d = env.start_daemon(cfg)
    dump = env.path("during.dump")
    consumer = env.spawn_loaderctl(harness.consume_args(
        d.socket, "p", epochs=3, dump=dump, extra=["--quiet", "--step-ms", "2"]))

    # Another user first: root's own try may chmod the object (root may),
    # which would loosen it for the tries after.
    tries = []
    if os.getuid() == 0:
        tries.append(("uid 65534", run_hostile(env, d.socket, True)))
    else:
        print("not root: the attack as another user is skipped")
    tries.append(("root" if os.getuid() == 0 else "this user", run_hostile(env, d.socket, False)))
    must_fail = ["mmap_write", "mprotect_write", "write", "ftruncate_zero", "ftruncate_grow",
                 "punch_hole", "reopen_rw_truncate"]
    for who, out in tries:
        for name in must_fail:
            check(out[name].startswith("refused"),
                  "a client running as %s could %s the arena fd: %s" % (who, name, out))
        check(out["still_size"] == out["size"], "%s changed the arena's size: %s" % (who, out))
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
        hostile(sys.argv[2])
        sys.exit(0)
    harness.run_test("test_arena_isolation", body)
