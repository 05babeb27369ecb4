#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-demo: builds loaderd, makes a sample dataset, starts the daemon and
# streams from it with loaderctl so you can see what it does and how fast:
#   1. installs missing build dependencies (scripts/install-deps.sh);
#   2. configures and builds a Release tree in ./build, and installs the
#      Python package into build/venv;
#   3. writes a 128 MiB raw dataset (32768 records of 4096 bytes), 4M
#      uint16 tokens and an ImageFolder tree of 600 JPEGs (mkjpeg) into a
#      temporary directory, with a config beside them;
#   4. starts loaderd (workers = cores - 1) and waits until it answers;
#   5. consumes 3 epochs of the raw pipeline, 1 of the token pipeline and 2
#      of the image pipeline with loaderctl, printing throughput, then 2
#      epochs of the raw pipeline from Python (the loaderd package in
#      build/venv), and an epoch of a pipeline the Python job declares
#      itself (the config's job_roots lets it read the demo's data); writes the image pipeline's first batch as a contact
#      sheet to build/demo-batch0.png (loaderctl peek); prints the daemon's
#      status;
#   6. stops loaderd with SIGTERM and removes the temporary directory.
# Exits non-zero if any step fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cores=$(nproc)

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$cores"
bin=$root/build/bin
# The Python package, into a virtual environment over the interpreter the
# build chose for the tests (the one with numpy and torch: tests/CMakeLists.txt),
# seeing its packages. A venv left over from another interpreter is remade.
python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' build/CMakeCache.txt)
python=${python:-python3}
if [ ! -x build/venv/bin/python ] || ! build/venv/bin/python -c 'import numpy' 2>/dev/null; then
	rm -rf build/venv
	"$python" -m venv --system-site-packages build/venv
fi
build/venv/bin/python -m pip install --quiet --no-index --no-build-isolation --no-deps \
	--force-reinstall build/python

work=$(mktemp -d "${TMPDIR:-/tmp}/loaderd-demo.XXXXXX")
daemon_pid=
cleanup() {
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

"$python" tools/make_dataset.py raw --out "$work/images.bin" --records 32768 --record-bytes 4096 --seed 1
"$python" tools/make_dataset.py tokens --out "$work/tokens.bin" --tokens 4194304 --dtype uint16 \
	--vocab 50257 --seed 2
"$bin/mkjpeg" --tree "$work/tree" --classes 6 --per-class 100 --min-side 300 --max-side 600 --seed 3

workers=$((cores > 1 ? cores - 1 : 1))
sock=$work/loaderd.sock
cat > "$work/loaderd.ini" <<INI
[daemon]
socket = $sock
workers = $workers
; jobs may declare their own pipelines on the demo's data, batches of up to 16 MiB
job_roots = $work
job_batch_bytes = 16M

[pipeline.records]
source = raw:$work/images.bin
record_bytes = 4096
batch_size = 64
seed = 1

[pipeline.tokens]
source = tokens:$work/tokens.bin
token_dtype = uint16
seq_len = 2048
token_output = int64
batch_size = 8
seed = 2

[pipeline.train]
source = imagefolder:$work/tree
transform = random_resized_crop(224) hflip(0.5)
batch_size = 64
seed = 3
INI
echo "run-demo: config $work/loaderd.ini:"
cat "$work/loaderd.ini"

"$bin/loaderd" --config "$work/loaderd.ini" &
daemon_pid=$!

# Up means `loaderctl status` answers; give up after 30 s or if it exits.
deadline=$((SECONDS + 30))
until "$bin/loaderctl" --socket "$sock" status >/dev/null 2>&1; do
	if ! kill -0 "$daemon_pid" 2>/dev/null; then
		echo "run-demo: loaderd exited during start" >&2
		exit 1
	fi
	if [ "$SECONDS" -ge "$deadline" ]; then
		echo "run-demo: loaderd did not answer within 30 s" >&2
		exit 1
	fi
	sleep 0.1
done

echo "run-demo: 3 epochs of records (64 x 4096-byte records per batch)"
"$bin/loaderctl" --socket "$sock" consume --pipeline records --epochs 3
echo "run-demo: 1 epoch of tokens (8 x 2049 tokens per batch, widened to int64)"
"$bin/loaderctl" --socket "$sock" consume --pipeline tokens --epochs 1
echo "run-demo: 2 epochs of images (64 JPEGs per batch, random_resized_crop(224) hflip(0.5), uint8)"
"$bin/loaderctl" --socket "$sock" consume --pipeline train --epochs 2
echo "run-demo: 2 epochs of records from Python (build/venv: import loaderd)"
build/venv/bin/python - "$sock" <<'PY'
import sys, time
import loaderd

loader = loaderd.Loader("records", socket=sys.argv[1], device="cpu", framework="numpy")
start, rows, nbytes = time.perf_counter(), 0, 0
for epoch in range(2):
    loader.set_epoch(epoch)
    for batch in loader:
        rows += batch.rows
        nbytes += batch["data"].nbytes
seconds = time.perf_counter() - start
print("python: %d batches of %d, %d samples, %.0f samples/s, %.0f MB/s" %
      (2 * len(loader), loader.batch_size, rows, rows / seconds, nbytes / seconds / 1e6))
loader.close()
PY
echo "run-demo: 1 epoch of a pipeline the job declares itself (batches of 128 records)"
build/venv/bin/python - "$sock" "$work/images.bin" <<'PY'
import sys
import loaderd

loader = loaderd.Loader(source="raw:" + sys.argv[2], options={"record_bytes": 4096},
                        batch_size=128, seed=4, socket=sys.argv[1], device="cpu",
                        framework="numpy")
rows = sum(batch.rows for batch in loader)
print("python: declared pipeline %s: %d batches of %d, %d samples" %
      (loader.pipeline, len(loader), loader.batch_size, rows))
loader.close()
PY
"$bin/loaderctl" --socket "$sock" peek --pipeline train --columns 8 --out "$root/build/demo-batch0.png"
"$bin/loaderctl" --socket "$sock" status

kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=
if [ "$rc" -ne 0 ]; then
	echo "run-demo: loaderd exited with status $rc after SIGTERM" >&2
	exit 1
fi
echo "run-demo: done"
