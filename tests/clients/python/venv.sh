#!/usr/bin/env bash
# Prepares the Python environment of the generated-client test
# (tests/tests/http_clients.rs): openapi-python-client and what the client
# it generates needs, pinned in requirements.txt, installed from PyPI into
# tests/clients/python/.venv on first use and whenever requirements.txt
# changes. A second run with nothing changed asks pip nothing.
#
#   tests/clients/python/venv.sh      # prints the venv's path when ready
#
# PYTHON names the interpreter that makes the venv (default python3).
#
# Exit status 3 means the Python toolchain could not be set up (no python3 ≥
# 3.11 — the generated client needs it —, no venv module, or the install
# failed); other failures are 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"

say() { printf '    %s\n' "$*" >&2; }
toolchain_failure() { printf 'error: %s\n' "$*" >&2; exit 3; }

# A copy of the requirements the venv was installed from sits inside it; a
# working venv whose copy matches is used as is.
installed="$venv/requirements.installed"
venv_works() { [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c '' 2>/dev/null; }
if ! venv_works || ! cmp -s "$here/requirements.txt" "$installed"; then
  command -v "$python" >/dev/null || toolchain_failure "$python not found (Python ≥ 3.11 is needed)"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    toolchain_failure "$python is older than 3.11 (the generated client needs 3.11)"
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
[[ -x "$venv/bin/openapi-python-client" ]] ||
  toolchain_failure "$venv/bin/openapi-python-client is missing; delete $venv and retry"
printf '%s\n' "$venv"
