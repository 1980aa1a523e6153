#!/usr/bin/env bash
# The T-REx dev half in every mode (the dev protocol: docs/QUALITY.md "T-REx dev half"):
#   bash recipes/eval_trex_dev.sh [TAG]     -> $WORK/trex_dev/eval/TAG/{default,restricted,dense}.json (+ predictions)
# An index of the dev half's evidence and ~1.3M tokens of distractors (recipes/prepare_trex_dev.sh), built with the
# default `indexer build` settings (as the outside measure builds it) and MODEL (default: the bundled encoder);
# the probes: PER_RELATION per relation (default 50, the outside measure's sample size; SEED 0), macro EM@1.
# default = the engine's default mode with the reader, restricted = restricted with the reader, dense = dense
# without the reader (NPM itself). SCORING=FILE scores with that scoring.json (default: the model's own, beside it),
# the fills and the reader-input count alike; other fill-eval flags go in FLAGS; MODES picks.
# With GOLD=1 it also prints, per mode, the share of probes whose answer is in the windows the reader reads
# (fill-reader-data's "answer read").
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
D="$WORK/trex_dev"
TAG="${1:-bundled}"
MODEL="${MODEL:-}"
IDX="${IDX:-$D/index}"
PER_RELATION="${PER_RELATION:-50}"
SEED="${SEED:-0}"
MODES="${MODES:-default restricted dense}"
read -r -a extra <<< "${FLAGS:-}"
scoring=(); [ -n "${SCORING:-}" ] && scoring=(--scoring "$SCORING")
[ -f "$D/index_corpus.jsonl" ] || bash recipes/prepare_trex_dev.sh
if [ ! -f "$IDX/manifest.json" ]; then
    model_flag=(); [ -n "$MODEL" ] && model_flag=(--model "$MODEL")
    "$VENV/bin/indexer" build --corpus "$D/index_corpus.jsonl" --out "$IDX" "${model_flag[@]}"
fi
out="$D/eval/$TAG"; mkdir -p "$out"
if [ "${GOLD:-0}" = 1 ]; then  # the reported sample, as fill-eval draws it, for fill-reader-data
    "$VENV/bin/python" - "$D/probes.jsonl" "$PER_RELATION" "$SEED" "$out/probes_sample.jsonl" <<'EOF'
import json, sys
from evaluation.evaluate import load_probes, subsample
from pathlib import Path
probes = subsample(load_probes(Path(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3]))
with open(sys.argv[4], "w", encoding="utf-8") as f:
    f.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in probes)
EOF
fi
for mode in $MODES; do
    case $mode in
        default) flags=() ;;
        restricted) flags=(--mode restricted) ;;
        hybrid) flags=(--mode hybrid) ;;
        dense) flags=(--mode dense --no-reader) ;;
        *) echo "unknown mode $mode" >&2; exit 2 ;;
    esac
    "$VENV/bin/fill-eval" --index "$IDX" --probes "$D/probes.jsonl" --per-relation "$PER_RELATION" --seed "$SEED" \
        "${flags[@]}" "${scoring[@]}" "${extra[@]}" --report "$out/$mode.json" --out "$out/$mode.predictions.jsonl" \
        > "$out/$mode.txt" 2> "$out/$mode.log" || { tail -n 5 "$out/$mode.log" >&2; exit 1; }
    echo "$mode:"; grep -E "^(macro|latency)|ECE" "$out/$mode.txt"
    if [ "${GOLD:-0}" = 1 ] && [ "$mode" != dense ]; then
        mflag=(); [ "$mode" = restricted ] && mflag=(--mode restricted)
        echo "$mode: gold in the reader's input"
        OMP_NUM_THREADS=1 "$VENV/bin/fill-reader-data" --index "$IDX" --probes "$out/probes_sample.jsonl" \
            --out "$out/$mode.reader_input.jsonl" --window 10 --phrases 16 --max-tokens 200 "${mflag[@]}" "${scoring[@]}" \
            > "$out/$mode.gold.txt" 2>&1 || { tail -n 5 "$out/$mode.gold.txt" >&2; exit 1; }
        grep -i "answer read" "$out/$mode.gold.txt"
    fi
done
