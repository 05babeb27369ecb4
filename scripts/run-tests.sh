#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-tests: everything CI checks, from a clean clone.
#   deps      scripts/install-deps.sh
#   build     -DLOADERD_WERROR=ON in ./build-test
#   test      the whole ctest suite there (unit and integration)
#   asan      the same with -DLOADERD_SANITIZE=address,undefined in ./build-asan
#   fuzz      when fuzz/CMakeLists.txt exists and clang is installed: the
#             libFuzzer harnesses built with clang in ./build-fuzz, each run
#             for $LOADERD_FUZZ_SECONDS (default 20) seconds; the inputs of
#             one that fails are printed in base64, with how to run them
# Prints how long each phase took; exits non-zero when any phase fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc)
fuzz_seconds=${LOADERD_FUZZ_SECONDS:-20}
timings=()

report() {
	echo "run-tests: phase timings"
	for t in "${timings[@]}"; do
		echo "  $t"
	done
}

# phase NAME COMMAND...: runs one phase, records its time, stops at a failure.
phase() {
	local name=$1 start=$SECONDS rc=0
	shift
	echo "run-tests: ---- $name ----"
	"$@" || rc=$?
	timings+=("$(printf '%-12s %4d s  %s' "$name" $((SECONDS - start)) "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)")")")
	if [ "$rc" -ne 0 ]; then
		report
		echo "run-tests: phase $name failed" >&2
		exit 1
	fi
}

build() { # build DIR CMAKE-ARGS...
	local dir=$1
	shift
	cmake -S . -B "$dir" "$@" && cmake --build "$dir" -j"$jobs"
}

# The inputs a failed harness left (crash-, leak-, timeout-, oom-...), in
# base64, so that a log from another machine is enough to reproduce them.
print_artifacts() { # print_artifacts HARNESS PREFIX
	local a bytes
	for a in "$2"*; do
		[ -f "$a" ] || continue
		bytes=$(stat -c %s "$a")
		if [ "$bytes" -gt 65536 ]; then
			echo "run-tests: $1 failed on $a ($bytes bytes, too large to print)"
			continue
		fi
		echo "run-tests: $1 failed on $a ($bytes bytes); to reproduce:"
		echo "base64 -d > input <<'END'"
		base64 -w 76 "$a"
		echo "END"
		echo "$1 input"
	done
}

run_fuzzers() {
	local found=0 f name corpus prefix
	mkdir -p build-fuzz/artifacts
	for f in build-fuzz/bin/fuzz_*; do
		[ -x "$f" ] || continue
		found=1
		name=$(basename "$f")
		corpus=build-fuzz/corpus/$name
		prefix=build-fuzz/artifacts/$name-
		rm -f "$prefix"*
		mkdir -p "$corpus"
		if [ -d "fuzz/corpus/$name" ]; then
			cp -r "fuzz/corpus/$name/." "$corpus/"
		fi
		echo "run-tests: $f for $fuzz_seconds s"
		if ! "$f" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
			-artifact_prefix="$prefix" "$corpus"; then
			print_artifacts "$f" "$prefix"
			return 1
		fi
	done
	if [ "$found" -eq 0 ]; then
		echo "run-tests: no fuzz_* binary was built" >&2
		return 1
	fi
}

phase deps scripts/install-deps.sh
phase build build build-test -DLOADERD_WERROR=ON
phase test ctest --test-dir build-test --output-on-failure -j2
phase asan-build build build-asan -DLOADERD_SANITIZE=address,undefined -DLOADERD_WERROR=ON
phase asan-test ctest --test-dir build-asan --output-on-failure -j2
if [ -f fuzz/CMakeLists.txt ] && command -v clang >/dev/null 2>&1; then
	phase fuzz-build build build-fuzz -DLOADERD_FUZZ=ON -DCMAKE_C_COMPILER=clang -DBUILD_TESTING=OFF
	phase fuzz-run run_fuzzers
else
	echo "run-tests: fuzz harnesses skipped (no fuzz/CMakeLists.txt or no clang)"
fi
report
echo "run-tests: all phases passed"
