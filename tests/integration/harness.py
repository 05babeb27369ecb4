"""harness: shared helpers for loaderd's integration tests.

Every test is its own process (tests/integration/test_*.py) that runs a real
loaderd and real loaderctl clients from $LOADERD_BUILD_DIR/bin over the real
socket, on datasets written by tools/make_dataset.py into a temporary
directory that is removed afterwards. run_test() maps the outcome to the exit
codes CTest understands: 0 pass, 1 fail, 77 skip.

"The daemon is up" means it sent READY=1 on $NOTIFY_SOCKET (a datagram
socket the harness binds in the test's directory). Everything that waits
waits for a condition under a deadline; nothing sleeps a fixed time.

The expected content of a sample is computed here, independently of the
daemon: a pure-Python CRC-32C over the sample's bytes read from the data file
(raw: the record; tokens: the seq_len+1 window, zero-extended to the
delivered width, little-endian).
"""

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

SOURCE_DIR = os.environ.get("LOADERD_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import make_dataset  # noqa: E402  (tools/ is put on the path just above)
import wait  # noqa: E402

EXIT_PASS, EXIT_FAIL, EXIT_SKIP = 0, 1, 77
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


class TestFailure(Exception):
    """A check failed; the message says which and with what."""


class TestSkip(Exception):
    """The test cannot run here."""


def check(cond, message):
    if not cond:
        raise TestFailure(message)


def import_or_fail(test, *modules):
    """Imports the modules a test needs. scripts/install-deps.sh installs
    them, so a missing one fails the test (exit 1) rather than skipping it:
    a skip would hide that the test never ran."""
    loaded = []
    for name in modules:
        try:
            loaded.append(__import__(name, fromlist=["_"]))
        except Exception as e:  # noqa: BLE001  (a broken install raises more than ImportError)
            print("%s: FAIL: %s cannot be imported by %s (%s); scripts/install-deps.sh "
                  "installs it from Debian" % (test, name, sys.executable, e), file=sys.stderr)
            sys.exit(EXIT_FAIL)
    return loaded[0] if len(loaded) == 1 else loaded


def build_dir():
    d = os.environ.get("LOADERD_BUILD_DIR")
    if not d:
        raise TestSkip("LOADERD_BUILD_DIR is not set (run through ctest)")
    return d


def binary(name):
    path = os.path.join(build_dir(), "bin", name)
    check(os.access(path, os.X_OK), "%s is missing: build the tree first" % path)
    return path


def check_no_sanitizer_report(text, what):
    """In a sanitized build a report can come with an ordinary exit code
    (ASan exits 1, the code of an expected error) or from a worker that is
    then respawned: look for the report itself."""
    for marker in SANITIZER_MARKERS:
        check(marker not in (text or ""), "%s: a sanitizer report (%r):\n%s" % (what, marker, text))


@contextlib.contextmanager
def environ(overrides):
    """Applies overrides to os.environ for the duration of the block, so
    that code which builds a child's environment from os.environ (as
    harness.Daemon.start does) picks them up."""
    saved = {k: os.environ.get(k) for k in overrides}
    try:
        for k, v in overrides.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wait_for(cond, timeout_s, what, interval_s=0.02):
    """Polls cond() until it returns a true value, which is returned; fails
    with `what` when timeout_s passes first (tools/wait.py)."""
    return wait.wait_for(cond, timeout_s, interval_s,
                         lambda: TestFailure("timed out after %.1f s waiting for %s" % (timeout_s, what)))


# ---------------------------------------------------------------- CRC-32C

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli, reflected, init/xorout 0xFFFFFFFF); chainable
    like common/crc32c.h: crc32c(b, crc32c(a)) == crc32c(a + b)."""
    table = _CRC_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the published check value


def raw_sample_crcs(path, record_bytes):
    """CRC of every record of a raw file, by sample index."""
    with open(path, "rb") as f:
        data = f.read()
    return [crc32c(data[i:i + record_bytes]) for i in range(0, len(data), record_bytes)]


def token_sample_crcs(path, in_bytes, out_bytes, seq_len):
    """CRC of every seq_len+1 window of a token file, each token widened
    (zero-extended) from in_bytes to out_bytes, little-endian."""
    with open(path, "rb") as f:
        data = f.read()
    n_tokens = len(data) // in_bytes
    pad = bytes(out_bytes - in_bytes)
    widened = b"".join(data[i:i + in_bytes] + pad for i in range(0, n_tokens * in_bytes, in_bytes))
    n_samples = (n_tokens - 1) // seq_len
    row = (seq_len + 1) * out_bytes
    step = seq_len * out_bytes
    return [crc32c(widened[i * step:i * step + row]) for i in range(n_samples)]


# ---------------------------------------------------------------- files

def write_config(path, daemon, pipelines):
    """Writes an INI config: daemon is a dict of [daemon] keys, pipelines a
    dict name -> dict of keys (values are written as str())."""
    lines = ["[daemon]"]
    lines += ["%s = %s" % (k, v) for k, v in daemon.items()]
    for name, keys in pipelines.items():
        lines += ["", "[pipeline.%s]" % name]
        lines += ["%s = %s" % (k, v) for k, v in keys.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def read_text(path):
    with open(path) as f:
        return f.read()


def parse_dump_lines(lines, path):
    """`consume --dump` lines (of the file at path) as a list of (epoch,
    batch, sample, crc)."""
    rows = []
    for n, line in enumerate(lines, 1):
        fields = line.split()
        check(len(fields) == 4 and all(x.isdigit() for x in fields),
              "%s:%d: not 'epoch batch sample crc': %r" % (path, n, line))
        rows.append(tuple(int(x) for x in fields))
    return rows


def read_dump(path):
    """`consume --dump` lines as a list of (epoch, batch, sample, crc)."""
    with open(path) as f:
        return parse_dump_lines(f, path)


def check_dump_crcs(rows, expected_crcs, what):
    """Every dumped sample's CRC must be the CRC of its bytes in the file."""
    for epoch, batch, sample, crc in rows:
        check(sample < len(expected_crcs),
              "%s: epoch %d batch %d: sample index %d out of range (n = %d)"
              % (what, epoch, batch, sample, len(expected_crcs)))
        check(crc == expected_crcs[sample],
              "%s: epoch %d batch %d sample %d: crc %d, the file's bytes give %d"
              % (what, epoch, batch, sample, crc, expected_crcs[sample]))


