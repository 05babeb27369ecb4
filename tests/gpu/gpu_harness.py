# SPDX-License-Identifier: Apache-2.0
"""gpu_harness: what the GPU tests (tests/gpu/test_*.py) need on top of
tests/integration/harness.py.

- Whether there is a GPU, and which: `loaderd --version` lists the GPUs the
  daemon's CUDA sees ("gpus: N", then "  gpu I GPU-<uuid> "NAME" memory B
  compute X.Y"); no GPU line, or "gpus: 0", means the test is skipped
  (exit 77). Run with a client's environment, the same command gives the
  UUID of each CUDA ordinal as that client sees it.
- Daemons and loaderctl runs with their own environment (overrides where
  None removes a variable), for the tests where CUDA_VISIBLE_DEVICES
  differs between daemon and client.
- The helper programs built from tests/gpu (absent when the build found no
  CUDA toolkit: then the test is skipped, saying so).
- /proc measurements of a process (open fds, resident memory) and a
  line-by-line conversation with a helper program over its stdin/stdout.
"""

import os
import re
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import harness  # noqa: E402  (tests/integration is put on the path just above)
from harness import TestFailure, TestSkip, check, environ  # noqa: E402

_GPUS_RE = re.compile(r"^gpus: (\d+)(?: \(.*\))?$", re.M)  # "gpus: 0 (REASON)" when none
_GPU_RE = re.compile(r'^  gpu (\d+) (GPU-[0-9a-f-]{36}) "([^"]*)" memory (\d+) compute (\d+)\.(\d+)$')
_CUDA_RE = re.compile(r"^cuda: .*$", re.M)

MIB = 1 << 20

# A device client of an image pipeline decodes its GPU's JPEGs in its own
# process when it can (client/decode.h). The tests of the daemon's own GPU
# decoding (its decoding thread, helpers, decoder processes, its counts)
# run with the daemon decoding, as a client that cannot decode gets; the
# tests of the client's decoding (test_gpu_client_decode*.py) set this to 1.
os.environ.setdefault("LOADERD_CLIENT_DECODE", "0")


def proc_env(overrides=None):
    """os.environ with overrides applied; a value of None removes the
    variable."""
    env = dict(os.environ)
    for k, v in (overrides or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def version_gpus(overrides=None):
    """The GPUs `loaderd --version` reports in the environment given by
    overrides, as dicts (index, uuid, name, memory, compute); and the
    whole text."""
    cmd = [harness.binary("loaderd"), "--version"]
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=60, env=proc_env(overrides))
    except subprocess.TimeoutExpired:
        raise TestFailure("loaderd --version did not finish within 60 s") from None
    check(r.returncode == 0, "loaderd --version exited %d: %s" % (r.returncode, r.stderr))
    m = _GPUS_RE.search(r.stdout)
    if m is None:
        return [], r.stdout
    gpus = []
    for line in r.stdout.splitlines():
        g = _GPU_RE.match(line)
        if g:
            gpus.append({"index": int(g.group(1)), "uuid": g.group(2), "name": g.group(3),
                         "memory": int(g.group(4)),
                         "compute": (int(g.group(5)), int(g.group(6)))})
    check(len(gpus) == int(m.group(1)) and [g["index"] for g in gpus] == list(range(len(gpus))),
          "loaderd --version says %s but lists GPUs %s:\n%s"
          % (m.group(0), [g["index"] for g in gpus], r.stdout))
    return gpus, r.stdout


def require_gpus(overrides=None):
    """The GPUs `loaderd --version` reports; skips the test when none."""
    gpus, text = version_gpus(overrides)
    if not gpus:
        facts = [m.group(0) for m in (_CUDA_RE.search(text), _GPUS_RE.search(text)) if m]
        raise TestSkip("loaderd --version reports no GPU (%s)"
                       % ("; ".join(facts) or "no cuda or gpus line"))
    return gpus


def program(name):
    """A helper program built from tests/gpu; skips the test when the build
    did not make it."""
    path = os.path.join(harness.build_dir(), "bin", name)
    if not os.access(path, os.X_OK):
        raise TestSkip("%s was not built (the build found no CUDA toolkit or no CUDA compiler)"
                       % path)
    return path


