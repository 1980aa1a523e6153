#!/usr/bin/env bash
# The main job on the embedded default: install, index the bundled sample corpora with the default model,
# start the server, fill example queries (encyclopedia sample), then score a closed set (reviews sample),
# stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
VENV="${VENV:-.venv}"
PORT="${FILL_PORT:-8311}"
INDEX="${DEMO_INDEX:-indexes/sample}"
REVIEWS="${DEMO_REVIEWS_INDEX:-indexes/sample_reviews}"
"$VENV/bin/indexer" build --corpus data/sample/encyclopedia.jsonl --out "$INDEX" --overwrite
"$VENV/bin/indexer" build --corpus data/sample/reviews.jsonl --out "$REVIEWS" --overwrite
server=""
trap 'kill $server 2>/dev/null || true' EXIT
serve() {  # start the server on index $1 and wait until it is ready (up to 3 minutes)
    [ -z "$server" ] || { kill $server; wait $server 2>/dev/null || true; }
    "$VENV/bin/python" -m service --index "$1" --port "$PORT" --log-level warning &
    server=$!
    for _ in $(seq 1 360); do
        if "$VENV/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
            "http://127.0.0.1:$PORT/readyz" 2>/dev/null; then return; fi
        kill -0 $server 2>/dev/null || { echo "server exited" >&2; exit 1; }
        sleep 0.5
    done
    echo "server not ready in 3 minutes" >&2; exit 1
}
fill() { "$VENV/bin/python" deploy/fill_client.py "http://127.0.0.1:$PORT/fill" "$1"; }
score() { "$VENV/bin/python" deploy/fill_client.py "http://127.0.0.1:$PORT/score" "$1"; }
serve "$INDEX"
echo "the page to try it in a browser: http://127.0.0.1:$PORT/ while the demo runs; after it, start a server"
echo "(.venv/bin/python -m service --index $INDEX) and open http://127.0.0.1:8000/"
fill '{"text": "Marie Curie was born in <mask> .", "top_k": 3}'
fill '{"text": "Paris is the capital of <mask> .", "top_k": 3, "mode": "restricted"}'
fill '{"text": "Marie Curie was born in <mask> . In 1891 she moved to <mask> .", "top_k": 3}'
fill '{"text": "Zorblax Quint was born in <mask> .", "top_k": 3, "min_confidence": 0.5}'
# closed-set scoring (NPM's zero-shot classification) over 40 sample reviews: the 5 most similar vote
serve "$REVIEWS"
POSITIVE='{"label": "positive", "phrases": ["great", "good", "excellent", "amazing", "wonderful", "fantastic", "brilliant", "perfect", "awesome", "beautiful"]}'
NEGATIVE='{"label": "negative", "phrases": ["terrible", "bad", "awful", "horrible", "poor", "boring", "worst", "disappointing", "stupid", "waste"]}'
score '{"text": "I loved the music and the acting. It was <mask> .", "choices": ['"$POSITIVE, $NEGATIVE"'], "blocks": 5}'
score '{"text": "The plot made no sense and the jokes fell flat. It was <mask> .", "choices": ['"$POSITIVE, $NEGATIVE"'], "blocks": 5}'
