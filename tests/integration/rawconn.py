# SPDX-License-Identifier: Apache-2.0
"""rawconn: connections to loaderd made by hand, for the tests of what the
daemon does with connections that are idle, many, or unidentifiable.

Frames follow proto/PROTOCOL.md: a 24-byte little-endian header {magic
0x4452444c, version 7, type, flags, length, request_id} and the payload.
"""

import errno
import os
import resource
import select
import signal
import socket
import struct
import time

import harness

MAGIC, VERSION = 0x4452444C, 7
HELLO, WELCOME, READY, RELEASE, BYE, ERROR, STATUS_REQ, STATUS, RELOAD_REQ, DECODED = range(1, 11)


def frame(ftype, payload=b"", request_id=7):
    return struct.pack("<IHHIIQ", MAGIC, VERSION, ftype, 0, len(payload), request_id) + payload


def raise_own_fd_limit(need):
    """Lets this test process hold `need` descriptors (root may raise the
    hard limit too)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(need, soft), max(need, hard)))
    except (ValueError, OSError) as e:
        raise harness.TestSkip("cannot raise this process's RLIMIT_NOFILE to %d: %s" % (need, e))


def connect(path):
    """A non-blocking SOCK_SEQPACKET connection, or None while the listen
    backlog is full (EAGAIN)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    try:
        s.connect(path)
    except BlockingIOError:
        s.close()
        return None
    return s


def open_idle(path, n, timeout_s):
    """Opens n connections that send nothing, retrying while the backlog is
    full; returns those open when n are, or when timeout_s has passed."""
    socks = []
    deadline = time.monotonic() + timeout_s
    while len(socks) < n and time.monotonic() < deadline:
        s = connect(path)
        if s is None:
            time.sleep(0.005)  # the backlog is full: poll it under the deadline
            continue
        socks.append(s)
    return socks


def answer(s):
    """What the daemon sent on s so far, without waiting: a list of
    (type, code, text) frames, then ("eof",) once it has closed."""
    out = []
    reset_seen = False
    while True:
        try:
            data = s.recv(70000)
        except BlockingIOError:
            return out
        except ConnectionResetError:
            # Reported once, before what the daemon sent last.
            if reset_seen:
                out.append(("eof",))
                return out
            reset_seen = True
            continue
        if not data:
            out.append(("eof",))
            return out
        ftype = struct.unpack_from("<H", data, 6)[0] if len(data) >= 8 else None
        if ftype == ERROR and len(data) >= 30:
            code, n = struct.unpack_from("<iH", data, 24)
            out.append((ERROR, code, data[30:30 + n].decode(errors="replace")))
        elif ftype == STATUS and len(data) >= 28:
            n = struct.unpack_from("<I", data, 24)[0]
            out.append((STATUS, 0, data[28:28 + n].decode(errors="replace")))
        else:
            out.append((ftype, 0, ""))


class Watch:
    """Collects what the daemon says on a set of sockets until each is closed."""

    def __init__(self, socks):
        self.open = {s.fileno(): s for s in socks}
        self.got = {}       # fileno -> frames, ("eof",) last
        self.closed_at = {}  # fileno -> time.monotonic() when EOF was seen

    def poll(self):
        """Reads what is there; True once every socket has seen EOF."""
        if self.open:
            ready, _, _ = select.select(list(self.open), [], [], 0)
            for fd in ready:
                frames = answer(self.open[fd])
                self.got.setdefault(fd, []).extend(frames)
                if frames and frames[-1] == ("eof",):
                    self.closed_at[fd] = time.monotonic()
                    self.open.pop(fd).close()
        return not self.open

    def codes(self):
        """ERROR code of each closed socket (None: closed without ERROR)."""
        out = []
        for frames in self.got.values():
            errs = [f for f in frames if f[0] == ERROR]
            out.append(errs[0][1] if errs else None)
        return out

    def texts(self, code):
        return [f[2] for frames in self.got.values() for f in frames if f[0] == ERROR and f[1] == code]

    def close_all(self):
        for s in self.open.values():
            s.close()
        self.open = {}


def status_or_error(path, timeout_s=5):
    """Connects and sends STATUS_REQ at once; returns the daemon's frames up
    to its close, failing when the backlog stays full or no answer comes
    within timeout_s."""
    s = harness.wait_for(lambda: connect(path), timeout_s, "room in the backlog of %s" % path,
                         interval_s=0.005)
    try:
        s.send(frame(STATUS_REQ))
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed at once: what it said before is still there to read
    fd = s.fileno()
    w = Watch([s])
    harness.wait_for(w.poll, timeout_s, "an answer to STATUS_REQ on %s" % path)
    return w.got.get(fd, [])


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def settled_fds(pid, quiet_s=0.3, timeout_s=10.0):
    """pid's open descriptors once their count has held for quiet_s: a
    connection a client has just closed (a status request's) is closed
    by the daemon a moment later, on its loop."""
    n, since = open_fds(pid), time.monotonic()
    deadline = since + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        m = open_fds(pid)
        if m != n:
            n, since = m, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return n


ECODES = {errno.EBUSY: "EBUSY", errno.ETIMEDOUT: "ETIMEDOUT", errno.EMFILE: "EMFILE",
          errno.EPERM: "EPERM"}


class Frozen:
    """with Frozen(pid): the process is stopped (SIGSTOP) inside the block,
    so that what the test does there reaches it all at once when it goes
    on (SIGCONT)."""

    def __init__(self, pid):
        self.pid = pid

    def _state(self):
        with open("/proc/%d/stat" % self.pid) as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2]

    def __enter__(self):
        os.kill(self.pid, signal.SIGSTOP)
        harness.wait_for(lambda: self._state() in "tT", 5, "pid %d to stop" % self.pid)
        return self

    def __exit__(self, *exc):
        os.kill(self.pid, signal.SIGCONT)
        return False


def status_frozen(d):
    """STATUS_REQ sent while the daemon is stopped, so that the frame is
    there when the daemon accepts the connection: the answer's text."""
    with Frozen(d.main_pid()):
        s = connect(d.socket)
        harness.check(s is not None, "the backlog of %s is full" % d.socket)
        s.send(frame(STATUS_REQ))
    fd = s.fileno()
    w = Watch([s])
    harness.wait_for(w.poll, 5, "the answer to STATUS_REQ")
    got = w.got.get(fd, [])
    harness.check(got and got[0][0] == STATUS, "STATUS_REQ got %s" % got)
    return got[0][2]