# ---------------------------------------------------------------- daemons

class EnvDaemon(harness.Daemon):
    """harness.Daemon started with environment overrides."""

    def __init__(self, env, config, overrides):
        super().__init__(env, config)
        self.overrides = dict(overrides or {})

    def start(self):
        with environ(self.overrides):
            super().start()


def start_daemon(env, config, overrides=None, timeout_s=60, program=None):
    """Starts a daemon (with overrides applied to its environment; program:
    another loaderd binary than the build's) and waits for READY=1.
    Opening the GPU takes longer than a host-only start."""
    d = EnvDaemon(env, config, overrides)
    if program:
        d.program = program
    env.daemons.append(d)
    d.start()
    d.wait_ready(timeout_s)
    return d


def gpu_config(env, name, pipelines, pin="register", **daemon):
    """A config with GPU delivery required (a daemon that cannot deliver to
    the GPU must not quietly fall back to host delivery in these tests)."""
    keys = {"gpu": "required", "pin": pin}
    keys.update(daemon)
    return env.config(name, pipelines, **keys)


def check_delivery(d, pin, timeout_s=30):
    """Status must report device delivery with pin mode `pin`; returns the
    status."""
    st = d.wait_status(lambda s: s["delivery"].startswith("host, device"), timeout_s,
                       "status to report device delivery")
    check(st["delivery"].startswith("host, device") and ("pin %s" % pin) in st["delivery"],
          "status says delivery: %s; expected device delivery with pin %s" % (st["delivery"], pin))
    return st


# ---------------------------------------------------------------- data

def make_jpeg_tree(env, classes, per_class, seed, min_side, spread):
    """An imagefolder tree of mkjpeg photos under env's directory: class_C/
    img_NNN.jpg, each of its own seed and a size of min_side plus up to
    spread pixels a side; returns its root."""
    root = env.path("images")
    mkjpeg = harness.binary("mkjpeg")
    for c in range(classes):
        os.makedirs(os.path.join(root, "class_%d" % c))
        for i in range(per_class):
            seed += 1
            w, h = min_side + (seed * 37) % spread, min_side + (seed * 53) % spread
            subprocess.run([mkjpeg, os.path.join(root, "class_%d" % c, "img_%03d.jpg" % i),
                            "--width", str(w), "--height", str(h), "--seed", str(seed)], check=True)
    return root


# ---------------------------------------------------------------- clients

def loaderctl(env, args, overrides=None, timeout_s=120):
    """Runs loaderctl to completion with overrides applied to its
    environment; returns the CompletedProcess."""
    cmd = [harness.binary("loaderctl")] + list(args)
    try:
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout_s, env=proc_env(overrides))
    except subprocess.TimeoutExpired as e:
        raise TestFailure("%s did not finish within %d s; stderr: %s"
                          % (" ".join(cmd), timeout_s, e.stderr)) from None
    harness.check_no_sanitizer_report(r.stderr, " ".join(cmd))
    return r


def spawn_loaderctl(env, args, overrides=None):
    """Starts loaderctl in the background (stdout/stderr are pipes); it is
    killed at the end of the test if still running."""
    p = subprocess.Popen([harness.binary("loaderctl")] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=proc_env(overrides))
    env.procs.append(p)
    return p


def consume_cmd(socket_path, pipeline, device=None, epochs=None, batches=None, dump=None,
                extra=()):
    """consume arguments; device None is host delivery."""
    more = ["--device", device] if device is not None else []
    return harness.consume_args(socket_path, pipeline, epochs=epochs, batches=batches, dump=dump,
                                extra=more + list(extra) + ["--quiet"])


def consume(env, socket_path, pipeline, dump, device=None, epochs=None, extra=(), overrides=None,
            timeout_s=120):
    """Runs one consumer to completion; it must exit 0. Returns (summary,
    dump rows)."""
    args = consume_cmd(socket_path, pipeline, device=device, epochs=epochs, dump=dump, extra=extra)
    r = loaderctl(env, args, overrides=overrides, timeout_s=timeout_s)
    check(r.returncode == 0, "loaderctl %s exited %d\nstdout: %s\nstderr: %s"
          % (" ".join(args), r.returncode, r.stdout, r.stderr))
    summary, _ = harness.parse_consume_output(r.stdout)
    return summary, harness.read_dump(dump)


