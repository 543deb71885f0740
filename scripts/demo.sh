#!/usr/bin/env bash
# End to end on a fresh Debian 12 machine: dependencies, Release build, demo model, inspect.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$(nproc)"
ZM=build/release/tools/zenmoe
"$ZM" version

# The demo model: made once, reused while it still opens cleanly as the small preset.
DEMO=build/demo/small.gguf
preset_of() {  # the preset a zenmoe-made model was generated from; empty if unreadable
  "$ZM" inspect --json "$1" 2>/dev/null | grep -A2 '"zenmoe.mkmodel.preset"' |
    sed -n 's/.*"value": "\(.*\)".*/\1/p' || true
}
mkdir -p build/demo
if [ -f "$DEMO" ] && [ "$(preset_of "$DEMO")" = small ]; then
  echo "using existing $DEMO"
else
  "$ZM" mkmodel --preset small -o "$DEMO"
fi
"$ZM" inspect "$DEMO"
# Lower it to a plan (repacked weights for this CPU), then generate from the plan (random
# weights: the text is noise; the summary line on stderr gives prefill and decode tok/s).
PLAN=build/demo/small.zplan
"$ZM" compile "$DEMO" -o "$PLAN" --threads "$(nproc)"
"$ZM" run -m "$PLAN" -p "The quick brown fox" -n 32 --seed 1 -t "$(nproc)"
echo
