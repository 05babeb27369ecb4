#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The unit `cmake --install` puts is one systemd accepts, runs the
installed daemon, and has the directives the daemon relies on.

This build is installed into a prefix of the test's own (installed.py);
the installed PREFIX/lib/systemd/system/loaderd.service must name
PREFIX/bin/loaderd and PREFIX/etc/loaderd/loaderd.conf in its ExecStart
(written at install time from systemd/loaderd.service.in), and goes
through `systemd-analyze verify` as it is; any complaint fails the test
(systemd reports unknown keys and unparsable values as warnings and still
exits 0, so the output is checked, not only the exit status). Its ExecStart
command line, run with --check-config added, must accept the installed
configuration. The installed sysusers.d entry goes through
`systemd-sysusers --dry-run` on an empty root and must create the loaderd
user and group the unit runs as. Then the unit's directives are compared
with what the daemon and the hardening promise: Type=notify and
NotifyAccess=main (READY=1 and WATCHDOG=1 come from the master), the
loaderd user and runtime directory, LimitMEMLOCK=infinity, LimitNOFILE=65536
(room for max_clients and max_handshakes at their largest), restart and stop
behaviour, and sandboxing that leaves /dev/nvidia* visible (a closed
device policy that allows the NVIDIA device classes, no PrivateDevices=,
no MemoryDenyWriteExecute=). ExecReload must run the installed loaderctl's
`reload` (which exits 1 when the daemon refuses: test_reload.py), with
LOADERD_SOCKET set to the unit's socket. loaderd.socket must be installed
beside the service, pass verify too, and listen where the daemon's socket
is, with its owner and mode. `systemd-analyze security --offline=yes`
must rate the service EXPOSURE_MAX (3.0) or less (not rated where
systemd-analyze has no --offline, before systemd 252).

Without systemd as PID 1 (a build machine, a container) the service is
never started here: not its sandbox, the user it runs as, its
RuntimeDirectory or its readiness and watchdog as systemd sees them
(test_notify.py checks what loaderd sends on $NOTIFY_SOCKET).

