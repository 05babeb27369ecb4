#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""seccomp_exec: runs a command under the system-call filter and address
family restriction a systemd unit would give it, without systemd.

  seccomp_exec.py SYSCALLS_FILE ERRNO FAMILY COMMAND...

SYSCALLS_FILE lists the allowed system calls, one a line (the unit's
SystemCallFilter= expanded by unitfilter.py); every other call fails with
ERRNO (SystemCallErrorNumber=). FAMILY (RestrictAddressFamilies=, one
family, e.g. AF_UNIX) is the only one socket() and socketpair() accept;
others fail with EAFNOSUPPORT, as under systemd. no_new_privs is
set (NoNewPrivileges=yes), then COMMAND is exec'ed: it and every process it
forks run under the filter. Needs the libseccomp binding (python3-seccomp),
or pyseccomp (the same API over ctypes, from the Python package index;
$LOADERD_PYSECCOMP may name the directory that holds it).
"""

import errno
import os
import socket
import sys

# A directory holding pyseccomp, where neither binding is installed
# (scripts/gpu-check.sh unpacks its wheel there on the GPU machines).
if os.environ.get("LOADERD_PYSECCOMP"):
    sys.path.append(os.environ["LOADERD_PYSECCOMP"])
try:
    import seccomp
except ImportError:  # pyseccomp: the same API over ctypes, from the package index
    import pyseccomp as seccomp


def main(argv):
    if len(argv) < 5:
        sys.exit("usage: seccomp_exec.py SYSCALLS_FILE ERRNO FAMILY COMMAND...")
    with open(argv[1]) as f:
        names = [l.strip() for l in f if l.strip()]
    deny = getattr(errno, argv[2])
    family = getattr(socket, argv[3])
    flt = seccomp.SyscallFilter(defaction=seccomp.ERRNO(deny))
    for name in names:
        try:
            if name in ("socket", "socketpair"):
                flt.add_rule(seccomp.ALLOW, name, seccomp.Arg(0, seccomp.EQ, family))
                flt.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), name,
                             seccomp.Arg(0, seccomp.NE, family))
            else:
                flt.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError, OSError):
            pass  # not a call of this architecture or kernel: nothing to allow
    flt.load()  # sets no_new_privs first
    os.execvp(argv[4], argv[4:])


if __name__ == "__main__":
    main(sys.argv)
