#!/usr/bin/env bash
# Google-RE EM@1 (dense and BM25-restricted modes) for each given model directory:
#   bash bench/eval_checkpoints.sh MODEL_DIR...
# Builds an index over the de-duplicated snippets with each model, then runs fill-eval on a fixed
# sample of PER_RELATION probes per relation (all probes when PER_RELATION=0), with each phrase
# aggregation in AGGREGATES (default "max sum").
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
PER="${PER_RELATION:-100}"
GRE="${GOOGLE_RE:-../shared/data/google_re}"
export INDEXER_INDEX_TYPE="${INDEXER_INDEX_TYPE:-flat}"  # exact dense search: quality of the encoder, not of the ANN
for model in "$@"; do
    name="${NAME_PREFIX:-}$(basename "$model")"
    "$VENV/bin/indexer" build --corpus "$WORK/google_re/corpus.jsonl" --out "$WORK/idx_$name" --model "$model" 2>/dev/null | tail -1
    for agg in ${AGGREGATES:-max sum}; do
        for mode in dense restricted; do
            "$VENV/bin/fill-eval" --index "$WORK/idx_$name" --google-re "$GRE" --per-relation "$PER" --mode "$mode" \
                --aggregate "$agg" --out "$WORK/pred_${name}_${mode}_$agg.jsonl" \
                --report "$WORK/report_${name}_${mode}_$agg.json" | sed "s|^|$name $mode $agg  |"
        done
    done
done
