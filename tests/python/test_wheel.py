#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The wheel: tagged for its platform, numpy optional, and working in fresh
virtual environments with torch alone, numpy alone, or a clear error with
neither.

- `pip wheel --no-deps` of the staged package (a copy of it) builds
  loaderd-VERSION-py3-none-PLATFORM.whl (PLATFORM this interpreter's,
  linux_x86_64 on x86-64), with Root-Is-Purelib false, numpy required only
  by the `numpy` extra, and the client library inside, which needs no
  CUDA library (its NEEDED entries: no libcuda, libcudart or libnvjpeg;
  the CUDA runtime is linked in statically, the driver loaded when a
  device is asked for).
- `pip install "WHEEL[numpy]"` into a fresh venv (numpy from the index):
  numpy 2 or whatever the index gives, no torch; the package delivers an
  epoch of a raw pipeline (host delivery) as numpy arrays, byte for byte.
- `pip install WHEEL` into a fresh venv: no numpy is installed, `import
  loaderd` works, and a Loader says that neither torch nor numpy can be
  imported and names the extra.
- The wheel in a venv that sees the system's torch with numpy made
  unimportable (None in sys.modules, as when it is not installed): the
  package delivers the same epoch as torch tensors.

Skipped (exit 77) where no venv can be made or the index cannot be
reached; the torch case is left out where $LOADERD_TEST_FRAMEWORKS does
not list torch (the sanitizer build).
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_harness as ch  # noqa: E402
import harness  # noqa: E402
from harness import check  # noqa: E402

N, RECORD, BATCH = 60, 8, 7

PROBE = r"""
import sys
if sys.argv[2] == "no-numpy":
    sys.modules["numpy"] = None      # import numpy raises ImportError, as when it is not installed
import loaderd
x = loaderd.Loader("p", socket=sys.argv[1], device="cpu")
out = []
for b in x:
    t = b["data"]
    out.append(bytes(t.reshape(-1).tolist()))  # uint8: neither needs numpy
    kind = type(t).__module__ + "." + type(t).__name__
print(loaderd.__file__)
print(kind)
print(b"".join(out).hex())
print(" ".join("%s %s" % (m, sys.modules[m].__version__) for m in ("numpy", "torch") if sys.modules.get(m)))
"""


