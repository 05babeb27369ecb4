#!/usr/bin/env bash
# image_probe.sh BUILD_DIR: a first throughput figure of an image pipeline,
# loaderd alone (bench/RESULTS.md, "Image pipelines: a first figure").
# Writes 3000 JPEGs of 300-600 px (mkjpeg --tree, quality 90) to /dev/shm,
# then, for 4 and 15 workers, one daemon with a random_resized_crop(224)
# hflip(0.5) pipeline (batch 256, uint8 NCHW): a warm-up epoch, 3 epochs of
# host delivery and 2 to GPU 0 (`loaderctl consume`, samples_per_s).
# Daemon logs go to $OUT (default /tmp/image-probe). Removes its files at the end.
set -u
B=${1:?usage: bench/image_probe.sh BUILD_DIR}/bin
OUT=${OUT:-/tmp/image-probe}; mkdir -p "$OUT"
D=/dev/shm/loaderd-image-probe; rm -rf $D; mkdir -p $D
trap 'rm -rf $D' EXIT
$B/mkjpeg --tree $D/tree --classes 10 --per-class 300 --min-side 300 --max-side 600 --seed 7
for w in 4 15; do
	cat > $D/d.ini <<INI
[daemon]
socket = $D/d.sock
workers = $w
shm_bytes = 4G
staging_slots = 16
log_level = notice
[pipeline.train]
source = imagefolder:$D/tree
batch_size = 256
transform = random_resized_crop(224) hflip(0.5)
INI
	$B/loaderd --config $D/d.ini 2>"$OUT/img-w$w.log" & pid=$!
	for i in $(seq 100); do $B/loaderctl --socket $D/d.sock status >/dev/null 2>&1 && break; sleep 0.1; done
	$B/loaderctl --socket $D/d.sock consume --pipeline train --epochs 1 --quiet >/dev/null
	echo "workers $w host: $($B/loaderctl --socket $D/d.sock consume --pipeline train --epochs 3 --quiet | head -1 | grep -o 'samples_per_s=[0-9.]*')"
	echo "workers $w device: $($B/loaderctl --socket $D/d.sock consume --pipeline train --epochs 2 --device 0 --quiet | head -1 | grep -o 'samples_per_s=[0-9.]*')"
	kill $pid; wait $pid
done
