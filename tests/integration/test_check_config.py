#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""--check-config catches what would stop loaderd at start, and names it.

Everything here is refused by `loaderd --check-config` (within seconds:
nothing may block) and by a real start, with the same message:

- Data files that are not regular files, for every source kind: a FIFO,
  a symlink to a FIFO, a character device (/dev/zero, /dev/null), a
  directory and a socket as a raw or tokens file or as a tar shard (alone,
  or inside a shard pattern); the same as an imagefolder root ("not a
  directory"); a FIFO, a socket, or a symlink to a device named like an
  image inside an imagefolder tree. Messages read
  `FILE:LINE: pipeline "NAME": PATH: not a regular file (a FIFO)`, LINE
  being the `source` line.
- A worker_program that is missing, a directory, not executable, exits
  at once (/bin/false), dies of a signal, prints something else, or is
  another version: `FILE:LINE: [daemon] worker_program: PROGRAM: reason`.
- An unknown socket_group: `FILE:LINE: [daemon] socket_group: "NAME" is
  not a group on this system`.
- A socket path the start could not listen on: under a regular file (one
  and two directories down), in or under a directory not writable or not
  searchable (not as root), a regular file (left in place) or a directory
  at the path, a $LOADERD_SOCKET over 107 bytes:
  `FILE:LINE: [daemon] socket: PATH: reason`, or `socket PATH (from
  $LOADERD_SOCKET; ...): reason`. A socket two missing directories deep
  passes, and the start makes them; a second daemon on a live socket
  passes --check-config and fails to start with
  `FILE:LINE: [daemon] socket: PATH: another loaderd is serving this socket`.
- An arena over shm_bytes, and one larger than the memory available
  (1024 staging slots of a 16 GiB batch from a sparse file): the bytes
  needed, the bytes available and where that figure came from.
- Several problems at once: each is reported, in one run.
- The configuration file itself as a FIFO or a directory:
  `FILE: not a regular file (a FIFO)`, also for a reload (the daemon's
  loop must not block on it: it goes on serving).
"""

import io
import os
import socket
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

TIMEOUT_S = 15


def run_loaderd(args, environ=None):
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    env.update(environ or {})
    try:
        r = subprocess.run([harness.binary("loaderd")] + args, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise harness.TestFailure("loaderd %s did not finish within %d s (blocked?)"
                                  % (" ".join(args), TIMEOUT_S)) from None
    harness.check_no_sanitizer_report(r.stderr, "loaderd " + " ".join(args))
    return r


def expect_refused(cfg, expected, what, start_too=False, sock=None, environ=None):
    """--check-config (and a real start when start_too) exits 1 and prints
    every expected text."""
    runs = [["--check-config", "--config", cfg]] + ([["--config", cfg]] if start_too else [])
    for args in runs:
        r = run_loaderd(args, environ)
        check(r.returncode == 1, "%s: loaderd %s exited %d, expected 1; stderr:\n%s"
              % (what, args[0], r.returncode, r.stderr))
        for text in expected if isinstance(expected, list) else [expected]:
            check(text in r.stderr, "%s: loaderd %s: stderr lacks %r:\n%s" % (what, args[0], text,
                                                                            r.stderr))
        check(sock is None or not os.path.exists(sock), "%s: the socket was created" % what)
    print("%s: %s" % (what, r.stderr.strip().splitlines()[-1]))


def write_cfg(path, daemon, section, keys):
    """A config whose [daemon] has the given keys and one pipeline; returns
    (path, line of the pipeline's source, {daemon key: line})."""
    lines = ["[daemon]"]
    key_lines = {}
    for k, v in daemon.items():
        lines.append("%s = %s" % (k, v))
        key_lines[k] = len(lines)
    source_line = None
    if section:
        lines += ["", "[pipeline.%s]" % section]
        for k, v in keys.items():
            lines.append("%s = %s" % (k, v))
            if k == "source":
                source_line = len(lines)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, source_line, key_lines


def odd_files(env):
    """(kind, path) of files that are not regular files."""
    fifo = env.path("odd", "fifo")
    os.makedirs(env.path("odd", "dir"))
    os.mkfifo(fifo)
    os.symlink(fifo, env.path("odd", "link-to-fifo"))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(env.path("odd", "sock"))  # the socket file stays after close
    return [("a FIFO", fifo), ("a FIFO", env.path("odd", "link-to-fifo")),
            ("a character device", "/dev/zero"), ("a character device", "/dev/null"),
            ("a directory", env.path("odd", "dir")), ("a socket", env.path("odd", "sock"))]


def data_files(env, base):
    sock = env.path("cc.sock")
    odd = odd_files(env)
    good_shard = make_shard(env)
    for n, (kind, path) in enumerate(odd):
        for source, extra in (("raw", {"record_bytes": 4}),
                              ("tokens", {"token_dtype": "uint16", "seq_len": 4}),
                              ("tar", {"transform": "center_crop(8)"})):
            cfg, line, _ = write_cfg(env.path("data.ini"), base, "p",
                                     dict({"source": "%s:%s" % (source, path), "batch_size": 1},
                                          **extra))
            expected = '%s:%d: pipeline "p": %s: not a regular file (%s)' % (cfg, line, path, kind)
            expect_refused(cfg, expected, "%s as %s source" % (kind, source),
                           start_too=source == "raw" and kind == "a FIFO", sock=sock)
        # a shard pattern naming a good shard, then the odd file
        shard_dir = env.path("shards-%d" % n)
        os.makedirs(shard_dir)
        os.symlink(good_shard, os.path.join(shard_dir, "s-0.tar"))
        os.symlink(path, os.path.join(shard_dir, "s-1.tar"))
        pattern = os.path.join(shard_dir, "s-{0..1}.tar")
        cfg, line, _ = write_cfg(env.path("data.ini"), base, "p",
                                 {"source": "tar:" + pattern, "batch_size": 1,
                                  "transform": "center_crop(8)"})
        expected = '%s:%d: pipeline "p": %s: %s: not a regular file (%s)' % (
            cfg, line, pattern, os.path.join(shard_dir, "s-1.tar"), kind)
        expect_refused(cfg, expected, "%s as the second shard of a pattern" % kind)
        if kind == "a directory":
            continue
        # as an imagefolder root
        cfg, line, _ = write_cfg(env.path("data.ini"), base, "p",
                                 {"source": "imagefolder:" + path, "batch_size": 1,
                                  "transform": "center_crop(8)"})
        expect_refused(cfg, '%s:%d: pipeline "p": %s: not a directory (%s)' % (cfg, line, path, kind),
                       "%s as an imagefolder root" % kind)

    # inside an imagefolder tree: the entry named like an image
    root = make_tree(env)
    def make_socket(path):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(path)
    for name, make, kind in (("x_fifo.jpg", os.mkfifo, "a FIFO"),
                             ("x_dev.jpeg", lambda p: os.symlink("/dev/zero", p), "a character device"),
                             ("x_sock.JPG", make_socket, "a socket")):
        bad = os.path.join(root, "cat", "sub", name)
        make(bad)
        cfg, line, _ = write_cfg(env.path("data.ini"), base, "p",
                                 {"source": "imagefolder:" + root, "batch_size": 1,
                                  "transform": "center_crop(8)"})
        expected = ('%s:%d: pipeline "p": %s: cat/sub/%s: not a regular file (%s); an image must be one'
                    % (cfg, line, root, name, kind))
        expect_refused(cfg, expected, "%s inside an imagefolder tree" % kind,
                       start_too=kind == "a FIFO", sock=sock)
        os.unlink(bad)
    # a dangling symlink stays (as in ImageFolder): the tree passes
    os.symlink(env.path("nowhere.jpg"), os.path.join(root, "cat", "dangling.jpg"))
    cfg, _, _ = write_cfg(env.path("data.ini"), base, "p",
                          {"source": "imagefolder:" + root, "batch_size": 1,
                           "transform": "center_crop(8)"})
    r = run_loaderd(["--check-config", "--config", cfg])
    check(r.returncode == 0, "a tree with a dangling symlink is refused: %s" % r.stderr)


def make_tree(env):
    root = env.path("tree")
    mkjpeg = harness.binary("mkjpeg")
    for rel in ("cat/a.jpg", "cat/sub/b.jpg", "dog/c.jpg"):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        subprocess.run([mkjpeg, os.path.join(root, rel), "--width", "16", "--height", "16"],
                       check=True)
    return root


def make_shard(env):
    path = env.path("good.tar")
    jpeg = env.path("one.jpg")
    subprocess.run([harness.binary("mkjpeg"), jpeg, "--width", "16", "--height", "16"], check=True)
    with open(jpeg, "rb") as f:
        data = f.read()
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, blob in (("k.jpg", data), ("k.cls", b"1")):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return path


def write_script(env, name, text, mode=0o755):
    path = env.path(name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def worker_programs(env, base, data):
    sock = env.path("cc.sock")
    pipeline = {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8}
    version = subprocess.run([harness.binary("loaderd-worker"), "--probe"], capture_output=True,
                             text=True, check=True).stdout.strip()
    check(version.startswith("loaderd-worker ") and " arena " in version,
          "loaderd-worker --probe printed %r" % version)
    cases = [
        ("missing", env.path("no-such-worker"), "No such file or directory"),
        ("a directory", env.dir, "not a regular file (a directory)"),
        ("not executable", write_script(env, "w-plain", "#!/bin/sh\n", 0o644),
         "not executable (mode 0644)"),
        ("exits at once", "/bin/false", "exited with code 1 when run with --probe"),
        ("killed", write_script(env, "w-segv", "#!/bin/sh\nkill -SEGV $$\n"),
         "was killed by signal 11"),
        ("prints something else", write_script(env, "w-hello", "#!/bin/sh\necho hello\n"),
         'printed "hello" when run with --probe, not a loaderd worker\'s answer ("%s")' % version),
        ("another version", write_script(env, "w-old", "#!/bin/sh\necho 'loaderd-worker 0.0.1 arena 1'\n"),
         "is loaderd-worker 0.0.1 (arena 1), but this loaderd is"),
        ("loaderd itself", harness.binary("loaderd"), "exited with code 2"),
    ]
    for what, program, reason in cases:
        cfg, _, lines = write_cfg(env.path("worker.ini"), dict(base, worker_program=program), "p",
                                  pipeline)
        expected = "%s:%d: [daemon] worker_program: %s: %s" % (cfg, lines["worker_program"], program,
                                                               reason)
        expect_refused(cfg, expected, "worker_program " + what,
                       start_too=what in ("exits at once", "missing"), sock=sock)
    # the real worker, named explicitly or through a wrapper, passes
    wrapper = write_script(env, "w-wrap", '#!/bin/sh\nexec "%s" "$@"\n' % harness.binary("loaderd-worker"))
    for program in (harness.binary("loaderd-worker"), wrapper):
        cfg, _, _ = write_cfg(env.path("worker.ini"), dict(base, worker_program=program), "p", pipeline)
        r = run_loaderd(["--check-config", "--config", cfg])
        check(r.returncode == 0, "worker_program %s is refused: %s" % (program, r.stderr))


def socket_group(env, base, data):
    pipeline = {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8}
    cfg, _, lines = write_cfg(env.path("group.ini"), dict(base, socket_group="no-such-group-x"), "p",
                              pipeline)
    expected = ('%s:%d: [daemon] socket_group: "no-such-group-x" is not a group on this system'
                % (cfg, lines["socket_group"]))
    expect_refused(cfg, expected, "unknown socket_group", start_too=True, sock=env.path("cc.sock"))
    cfg, _, _ = write_cfg(env.path("group.ini"), dict(base, socket_group="root"), "p", pipeline)
    r = run_loaderd(["--check-config", "--config", cfg])
    check(r.returncode == 0, "socket_group root is refused: %s" % r.stderr)


def socket_path(env, base, data):
    pipeline = {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8}
    plain = env.path("sockdir", "plain")
    os.makedirs(env.path("sockdir"))
    with open(plain, "w") as f:
        f.write("not a directory\n")

    def refused(sock, why, what, environ=None):
        keys = dict(base, socket=sock) if sock else {k: v for k, v in base.items() if k != "socket"}
        cfg, _, lines = write_cfg(env.path("sock.ini"), keys, "p", pipeline)
        where = "%s:%d: [daemon] socket: %s" % (cfg, lines["socket"], sock) if sock else why[0]
        expect_refused(cfg, "%s: %s" % (where, why if sock else why[1]), what, start_too=True,
                       environ=environ)

    refused(os.path.join(plain, "x.sock"), "%s is not a directory (a regular file)" % plain,
            "socket under a regular file")
    refused(os.path.join(plain, "a", "b", "x.sock"), "%s is not a directory (a regular file)"
            % plain, "socket two directories under a regular file")
    # a file at the socket path is refused, and left alone (bind's EADDRINUSE
    # must not lead to unlinking it)
    refused(plain, "exists and is not a socket (a regular file)", "socket path is a regular file")
    check(os.path.isfile(plain), "the regular file at the socket path was removed")
    refused(env.path("sockdir"), "exists and is not a socket (a directory)",
            "socket path is a directory")
    long_path = env.path("sockdir", "l" * 120 + ".sock")
    refused(None, ["socket %s (from $LOADERD_SOCKET; socket in [daemon] names another)"
                   % long_path, "longer than 107 bytes (a Unix socket address)"],
            "socket path from $LOADERD_SOCKET too long", environ={"LOADERD_SOCKET": long_path})
    if os.geteuid() != 0:  # root may write anywhere
        locked = env.path("sockdir", "locked")
        os.makedirs(locked)
        os.chmod(locked, 0o555)
        refused(os.path.join(locked, "x.sock"), "cannot create the socket in %s: Permission "
                "denied" % locked, "socket in a directory not writable")
        refused(os.path.join(locked, "a", "b", "x.sock"), "cannot create directory %s in %s: "
                "Permission denied" % (os.path.join(locked, "a"), locked),
                "socket two missing directories under a directory not writable")
        sealed = env.path("sockdir", "sealed")
        os.makedirs(os.path.join(sealed, "sub"))
        os.chmod(sealed, 0)
        refused(os.path.join(sealed, "sub", "x.sock"), "%s: Permission denied"
                % os.path.join(sealed, "sub"), "socket under a directory not searchable")
        os.chmod(sealed, 0o755)
        os.chmod(locked, 0o755)
    # two missing directories: --check-config accepts, and the start makes them
    sock = env.path("sockdir", "new1", "new2", "x.sock")
    cfg, _, lines = write_cfg(env.path("deep.ini"), dict(base, socket=sock), "p", pipeline)
    r = run_loaderd(["--check-config", "--config", cfg])
    check(r.returncode == 0, "socket two missing directories deep is refused: %s" % r.stderr)
    d = env.start_daemon(cfg)
    check(os.path.isdir(os.path.dirname(sock)) and d.status()["pipelines"][0]["samples"] == 64,
          "the daemon on %s did not make its directories or does not serve" % sock)
    # a live daemon's socket: --check-config passes (a running service's
    # file is checked before a restart), the second start names the key
    r = run_loaderd(["--check-config", "--config", cfg])
    check(r.returncode == 0, "--check-config beside a live daemon is refused: %s" % r.stderr)
    r = run_loaderd(["--config", cfg])
    expected = ("%s:%d: [daemon] socket: %s: another loaderd is serving this socket"
                % (cfg, lines["socket"], sock))
    check(r.returncode == 1 and expected in r.stderr,
          "a second daemon on a live socket: exit %d, stderr lacks %r:\n%s"
          % (r.returncode, expected, r.stderr))
    d.stop()
    print("socket two missing directories deep: made at start; a second daemon: %s" % expected)


def arena_size(env, base, data):
    sock = env.path("cc.sock")
    # a batch of 8 x 256 KiB = 2 MiB per slot, 4 slots, over shm_bytes = 1M
    big = env.make_raw("big.bin", 8, 256 * 1024)
    cfg, _, lines = write_cfg(env.path("shm.ini"), dict(base, shm_bytes="1M", staging_slots=4), "p",
                              {"source": "raw:" + big, "record_bytes": 256 * 1024, "batch_size": 8})
    expect_refused(cfg, ["%s:%d: shared memory: 4 staging slots of 2097152 bytes (the largest batch) "
                         "and the sample lists (runtime_index_bytes included) need " % (cfg, lines["shm_bytes"]), "over shm_bytes = 1048576"],
                   "arena over shm_bytes", start_too=True, sock=sock)
    # 1024 slots of 16 GiB (16 records of 1 GiB, a sparse file): no machine has that memory
    sparse = env.path("sparse.bin")
    with open(sparse, "wb") as f:
        f.truncate(16 << 30)
    cfg, _, _ = write_cfg(env.path("mem.ini"), dict(base, shm_bytes="64T", staging_slots=1024), "p",
                          {"source": "raw:" + sparse, "record_bytes": 1 << 30, "batch_size": 16})
    expect_refused(cfg, ["shared memory: 1024 staging slots of 17179869184 bytes (the largest batch) and the "
                         "sample lists (runtime_index_bytes included) need ",
                         " bytes, but only ", " bytes of memory are available ("],
                   "arena over the memory available", start_too=True, sock=sock)


def all_at_once(env, base):
    fifo = env.path("odd", "fifo")
    cfg, line, lines = write_cfg(env.path("all.ini"),
                                 dict(base, worker_program="/bin/false", socket_group="no-such-group-x"),
                                 "p", {"source": "raw:" + fifo, "record_bytes": 4, "batch_size": 1})
    expect_refused(cfg, ['%s:%d: pipeline "p": %s: not a regular file (a FIFO)' % (cfg, line, fifo),
                         "%s:%d: [daemon] worker_program: /bin/false: exited with code 1"
                         % (cfg, lines["worker_program"]),
                         '%s:%d: [daemon] socket_group: "no-such-group-x"' % (cfg, lines["socket_group"])],
                   "three problems in one file")


def config_file(env, base, data):
    fifo = env.path("odd", "fifo")
    for path, kind in ((fifo, "a FIFO"), (env.path("odd", "dir"), "a directory")):
        expect_refused(path, "%s: not a regular file (%s)" % (path, kind), "the config file is " + kind,
                       start_too=True)
    # a reload of a config file that became a FIFO is refused, not waited on
    cfg = env.config("live", {"p": {"source": "raw:" + data, "record_bytes": 64, "batch_size": 8}})
    d = env.start_daemon(cfg)
    os.rename(cfg, cfg + ".away")
    os.mkfifo(cfg)
    r = env.loaderctl(["--socket", d.socket, "reload"], timeout_s=TIMEOUT_S)
    check(r.returncode == 1 and "%s: not a regular file (a FIFO)" % cfg in r.stdout + r.stderr,
          "reload of a FIFO: exit %d, %s%s" % (r.returncode, r.stdout, r.stderr))
    (_, _, rows), = harness.consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1,
                                                         "dump": env.path("live.dump")}])
    check(len(rows) == 64, "after the refused reload, an epoch has %d rows" % len(rows))
    os.unlink(cfg)
    os.rename(cfg + ".away", cfg)
    d.stop()
    print("reload of a FIFO: %s" % (r.stdout + r.stderr).strip().splitlines()[-1])


def body(env):
    base = {"socket": env.path("cc.sock"), "workers": 1}
    data = env.make_raw("data.bin", 64, 64)
    data_files(env, base)
    worker_programs(env, base, data)
    socket_group(env, base, data)
    socket_path(env, base, data)
    arena_size(env, base, data)
    all_at_once(env, base)
    config_file(env, base, data)


if __name__ == "__main__":
    harness.run_test("test_check_config", body)
