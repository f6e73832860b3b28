#!/usr/bin/env bash
# Builds every example guest as a release component for wasm32-wasip2 and
# prints where the .wasm files are (one path per line on stdout; progress
# goes to stderr). The host's tests call this script.
#
#   guests/build.sh
set -euo pipefail
cd "$(dirname "$0")"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "error: the wasm32-wasip2 target is not installed; run: rustup target add wasm32-wasip2" >&2
  exit 1
fi

cargo build --release --target wasm32-wasip2 --workspace --locked >&2

target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" == /* ]] || target_dir="$PWD/$target_dir"
out="$target_dir/wasm32-wasip2/release"
for guest in echo flaky poison spin hog transform probe crash; do
  wasm="$out/$guest.wasm"
  if [[ ! -f "$wasm" ]]; then
    echo "error: $wasm was not built" >&2
    exit 1
  fi
  echo "$wasm"
done
