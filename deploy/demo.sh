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
for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null; then break; fi
    kill -0 $server 2>/dev/null || { echo "server exited" >&2; exit 1; }
    sleep 0.5
done
fill() {
    echo "POST /fill $1"
    curl -sf -X POST "http://127.0.0.1:$PORT/fill" -H 'content-type: application/json' -d "$1" \
        | "$VENV/bin/python" -c 'import json,sys; r=json.load(sys.stdin); print(" filled:", r["filled"]); [print(f"  mask {m["index"]}: " + ", ".join(f"{c["phrase"]!r} {c["score"]:.3f}" for c in m["candidates"])) for m in r["masks"]]; e=r["masks"][0]["candidates"][0]["evidence"][:1]; print("  evidence:", e[0]["doc_id"], e[0]["start"], e[0]["end"], e[0]["context"]) if e else None; print(f"  took {r["took_ms"]:.1f} ms")'
}
fill '{"text": "Marie Curie was born in <mask> .", "top_k": 3}'
fill '{"text": "Paris is the capital of <mask> .", "top_k": 3}'
fill '{"text": "The <mask> flows through <mask> .", "top_k": 3}'
