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

# shellcheck source=../../../guests/build-lib.sh
source "$here/../../../guests/build-lib.sh"
# The generated client needs Python 3.11.
ensure_venv "$venv" "$here/requirements.txt" 11 "$python"
[[ -x "$venv/bin/openapi-python-client" ]] ||
  toolchain_failure "$venv/bin/openapi-python-client is missing; delete $venv and retry"
printf '%s\n' "$venv"
