#!/usr/bin/env bash
# Step 5 of recipes/train_reader.sh and recipes/train_reader_v2.sh: a reader's retrieval weight and confidence,
# fitted into a model's scoring.json on train-side sets only (the held side is for reporting):
#   READER=DIR DEV_INDEX=IDX DEV_PROBES=P DEV_CORPUS=C FIT_DIR=D bash recipes/fit_reader.sh
# DEV_INDEX: a flat index of round 0's corpus (the dev fold's query sentences left out); DEV_PROBES: round 0's
# dev-fold queries; DEV_CORPUS: that corpus (its dev-fold articles give cloze windows left in the index);
# FIT_DIR: where the grids and fills go; SCORING (default: the bundled model's), FOLD_MODEL (the train_a fold
# model, trained by recipes/train_default_model.sh if missing), GOOGLE_RE; smaller fits: READER_GRID (weights,
# default fill-fit's grid), DEV_PER_RELATION (dev-fold queries per answer type, default 1000: all),
# GRE_PER_RELATION (Google-RE train_b probes per relation, default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
: "${READER:?} ${DEV_INDEX:?} ${DEV_PROBES:?} ${DEV_CORPUS:?} ${FIT_DIR:?}"
mkdir -p "$FIT_DIR"
export INDEXER_INDEX_TYPE=flat
SCORING="${SCORING:-encoder/default_model/scoring.json}"
FOLD_MODEL="${FOLD_MODEL:-$WORK/models/fold_a}"
GRE="${GOOGLE_RE:-../shared/data/google_re}"
grid=(); for w in ${READER_GRID:-}; do grid+=(--reader-grid "$w"); done
GRE_N="${GRE_PER_RELATION:-200}"
fit() { OMP_NUM_THREADS=1 "$VENV/bin/fill-fit" --part reader --reader-dir "$READER" --per-relation "${DEV_PER_RELATION:-1000}" "$@"; }
# 5a. the reader's retrieval weight per mode: a grid on two train-side sets (round 0's dev fold and
# Google-RE train_b over the fold model's index), the best mean macro EM@1 of the two (ties: the smaller)
fit --index "$DEV_INDEX" --probes "$DEV_PROBES" "${grid[@]}" --out "$FIT_DIR/grid_wikidev.json"
if [ ! -f "$FOLD_MODEL/config.json" ]; then
    WORK="$WORK/fold_a" TRAIN_SIDE=train_a EXPORT_TO="$FOLD_MODEL" bash recipes/train_default_model.sh "$GRE"
fi
"$VENV/bin/indexer" build --model "$FOLD_MODEL" --corpus "$WORK/google_re/train_b/corpus.jsonl" \
    --out "$WORK/idx_train_b_fold_a" --overwrite 2>/dev/null | tail -1  # (always: the fold model may be new)
cp "$SCORING" "$FOLD_MODEL/scoring.json"  # the fold model's fills with the same lexical weights
fit --index "$WORK/idx_train_b_fold_a" --model "$FOLD_MODEL" --google-re "$GRE" --side train_b --per-relation "$GRE_N" \
    "${grid[@]}" --out "$FIT_DIR/grid_gre_trainb.json"
"$VENV/bin/python" - "$SCORING" "$FIT_DIR/grid_wikidev.json" "$FIT_DIR/grid_gre_trainb.json" <<'PY'
import json, os, sys
scoring, grids = json.load(open(sys.argv[1])), [json.load(open(p))["fitted"]["reader"]["grid_macro_em@1"] for p in sys.argv[2:]]
for mode in grids[0]:
    mean = {w: sum(g[mode][w] for g in grids) / len(grids) for w in grids[0][mode]}
    scoring.setdefault("reader_weight", {})[mode] = max(map(float, mean), key=lambda w: (mean[str(w)], -w))
    print(mode, {w: round(v, 2) for w, v in mean.items()}, "->", scoring["reader_weight"][mode])
with open(sys.argv[1] + ".tmp", "w") as f:  # atomically: a temporary name, fsync, rename
    json.dump(scoring, f, indent=2)
    f.flush()
    os.fsync(f.fileno())
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PY
cp "$SCORING" "$FOLD_MODEL/scoring.json"
# 5b. the confidence of re-ranked fills, on three kinds of train-side fills at those weights
fit --keep-weights --index "$WORK/idx_train_b_fold_a" --model "$FOLD_MODEL" --google-re "$GRE" --side train_b \
    --per-relation "$GRE_N" --save-fills "$FIT_DIR/fills_gre_trainb.npz" --out "$FIT_DIR/gre_trainb.json"
"$VENV/bin/python" - "$DEV_CORPUS" "$FIT_DIR/dev_articles.jsonl" <<'PY'  # the dev fold's articles, for cloze windows
import hashlib, json, sys
rows = [line for line in open(sys.argv[1], encoding="utf-8")
        if hashlib.sha256(json.loads(line)["title"].encode("utf-8")).hexdigest()[0] == "7"]
open(sys.argv[2], "w", encoding="utf-8").write("".join(rows))
PY
"$VENV/bin/python" -m bench.probes --corpus "$FIT_DIR/dev_articles.jsonl" --n 300 --out "$FIT_DIR/dev_cloze.jsonl"
fit --keep-weights --index "$DEV_INDEX" --probes "$FIT_DIR/dev_cloze.jsonl" \
    --save-fills "$FIT_DIR/fills_devcloze.npz" --out "$FIT_DIR/devcloze.json"
fit --keep-weights --index "$DEV_INDEX" --probes "$DEV_PROBES" \
    --with-fills "$FIT_DIR/fills_devcloze.npz" --with-fills "$FIT_DIR/fills_gre_trainb.npz" --out "$SCORING"
