#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# install-deps: installs what loaderd's build and tests need on Debian 12
# (as root, or through sudo otherwise). Does nothing when every package is
# already installed; runs `apt-get update` only when something is missing.
# The CUDA toolkit is optional and never installed here.
#
# Where a CUDA toolkit without nvJPEG is found (nvcc on PATH or in
# /usr/local/cuda, no nvjpeg.h beside its headers), nvJPEG's header and
# library come from the Python package index's nvidia-nvjpeg package,
# installed with pip --target into .deps/nvjpeg in the project (never
# system-wide): nvidia/cu13/include/nvjpeg.h and nvidia/cu13/lib/libnvjpeg.so.13.
# CMake finds them there (CMakeLists.txt). Done again only when the pinned
# version changes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
	build-essential cmake pkg-config
	libuv1-dev liburing-dev libinih-dev libcmocka-dev
	libjpeg62-turbo-dev libpng-dev  # image pipelines: decode, loaderctl peek
	libjansson-dev   # loaderctl metrics and GET /metrics: read the status JSON
	libmicrohttpd-dev  # the daemon's GET /metrics (metrics_listen)
	prometheus       # tests: a real Prometheus scrapes GET /metrics
	python3 python3-pil python3-numpy  # tests: reference image decode
	python3-jsonschema  # tests: the status JSON against docs/status.schema.json
	python3-prometheus-client  # tests: loaderctl metrics read by Prometheus's own parser
	python3-venv python3-setuptools python3-wheel python3-torch python3-torchvision  # the Python package: install, tests, examples
	python3-pip      # nvJPEG's headers from the Python package index, where the CUDA toolkit lacks them
	systemd          # systemd-analyze, to check the unit files; systemd-socket-activate
	strace python3-seccomp  # the system calls loaderd makes, and a run under the unit's filter
	clang libclang-rt-14-dev  # libFuzzer harnesses
)

# nvJPEG for CUDA 13 (the header's major version must be the toolkit's).
nvjpeg_package="nvidia-nvjpeg==13.0.2.28"
nvjpeg_dir=$root/.deps/nvjpeg

debian_packages() {
	local missing=() p status as_root
	for p in "${packages[@]}"; do
		status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
		[ "$status" = installed ] || missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		echo "install-deps: all build and test dependencies are installed"
		return 0
	fi
	if [ "$(id -u)" -eq 0 ]; then
		as_root=()
	elif command -v sudo >/dev/null 2>&1; then
		as_root=(sudo)
	else
		echo "install-deps: missing ${missing[*]}, and neither root nor sudo to install them" >&2
		return 1
	fi
	echo "install-deps: installing ${missing[*]}"
	"${as_root[@]}" apt-get update
	"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# nvjpeg: the pinned nvidia-nvjpeg in $nvjpeg_dir, when a CUDA toolkit
# lacks nvjpeg.h. Installed into a scratch directory first and moved into
# place whole, so an interrupted run leaves no half-installed tree.
nvjpeg() {
	local nvcc cuda python scratch
	nvcc=$(command -v nvcc || true)
	[ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
	if [ -z "$nvcc" ]; then
		echo "install-deps: no CUDA toolkit, so no nvJPEG"
		return 0
	fi
	cuda=$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)
	if compgen -G "$cuda/include/nvjpeg.h" >/dev/null || compgen -G "$cuda/targets/*/include/nvjpeg.h" >/dev/null; then
		echo "install-deps: the CUDA toolkit in $cuda has nvJPEG"
		return 0
	fi
	if [ "$(cat "$nvjpeg_dir/.installed" 2>/dev/null || true)" = "$nvjpeg_package" ]; then
		echo "install-deps: $nvjpeg_package is in $nvjpeg_dir"
		return 0
	fi
	python=
	for candidate in python3 /usr/bin/python3; do
		if "$candidate" -m pip --version >/dev/null 2>&1; then
			python=$candidate
			break
		fi
	done
	if [ -z "$python" ]; then
		echo "install-deps: no python3 with pip to install $nvjpeg_package" >&2
		return 1
	fi
	echo "install-deps: installing $nvjpeg_package into $nvjpeg_dir"
	mkdir -p "$(dirname "$nvjpeg_dir")"
	scratch=$(mktemp -d "$nvjpeg_dir.XXXXXX")
	chmod 755 "$scratch"
	if ! PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
		--target "$scratch" "$nvjpeg_package"; then
		rm -rf "$scratch"
		return 1
	fi
	echo "$nvjpeg_package" > "$scratch/.installed"
	rm -rf "$nvjpeg_dir"
	mv "$scratch" "$nvjpeg_dir"
}

debian_packages
nvjpeg
