#!/usr/bin/env bash
# Fuzzes the GGUF reader, the plan file reader and the tokenizer: bash scripts/fuzz.sh [SECONDS=60]
# SECONDS is the total: half for the GGUF reader, a quarter each for the plan reader and the
# tokenizer. Builds build/fuzz with clang-19 (libFuzzer + ASan + UBSan; the libraries get
# coverage instrumentation too), writes seed corpora (writer-made files, files built from the
# oracle model's metadata, tokenizer vocabularies) under build/fuzz, runs the fuzzers, and
# fails on any finding. A crashing input is copied to tests/fuzz/regressions/ (GGUF),
# tests/fuzz/regressions-plan/ (plan) or tests/fuzz/regressions-tokenizer/ (tokenizer) so the
# regression tests replay it.
set -euo pipefail
TOTAL_SECS=${1:-60}
SECS=$(( TOTAL_SECS / 2 ))
PLAN_SECS=$(( (TOTAL_SECS - SECS) / 2 ))
TOK_SECS=$(( TOTAL_SECS - SECS - PLAN_SECS ))
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=build/fuzz
ORACLE=${ZENMOE_ORACLE_DIR:-$ROOT/../shared/oracle}
[ -f "$ORACLE/tiny-q4ks.gguf" ] || ORACLE=/work/shared/oracle
JOBS=$(( $(nproc) < 2 ? $(nproc) : 2 ))

# The build's output goes to a log, printed (its end) when the build fails.
BUILD_LOG="$BUILD/build.log"
mkdir -p "$BUILD"
if ! { CC=clang-19 CXX=clang++-19 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
         -DZENMOE_SANITIZE=ON -DZENMOE_FUZZ=ON -DZENMOE_BUILD_BENCH=OFF \
         -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" &&
       cmake --build "$BUILD" -j "$JOBS" --target fuzz_gguf fuzz_plan fuzz_tokenizer; } >"$BUILD_LOG" 2>&1; then
  tail -n 60 "$BUILD_LOG" >&2
  echo "fuzz: the fuzz build failed (log: $BUILD_LOG)" >&2
  exit 1
fi

# The fuzzer binary named $1, wherever the generator put it.
fuzzer_bin() {
  local bin="$BUILD/tests/$1"
  [ -x "$bin" ] || bin=$(find "$BUILD" -name "$1" -type f -perm -u+x | head -n1)
  echo "$bin"
}

ARTIFACTS="$BUILD/artifacts"
mkdir -p "$ARTIFACTS"

# run_fuzzer LABEL BIN CORPUS REGRESSIONS SECONDS MAX_LEN LOG: runs BIN over CORPUS and the
# kept regressions; on a finding or a failure prints the log's end, keeps each crashing input
# in REGRESSIONS and returns 1.
run_fuzzer() {
  local label=$1 bin=$2 corpus=$3 regressions=$4 secs=$5 max_len=$6 log=$7 rc found f
  echo "fuzzing the $label for ${secs}s"
  rm -f "$ARTIFACTS"/*
  set +e
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$bin" "$corpus" "$regressions" -max_total_time="$secs" -max_len="$max_len" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/" >"$log" 2>&1
  rc=$?
  set -e
  found=$(find "$ARTIFACTS" -type f | wc -l)
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    tail -n 40 "$log" >&2
    for f in "$ARTIFACTS"/*; do
      [ -f "$f" ] || continue
      cp "$f" "$regressions/$(basename "$f")"
      echo "kept $(basename "$f") in $regressions/" >&2
    done
    echo "$label: fuzzer exit $rc, $found finding(s)" >&2
    return 1
  fi
  grep -E "stat::number_of_executed_runs|cov:" "$log" | tail -n 2
}

# The GGUF reader. Seeds: writer-made files (written by the fuzzer binary itself) and the
# oracle files cut down to their metadata and tensor-info sections (their data would only
# slow the fuzzer).
BIN=$(fuzzer_bin fuzz_gguf)
CORPUS="$BUILD/corpus"
mkdir -p "$CORPUS"
ZENMOE_FUZZ_SEED_DIR="$CORPUS" ZENMOE_FUZZ_ORACLE_DIR="$ORACLE" "$BIN" -runs=0 "$CORPUS" \
  >/dev/null 2>&1
head -c 17344 "$ORACLE/tiny-q4ks.gguf" >"$CORPUS/oracle-q4ks-head.gguf"
head -c 4096 "$ORACLE/tiny-f16.gguf" >"$CORPUS/oracle-f16-head.gguf"
if ! run_fuzzer "GGUF reader" "$BIN" "$CORPUS" tests/fuzz/regressions "$SECS" 24576 "$BUILD/fuzz.log"; then
  echo "fuzz: FAILED" >&2
  exit 1
fi
echo "fuzz: no findings in ${SECS}s"

# The plan file reader: seeds are plans written by the writer (the target writes them).
PLAN_BIN=$(fuzzer_bin fuzz_plan)
PLAN_CORPUS="$BUILD/corpus-plan"
mkdir -p "$PLAN_CORPUS" tests/fuzz/regressions-plan
ZENMOE_FUZZ_SEED_DIR="$PLAN_CORPUS" "$PLAN_BIN" -runs=0 "$PLAN_CORPUS" >/dev/null 2>&1
if ! run_fuzzer "plan file reader" "$PLAN_BIN" "$PLAN_CORPUS" tests/fuzz/regressions-plan "$PLAN_SECS" 8192 \
  "$BUILD/fuzz-plan.log"; then
  echo "fuzz (plan): FAILED" >&2
  exit 1
fi
echo "fuzz (plan): no findings in ${PLAN_SECS}s"

# The tokenizer: seeds are vocabularies and texts the target writes (tests/fuzz/tokenizer_property.h).
TOK_BIN=$(fuzzer_bin fuzz_tokenizer)
TOK_CORPUS="$BUILD/corpus-tokenizer"
mkdir -p "$TOK_CORPUS" tests/fuzz/regressions-tokenizer
ZENMOE_FUZZ_SEED_DIR="$TOK_CORPUS" "$TOK_BIN" -runs=0 "$TOK_CORPUS" >/dev/null 2>&1
if ! run_fuzzer "tokenizer" "$TOK_BIN" "$TOK_CORPUS" tests/fuzz/regressions-tokenizer "$TOK_SECS" 4096 \
  "$BUILD/fuzz-tokenizer.log"; then
  echo "fuzz (tokenizer): FAILED" >&2
  exit 1
fi
echo "fuzz (tokenizer): no findings in ${TOK_SECS}s"
