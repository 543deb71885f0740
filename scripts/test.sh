#!/usr/bin/env bash
# The test command: installs dependencies, builds Release and ASan+UBSan configurations,
# runs the whole test suite in both, then the fuzzers (GGUF reader, plan reader, tokenizer,
# prompt cache reader, log-probability file reader, grammars) for 60 seconds in all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
JOBS=$(nproc)

cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$JOBS"
(cd build/release && ctest --output-on-failure -j "$JOBS")

cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZENMOE_SANITIZE=ON \
  -DZENMOE_BUILD_BENCH=OFF >/dev/null
cmake --build build/asan -j "$JOBS"
(cd build/asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$JOBS")

if [ -x scripts/fuzz.sh ]; then
  bash scripts/fuzz.sh 60
fi
echo "all tests passed"