Skipped (exit 77) where systemd-analyze is not installed.
"""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import installed  # noqa: E402
from harness import check  # noqa: E402

UNIT = None  # the installed unit, set by body()

# (section, key) -> the exact value the unit must set.
REQUIRED = {
    ("Service", "Type"): "notify",
    ("Service", "NotifyAccess"): "main",
    ("Service", "RuntimeDirectoryPreserve"): "yes",
    ("Service", "User"): "loaderd",
    ("Service", "Group"): "loaderd",
    ("Service", "RuntimeDirectory"): "loaderd",
    ("Service", "RuntimeDirectoryMode"): "0750",
    ("Service", "LimitMEMLOCK"): "infinity",
    ("Service", "LimitNOFILE"): "65536",
    ("Service", "Restart"): "on-failure",
    ("Service", "RestartSec"): "2s",
    ("Service", "KillMode"): "mixed",
    ("Service", "TimeoutStopSec"): "30s",
    ("Service", "WatchdogSec"): "30s",
    ("Service", "NoNewPrivileges"): "yes",
    ("Service", "ProtectSystem"): "strict",
    ("Service", "ProtectHome"): "read-only",
    ("Service", "PrivateTmp"): "yes",
    ("Service", "ProtectKernelTunables"): "yes",
    ("Service", "ProtectControlGroups"): "yes",
    ("Service", "RestrictAddressFamilies"): "AF_UNIX",
    ("Service", "LockPersonality"): "yes",
    ("Service", "CapabilityBoundingSet"): "",
    ("Service", "ProtectKernelModules"): "yes",
    ("Service", "ProtectKernelLogs"): "yes",
    ("Service", "ProtectClock"): "yes",
    ("Service", "ProtectHostname"): "yes",
    ("Service", "RestrictNamespaces"): "yes",
    ("Service", "RestrictRealtime"): "yes",
    ("Service", "RestrictSUIDSGID"): "yes",
    ("Service", "SystemCallArchitectures"): "native",
    ("Service", "SystemCallFilter"): "@system-service io_uring_setup io_uring_enter io_uring_register",
    ("Service", "SystemCallErrorNumber"): "EPERM",
    ("Service", "DevicePolicy"): "closed",
    ("Service", "Environment"): None,  # checked in check_directives
}

# The socket unit: what loaderd does itself with socket_group (empty: its
# own group) and socket_mode (0660), on the path the unit's daemon uses.
SOCKET_REQUIRED = {
    ("Socket", "ListenSequentialPacket"): "/run/loaderd/loaderd.sock",
    ("Socket", "SocketUser"): "loaderd",
    ("Socket", "SocketGroup"): "loaderd",
    ("Socket", "SocketMode"): "0660",
    ("Install", "WantedBy"): "sockets.target",
}

# The GPU's device nodes, by class, that DevicePolicy=closed must allow.
DEVICES = ["char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps r"]
# The most `systemd-analyze security --offline=yes` may rate the unit.
EXPOSURE_MAX = 3.0

# Keys the unit must not set: each would break the GPU (device nodes, the
# driver's W+X JIT mappings).
FORBIDDEN = {
    ("Service", "PrivateDevices"): "it hides /dev/nvidia*",
    ("Service", "MemoryDenyWriteExecute"): "the CUDA driver maps W+X memory",
}

# The unit runs as User=loaderd, which the packaging creates
# (systemd/loaderd-sysusers.conf) and which need not exist on a build
# machine. systemd 252's verify does not look the user up, but other
# versions may say it does not exist; such a complaint, and only such a
# complaint, is accepted here.
MISSING_USER = (re.compile(r"\b(user|group)\b", re.IGNORECASE), re.compile(r"\bloaderd\b(?!\.service)"),
                re.compile(r"not exist|unknown|no such|not found|failed to resolve", re.IGNORECASE))


def about_missing_user(line):
    return all(r.search(line) for r in MISSING_USER)


def parse_unit(path):
    """{(section, key): [values]} of a unit file; continuation lines (a
    trailing backslash) are joined as systemd joins them."""
    entries = {}
    section = None
    pending = ""
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = pending + raw.rstrip("\n")
            pending = ""
            stripped = line.strip()
            if not stripped or stripped[0] in "#;":
                continue
            if stripped.endswith("\\"):
                pending = stripped[:-1] + " "
                continue
            if stripped.startswith("["):
                check(stripped.endswith("]"), "%s:%d: malformed section header" % (path, number))
                section = stripped[1:-1]
                continue
            check("=" in stripped, "%s:%d: not a key=value line: %r" % (path, number, stripped))
            check(section is not None, "%s:%d: key outside a section" % (path, number))
            key, value = stripped.split("=", 1)
            entries.setdefault((section, key.strip()), []).append(value.strip())
    return entries


def check_directives(entries):
    for (section, key), want in REQUIRED.items():
        got = entries.get((section, key))
        if key == "Environment":
            check(got is not None and "LOADERD_SOCKET=/run/loaderd/loaderd.sock" in got,
                  "%s: Environment=%s does not set LOADERD_SOCKET=/run/loaderd/loaderd.sock, "
                  "the socket ExecReload's loaderctl asks" % (UNIT, got))
            continue
        check(got is not None, "[%s] %s= is missing from %s (expected %s=%s)"
              % (section, key, UNIT, key, want))
        check(got == [want], "[%s] %s= is %s in %s, expected exactly %r"
              % (section, key, got, UNIT, want))
    for (section, key), why in FORBIDDEN.items():
        got = entries.get((section, key))
        check(got is None or got == ["no"], "[%s] %s=%s must not be set in %s: %s"
              % (section, key, got, UNIT, why))
    allowed = entries.get(("Service", "DeviceAllow"), [])
    for dev in DEVICES:
        check(dev in allowed, "%s: DevicePolicy=closed without DeviceAllow=%s: the GPU would be "
              "denied (DeviceAllow= is %s)" % (UNIT, dev, allowed))


def verify(tmp_dir, units):
    """systemd-analyze verify on the installed units."""
    env = dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="cat")
    # --man=no: the unit names no man pages and the container has none.
    # --recursive-errors=no: complaints about the units it is ordered after
    # (local-fs.target, multi-user.target) belong to this machine, not to us.
    cmd = ["systemd-analyze", "verify", "--man=no", "--recursive-errors=no"] + units
    r = subprocess.run(cmd, cwd=tmp_dir, capture_output=True, text=True, timeout=60, env=env)
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    complaints = [l for l in lines if not about_missing_user(l)]
    check(not complaints, "%s complains about the unit (exit %d):\n%s"
          % (" ".join(cmd), r.returncode, "\n".join(lines)))
    check(r.returncode == 0 or len(lines) > 0,
          "%s exited %d without saying why" % (" ".join(cmd), r.returncode))
    for l in lines:
        print("accepted: %s" % l)


def check_exec_reload(entries, prefix):
    """ExecReload runs the installed loaderctl's reload, which fails when
    the daemon refuses (test_reload.py checks loaderctl's exit status)."""
    want = os.path.join(prefix, installed.BIN, "loaderctl") + " reload"
    got = entries.get(("Service", "ExecReload"))
    check(got == [want], "%s: ExecReload=%s, expected %r" % (UNIT, got, want))
    check(os.access(want.split()[0], os.X_OK), "%s: ExecReload names %s, which is not installed"
          % (UNIT, want.split()[0]))


def check_socket_unit(path):
    entries = parse_unit(path)
    for (section, key), want in SOCKET_REQUIRED.items():
        got = entries.get((section, key))
        check(got == [want], "%s: [%s] %s= is %s, expected exactly %r" % (path, section, key, got, want))


def check_exposure(tmp_dir):
    """systemd-analyze security rates the installed unit EXPOSURE_MAX or less."""
    env = dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="cat")
    cmd = ["systemd-analyze", "security", "--offline=yes", UNIT]
    r = subprocess.run(cmd, cwd=tmp_dir, capture_output=True, text=True, timeout=60, env=env)
    out = r.stdout + r.stderr
    if "--offline" in out and ("unrecognized" in out or "Unknown option" in out or "invalid option" in out):
        print("systemd-analyze has no --offline (systemd before 252): the exposure is not rated here")
        return
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", out)
    check(m is not None, "%s (exit %d) gave no overall exposure level:\n%s" % (" ".join(cmd), r.returncode, out))
    level = float(m.group(1))
    print("systemd-analyze security: %s" % m.group(0))
    check(level <= EXPOSURE_MAX, "%s rates the unit %.1f, above %.1f:\n%s"
          % (" ".join(cmd), level, EXPOSURE_MAX, out))


