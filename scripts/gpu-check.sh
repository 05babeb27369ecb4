#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu-check.sh: build loaderd on a GPU machine that has a compiler, cmake and
# the CUDA toolkit but none of loaderd's -dev packages, then run the whole
# test suite (GPU tests included), the GPU transfer benchmark, device
# delivery by batch size and clients (bench/device_bench.py), the image
# benchmark against the DataLoader and the end-to-end training benchmark
# (bench/train_bench.py: examples/train_resnet.py fed by loaderd, by the
# DataLoader and by synthetic data; it needs torch and torchvision), and JPEG
# decoding on the GPU's hardware engines (bench/nvjd_bench.c, on a tree of
# $LOADERD_NVJD_BENCH_IMAGES mkjpeg files, from 1, 2 and 4 host threads),
# and the whole GPU decode path against the CPU path on the same files
# (bench/gpu_decode_bench.c), GPU decoding beside a training process on the
# same GPU, without and with CUDA MPS (bench/beside_training.py), what a
# training process fed by loaderd under MPS loses (bench/fed_training.py), and LLM
# token batches against megatron-core's
# GPTDataset through a DataLoader (bench/token_bench.py with
# bench/megatron_peer.py).
#
# nvJPEG comes with the toolkit there: CMake takes /usr/local/cuda's
# nvjpeg.h, and the GPU tests (gpu.nvjd_check among them) and the benchmark
# load the libnvjpeg.so.13 beside it.
#
# libmicrohttpd (the metrics endpoint) is linked shared even there: its
# static archive needs GnuTLS's; it and the libraries it loads travel as
# packages too and are found through LD_LIBRARY_PATH.
# The Debian -dev packages travel as .deb files in .gpu/debs (fetch them
# with `scripts/gpu-check.sh --fetch` on a Debian machine) and are unpacked
# into a private prefix, never into /; the build links them statically.
# The megatron-core wheel (Python 3.12) and packaging, which it imports,
# travel in .gpu/wheels (fetched by --fetch too); bench/token_bench.py
# installs them into a directory of its own run, never into the system.
# The pyseccomp wheel and .gpu/syscall-groups.txt (systemd-analyze's listing
# of the system-call groups, written by --fetch) let
# gpu.test_gpu_syscall_filter run the daemon's CUDA work under the unit's
# filter on machines without systemd or python3-seccomp.
#
# LOADERD_GPU_TESTS=0, LOADERD_GPU_BENCH=0, LOADERD_GPU_DEVICE_BENCH=0,
# LOADERD_GPU_IMAGE_BENCH=0, LOADERD_GPU_TRAIN_BENCH=0, LOADERD_GPU_NVJD_BENCH=0,
# LOADERD_GPU_BESIDE_BENCH=0, LOADERD_GPU_FED_BENCH=0, LOADERD_GPU_NODE_BENCH=0,
# LOADERD_GPU_TOKEN_BENCH=0,
# LOADERD_GPU_ALL_TESTS=0
# skip a part (the node benchmark, bench/node_bench.py, runs only where there
# are 2 GPUs or more);
# LOADERD_BENCH_ARGS, LOADERD_DEVICE_BENCH_ARGS, LOADERD_IMAGE_BENCH_ARGS,
# LOADERD_TRAIN_BENCH_ARGS, LOADERD_NVJD_BENCH_ARGS,
# LOADERD_GPU_DECODE_BENCH_ARGS, LOADERD_BESIDE_BENCH_ARGS, LOADERD_FED_BENCH_ARGS,
# LOADERD_NODE_BENCH_ARGS and
# LOADERD_TOKEN_BENCH_ARGS add arguments to the benchmarks.
# Logs go to $OUT (default /tmp/loaderd-gpu-out): build.log, version.txt,
# gpu-tests.log, bench/, device/, image/, train/, nvjd/, beside-plain/,
# beside-mps/, fed/, node/, tokens/ and
# tests.log (the rest of the suite), in that order.
set -uo pipefail
cd "$(dirname "$0")/.."
DEBS="libuv1-dev libuv1 liburing-dev liburing2 libinih-dev libinih1 libcmocka-dev libcmocka0 libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16 zlib1g-dev libjansson-dev libjansson4 libmicrohttpd-dev libmicrohttpd12 libgnutls30 libgmp10 libhogweed6 libidn2-0 libnettle8 libp11-kit0 libtasn1-6 libunistring2 libffi8"
if [ "${1:-}" = "--fetch" ]; then
	mkdir -p .gpu/wheels .gpu/debs
	pip download megatron-core==0.16.1 "packaging>=24.2" --no-deps --only-binary=:all: \
		--python-version 3.12 --platform manylinux_2_28_x86_64 -d .gpu/wheels || exit 1
	# The unit's system-call filter on a GPU (gpu.test_gpu_syscall_filter):
	# pyseccomp, and the filter's groups as this machine's systemd lists them.
	pip download pyseccomp==0.1.2 --no-deps -d .gpu/wheels || exit 1
	SYSTEMD_PAGER=cat systemd-analyze syscall-filter > .gpu/syscall-groups.txt || exit 1
	cd .gpu/debs && exec apt-get download $DEBS
