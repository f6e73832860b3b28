#!/usr/bin/env bash
# Builds Python handlers into WebAssembly components for `rheo handler
# deploy`. See README.md next to this file.
#
#   guests/python/build.sh [OUT_DIR [APP_DIR...]]
#
# OUT_DIR defaults to guests/python/target. Without APP_DIRs it builds every
# example (examples/<name>/app.py) and the SDK's test handler
# (tests/sdk_check/app.py); an APP_DIR is any folder holding an app.py. Each
# lands in OUT_DIR/<folder name>.wasm. A component newer than all of its
# inputs (its folder, the SDK, wit/, requirements.txt and this script) is
# left alone, so a second run with nothing changed takes no time.
#
# The tools (requirements.txt) are installed from PyPI into
# guests/python/.venv on first use and whenever requirements.txt changes.
# Sources are copied into OUT_DIR/.stage before building, because building
# writes __pycache__ folders next to the modules it imports.
#
# PYTHON names the interpreter that makes the venv (default python3); JOBS
# how many components build at once (default: the number of CPUs).
#
# Exit status 3 means the Python toolchain could not be set up (no python3 ≥
# 3.9, no venv module, or the install failed); other failures are 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/target}"
shift || true
venv="$here/.venv"
python="${PYTHON:-python3}"

# shellcheck source=../build-lib.sh
source "$here/../build-lib.sh"
find_apps "$here" app.py "$@"

# --- The tools ---------------------------------------------------------------
ensure_venv "$venv" "$here/requirements.txt" 9 "$python"
componentize="$venv/bin/componentize-py"
[[ -x "$componentize" ]] || toolchain_failure "$componentize is missing; delete $venv and retry"

# --- The components ----------------------------------------------------------
mkdir -p "$out"
out="$(cd "$out" && pwd)"
shared_inputs=("$here/sdk" "$root/wit" "$here/requirements.txt" "$here/build.sh" "$here/../build-lib.sh")

# build APP_DIR NAME: componentizes one handler into $out/NAME.wasm.
build() {
  local app="$1" name="$2" started=$SECONDS
  local wasm="$out/$name.wasm" stage="$out/.stage/$name"
  rm -rf "$stage"
  mkdir -p "$stage/app" "$stage/sdk"
  cp -R "$app/." "$stage/app/"
  cp -R "$here/sdk/." "$stage/sdk/"
  find "$stage" -name __pycache__ -prune -exec rm -rf {} +
  # The entry module (rheo_handler._entry) imports `app` and exports its
  # handler; the build runs that import, so a broken app.py fails here.
  if ! (cd "$stage" && "$componentize" --quiet -d "$root/wit" -w handler \
    componentize -p app -p sdk rheo_handler._entry -o "$wasm.partial"); then
    rm -f "$wasm.partial"
    printf 'error: componentize-py failed for %s\n' "$app" >&2
    return 1
  fi
  mv -f "$wasm.partial" "$wasm"
  report_built "$wasm" "$name" "$started"
}

build_apps "$out" app.py __pycache__
