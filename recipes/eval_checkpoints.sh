#!/usr/bin/env bash
# Held-side Google-RE EM@1 / recall@5 (dense, restricted and hybrid modes) for each given model directory:
#   bash recipes/eval_checkpoints.sh MODEL_DIR...
# The honest protocol (docs/QUALITY.md): the reference corpus is the HELD side's snippets only and the
# probes are the held side's (subject-disjoint from everything a model may be trained on), a fixed
# sample of PER_RELATION probes per relation (seed 0; all when PER_RELATION=0), each phrase
# aggregation in AGGREGATES (default "max"). recipes/prepare_google_re.py writes the two sides.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
PER="${PER_RELATION:-200}"
GRE="${GOOGLE_RE:-../shared/data/google_re}"
SIDE="${SIDE:-held}"
MODES="${MODES:-dense restricted hybrid}"
export INDEXER_INDEX_TYPE="${INDEXER_INDEX_TYPE:-flat}"  # exact dense search: quality of the encoder, not of the ANN
[ -f "$WORK/google_re/$SIDE/corpus.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_google_re --data "$GRE" --out "$WORK/google_re"
per_arg=()
[ "$PER" != 0 ] && per_arg=(--per-relation "$PER")
for model in "$@"; do
    name="${NAME_PREFIX:-}$(basename "$model")"
    "$VENV/bin/indexer" build --corpus "$WORK/google_re/$SIDE/corpus.jsonl" --out "$WORK/idx_${SIDE}_$name" --model "$model" \
        --overwrite 2>/dev/null | tail -1
    for agg in ${AGGREGATES:-max}; do
        for mode in $MODES; do
            "$VENV/bin/fill-eval" --index "$WORK/idx_${SIDE}_$name" --probes "$WORK/google_re/$SIDE/probes.jsonl" "${per_arg[@]}" \
                --mode "$mode" --aggregate "$agg" --out "$WORK/pred_${SIDE}_${name}_${mode}_$agg.jsonl" \
                --report "$WORK/report_${SIDE}_${name}_${mode}_$agg.json" | sed "s|^|$name $SIDE $mode $agg  |"
        done
    done
done
