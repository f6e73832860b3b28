#!/usr/bin/env bash
# Prepares the Python environment of the contract test
# (tests/tests/contract.rs): Schemathesis and its dependencies, pinned in
# requirements.txt, installed from PyPI into tests/contract/.venv on first
# use and whenever requirements.txt changes. A second run with nothing
# changed asks pip nothing.
#
#   tests/contract/venv.sh      # prints the venv's path when ready
#
# PYTHON names the interpreter that makes the venv (default python3).
#
# Exit status 3 means the Python toolchain could not be set up (no python3 ≥
# 3.10 — Schemathesis needs it —, no venv module, or the install failed);
# other failures are 1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"

# shellcheck source=../../guests/build-lib.sh
source "$here/../../guests/build-lib.sh"
ensure_venv "$venv" "$here/requirements.txt" 10 "$python"
[[ -x "$venv/bin/schemathesis" ]] ||
  toolchain_failure "$venv/bin/schemathesis is missing; delete $venv and retry"
printf '%s\n' "$venv"
