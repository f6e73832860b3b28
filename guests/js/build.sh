#!/usr/bin/env bash
# Builds JavaScript handlers into WebAssembly components for `rheo handler
# deploy`. See README.md next to this file.
#
#   guests/js/build.sh [OUT_DIR [APP_DIR...]]
#
# OUT_DIR defaults to guests/js/target. Without APP_DIRs it builds every
# example (examples/<name>/app.js) and the SDK's test handler
# (tests/sdk_check/app.js); an APP_DIR is any folder holding an app.js. Each
# lands in OUT_DIR/<folder name>.wasm. A component newer than all of its
# inputs (its folder, the SDK, wit/, package.json, package-lock.json,
# componentize.mjs and this script) is left alone, so a second run with
# nothing changed takes no time.
#
# The tools (package-lock.json: componentize-qjs, pinned) are installed from
# the npm registry with `npm ci` into guests/js/node_modules on first use and
# whenever package-lock.json changes; nothing else is downloaded, at install
# or at build time. Each handler is staged in OUT_DIR/.stage/<name> (its
# folder as app/, the SDK as node_modules/rheo-handler, the entry module) and
# built from there.
#
# NODE and NPM name the tools (default node and npm); JOBS how many
# components build at once (default: the number of CPUs).
#
# Exit status 3 means the Node toolchain could not be set up (no node ≥ 18,
# no npm, or the install failed); other failures are 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/target}"
shift || true
node="${NODE:-node}"
npm="${NPM:-npm}"
modules="$here/node_modules"

# shellcheck source=../build-lib.sh
source "$here/../build-lib.sh"
find_apps "$here" app.js "$@"

# --- The tools ---------------------------------------------------------------
command -v "$node" >/dev/null || toolchain_failure "$node not found (Node.js ≥ 18 is needed)"
"$node" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' ||
  toolchain_failure "$node is older than 18 ($("$node" --version))"
# A copy of the lockfile the modules were installed from sits among them;
# when it matches, they are used as they are, without asking npm anything.
installed="$modules/.rheo-package-lock.installed"
if ! cmp -s "$here/package-lock.json" "$installed"; then
  command -v "$npm" >/dev/null || toolchain_failure "$npm not found (npm comes with Node.js)"
  say "installing package-lock.json into $modules (npm ci)"
  started=$SECONDS
  # No install scripts run: the packages are JavaScript and a prebuilt
  # binding, both taken from the registry as they are.
  (cd "$here" && "$npm" ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
    toolchain_failure "npm ci in $here failed"
  cp "$here/package-lock.json" "$installed"
  say "installed in $((SECONDS - started)) s"
fi
# The package's native binding is per platform (an optional dependency each).
(cd "$here" && "$node" --input-type=module -e 'await import("componentize-qjs")') ||
  toolchain_failure "componentize-qjs does not load here (is this platform one it ships a binding for?); delete $modules and retry"

# --- The components ----------------------------------------------------------
mkdir -p "$out"
out="$(cd "$out" && pwd)"
shared_inputs=("$here/sdk" "$root/wit" "$here/package.json" "$here/package-lock.json"
  "$here/componentize.mjs" "$here/build.sh" "$here/../build-lib.sh")

# build APP_DIR NAME: componentizes one handler into $out/NAME.wasm.
build() {
  local app="$1" name="$2" started=$SECONDS
  local wasm="$out/$name.wasm" stage="$out/.stage/$name"
  rm -rf "$stage"
  mkdir -p "$stage/app" "$stage/node_modules/rheo-handler"
  cp -R "$app/." "$stage/app/"
  cp "$here/sdk/rheo-handler.js" "$stage/node_modules/rheo-handler/"
  printf '{"name": "rheo-handler", "type": "module", "main": "rheo-handler.js"}\n' \
    >"$stage/node_modules/rheo-handler/package.json"
  cp "$here/sdk/entry.js" "$stage/entry.js"
  # Evaluating entry.js (and with it app.js) is part of the build, so a
  # broken app.js fails here.
  if ! (cd "$here" && "$node" componentize.mjs "$root/wit" "$stage" "$wasm.partial"); then
    rm -f "$wasm.partial"
    printf 'error: componentize-qjs failed for %s\n' "$app" >&2
    return 1
  fi
  mv -f "$wasm.partial" "$wasm"
  report_built "$wasm" "$name" "$started"
}

build_apps "$out" app.js node_modules
