#!/usr/bin/env bash
# Fuzzes the GGUF reader, the plan file reader, the tokenizer, the prompt cache reader, the
# log-probability file reader and GBNF grammars: bash scripts/fuzz.sh [SECONDS=60]. SECONDS is
# the total: two fifths for the GGUF reader, a fifth for the tokenizer, three twentieths for
# grammars, a tenth each for the plan reader and the prompt cache reader, a twentieth for
# log-probability files. Builds build/fuzz with clang-19 (libFuzzer + ASan + UBSan; the
# libraries get coverage instrumentation too), writes seed corpora (writer-made files, files built from the
# oracle model's metadata, tokenizer vocabularies) under build/fuzz, runs the fuzzers, and
# fails on any finding. A crashing input is copied to tests/fuzz/regressions/ (GGUF),
# tests/fuzz/regressions-plan/ (plan), tests/fuzz/regressions-tokenizer/ (tokenizer) or
# tests/fuzz/regressions-prompt-cache/ (prompt cache), tests/fuzz/regressions-logprob/
# (log-probability file) or tests/fuzz/regressions-grammar/ (grammar) so the regression tests
# replay it.
set -euo pipefail
TOTAL_SECS=${1:-60}
SECS=$(( TOTAL_SECS * 2 / 5 ))
PLAN_SECS=$(( TOTAL_SECS / 10 ))
TOK_SECS=$(( TOTAL_SECS / 5 ))
CACHE_SECS=$(( TOTAL_SECS / 10 ))
LOGPROB_SECS=$(( TOTAL_SECS / 20 ))
GRAMMAR_SECS=$(( TOTAL_SECS - SECS - PLAN_SECS - TOK_SECS - CACHE_SECS - LOGPROB_SECS ))
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
       cmake --build "$BUILD" -j "$JOBS" --target fuzz_gguf fuzz_plan fuzz_tokenizer fuzz_prompt_cache \
         fuzz_logprob fuzz_grammar; } >"$BUILD_LOG" 2>&1; then
  tail -n 60 "$BUILD_LOG" >&2
  echo "fuzz: the fuzz build failed (log: $BUILD_LOG)" >&2
  exit 1
fi

ARTIFACTS="$BUILD/artifacts"
mkdir -p "$ARTIFACTS"

# fuzz_target TARGET LABEL TAG CORPUS REGRESSIONS SECONDS MAX_LEN LOG: the target writes its
# seeds into CORPUS, then fuzzes CORPUS and the kept regressions for SECONDS. On a finding or
# a failure: prints the log's end, keeps each crashing input in REGRESSIONS and ends the script.
fuzz_target() {
  local target=$1 label=$2 tag=$3 corpus=$4 regressions=$5 secs=$6 max_len=$7 log=$8 bin rc found f
  bin="$BUILD/tests/$target"
  [ -x "$bin" ] || bin=$(find "$BUILD" -name "$target" -type f -perm -u+x | head -n1)
  mkdir -p "$corpus" "$regressions"
  # Writing the seeds also runs them: a seed that fails is left for the run below to report.
  ZENMOE_FUZZ_SEED_DIR="$corpus" ZENMOE_FUZZ_ORACLE_DIR="$ORACLE" "$bin" -runs=0 -artifact_prefix="$ARTIFACTS/" \
    "$corpus" >/dev/null 2>&1 || true
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
    echo "$tag: FAILED (fuzzer exit $rc, $found finding(s))" >&2
    exit 1
  fi
  grep -E "stat::number_of_executed_runs|cov:" "$log" | tail -n 2
  echo "$tag: no findings in ${secs}s"
}

# The GGUF reader. Seeds: writer-made files (written by the fuzzer binary itself) and the
# oracle files cut down to their metadata and tensor-info sections (their data would only
# slow the fuzzer).
mkdir -p "$BUILD/corpus"
head -c 17344 "$ORACLE/tiny-q4ks.gguf" >"$BUILD/corpus/oracle-q4ks-head.gguf"
head -c 4096 "$ORACLE/tiny-f16.gguf" >"$BUILD/corpus/oracle-f16-head.gguf"
fuzz_target fuzz_gguf "GGUF reader" "fuzz" "$BUILD/corpus" tests/fuzz/regressions "$SECS" 24576 "$BUILD/fuzz.log"
# The plan file reader: seeds are plans written by the writer.
fuzz_target fuzz_plan "plan file reader" "fuzz (plan)" "$BUILD/corpus-plan" tests/fuzz/regressions-plan \
  "$PLAN_SECS" 8192 "$BUILD/fuzz-plan.log"
# The tokenizer: seeds are vocabularies and texts (tests/fuzz/tokenizer_property.h).
fuzz_target fuzz_tokenizer "tokenizer" "fuzz (tokenizer)" "$BUILD/corpus-tokenizer" tests/fuzz/regressions-tokenizer \
  "$TOK_SECS" 4096 "$BUILD/fuzz-tokenizer.log"
# The prompt cache reader: seeds are caches saved by the writer from an executor without a model.
fuzz_target fuzz_prompt_cache "prompt cache reader" "fuzz (prompt cache)" "$BUILD/corpus-prompt-cache" \
  tests/fuzz/regressions-prompt-cache "$CACHE_SECS" 16384 "$BUILD/fuzz-prompt-cache.log"
# The log-probability file reader (zenmoe perplexity --kl-divergence): seeds are small valid files.
fuzz_target fuzz_logprob "log-probability file reader" "fuzz (log-probability file)" "$BUILD/corpus-logprob" \
  tests/fuzz/regressions-logprob "$LOGPROB_SECS" 4096 "$BUILD/fuzz-logprob.log"
# GBNF grammars (requests' "grammar"), each input a grammar, NUL, a text: seeds are grammars
# with texts they allow.
fuzz_target fuzz_grammar "grammar parser and state" "fuzz (grammar)" "$BUILD/corpus-grammar" \
  tests/fuzz/regressions-grammar "$GRAMMAR_SECS" 4096 "$BUILD/fuzz-grammar.log"