def check_exec_start(entries, prefix):
    """ExecStart names the installed loaderd and configuration, and that
    command line accepts the installed configuration."""
    want = [os.path.join(prefix, installed.BIN, "loaderd"), "--config", os.path.join(prefix, installed.CONFIG)]
    got = entries.get(("Service", "ExecStart"))
    check(got == [" ".join(want)], "%s: ExecStart=%s, expected %r" % (UNIT, got, " ".join(want)))
    cmd = want + ["--check-config"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    harness.check_no_sanitizer_report(r.stderr, " ".join(cmd))
    check(r.returncode == 0, "the unit's command line with --check-config exited %d: %s"
          % (r.returncode, r.stdout + r.stderr))


def check_sysusers(tmp_dir, prefix):
    """The installed sysusers.d entry creates the user and group the unit
    names (on an empty root, without writing)."""
    if shutil.which("systemd-sysusers") is None:
        print("systemd-sysusers is not installed: the sysusers.d entry is not checked")
        return
    root = os.path.join(tmp_dir, "sysroot")
    os.makedirs(root)
    cmd = ["systemd-sysusers", "--root=" + root, "--dry-run", os.path.join(prefix, installed.SYSUSERS)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr
    check(r.returncode == 0, "%s exited %d: %s" % (" ".join(cmd), r.returncode, out))
    check("Creating group 'loaderd'" in out and "Creating user 'loaderd'" in out,
          "%s does not create the user and group loaderd: %s" % (" ".join(cmd), out))


def body(env):
    global UNIT
    if shutil.which("systemd-analyze") is None:
        raise harness.TestSkip("systemd-analyze is not installed")
    prefix = installed.install(env)
    UNIT = os.path.join(prefix, installed.UNIT)
    entries = parse_unit(UNIT)
    check_directives(entries)
    check_exec_start(entries, prefix)
    check_exec_reload(entries, prefix)
    socket_unit = os.path.join(os.path.dirname(UNIT), "loaderd.socket")
    check(os.path.exists(socket_unit), "%s is not installed beside the service" % socket_unit)
    check_socket_unit(socket_unit)
    verify(env.dir, [UNIT, socket_unit])
    check_exposure(env.dir)
    check_sysusers(env.dir, prefix)


if __name__ == "__main__":
    harness.run_test("test_systemd_unit", body)
