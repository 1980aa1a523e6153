#!/usr/bin/env bash
# The bundled model's fitted scoring (encoder/default_model/scoring.json: the lexical weight of the
# restricted and hybrid modes, the confidence calibration of every mode; the reader's weights and confidence
# kept from the scoring it replaces, READER_FROM), one command:
#   bash recipes/fit_scoring.sh [GOOGLE_RE_DIR]
# Fitted on scores of text the model never saw, never on the held side:
# 1. the default recipe (recipes/train_default_model.sh) trained on the train_a fold of the train side
#    only (TRAIN_SIDE=train_a; ~3 h on 2 CPU cores, ~10 min on one H200), a stand-in for the bundled model meeting a
#    user's corpus;
# 2. an index (flat) of the train_b fold's snippets built with that model;
# 3. fill-fit on train_b's probes (200 per relation): grid of lexical weights per mode (macro EM@1),
#    then a logistic regression of "this candidate is right" per mode.
# The held side (recipes/eval_checkpoints.sh) then measures the bundled model with this scoring.
set -euo pipefail
cd "$(dirname "$0")/.."
GRE="${1:-../shared/data/google_re}"
WORK="${WORK:-data-local}"
VENV="${VENV:-.venv}"
FOLD_WORK="$WORK/fold_a"
FOLD_MODEL="${FOLD_MODEL:-$WORK/models/fold_a}"
OUT="${OUT:-encoder/default_model/scoring.json}"
"$VENV/bin/python" -m recipes.prepare_google_re --data "$GRE" --out "$WORK/google_re"
if [ ! -f "$FOLD_MODEL/config.json" ]; then
    WORK="$FOLD_WORK" TRAIN_SIDE=train_a EXPORT_TO="$FOLD_MODEL" bash recipes/train_default_model.sh "$GRE"
fi
INDEXER_INDEX_TYPE=flat "$VENV/bin/indexer" build --corpus "$WORK/google_re/train_b/corpus.jsonl" \
    --out "$WORK/idx_train_b_fold_a" --model "$FOLD_MODEL" --overwrite 2>/dev/null | tail -1
READER_FROM="${READER_FROM:-$OUT}"  # the reader's weights and confidence are kept from the scoring this replaces
cp "$READER_FROM" "$WORK/previous_scoring.json"
"$VENV/bin/fill-fit" --index "$WORK/idx_train_b_fold_a" --model "$FOLD_MODEL" --google-re "$GRE" --side train_b \
    --per-relation "${PER_RELATION:-200}" --out "$OUT"
"$VENV/bin/python" - "$OUT" "$WORK/previous_scoring.json" <<'EOF'
import json, sys
new, old = (json.load(open(p)) for p in sys.argv[1:])
for key in ("reader_weight", "reader_confidence"):
    new[key] = old.get(key, {})
if "reader" in old.get("fitted", {}):
    kept = old["fitted"]["reader"]
    if "note" not in kept:  # first kept: say which scoring's encoder it was fitted with
        kept = dict(kept, note=f"kept from the previous scoring, whose fold model was {old['fitted']['model']['name']}; "
                               "not refitted for this encoder")
    new["fitted"]["reader"] = kept
json.dump(new, open(sys.argv[1], "w"), indent=2)
EOF
