#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Debian package (packaging/deb.cmake) holds the install with the
prefix /usr, and what it holds runs.

cpack builds it into the test's directory (`cpack --config
$BUILD/CPackConfig.cmake -B DIR`). Its contents (`dpkg-deb -c`) must
include the programs (loaderd, loaderctl, libexec/loaderd/loaderd-worker,
and loaderd-decoder where the build has it), the client library and
header, the unit in /usr/lib/systemd/system, the sysusers.d entry, the
configuration in /etc/loaderd and the Python package; its control
(`dpkg-deb -I`, `-f`) a Depends that names libuv1, liburing2 and
libjpeg62-turbo, /etc/loaderd/loaderd.conf as a conffile, and a postinst
that creates the user. Extracted (`dpkg-deb -x`) into a directory, the
unit's ExecStart names /usr/bin/loaderd and /etc/loaderd/loaderd.conf, and
the extracted loaderd, run from there, finds the extracted worker: its
`--check-config` of a configuration with a pipeline passes.

Not covered here: installing the package (dpkg -i changes the machine)
and its postinst under a running systemd.

Skipped (exit 77) where cpack or dpkg-deb is missing.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402


def run(cmd, timeout_s=300):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    check(r.returncode == 0, "%s exited %d: %s" % (" ".join(cmd), r.returncode, (r.stdout + r.stderr)[-3000:]))
    return r.stdout


def body(env):
    cpack = os.environ.get("LOADERD_CPACK") or shutil.which("cpack")
    if not cpack or not os.path.exists(cpack) or shutil.which("dpkg-deb") is None:
        raise harness.TestSkip("cpack or dpkg-deb is not installed")
    out_dir = env.path("deb")
    run([cpack, "--config", os.path.join(harness.build_dir(), "CPackConfig.cmake"), "-B", out_dir])
    debs = [n for n in os.listdir(out_dir) if n.endswith(".deb")]
    check(len(debs) == 1, "cpack made %s in %s, expected one .deb" % (debs, out_dir))
    deb = os.path.join(out_dir, debs[0])

    listing = run(["dpkg-deb", "-c", deb])
    print(listing)
    paths = {line.split()[5].lstrip(".") for line in listing.splitlines() if len(line.split()) >= 6}
    want = ["/usr/bin/loaderd", "/usr/bin/loaderctl", "/usr/libexec/loaderd/loaderd-worker",
            "/usr/lib/systemd/system/loaderd.service", "/usr/lib/systemd/system/loaderd.socket",
            "/usr/lib/sysusers.d/loaderd.conf",
            "/etc/loaderd/loaderd.conf", "/usr/include/loaderd.h",
            "/usr/lib/python3/dist-packages/loaderd/__init__.py",
            "/usr/lib/python3/dist-packages/loaderd/libloaderd_client.so",
            "/usr/share/doc/loaderd/LICENSE"]
    if os.path.exists(os.path.join(harness.build_dir(), "bin", "loaderd-decoder")):
        want.append("/usr/libexec/loaderd/loaderd-decoder")
    missing = [p for p in want if p not in paths]
    check(not missing, "the package lacks %s" % ", ".join(missing))
    check(any(p.endswith("/libloaderd_client.so.0") for p in paths), "the package has no libloaderd_client.so.0")

    depends = run(["dpkg-deb", "-f", deb, "Depends"])
    for name in ("libuv1", "liburing2", "libjpeg62-turbo"):
        check(name in depends, "Depends: %s names no %s" % (depends.strip(), name))
    control = env.path("control")
    run(["dpkg-deb", "-e", deb, control])
    with open(os.path.join(control, "conffiles")) as f:
        check("/etc/loaderd/loaderd.conf" in f.read().split(), "/etc/loaderd/loaderd.conf is not a conffile")
    with open(os.path.join(control, "postinst")) as f:
        check("systemd-sysusers" in f.read(), "the postinst does not run systemd-sysusers")
    run(["sh", "-n", os.path.join(control, "postinst")])
    run(["sh", "-n", os.path.join(control, "postrm")])

    root = env.path("root")
    run(["dpkg-deb", "-x", deb, root])
    unit = os.path.join(root, "usr", "lib", "systemd", "system", "loaderd.service")
    with open(unit) as f:
        exec_start = [l.strip() for l in f if l.startswith("ExecStart=")]
    check(exec_start == ["ExecStart=/usr/bin/loaderd --config /etc/loaderd/loaderd.conf"],
          "the package's unit: %s" % exec_start)
    data = env.make_raw("data.bin", 40, 4)
    config = env.config("deb", {"p": {"source": "raw:" + data, "record_bytes": 4, "batch_size": 8}})
    out = run([os.path.join(root, "usr", "bin", "loaderd"), "--check-config", "--config", config], 60)
    check("1 pipeline" in out, "the extracted loaderd's --check-config: %s" % out)


if __name__ == "__main__":
    harness.run_test("test_deb", body)
