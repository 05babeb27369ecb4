# SPDX-License-Identifier: Apache-2.0
"""bench_daemon: the loaderd a benchmark starts, waits for and stops, shared
by gpu_bench.py and image_bench.py. Each subclasses LoaderdDaemon with the
config lines of its daemon and the wording of its log lines; what a bench
measures stays in the bench.

Also here, since the daemon needs them and both benches import this
module: Log, StepError, last_line and wait_for (tools/wait.py's, in a
bench's terms).
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import wait  # noqa: E402  (tools/ is put on the path just above)

START_TIMEOUT_S = 90        # loaderd start: the file list, CUDA init, rings, workers
STOP_TIMEOUT_S = 30         # SIGTERM to exit, and SIGKILL to exit


class Log:
    """Progress on stdout, each line prefixed with the bench's name;
    progress and every command's output in --out (path)."""

    def __init__(self, prefix, path):
        self.prefix = prefix + ": "
        self.f = open(path, "w") if path else None

    def write(self, text):
        if self.f:
            self.f.write(text)
            self.f.flush()

    def say(self, text):
        print(self.prefix + text, flush=True)
        self.write(self.prefix + text + "\n")

    def close(self):
        if self.f:
            self.f.close()


def publish(log, out_dir, text):
    """Prints a benchmark's report, appends it to the log (which it
    closes) and writes it to OUT/table.md when there is an --out."""
    print()
    print(text, end="")
    log.write("\n" + text)
    log.close()
    if out_dir:
        with open(os.path.join(out_dir, "table.md"), "w") as f:
            f.write(text)


def failed_exit(cells):
    """1 when a cell says its measurement failed (a text "error: ...",
    where a figure would be), else 0."""
    return 1 if any(isinstance(v, str) and v.startswith("error:") for v in cells) else 0


class StepError(Exception):
    """One measurement failed; its message goes into the table's cell."""


def last_line(text):
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def wait_for(cond, timeout_s, what, interval_s=0.05):
    """Polls cond() until it returns a true value, which is returned; a
    StepError naming `what` when timeout_s passes first."""
    return wait.wait_for(cond, timeout_s, interval_s,
                         lambda: StepError("timed out after %d s waiting for %s" % (timeout_s, what)))


class LoaderdDaemon:
    """One loaderd with a config file, a log and a socket of its own.

    ctx gives workdir (the socket), logdir (config and log), bindir,
    loaderctl and log. A subclass supplies config_lines(), may check the
    first status in check_started(), and sets the wording: label ("mode
    copy", "4 workers") in its log lines, START_GOAL in the start timeout's
    message, error_name() in the StepErrors that end up in table cells."""

    START_GOAL = "to start"

    def __init__(self, ctx, tag, label):
        self.ctx = ctx
        self.label = label
        self.socket = os.path.join(ctx.workdir, "loaderd-%s.sock" % tag)
        self.config = os.path.join(ctx.logdir, "loaderd-%s.ini" % tag)
        self.log_path = os.path.join(ctx.logdir, "loaderd-%s.log" % tag)
        self.proc = None
        self.env = None  # the daemon's environment, when not the bench's

    def config_lines(self):
        """The config file's lines, [daemon] and the pipelines; the file is
        these joined with newlines."""
        raise NotImplementedError

    def check_started(self, status):
        """Raises StepError when the first full `loaderctl status` shows a
        daemon that cannot deliver what the bench measures."""

    def error_name(self):
        return "loaderd (%s)" % self.label

    def write_config(self):
        with open(self.config, "w") as f:
            f.write("\n".join(self.config_lines()))

    def log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        # The reason is the last error, not the "stopped" that follows it.
        errors = [ln for ln in text.splitlines() if re.match(r"^loaderd: (error|fatal|crit)", ln)
                  and not ln.rstrip().endswith(": stopping")]
        return errors[-1].strip() if errors else last_line(text)

    def status(self):
        r = subprocess.run([self.ctx.loaderctl, "--socket", self.socket, "status"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
        return r.stdout if r.returncode == 0 else None

    def start(self):
        self.write_config()
        cmd = [os.path.join(self.ctx.bindir, "loaderd"), "--config", self.config]
        self.ctx.log.write("\n$ %s    # loaderd, %s, log in %s\n"
                           % (shlex.join(cmd), self.label, self.log_path))
        with open(self.log_path, "wb") as logf:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                         env=self.env)

        def up():
            if self.proc.poll() is not None:
                raise StepError("%s exited %d at start: %s"
                                % (self.error_name(), self.proc.returncode, self.log_tail()))
            try:
                text = self.status()
            except subprocess.TimeoutExpired:
                return None
            # The socket answers while the GPU is still being set up.
            return text if text and "(GPU starting)" not in text else None

        text = wait_for(up, START_TIMEOUT_S, "loaderd (%s) %s" % (self.label, self.START_GOAL))
        self.ctx.log.write("status:\n%s" % text)
        self.check_started(text)

    def check_alive(self):
        if self.proc is None or self.proc.poll() is not None:
            raise StepError("%s is not running: %s" % (self.error_name(), self.log_tail()))

    def stop(self):
        """SIGTERM, then a bounded wait; SIGKILL only if that runs out."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
            self.ctx.log.write("loaderd (%s) exited %d after SIGTERM\n" % (self.label, rc))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
            self.ctx.log.say("loaderd (%s) did not exit within %d s of SIGTERM; killed"
                             % (self.label, STOP_TIMEOUT_S))


def stop_process(proc, timeout_s=STOP_TIMEOUT_S):
    """SIGTERM to a daemon a bench started itself, a bounded wait, SIGKILL
    only if that runs out; True when it had to be killed."""
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


class MpsServer:
    """A private CUDA MPS control daemon for one benchmark run: its pipe and
    log directories in a temporary directory of its own (short: the pipes
    are Unix sockets), named in this process's environment, so that every
    CUDA process the bench starts from then on (loaderd, the training
    ranks) shares the GPU through it instead of taking turns on it in time
    slices. stop() quits it, removes the directory and puts the
    environment back."""

    ENV = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")

    def __init__(self, log):
        self.log = log
        self.root = tempfile.mkdtemp(prefix="loaderd-mps-")
        self.dirs = (os.path.join(self.root, "pipe"), os.path.join(self.root, "log"))
        self.saved = {k: os.environ.get(k) for k in self.ENV}
        self.running = False

    def start(self):
        """Starts the control daemon; a StepError naming why it could not."""
        for d in self.dirs:
            os.makedirs(d, exist_ok=True)
        os.environ.update(dict(zip(self.ENV, self.dirs)))
        cmd = ["nvidia-cuda-mps-control", "-d"]
        self.log.write("\n$ %s    # %s\n" % (shlex.join(cmd), " ".join(
            "%s=%s" % kv for kv in zip(self.ENV, self.dirs))))
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.restore()
            raise StepError("nvidia-cuda-mps-control -d: %s" % e)
        if r.returncode != 0:
            self.restore()
            raise StepError("nvidia-cuda-mps-control -d exited %d: %s"
                            % (r.returncode, last_line(r.stderr + r.stdout)))
        self.running = True

    def stop(self):
        if self.running:
            try:
                r = subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", capture_output=True,
                                   text=True, timeout=STOP_TIMEOUT_S)
                self.log.write("MPS control daemon: quit (exit %d)\n" % r.returncode)
            except (OSError, subprocess.TimeoutExpired) as e:
                self.log.write("MPS control daemon: quit failed: %s\n" % e)
            self.running = False
        self.restore()
        shutil.rmtree(self.root, ignore_errors=True)

    def restore(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
