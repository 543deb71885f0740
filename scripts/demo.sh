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
mkdir -p build/demo
if [ -f "$DEMO" ] && "$ZM" inspect --json "$DEMO" 2>/dev/null |
    grep -A2 '"zenmoe.mkmodel.preset"' | grep -q '"value": "small"'; then
  echo "using existing $DEMO"
else
  "$ZM" mkmodel --preset small -o "$DEMO"
fi
"$ZM" inspect "$DEMO"
