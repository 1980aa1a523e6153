#!/usr/bin/env bash
# Install (if needed) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
exec "${VENV:-.venv}/bin/python" -m pytest "$@"
