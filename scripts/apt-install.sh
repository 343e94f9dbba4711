#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not
# installed yet (apt-get; through sudo when not root). Quiet when nothing
# is missing. Used by install-deps.sh and build-llama-tool.sh.
set -euo pipefail

missing=()
for p in "$@"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "apt-install: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