def check_epochs(rows, epochs, n_samples, what):
    """World 1: every epoch delivers each sample exactly once."""
    for epoch in range(epochs):
        samples = sorted(s for e, _, s, _ in rows if e == epoch)
        check(samples == list(range(n_samples)), "%s: epoch %d delivered %d samples, not each of %d once"
              % (what, epoch, len(samples), n_samples))
    check(all(e < epochs for e, _, _, _ in rows), "%s: dump has lines past epoch %d" % (what, epochs - 1))


def read_complete_dump_lines(path):
    """The complete lines of a dump whose writer may have been killed
    mid-write, as (epoch, batch, sample, crc)."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    lines = text.split("\n")[:-1]  # the last element is "" or a cut line
    return harness.parse_dump_lines(lines, path)


def check_same_dumps(texts):
    """texts: [(what, dump text)], which must all be the same."""
    first_what, first = texts[0]
    for what, text in texts[1:]:
        i = harness.first_difference(first.splitlines(), text.splitlines())
        check(i is None, "the dumps of %s and %s differ from line %s on"
              % (first_what, what, None if i is None else i + 1))


def torch_cuda():
    """torch, with a CUDA device; skips the test otherwise."""
    try:
        import torch
    except ImportError:
        raise TestSkip("torch is not importable") from None
    if not torch.cuda.is_available():
        raise TestSkip("torch sees no CUDA device")
    return torch


def client_by_pid(st, pid):
    for c in st["clients"]:
        if c["pid"] == pid:
            return c
    return None


def gpu_by_uuid(st, uuid):
    for g in st["gpus"]:
        if g["uuid"] == uuid:
            return g
    return None


# ---------------------------------------------------------------- /proc

def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise TestFailure("/proc/%d/status has no VmRSS line" % pid)


def settled(measure, what, timeout_s=10, polls=5, interval_s=0.05):
    """A value measure() returns on `polls` consecutive polls (a count that
    momentarily includes, say, a status connection being closed settles);
    fails when none holds still within timeout_s."""
    deadline = time.monotonic() + timeout_s
    last, same = None, 0
    while True:
        value = measure()
        same = same + 1 if value == last else 1
        last = value
        if same >= polls:
            return value
        if time.monotonic() >= deadline:
            raise TestFailure("%s did not settle within %.1f s (last %r)" % (what, timeout_s, last))
        time.sleep(interval_s)


# ---------------------------------------------------------------- helper programs

class Conversation:
    """A helper program that prints lines and waits for a line on stdin
    at agreed points. stderr goes to a file in the test directory."""

    def __init__(self, env, cmd, name, overrides=None):
        self.name = name
        self.stderr_path = env.path(name + ".stderr")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, env=proc_env(overrides))
        env.procs.append(self.proc)
        self.buf = b""

    def stderr(self):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def read_line(self, timeout_s, what):
        """The next stdout line; fails on timeout or when the program
        exits first."""
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestFailure("%s: no %s within %.0f s; stderr:\n%s"
                                  % (self.name, what, timeout_s, self.stderr()))
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    rc = self.proc.wait()
                    raise TestFailure("%s exited %d before %s; stderr:\n%s"
                                      % (self.name, rc, what, self.stderr()))
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def expect(self, line, timeout_s):
        got = self.read_line(timeout_s, repr(line))
        check(got == line, "%s printed %r, expected %r" % (self.name, got, line))

    def send(self, line):
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s):
        """Waits for the exit; returns (rc, the rest of stdout, stderr)."""
        try:
            rest, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TestFailure("%s did not exit within %.0f s; stderr:\n%s"
                              % (self.name, timeout_s, self.stderr())) from None
        err = self.stderr()
        harness.check_no_sanitizer_report(err, self.name)
        return self.proc.returncode, (self.buf + rest).decode(errors="replace"), err
