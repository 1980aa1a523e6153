#!/usr/bin/env bash
# The main job on the embedded default: install, index the bundled sample corpus with the default
# model, start the server, fill example queries, stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
VENV="${VENV:-.venv}"
PORT="${FILL_PORT:-8311}"
INDEX="${DEMO_INDEX:-indexes/sample}"
"$VENV/bin/indexer" build --corpus data/sample/encyclopedia.jsonl --out "$INDEX" --overwrite
"$VENV/bin/python" -m service --index "$INDEX" --port "$PORT" --log-level warning &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 360); do  # up to 3 minutes
    if "$VENV/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
        "http://127.0.0.1:$PORT/readyz" 2>/dev/null; then break; fi
    kill -0 $server 2>/dev/null || { echo "server exited" >&2; exit 1; }
    sleep 0.5
done
fill() { "$VENV/bin/python" deploy/fill_client.py "http://127.0.0.1:$PORT/fill" "$1"; }
fill '{"text": "Marie Curie was born in <mask> .", "top_k": 3}'
fill '{"text": "Paris is the capital of <mask> .", "top_k": 3, "mode": "restricted"}'
fill '{"text": "Marie Curie was born in <mask> . In 1891 she moved to <mask> .", "top_k": 3}'
fill '{"text": "Zorblax Quint was born in <mask> .", "top_k": 3, "min_confidence": 0.5}'
