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

say() { printf '    %s\n' "$*"; }
toolchain_failure() { printf 'error: %s\n' "$*" >&2; exit 3; }
failure() { printf 'error: %s\n' "$*" >&2; exit 1; }

if (($# > 0)); then
  apps=("$@")
else
  apps=()
  for dir in "$here"/examples/*/ "$here"/tests/*/; do
    [[ -f "$dir/app.py" ]] && apps+=("$dir")
  done
fi

# --- The tools ---------------------------------------------------------------
# A copy of the requirements the venv was installed from sits inside it; a
# working venv whose copy matches is used as is, without asking pip anything.
installed="$venv/requirements.installed"
venv_works() { [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c '' 2>/dev/null; }
if ! venv_works || ! cmp -s "$here/requirements.txt" "$installed"; then
  command -v "$python" >/dev/null || toolchain_failure "$python not found (Python ≥ 3.9 is needed)"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' ||
    toolchain_failure "$python is older than 3.9"
  if ! venv_works; then
    say "creating $venv"
    "$python" -m venv --clear "$venv" ||
      toolchain_failure "$python -m venv failed (is the venv module installed?)"
  fi
  say "installing requirements.txt into $venv"
  started=$SECONDS
  rm -f "$installed"
  # PyPI only: no local wheel folders or extra indexes from the environment.
  env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_NO_INDEX \
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --only-binary :all: -r "$here/requirements.txt" ||
    toolchain_failure "installing $here/requirements.txt failed"
  cp "$here/requirements.txt" "$installed"
  say "installed in $((SECONDS - started)) s"
fi
componentize="$venv/bin/componentize-py"
[[ -x "$componentize" ]] || toolchain_failure "$componentize is missing; delete $venv and retry"

# --- The components ----------------------------------------------------------
mkdir -p "$out"
out="$(cd "$out" && pwd)"
shared_inputs=("$here/sdk" "$root/wit" "$here/requirements.txt" "$here/build.sh")

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
  local tenths
  tenths=$(($(wc -c <"$wasm") * 10 / 1048576))
  say "$name: built in $((SECONDS - started)) s, $((tenths / 10)).$((tenths % 10)) MiB -> $wasm"
}

# A build keeps about one core busy, so up to JOBS (default: the number of
# CPUs) run at once.
jobs_max="${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}"
pids=()
names=()
failed=()
# collect: waits for the oldest running build.
collect() {
  wait "${pids[0]}" || failed+=("${names[0]}")
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
}
for app in "${apps[@]}"; do
  app="${app%/}"
  name="$(basename "$app")"
  [[ -f "$app/app.py" ]] || failure "$app has no app.py"
  wasm="$out/$name.wasm"
  # Up to date: the component exists and no input file or folder (a folder
  # changes when a file in it is added or removed) is newer than it.
  if [[ -f "$wasm" ]] &&
    [[ -z "$(find "$app" "${shared_inputs[@]}" -name __pycache__ -prune -o -newer "$wasm" -print -quit)" ]]; then
    say "$name: up to date ($wasm)"
    continue
  fi
  while ((${#pids[@]} >= jobs_max)); do collect; done
  say "$name: building"
  build "$app" "$name" &
  pids+=($!)
  names+=("$name")
done
while ((${#pids[@]} > 0)); do collect; done
((${#failed[@]} == 0)) || failure "building ${failed[*]} failed"
