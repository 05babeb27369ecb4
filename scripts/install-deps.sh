#!/usr/bin/env bash
# install-deps: installs what loaderd's build and tests need on Debian 12
# (as root, or through sudo otherwise). Does nothing when every package is
# already installed; runs `apt-get update` only when something is missing.
# The CUDA toolkit is optional and never installed here.
set -euo pipefail

packages=(
	build-essential cmake pkg-config
	libuv1-dev liburing-dev libinih-dev libcmocka-dev
	libjpeg62-turbo-dev libpng-dev  # image pipelines: decode, loaderctl peek
	python3 python3-pil python3-numpy  # tests: reference image decode
	python3-venv python3-setuptools python3-wheel python3-torch python3-torchvision  # the Python package: install, tests, examples
	systemd          # systemd-analyze, to check the unit file
	clang libclang-rt-14-dev  # libFuzzer harnesses
)

missing=()
for p in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$status" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all build and test dependencies are installed"
	exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
	as_root=()
elif command -v sudo >/dev/null 2>&1; then
	as_root=(sudo)
else
	echo "install-deps: missing ${missing[*]}, and neither root nor sudo to install them" >&2
	exit 1
fi
echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