fi
OUT=${OUT:-/tmp/loaderd-gpu-out}
B=${LOADERD_GPU_BUILD:-/tmp/loaderd-gpu-build}
D=/tmp/loaderd-deps
mkdir -p "$OUT" "$D"
for f in .gpu/debs/*.deb; do dpkg -x "$f" "$D"; done
export PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_LIBDIR=$D/usr/lib/x86_64-linux-gnu/pkgconfig
# Multiarch headers (jconfig.h) of the carried packages before the system's:
# a jpeglib.h must come with the jconfig.h of the library it links.
export CPATH=$D/usr/include/x86_64-linux-gnu
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/usr/local/cuda/bin:$PATH
nproc=$(nproc)
# What gpu.test_gpu_syscall_filter needs where systemd and python3-seccomp are not.
[ -f .gpu/syscall-groups.txt ] && export LOADERD_SYSCALL_GROUPS=$PWD/.gpu/syscall-groups.txt
for w in .gpu/wheels/pyseccomp-*.whl; do
	[ -f "$w" ] && python3 -c 'import zipfile, sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
		"$w" "$D/pyseccomp" && export LOADERD_PYSECCOMP=$D/pyseccomp
done
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DLOADERD_STATIC_DEPS=ON -DLOADERD_WERROR=ON \
	&& cmake --build "$B" -j"$nproc"; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
"$B/bin/loaderd" --version | tee "$OUT/version.txt"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$OUT/version.txt" 2>&1
rc=0
if [ "${LOADERD_GPU_TESTS:-1}" = 1 ]; then
	ctest --test-dir "$B" -L gpu --output-on-failure --timeout 300 > "$OUT/gpu-tests.log" 2>&1 || rc=1
	grep -E "tests passed|Failed|Passed|Not Run|Skipped" "$OUT/gpu-tests.log" | tail -20
fi
if [ "${LOADERD_GPU_BENCH:-1}" = 1 ]; then
	mkdir -p "$OUT/bench"
	python3 bench/gpu_bench.py --build "$B" --out "$OUT/bench" ${LOADERD_BENCH_ARGS:-} 2>&1 | tail -40 || rc=1
fi
if [ "${LOADERD_GPU_DEVICE_BENCH:-1}" = 1 ]; then
	mkdir -p "$OUT/device"
	python3 bench/device_bench.py --build "$B" --out "$OUT/device" ${LOADERD_DEVICE_BENCH_ARGS:-} 2>&1 |
		tail -60 || rc=1
fi
if [ "${LOADERD_GPU_IMAGE_BENCH:-1}" = 1 ]; then
	mkdir -p "$OUT/image"
	python3 bench/image_bench.py --build "$B" --out "$OUT/image" ${LOADERD_IMAGE_BENCH_ARGS:-} 2>&1 |
		tail -30 || rc=1
fi
if [ "${LOADERD_GPU_TRAIN_BENCH:-1}" = 1 ]; then
	# The examples import the Python package the build staged in $B/python.
	mkdir -p "$OUT/train"
	PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}" python3 bench/train_bench.py --build "$B" \
		--out "$OUT/train" ${LOADERD_TRAIN_BENCH_ARGS:-} 2>&1 | tail -30 || rc=1
fi
if [ "${LOADERD_GPU_NVJD_BENCH:-1}" = 1 ] && [ -x "$B/bin/loaderd-nvjd-bench" ]; then
	# 300-600 px, quality 90, about 80 KB a file: as GPU.md's measurements.
	mkdir -p "$OUT/nvjd"
	images=${LOADERD_NVJD_BENCH_IMAGES:-4000}
	tree=/tmp/loaderd-nvjd-tree-$images
	[ -d "$tree" ] || "$B/bin/mkjpeg" --tree "$tree" --classes 10 --per-class $((images / 10)) \
		--min-side 300 --max-side 600 --seed 1 > "$OUT/nvjd/tree.txt" 2>&1 || rc=1
	for threads in 1 2 4; do
		"$B/bin/loaderd-nvjd-bench" --dir "$tree" --batch 256 --threads $threads \
			${LOADERD_NVJD_BENCH_ARGS:-} 2>&1 | tee -a "$OUT/nvjd/bench.txt" | tail -3
		status=${PIPESTATUS[0]}
		[ "$status" -eq 0 ] || [ "$status" -eq 77 ] || rc=1
	done
	if [ -x "$B/bin/loaderd-gpu-decode-bench" ]; then
		"$B/bin/loaderd-gpu-decode-bench" --dir "$tree" --batch 256 --threads 1,2,4 \
			${LOADERD_GPU_DECODE_BENCH_ARGS:-} 2>&1 | tee "$OUT/nvjd/gpu-decode.txt" | tail -8
		status=${PIPESTATUS[0]}
		[ "$status" -eq 0 ] || [ "$status" -eq 77 ] || rc=1
	fi
fi
if [ "${LOADERD_GPU_BESIDE_BENCH:-1}" = 1 ] && [ -x "$B/bin/loaderd-nvjd-bench" ]; then
	# A training process beside GPU decoding, without and with MPS.
	for mode in plain mps; do
		python3 bench/beside_training.py --build "$B" --out "$OUT/beside-$mode" --keep \
			$([ $mode = mps ] && echo --mps) ${LOADERD_BESIDE_BENCH_ARGS:-} 2>&1 | tail -12
		status=${PIPESTATUS[0]}
		[ "$status" -eq 0 ] || [ "$status" -eq 77 ] || rc=1
	done
fi
if [ "${LOADERD_GPU_FED_BENCH:-1}" = 1 ] && [ -x "$B/bin/loaderd-decoder" ]; then
	# A training process fed by loaderd's GPU decoding under MPS, taken apart.
	PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}" python3 bench/fed_training.py --build "$B" \
		--out "$OUT/fed" --keep --mps ${LOADERD_FED_BENCH_ARGS:-} 2>&1 | tail -12
	status=${PIPESTATUS[0]}
	[ "$status" -eq 0 ] || [ "$status" -eq 77 ] || rc=1
fi
gpus=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | grep -c GPU-)
if [ "${LOADERD_GPU_NODE_BENCH:-1}" = 1 ] && [ "$gpus" -ge 2 ]; then
	mkdir -p "$OUT/node"
	PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}" python3 bench/node_bench.py --build "$B" \
		--out "$OUT/node" ${LOADERD_NODE_BENCH_ARGS:-} 2>&1 | tail -30 || rc=1
fi
if [ "${LOADERD_GPU_TOKEN_BENCH:-1}" = 1 ]; then
	# examples/train_tokens.py, which it runs, imports the package staged in $B/python.
	mkdir -p "$OUT/tokens"
	PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}" python3 bench/token_bench.py --build "$B" \
		--out "$OUT/tokens" ${LOADERD_TOKEN_BENCH_ARGS:-} 2>&1 | tail -30 || rc=1
fi
if [ "${LOADERD_GPU_ALL_TESTS:-1}" = 1 ]; then
	ctest --test-dir "$B" -LE gpu -j"$nproc" --output-on-failure > "$OUT/tests.log" 2>&1 || rc=1
	grep -E "tests passed|\*\*\*Failed|Timeout" "$OUT/tests.log" | tail -10
fi
exit $rc
