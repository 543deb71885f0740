#!/usr/bin/env bash
# Fuzzes the GGUF reader and the plan file reader: bash scripts/fuzz.sh [SECONDS=60]
# SECONDS is the total: two thirds for the GGUF reader, the rest for the plan reader.
# Builds build/fuzz with clang-19 (libFuzzer + ASan + UBSan; the libraries get coverage
# instrumentation too), writes a seed corpus (writer-made files and files built from the
# oracle model's metadata) into build/fuzz/corpus, runs the fuzzer, and fails on any finding.
# A crashing input is copied to tests/fuzz/regressions/ (GGUF) or tests/fuzz/regressions-plan/
# (plan) so the regression tests replay it.
set -euo pipefail
TOTAL_SECS=${1:-60}
SECS=$(( TOTAL_SECS * 2 / 3 ))
PLAN_SECS=$(( TOTAL_SECS - SECS ))
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=build/fuzz
ORACLE=${ZENMOE_ORACLE_DIR:-$ROOT/../shared/oracle}
[ -f "$ORACLE/tiny-q4ks.gguf" ] || ORACLE=/work/shared/oracle
JOBS=$(( $(nproc) < 2 ? $(nproc) : 2 ))

CC=clang-19 CXX=clang++-19 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DZENMOE_SANITIZE=ON -DZENMOE_FUZZ=ON -DZENMOE_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target fuzz_gguf fuzz_plan >/dev/null
BIN="$BUILD/tests/fuzz_gguf"
[ -x "$BIN" ] || BIN=$(find "$BUILD" -name fuzz_gguf -type f -perm -u+x | head -n1)

CORPUS="$BUILD/corpus"
ARTIFACTS="$BUILD/artifacts"
mkdir -p "$CORPUS" "$ARTIFACTS"
rm -f "$ARTIFACTS"/*
# Seeds: writer-made files (written by the fuzzer binary itself) and the oracle files cut
# down to their metadata and tensor-info sections (their data would only slow the fuzzer).
ZENMOE_FUZZ_SEED_DIR="$CORPUS" ZENMOE_FUZZ_ORACLE_DIR="$ORACLE" "$BIN" -runs=0 "$CORPUS" \
  >/dev/null 2>&1
head -c 17344 "$ORACLE/tiny-q4ks.gguf" >"$CORPUS/oracle-q4ks-head.gguf"
head -c 4096 "$ORACLE/tiny-f16.gguf" >"$CORPUS/oracle-f16-head.gguf"

echo "fuzzing the GGUF reader for ${SECS}s"
set +e
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  "$BIN" "$CORPUS" tests/fuzz/regressions -max_total_time="$SECS" -max_len=24576 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" >"$BUILD/fuzz.log" 2>&1
rc=$?
set -e
found=$(find "$ARTIFACTS" -type f | wc -l)
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
  tail -n 40 "$BUILD/fuzz.log" >&2
  for f in "$ARTIFACTS"/*; do
    [ -f "$f" ] || continue
    cp "$f" "tests/fuzz/regressions/$(basename "$f")"
    echo "kept $(basename "$f") in tests/fuzz/regressions/" >&2
  done
  echo "fuzz: FAILED (exit $rc)" >&2
  exit 1
fi
grep -E "stat::number_of_executed_runs|cov:" "$BUILD/fuzz.log" | tail -n 2
echo "fuzz: no findings in ${SECS}s"

# The plan file reader: seeds are plans written by the writer (the target writes them).
PLAN_BIN="$BUILD/tests/fuzz_plan"
[ -x "$PLAN_BIN" ] || PLAN_BIN=$(find "$BUILD" -name fuzz_plan -type f -perm -u+x | head -n1)
PLAN_CORPUS="$BUILD/corpus-plan"
mkdir -p "$PLAN_CORPUS" tests/fuzz/regressions-plan
rm -f "$ARTIFACTS"/*
ZENMOE_FUZZ_SEED_DIR="$PLAN_CORPUS" "$PLAN_BIN" -runs=0 "$PLAN_CORPUS" >/dev/null 2>&1

echo "fuzzing the plan file reader for ${PLAN_SECS}s"
set +e
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  "$PLAN_BIN" "$PLAN_CORPUS" tests/fuzz/regressions-plan -max_total_time="$PLAN_SECS" -max_len=8192 \
  -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" \
  >"$BUILD/fuzz-plan.log" 2>&1
rc=$?
set -e
found=$(find "$ARTIFACTS" -type f | wc -l)
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
  tail -n 40 "$BUILD/fuzz-plan.log" >&2
  for f in "$ARTIFACTS"/*; do
    [ -f "$f" ] || continue
    cp "$f" "tests/fuzz/regressions-plan/$(basename "$f")"
    echo "kept $(basename "$f") in tests/fuzz/regressions-plan/" >&2
  done
  echo "fuzz (plan): FAILED (exit $rc)" >&2
  exit 1
fi
grep -E "stat::number_of_executed_runs|cov:" "$BUILD/fuzz-plan.log" | tail -n 2
echo "fuzz (plan): no findings in ${PLAN_SECS}s"
