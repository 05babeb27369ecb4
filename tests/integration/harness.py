# SPDX-License-Identifier: Apache-2.0
"""harness: shared helpers for loaderd's integration tests.

Every test is its own process (tests/integration/test_*.py) that runs a real
loaderd and real loaderctl clients from $LOADERD_BUILD_DIR/bin over the real
socket, on datasets written by tools/make_dataset.py into a temporary
directory that is removed afterwards. run_test() maps the outcome to the exit
codes CTest understands: 0 pass, 1 fail, 77 skip.

"The daemon is up" means it sent READY=1 on $NOTIFY_SOCKET (a datagram
socket the harness binds in the test's directory). Everything that waits
waits for a condition under a deadline; nothing sleeps a fixed time.

What needs no process (the checks, the expected content of samples, the
readers of dumps and of status) is harness_data.py's; its names are this
module's too, so a test imports harness alone.
"""

import contextlib
import json
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
from harness_data import *  # noqa: E402,F401,F403  (beside this file; see above)

write_megatron = make_dataset.write_megatron  # Megatron-LM's indexed dataset, as the tests write it

EXIT_PASS, EXIT_FAIL, EXIT_SKIP = 0, 1, 77
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


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
        self.program = binary("loaderd")  # another copy runs with the programs beside it
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
            self.proc = subprocess.Popen(self.wrapper + [self.program, "--config", self.config],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         preexec_fn=preexec)
        self.pid = self.proc.pid

    def main_pid(self):
        """The loaderd process itself (under a wrapper, the wrapper's child
        that runs loaderd, or the wrapper once it exec'ed loaderd), as this
        test's pid namespace numbers it."""
        if not self.wrapper:
            return self.proc.pid
        loaderd = os.path.realpath(self.program)

        def find():
            try:  # a wrapper that exec'ed loaderd (seccomp_exec.py) is it
                if os.path.realpath("/proc/%d/exe" % self.proc.pid) == loaderd:
                    return self.proc.pid
            except OSError:
                pass
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

    def status_json(self, timeout_s=10):
        """`loaderctl status --json`, loaded."""
        r = self.env.loaderctl(["--socket", self.socket, "status", "--json"], timeout_s=timeout_s)
        check(r.returncode == 0, "loaderctl status --json exited %d: %s" % (r.returncode, r.stderr))
        return json.loads(r.stdout)

    def status(self):
        """The status (from its JSON), as parse_status makes it of the text."""
        return parse_status_json(self.status_json())

    def try_status(self):
        """The status as status() gives it, or None while the daemon does
        not answer or is still starting (no workers, pipelines or clients
        to look at yet)."""
        r = self.env.loaderctl(["--socket", self.socket, "status", "--json"], timeout_s=10)
        if r.returncode != 0:
            return None
        st = parse_status_json(json.loads(r.stdout))
        return None if "starting" in st else st

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


def only_file(directory, suffix):
    """The one file of directory whose name ends with suffix (a cache
    directory's one cache file, say); fails on none or several."""
    files = [f for f in os.listdir(directory) if f.endswith(suffix)]
    check(len(files) == 1, "%s holds %s, expected one %s file" % (directory, files, suffix))
    return os.path.join(directory, files[0])


def patch_file(path, at, data=None, size=None):
    """data written over path's bytes from at, then (size) path cut or
    grown to size bytes."""
    with open(path, "r+b") as f:
        if data is not None:
            f.seek(at)
            f.write(data)
        if size is not None:
            f.truncate(size)


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
