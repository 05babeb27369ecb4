#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# probe.sh BUILD_DIR: where GPU delivery's throughput goes (bench/RESULTS.md,
# "Where the time went"). On a GPU machine, with numpy: writes 8 GiB of
# random 1 MiB records to /dev/shm, runs loaderd-bus-probe on it (the bus
# alone, under CPU copies, with host callbacks, from the page-locked file),
# measures 15 parallel page-cache readers (dd), then loaderd with 15
# workers in host and device delivery at several staging/depth settings
# and with direct = on, one daemon each (`loaderctl consume`, MB_per_s).
# Daemon logs go to $OUT (default /tmp/probe). Removes its files at the end.
set -u
B=${1:?usage: bench/probe.sh BUILD_DIR}
OUT=${OUT:-/tmp/probe}; mkdir -p $OUT
D=/dev/shm/probe; mkdir -p $D
trap 'rm -rf $D' EXIT
python3 - <<'PY'
import os, numpy as np
rng = np.random.default_rng(1)
with open("/dev/shm/probe/rec.bin", "wb") as f:
    for i in range(8):
        f.write(rng.integers(0, 256, size=1 << 30, dtype=np.uint8).tobytes())
PY
echo "--- loaderd-bus-probe"
$B/bin/loaderd-bus-probe --file $D/rec.bin
echo "--- parallel dd read bandwidth (15 readers, 512 MiB each)"
start=$(date +%s.%N)
for i in $(seq 0 14); do dd if=$D/rec.bin of=/dev/null bs=1M skip=$((i*512)) count=512 status=none & done; wait
end=$(date +%s.%N); python3 -c "print('aggregate read GB/s', 15*512*2**20/($end-$start)/1e9)"
run() { # name staging depth pin batch delivery
  cat > $D/$1.ini <<INI
[daemon]
socket = $D/$1.sock
workers = 15
shm_bytes = 8G
staging_slots = $2
max_depth = 32
device_slots = 32
pin = $4
log_level = notice
[pipeline.p]
source = raw:$D/rec.bin
record_bytes = 1048576
batch_size = $5
direct = ${DIRECT:-off}
INI
  $B/bin/loaderd --config $D/$1.ini 2>$OUT/$1.log & pid=$!
  for i in $(seq 100); do [ -S $D/$1.sock ] && $B/bin/loaderctl --socket $D/$1.sock status 2>/dev/null | grep -q "delivery: host, device" && break; sleep 0.1; done
  dev=""; [ "$6" = device ] && dev="--device 0"
  $B/bin/loaderctl --socket $D/$1.sock consume --pipeline p $dev --depth $3 --batches 200 --quiet >/dev/null
  echo "$1 staging=$2 depth=$3 pin=$4 batch=$5 $6: $($B/bin/loaderctl --socket $D/$1.sock consume --pipeline p $dev --depth $3 --batches $((12000/$5*4)) --quiet | head -1 | grep -o 'MB_per_s=[0-9.]*')"
  $B/bin/loaderctl --socket $D/$1.sock status | grep -E "worker [0-9]" | head -3
  kill $pid; wait $pid
}
run h16a 16 8 register 16 host
run h16b 32 16 register 16 host
run d16a 16 8 register 16 device
run d16b 32 16 register 16 device
run d16c 48 32 register 16 device
run d4b 32 16 register 4 device
run d64b 24 16 register 64 device
run c16b 32 16 copy 16 device
DIRECT=on run x16a 16 8 register 16 device
DIRECT=on run x4b 16 16 register 4 device
