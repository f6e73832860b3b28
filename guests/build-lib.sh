# Shared by the guest build scripts (guests/python/build.sh,
# guests/js/build.sh) and tests/clients/python/venv.sh; sourced, not run.
#
#   say / failure / toolchain_failure   messages; exit 1 / exit 3
#   find_apps HERE FILE [APP_DIR...]    sets `apps`: the given folders, else
#                                       every HERE/{examples,tests}/*/ with FILE
#   ensure_venv VENV REQUIREMENTS MINOR PYTHON
#                                       a venv with exactly REQUIREMENTS (PyPI,
#                                       wheels only), Python ≥ 3.MINOR
#   build_apps OUT FILE PRUNE           runs the caller's `build APP NAME` for
#                                       each of `apps` not up to date against
#                                       `shared_inputs`, JOBS at once

say() { printf '    %s\n' "$*" >&2; }
toolchain_failure() { printf 'error: %s\n' "$*" >&2; exit 3; }
failure() { printf 'error: %s\n' "$*" >&2; exit 1; }

find_apps() {
  local here="$1" file="$2" dir
  shift 2
  if (($# > 0)); then
    apps=("$@")
    return
  fi
  apps=()
  for dir in "$here"/examples/*/ "$here"/tests/*/; do
    [[ -f "$dir/$file" ]] && apps+=("$dir")
  done
}

# A copy of the requirements the venv was installed from sits inside it; a
# working venv whose copy matches is used as is, without asking pip anything.
ensure_venv() {
  local venv="$1" requirements="$2" minor="$3" python="$4" started
  local installed="$venv/requirements.installed"
  venv_works() { [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c '' 2>/dev/null; }
  if venv_works && cmp -s "$requirements" "$installed"; then
    return
  fi
  command -v "$python" >/dev/null || toolchain_failure "$python not found (Python ≥ 3.$minor is needed)"
  "$python" -c "import sys; sys.exit(sys.version_info < (3, $minor))" ||
    toolchain_failure "$python is older than 3.$minor"
  if ! venv_works; then
    say "creating $venv"
    "$python" -m venv --clear "$venv" ||
      toolchain_failure "$python -m venv failed (is the venv module installed?)"
  fi
  say "installing $requirements into $venv"
  started=$SECONDS
  rm -f "$installed"
  # PyPI only: no local wheel folders or extra indexes from the environment.
  env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_NO_INDEX \
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --only-binary :all: -r "$requirements" ||
    toolchain_failure "installing $requirements failed"
  cp "$requirements" "$installed"
  say "installed in $((SECONDS - started)) s"
}

# A build keeps about one core busy, so up to JOBS (default: the number of
# CPUs) run at once. A component is up to date when it exists and no input
# file or folder (a folder changes when a file in it is added or removed)
# is newer than it; PRUNE names folders that are not inputs.
build_apps() {
  local out="$1" file="$2" prune="$3" app name wasm
  local jobs_max="${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}"
  local pids=() names=() failed=()
  for app in "${apps[@]}"; do
    app="${app%/}"
    name="$(basename "$app")"
    [[ -f "$app/$file" ]] || failure "$app has no $file"
    wasm="$out/$name.wasm"
    if [[ -f "$wasm" ]] &&
      [[ -z "$(find "$app" "${shared_inputs[@]}" -name "$prune" -prune -o -newer "$wasm" -print -quit)" ]]; then
      say "$name: up to date ($wasm)"
      continue
    fi
    while ((${#pids[@]} >= jobs_max)); do
      wait "${pids[0]}" || failed+=("${names[0]}")
      pids=("${pids[@]:1}")
      names=("${names[@]:1}")
    done
    say "$name: building"
    build "$app" "$name" &
    pids+=($!)
    names+=("$name")
  done
  while ((${#pids[@]} > 0)); do
    wait "${pids[0]}" || failed+=("${names[0]}")
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  done
  ((${#failed[@]} == 0)) || failure "building ${failed[*]} failed"
}

# report_built WASM NAME STARTED: one line with the size and time.
report_built() {
  local wasm="$1" name="$2" started="$3" tenths
  tenths=$(($(wc -c <"$wasm") * 10 / 1048576))
  say "$name: built in $((SECONDS - started)) s, $((tenths / 10)).$((tenths % 10)) MiB -> $wasm"
}
