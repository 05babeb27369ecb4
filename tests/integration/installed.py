# SPDX-License-Identifier: Apache-2.0
"""installed: this build installed into a test's own prefix, for the tests
of what `cmake --install` puts (test_install.py, test_systemd_unit.py).

install(env) runs `cmake --install $LOADERD_BUILD_DIR --prefix PREFIX`
(PREFIX in the test's directory) with the cmake that configured the build
($LOADERD_CMAKE), and returns PREFIX. The paths below are where
systemd/CMakeLists.txt and the install rules of the other folders put
things under a prefix other than /usr.
"""

import os
import subprocess

import harness
from harness import check

BIN = "bin"
PROGRAMS = os.path.join("libexec", "loaderd")
UNIT = os.path.join("lib", "systemd", "system", "loaderd.service")
SYSUSERS = os.path.join("lib", "sysusers.d", "loaderd.conf")
CONFIG = os.path.join("etc", "loaderd", "loaderd.conf")
CONFIG_EXAMPLE = os.path.join("share", "doc", "loaderd", "loaderd.conf.example")
PYTHON = os.path.join("lib", "python3", "dist-packages")


def cmake():
    path = os.environ.get("LOADERD_CMAKE")
    if not path:
        raise harness.TestSkip("LOADERD_CMAKE is not set (run through ctest)")
    return path


def install(env, name="prefix"):
    """This build installed under env.path(name): the prefix."""
    prefix = env.path(name)
    cmd = [cmake(), "--install", harness.build_dir(), "--prefix", prefix]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "%s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout + r.stderr))
    return prefix


def read_unit_value(path, section, key):
    """The one value of `key` in `[section]` of a unit file."""
    found, current = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                current = line[1:-1]
            elif current == section and line.split("=", 1)[0].strip() == key:
                found.append(line.split("=", 1)[1].strip())
    check(len(found) == 1, "%s: [%s] %s= is set %d times, expected once" % (path, section, key, len(found)))
    return found[0]
