#!/usr/bin/env bash
# A long `encoder tune-queries` run against a frozen index, in the background, resumable with the same command:
#   bash recipes/tune_queries.sh [TAG]          # -> $RUN (default $WORK/tune/TAG): checkpoints, metrics.jsonl, log
# IDX (default: the T-REx dev half's index, recipes/eval_trex_dev.sh builds it), MINUTES (total training minutes over
# every resume, default 60), FLAGS (more tune-queries flags, e.g. "--word-share 0.5 --k 512"). Run it again after a
# kill or at the next session: it resumes from the last checkpoint (at most SAVE minutes old, default 5). The run
# reads the index's files only; with PAIR=1 the best model is installed as IDX/query_model when the budget is spent.
# The log (RUN/tune.log) and RUN/metrics.jsonl give step, loss, queries/s and the held-out figures at each checkpoint.
# EVAL=1 then measures the dev half with the run's best model (recipes/eval_trex_dev.sh, --query-model).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
TAG="${1:-dev_self}"
IDX="${IDX:-$WORK/trex_dev/index}"
RUN="${RUN:-$WORK/tune/$TAG}"
MINUTES="${MINUTES:-60}"
SAVE="${SAVE:-5}"
read -r -a extra <<< "${FLAGS:-}"
pair=(--no-pair); [ "${PAIR:-0}" = 1 ] && pair=(--pair)
[ -f "$IDX/manifest.json" ] || { echo "no index at $IDX (build it first, e.g. bash recipes/eval_trex_dev.sh)" >&2; exit 2; }
mkdir -p "$RUN"
# one OpenMP team of 2 threads for torch; FAISS searches on the same two cores between the passes
OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" nice -n "${NICE:-10}" "$VENV/bin/encoder" tune-queries --index "$IDX" --out "$RUN" \
    --minutes "$MINUTES" --save-minutes "$SAVE" --resume "${pair[@]}" "${extra[@]}" >> "$RUN/tune.log" 2>&1
grep -E '"dev"' "$RUN/metrics.jsonl" | tail -n 3
if [ "${EVAL:-0}" = 1 ]; then
    FLAGS="--query-model $RUN/query_model ${EVAL_FLAGS:-}" bash recipes/eval_trex_dev.sh "tune_$TAG"
fi
