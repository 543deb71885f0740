#!/usr/bin/env bash
# End to end on a fresh Debian 12 machine: dependencies, Release build, demo model, inspect.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$(nproc)"
ZM=build/release/tools/zenmoe
"$ZM" version