def pip_env():
    """The environment of pip: no sanitizer runtime preloaded."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}


def make_venv(env, name, system_site=False):
    venv = env.path(name)
    cmd = [sys.executable, "-m", "venv", venv] + (["--system-site-packages"] if system_site else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=pip_env())
    if r.returncode != 0:
        raise ch.TestSkip("cannot make a virtual environment (python3-venv missing?): %s" % r.stderr[-300:])
    return os.path.join(venv, "bin", "python")


def pip_install(python, args, index=True):
    cmd = [python, "-m", "pip", "install", "--quiet"] + ([] if index else ["--no-index", "--no-deps"]) + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=pip_env())
    out = r.stdout + r.stderr
    if r.returncode != 0 and index and any(w in out for w in ("NewConnectionError", "Could not find a version",
                                                               "No matching distribution", "Network is unreachable")):
        raise ch.TestSkip("the package index cannot be reached: %s" % out[-400:])
    check(r.returncode == 0, "%s exited %d: %s" % (" ".join(cmd), r.returncode, out[-2000:]))


def has_module(python, name):
    r = subprocess.run([python, "-c", "import importlib.util, sys; "
                        "sys.exit(0 if importlib.util.find_spec(%r) else 1)" % name],
                       capture_output=True, timeout=60, env=pip_env())
    return r.returncode == 0


def probe(env, python, sock, mode):
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOADERD_CLIENT_LIB")}
    r = subprocess.run([python, "-c", PROBE, sock, mode], capture_output=True, text=True, timeout=120,
                       env=clean, cwd=env.dir)
    return r


def build_wheel(env):
    src = env.path("src")
    shutil.copytree(os.path.join(harness.build_dir(), "python"), src)
    dist = env.path("dist")
    have_tools = subprocess.run([sys.executable, "-c", "import setuptools, wheel"], capture_output=True,
                                env=pip_env()).returncode == 0
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist]
    cmd += (["--no-build-isolation"] if have_tools else []) + [src]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=pip_env())
    check(r.returncode == 0, "%s exited %d: %s" % (" ".join(cmd), r.returncode, (r.stdout + r.stderr)[-2000:]))
    wheels = os.listdir(dist)
    check(len(wheels) == 1, "pip wheel made %s" % wheels)
    return os.path.join(dist, wheels[0])


def check_wheel(path, env):
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    name = os.path.basename(path)
    check(name.endswith("-py3-none-%s.whl" % platform), "the wheel is %s, expected a py3-none-%s one"
          % (name, platform))
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        info = [n for n in names if n.endswith(".dist-info/WHEEL")]
        meta = [n for n in names if n.endswith(".dist-info/METADATA")]
        check(len(info) == 1 and len(meta) == 1, "the wheel's dist-info: %s" % names)
        wheel = z.read(info[0]).decode()
        metadata = z.read(meta[0]).decode()
        check("loaderd/libloaderd_client.so" in names, "the wheel has no loaderd/libloaderd_client.so: %s" % names)
        lib = env.path("libloaderd_client.so")
        with open(lib, "wb") as f:
            f.write(z.read("loaderd/libloaderd_client.so"))
    check("Root-Is-Purelib: false" in wheel, "the wheel says it is pure:\n%s" % wheel)
    check("Tag: py3-none-%s" % platform in wheel, "the wheel's tag:\n%s" % wheel)
    requires = [l for l in metadata.splitlines() if l.startswith("Requires-Dist:")]
    numpy = [l for l in requires if "numpy" in l]
    check(numpy and all("extra ==" in l and "numpy" in l.split("extra ==")[1] for l in numpy),
          "numpy must be required only by the numpy extra: %s" % requires)
    r = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "readelf -d %s: %s" % (lib, r.stderr))
    needed = [l.split("[")[1].rstrip("]") for l in r.stdout.splitlines() if "(NEEDED)" in l]
    cuda = [n for n in needed if any(n.startswith(p) for p in ("libcuda", "libcudart", "libnvjpeg"))]
    check(not cuda, "the wheel's library needs %s at load time (all it needs: %s)" % (cuda, needed))
    print("wheel %s; its library needs %s" % (name, ", ".join(needed)))


def body(env):
    ch.import_loaderd()
    wheel = build_wheel(env)
    check_wheel(wheel, env)

    data = env.make_raw("data.bin", N, RECORD, seed=3)
    with open(data, "rb") as f:
        want = f.read()
    d = env.start_daemon(env.config("w", {"p": {"source": "raw:" + data, "record_bytes": RECORD,
                                                "batch_size": BATCH, "shuffle": "false"}}))

    # numpy alone, from the index.
    python = make_venv(env, "with-numpy")
    pip_install(python, [wheel + "[numpy]"])
    check(has_module(python, "numpy") and not has_module(python, "torch"),
          "the numpy venv: numpy %s, torch %s" % (has_module(python, "numpy"), has_module(python, "torch")))
    r = probe(env, python, d.socket, "as-is")
    check(r.returncode == 0, "with numpy alone the package failed (%d): %s" % (r.returncode, r.stderr[-1500:]))
    where, kind, got = r.stdout.split("\n")[:3]
    check(where.startswith(env.path("with-numpy")), "imported loaderd from %s" % where)
    check(kind == "numpy.ndarray", "with numpy alone a tensor is a %s" % kind)
    check(bytes.fromhex(got) == want, "with numpy alone the epoch's bytes differ from the file's")
    print("numpy alone: %s, %s" % (kind, r.stdout.split("\n")[3]))

    # Neither: the wheel pulls in no numpy, imports, and says what to install.
    python = make_venv(env, "bare")
    pip_install(python, [wheel])
    check(not has_module(python, "numpy"), "pip install of the wheel without extras installed numpy")
    r = probe(env, python, d.socket, "as-is")
    check(r.returncode != 0 and "neither torch nor numpy can be imported" in r.stderr
          and "loaderd[numpy]" in r.stderr, "with neither torch nor numpy: exit %d, %s"
          % (r.returncode, r.stderr[-1500:]))
    check("ImportError" in r.stderr, "with neither, the error is not an ImportError: %s" % r.stderr[-800:])

    # torch alone: the system's torch, numpy unimportable.
    if "torch" in ch.frameworks():
        python = make_venv(env, "with-torch", system_site=True)
        pip_install(python, [wheel], index=False)
        r = probe(env, python, d.socket, "no-numpy")
        check(r.returncode == 0, "with torch and no numpy the package failed (%d): %s"
              % (r.returncode, r.stderr[-1500:]))
        where, kind, got = r.stdout.split("\n")[:3]
        check(where.startswith(env.path("with-torch")), "imported loaderd from %s" % where)
        check(kind == "torch.Tensor", "with torch a tensor is a %s" % kind)
        check(bytes.fromhex(got) == want, "with torch the epoch's bytes differ from the file's")
        print("torch alone: %s, %s" % (kind, r.stdout.split("\n")[3]))
    d.stop()


if __name__ == "__main__":
    harness.run_test("test_wheel", body)
