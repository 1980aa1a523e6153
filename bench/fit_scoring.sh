#!/usr/bin/env bash
# The bundled model's fitted scoring (MODEL/scoring.json: the lexical weight of the restricted and hybrid modes,
# the confidence of fills without and with the reader), one command:
#   MODEL=encoder/default_model bash bench/fit_scoring.sh
# Fitted only on text the model never saw, never on a held side. The default encoder's recipe
# (bench/train_default_model.sh) trains on the train_a fold of Google-RE and leaves out the Wikipedia-leads dev
# fold, so the model is fitted as it is:
# 1. lexical weights (grid, macro EM@1) and the retrieval confidence: fill-fit on Google-RE train_b (200 probes
#    per relation) over a flat index of train_b's snippets built with MODEL;
# 2. the reader's retrieval weight per mode is kept from READER_WEIGHTS_FROM (default: the scoring this replaces;
#    it was chosen on train-side sets, docs/QUALITY.md "The reader"); the confidence of re-ranked fills is
#    fitted on three kinds of train-side fills together, as bench/train_reader.sh does: Google-RE train_b, cloze
#    windows of the Wikipedia-leads dev-fold articles (bench/probes.py), and round 0's dev-fold queries (their
#    sentence left out), both over a flat index of the dev-fold articles built with MODEL.
# Needs bench/train_default_model.sh's data and bench/prepare_wiki_leads.py --train-rounds 1.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${WORK:-data-local}"
VENV="${VENV:-.venv}"
GRE="${GOOGLE_RE:-../shared/data/google_re}"
MODEL="${MODEL:-encoder/default_model}"
OUT="${OUT:-$MODEL/scoring.json}"
READER_WEIGHTS_FROM="${READER_WEIGHTS_FROM:-$OUT}"
F="$WORK/fit/$(basename "$MODEL")"
mkdir -p "$F"
export INDEXER_INDEX_TYPE=flat
[ -f "$WORK/google_re/train_b/corpus.jsonl" ] || "$VENV/bin/python" bench/prepare_google_re.py --data "$GRE" --out "$WORK/google_re"
"$VENV/bin/python" - "$WORK" "$F" <<'EOF'
import hashlib, json, sys
work, f = sys.argv[1:]
rows = [x for x in open(f"{work}/wiki_leads/train/round0/corpus.jsonl", encoding="utf-8")
        if hashlib.sha256(json.loads(x)["title"].encode("utf-8")).hexdigest()[0] == "7"]
open(f"{f}/dev_articles.jsonl", "w", encoding="utf-8").write("".join(rows))
EOF
"$VENV/bin/python" bench/probes.py --corpus "$F/dev_articles.jsonl" --n 300 --out "$F/dev_cloze.jsonl"
for c in train_b:"$WORK/google_re/train_b/corpus.jsonl" dev:"$F/dev_articles.jsonl"; do
    "$VENV/bin/indexer" build --corpus "${c#*:}" --out "$F/idx_${c%%:*}" --model "$MODEL" --overwrite 2>/dev/null | tail -1
done
cp "$READER_WEIGHTS_FROM" "$F/previous_scoring.json"
tmp="$F/scoring.json"
"$VENV/bin/fill-fit" --index "$F/idx_train_b" --model "$MODEL" --google-re "$GRE" --side train_b \
    --per-relation 200 --out "$tmp"
"$VENV/bin/python" - "$tmp" "$F/previous_scoring.json" <<'EOF'
import json, sys
new, old = (json.load(open(p)) for p in sys.argv[1:])
new["reader_weight"] = old["reader_weight"]
json.dump(new, open(sys.argv[1], "w"), indent=2)
EOF
cp "$tmp" "$OUT"  # --part reader starts from the model's own scoring.json
fit() { OMP_NUM_THREADS=1 "$VENV/bin/fill-fit" --part reader --keep-weights --model "$MODEL" --per-relation 1000 "$@"; }
fit --index "$F/idx_train_b" --google-re "$GRE" --side train_b --per-relation 200 \
    --save-fills "$F/fills_gre_trainb.npz" --out "$F/gre_trainb.json"
fit --index "$F/idx_dev" --probes "$F/dev_cloze.jsonl" --save-fills "$F/fills_devcloze.npz" --out "$F/devcloze.json"
fit --index "$F/idx_dev" --probes "$WORK/wiki_leads/train/round0/dev.jsonl" \
    --with-fills "$F/fills_devcloze.npz" --with-fills "$F/fills_gre_trainb.npz" --out "$OUT"