def epoch_rows(rows, epoch):
    """(batch, sample) of one epoch's dump lines, in delivery order."""
    return [(b, s) for e, b, s, _ in rows if e == epoch]


def shard_expected(perm, g, rank, world, batch_size, drop_last):
    """(batch, sample) that `rank` of `world` must receive, in order, from
    the segment of an epoch that starts at global offset g, given that
    epoch's permutation perm (position -> sample index): DistributedSampler
    semantics as common/sampler.h states them, written out independently."""
    n = len(perm)
    remaining = n - g
    if drop_last:
        k = remaining // world
        k -= k % batch_size  # an incomplete last batch is dropped
    else:
        k = -(-remaining // world)
    out = []
    for j in range(k):
        p = g + rank + j * world
        if p >= n:  # padding wraps to the segment's start
            p = g + (p - n) % remaining
        out.append((j // batch_size, perm[p]))
    return out


def first_difference(a, b):
    """Index of the first element where two sequences differ (or where the
    shorter one ends); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def check_permutation(order, n, what):
    check(sorted(order) == list(range(n)),
          "%s: the %d samples are not a permutation of 0..%d" % (what, len(order), n - 1))


_SUMMARY_RE = re.compile(
    r"^consume: pipeline=(\S+) rank=(\d+) world=(\d+) epochs=(\d+) batches=(\d+) "
    r"samples=(\d+) bytes=(\d+) seconds=(\d+\.\d{3}) batches_per_s=(\S+) "
    r"samples_per_s=(\S+) MB_per_s=(\S+) device=(host|GPU-[0-9a-f-]{36}) call_us=(\S+)$")


def parse_consume_output(stdout):
    """The two stdout lines of `loaderctl consume`: (summary dict, token)."""
    lines = stdout.splitlines()
    check(len(lines) == 2, "consume printed %d lines on stdout, expected 2:\n%s" % (len(lines), stdout))
    m = _SUMMARY_RE.match(lines[0])
    check(m is not None, "consume summary line does not match the contract: %r" % lines[0])
    keys = ["pipeline", "rank", "world", "epochs", "batches", "samples", "bytes", "seconds",
            "batches_per_s", "samples_per_s", "MB_per_s", "device", "call_us"]
    summary = dict(zip(keys, m.groups()))
    for k in ("rank", "world", "epochs", "batches", "samples", "bytes"):
        summary[k] = int(summary[k])
    for k in ("seconds", "batches_per_s", "samples_per_s", "MB_per_s", "call_us"):
        summary[k] = float(summary[k])
    check(lines[1].startswith("position: "), "second stdout line is not 'position: TOKEN': %r" % lines[1])
    token = lines[1][len("position: "):]
    check(re.fullmatch(r"ldr1:\d+:\d+:\d+:\d+", token) is not None, "malformed position token %r" % token)
    return summary, token


_STATUS_HEAD_RE = re.compile(r"^loaderd (\S+) pid (\d+) uptime (\d+(?:\.\d+)?)s$")
_ARENA_RE = re.compile(r"^arena: (\d+) bytes, (\d+) staging slots of (\d+) bytes, (\d+) in use, "
                       r"share (\d+)$")
_WORKER_RE = re.compile(r"^  worker (\d+) pid (\d+) state (\S+) items (\d+) inflight (\d+) restarts (\d+)"
                        r"(?: last_exit \"([^\"]*)\")?(?: retry_in_ms (\d+))?$")
_PIPELINE_RE = re.compile(r"^  pipeline (\S+) source (\S+) samples (\d+) batch_size (\d+) "
                          r"shuffle ([01]) drop_last ([01])$")
# A client's name is shown escaped (common/escape.h): between the quotes, a
# backslash starts an escape and a quote is always escaped.
_CLIENT_RE = re.compile(r"^  client (\d+) pid (\d+) name \"((?:[^\"\\]|\\.)*)\" pipeline (\S+) rank (\d+) "
                        r"world (\d+) depth (\d+) epoch (\d+) sent (\d+) released (\d+) in_flight (\d+) "
                        r"staging (\d+)"
                        r"(?: gpu (GPU-[0-9a-f-]{36}) stream_depth (\d+) bytes_moved (\d+) "
                        r"path (direct|staging))?$")
_CONNECTIONS_RE = re.compile(
    r"^connections: handshaking (?P<handshaking>\d+) max_handshakes (?P<max_handshakes>\d+) "
    r"timed_out (?P<timed_out>\d+) evicted (?P<evicted>\d+) unidentified (?P<unidentified>\d+) "
    r"shed (?P<shed>\d+) accept_pauses (?P<accept_pauses>\d+) accepting (?P<accepting>yes|paused)$")
_GPU_RE = re.compile(r"^  gpu (\d+) uuid (GPU-[0-9a-f-]{36}) name \"([^\"]*)\" clients (\d+) "
                     r"device_bytes (\d+)$")


def parse_status(text):
    """The status text of the contract, as a dict; fails on a line that
    does not match it."""
    lines = text.splitlines()
    st = {"workers": [], "pipelines": [], "clients": []}
    it = iter(enumerate(lines, 1))

    def expect(regex, what):
        n, line = next(it, (None, None))
        check(line is not None, "status ended before the %s line:\n%s" % (what, text))
        m = regex.match(line)
        check(m is not None, "status line %d is not the %s line: %r\n%s" % (n, what, line, text))
        return m

    m = expect(_STATUS_HEAD_RE, "version")
    st["version"], st["pid"], st["uptime"] = m.group(1), int(m.group(2)), float(m.group(3))
    st["delivery"] = expect(re.compile(r"^delivery: (host.*)$"), "delivery").group(1)
    st["gpus"] = []
    n_gpus = int(expect(re.compile(r"^gpus: (\d+)$"), "gpus").group(1))
    for _ in range(n_gpus):
        m = expect(_GPU_RE, "gpu")
        st["gpus"].append({"index": int(m.group(1)), "uuid": m.group(2), "name": m.group(3),
                           "clients": int(m.group(4)), "device_bytes": int(m.group(5))})
    m = expect(_ARENA_RE, "arena")
    st["arena_bytes"], st["slots"], st["slot_bytes"], st["in_use"], st["share"] = (
        int(x) for x in m.groups())
    n_workers = int(expect(re.compile(r"^workers: (\d+)$"), "workers").group(1))
    for _ in range(n_workers):
        m = expect(_WORKER_RE, "worker")
        st["workers"].append({
            "index": int(m.group(1)), "pid": int(m.group(2)), "state": m.group(3),
            "items": int(m.group(4)), "inflight": int(m.group(5)), "restarts": int(m.group(6)),
            "last_exit": m.group(7), "retry_in_ms": None if m.group(8) is None else int(m.group(8))})
    n_pipelines = int(expect(re.compile(r"^pipelines: (\d+)$"), "pipelines").group(1))
    for _ in range(n_pipelines):
        m = expect(_PIPELINE_RE, "pipeline")
        st["pipelines"].append({
            "name": m.group(1), "source": m.group(2), "samples": int(m.group(3)),
            "batch_size": int(m.group(4)), "shuffle": int(m.group(5)), "drop_last": int(m.group(6))})
    n_clients = int(expect(re.compile(r"^clients: (\d+)$"), "clients").group(1))
    for _ in range(n_clients):
        m = expect(_CLIENT_RE, "client")
        g = m.groups()
        st["clients"].append({
            "id": int(g[0]), "pid": int(g[1]), "name": g[2], "pipeline": g[3], "rank": int(g[4]),
            "world": int(g[5]), "depth": int(g[6]), "epoch": int(g[7]), "sent": int(g[8]),
            "released": int(g[9]), "in_flight": int(g[10]), "staging": int(g[11]), "gpu": g[12],
            "stream_depth": None if g[13] is None else int(g[13]),
            "bytes_moved": None if g[14] is None else int(g[14]), "path": g[15]})
    m = expect(re.compile(r"^errors: read (\d+) bad_images (\d+) substituted (\d+)$"), "errors")
    st["read_errors"], st["bad_images"], st["substituted"] = (int(x) for x in m.groups())
    m = expect(re.compile(r"^config: (.+) workers (\d+) max_workers (\d+) reloads (\d+) refused (\d+)$"),
               "config")
    st["config"] = {"file": m.group(1), "workers": int(m.group(2)), "max_workers": int(m.group(3)),
                    "reloads": int(m.group(4)), "refused": int(m.group(5)), "last": None}
    n, line = next(it, (None, None))
    if line is not None and line.startswith("  last_reload "):
        m = re.match(r"^  last_reload ([\d.]+)s ago: (applied|refused): (.*)$", line)
        check(m is not None, "status line %d is not the last_reload line: %r\n%s" % (n, line, text))
        st["config"]["last"] = (m.group(2), m.group(3))
        n, line = next(it, (None, None))
    m = _CONNECTIONS_RE.match(line or "")
    check(m is not None, "status line %s is not the connections line: %r\n%s" % (n, line, text))
    st["connections"] = {k: (v if k == "accepting" else int(v)) for k, v in m.groupdict().items()}
    return st


def pid_alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


# ---------------------------------------------------------------- processes

class Env:
    """One test's world: a temporary directory, the daemons and clients it
    started (all killed and reaped on exit), and their logs for failures."""

    def __init__(self, name):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="ldr-%s-" % name[:12])
        self.daemons = []
        self.procs = []

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def make_raw(self, name, records, record_bytes, seed=0):
        path = self.path(name)
        make_dataset.write_raw(path, records, record_bytes, seed)
        return path

    def make_tokens(self, name, tokens, dtype, seed=0, vocab=None):
        path = self.path(name)
        make_dataset.write_tokens(path, tokens, dtype, vocab, seed)
        return path

    def config(self, name, pipelines, **daemon):
        """Writes config `name`; the socket defaults to one in the test dir."""
        keys = {"socket": self.path(name + ".sock"), "workers": 2, "log_level": "info"}
        keys.update(daemon)
        return write_config(self.path(name + ".ini"), keys, pipelines)

    def start_daemon(self, config, wait_ready=True, timeout_s=20, nofile=None, wrapper=None):
        """nofile: RLIMIT_NOFILE for the daemon (both limits, or a tuple
        (soft, hard)); wrapper: a
        command the daemon runs under (e.g. unshare), its last word the
        daemon's command line."""
        d = Daemon(self, config, nofile=nofile, wrapper=wrapper)
        self.daemons.append(d)
        d.start()
        if wait_ready:
            d.wait_ready(timeout_s)
        return d

    def loaderctl(self, args, timeout_s=30):
        """Runs loaderctl to completion; returns the CompletedProcess."""
        cmd = [binary("loaderctl")] + list(args)
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise TestFailure("%s did not finish within %d s; stderr: %s"
                              % (" ".join(cmd), timeout_s, e.stderr)) from None
        check_no_sanitizer_report(r.stderr, " ".join(cmd))
        return r

    def spawn_loaderctl(self, args):
        """Starts loaderctl in the background; stdout/stderr are pipes."""
        p = subprocess.Popen([binary("loaderctl")] + list(args), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for d in self.daemons:
            d.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def print_logs(self):
        for d in self.daemons:
            d.print_log()


def consume_args(socket_path, pipeline, rank=0, world=1, epochs=None, batches=None, dump=None,
                 extra=()):
    args = ["--socket", socket_path, "consume", "--pipeline", pipeline,
            "--rank", str(rank), "--world", str(world)]
    if epochs is not None:
        args += ["--epochs", str(epochs)]
    if batches is not None:
        args += ["--batches", str(batches)]
    if dump is not None:
        args += ["--dump", dump]
    return args + list(extra)


def finish(proc, timeout_s, what):
    """Waits for a background loaderctl; returns (rc, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise TestFailure("%s did not finish within %d s; stderr: %s" % (what, timeout_s, err))
    check_no_sanitizer_report(err, what)
    return proc.returncode, out, err


def consume_all(env, socket_path, jobs, timeout_s=40):
    """Runs several consumers at once (jobs: list of consume_args kwargs,
    each with `dump`); all must exit 0. Returns [(summary, token, rows)]."""
    procs = [(j, env.spawn_loaderctl(consume_args(socket_path, **j) + ["--quiet"])) for j in jobs]
    results = []
    for j, p in procs:
        what = "consume %s" % j
        rc, out, err = finish(p, timeout_s, what)
        check(rc == 0, "%s exited %d\nstdout: %s\nstderr: %s" % (what, rc, out, err))
        summary, token = parse_consume_output(out)
        results.append((summary, token, read_dump(j["dump"]) if j.get("dump") else None))
    return results


def reference_epoch(env, d, crcs, n):
    """One epoch of pipeline "p" consumed, dumped to ref.dump and checked
    (its CRCs, n samples): the reference a run under faults must equal.
    The dump's path."""
    ref_dump = env.path("ref.dump")
    (_, _, ref_rows), = consume_all(env, d.socket, [{"pipeline": "p", "epochs": 1, "dump": ref_dump}])
    check_dump_crcs(ref_rows, crcs, "reference run")
    check(len(ref_rows) == n, "reference run delivered %d samples, expected %d" % (len(ref_rows), n))
    return ref_dump


def spawn_slow_consumer(env, d, step_ms):
    """A consumer of one epoch of pipeline "p", named "slow", step_ms per
    batch, dumping to slow.dump, returned (with the dump's path) once it
    has released 5 batches, for a fault to strike mid-epoch."""
    slow_dump = env.path("slow.dump")
    slow = env.spawn_loaderctl(consume_args(
        d.socket, "p", epochs=1, dump=slow_dump,
        extra=["--step-ms", str(step_ms), "--name", "slow", "--quiet"]))
    d.wait_status(lambda st: any(c["pid"] == slow.pid and c["released"] >= 5 for c in st["clients"]),
                  15, "the slow consumer to release 5 batches")
    return slow, slow_dump


def check_same_dump(path, ref_path, differs):
    """The dump at path holds what the one at ref_path does; else the test
    fails with `differs` and the first differing line. The reference's
    text."""
    text, ref_text = read_text(path), read_text(ref_path)
    check(text == ref_text, "%s (first differing line %s)"
          % (differs, first_difference(text.splitlines(), ref_text.splitlines())))
    return ref_text


class Daemon:
    """One loaderd: stdout and stderr go to files in the test directory (so
    its workers can never block on a full pipe), NOTIFY_SOCKET to a datagram
    socket bound by the harness."""

    def __init__(self, env, config, nofile=None, wrapper=None):
        self.env = env
        self.config = config
        self.nofile = nofile
        self.wrapper = list(wrapper or [])
        self.socket = None
        for line in open(config):
            m = re.match(r"\s*socket\s*=\s*(\S+)", line)
            if m:
                self.socket = m.group(1)
        self.notes = []  # every sd_notify assignment received, in order
        self.proc = None
        self.log_path = None

    def start(self):
        n = len(self.env.daemons)
        self.log_path = self.env.path("loaderd-%d.log" % n)
        notify_path = self.env.path("notify-%d" % n)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.notify.bind(notify_path)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        env.pop("LOADERD_SOCKET", None)
        preexec = None
        if self.nofile is not None:
            import resource
            limit = self.nofile if isinstance(self.nofile, tuple) else (self.nofile, self.nofile)
            preexec = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limit)  # noqa: E731
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.wrapper + [binary("loaderd"), "--config", self.config],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         preexec_fn=preexec)
        self.pid = self.proc.pid

    def main_pid(self):
        """The loaderd process itself (under a wrapper, the wrapper's child
        that runs loaderd), as this test's pid namespace numbers it."""
        if not self.wrapper:
            return self.proc.pid
        loaderd = os.path.realpath(binary("loaderd"))

        def find():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open("/proc/%s/stat" % entry) as f:
                        stat = f.read()
                    exe = os.path.realpath("/proc/%s/exe" % entry)
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == self.proc.pid and exe == loaderd:
                    return int(entry)
            return None
        return wait_for(find, 10, "loaderd to run under %s" % self.wrapper[0])

    def cpu_seconds(self):
        """User plus system CPU time the daemon (not its workers) has used."""
        with open("/proc/%d/stat" % self.main_pid()) as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _drain_notify(self, timeout_s):
        self.notify.settimeout(max(timeout_s, 0.001))
        try:
            data = self.notify.recv(4096)
        except (socket.timeout, BlockingIOError):
            return False
        self.notes += [x for x in data.decode(errors="replace").split("\n") if x]
        return True

    def drain_notes(self, wait_s=0.05):
        """Reads every sd_notify assignment waiting on the socket into notes
        (waiting up to wait_s for each datagram)."""
        while self._drain_notify(wait_s):
            pass

    def wait_note(self, pred, timeout_s, what):
        """Waits until a received sd_notify assignment satisfies pred."""
        deadline = time.monotonic() + timeout_s
        while not any(pred(x) for x in self.notes):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestFailure("timed out after %.1f s waiting for %s on NOTIFY_SOCKET "
                                  "(received %r)" % (timeout_s, what, self.notes))
            if self.proc.poll() is not None and not self._drain_notify(0):
                raise TestFailure("loaderd exited %d before %s" % (self.proc.returncode, what))
            self._drain_notify(min(left, 0.1))

    def wait_ready(self, timeout_s=20):
        self.wait_note(lambda x: x == "READY=1", timeout_s, "READY=1")

    def status_text(self, timeout_s=10):
        r = self.env.loaderctl(["--socket", self.socket, "status"], timeout_s=timeout_s)
        check(r.returncode == 0, "loaderctl status exited %d: %s" % (r.returncode, r.stderr))
        return r.stdout

    def status(self):
        return parse_status(self.status_text())

    def try_status(self):
        """The parsed status, or None while the daemon does not answer."""
        r = self.env.loaderctl(["--socket", self.socket, "status"], timeout_s=10)
        return parse_status(r.stdout) if r.returncode == 0 else None

    def wait_status(self, pred, timeout_s, what):
        """Polls status until pred(status) is true; returns that status."""
        def cond():
            check(self.proc.poll() is None, "loaderd exited %s while waiting for %s"
                  % (self.proc.returncode, what))
            st = self.try_status()
            return st if st is not None and pred(st) else None
        return wait_for(cond, timeout_s, what, interval_s=0.05)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout_s=15):
        """SIGTERM; the daemon must exit 0 and remove its socket file."""
        check(self.alive(), "loaderd exited %s before it was told to stop" % self.proc.returncode)
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TestFailure("loaderd did not exit within %d s of SIGTERM" % timeout_s) from None
        check(rc == 0, "loaderd exited %d after SIGTERM, expected 0" % rc)
        check(not os.path.exists(self.socket), "loaderd left its socket %s behind" % self.socket)
        self.check_log_clean()

    def check_log_clean(self):
        """Fails when the daemon or a worker (whose stderr is the daemon's)
        reported a sanitizer error: in a sanitized build a worker that
        trips one dies and is respawned, which no other check would see."""
        check_no_sanitizer_report(self.log(), "loaderd's log")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if getattr(self, "notify", None) is not None:
            self.notify.close()
            self.notify = None

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def print_log(self):
        print("---- loaderd stderr (%s) ----" % self.config, file=sys.stderr)
        print(self.log()[-20000:], file=sys.stderr)
        print("---- end of loaderd stderr ----", file=sys.stderr)


def run_test(name, body):
    """Runs body(env) and exits with 0 pass, 1 fail, 77 skip."""
    env = None
    code = EXIT_PASS
    try:
        env = Env(name)
        body(env)
        print("%s: pass" % name)
    except TestSkip as e:
        print("%s: skipped: %s" % (name, e))
        code = EXIT_SKIP
    except TestFailure as e:
        print("%s: FAIL: %s" % (name, e), file=sys.stderr)
        code = EXIT_FAIL
    except Exception:
        traceback.print_exc()
        print("%s: FAIL: unexpected exception" % name, file=sys.stderr)
        code = EXIT_FAIL
    if env is not None:
        if code == EXIT_FAIL:
            env.print_logs()
        env.cleanup()
    sys.exit(code)
