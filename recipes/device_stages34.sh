#!/usr/bin/env bash
# Stages 3 and 4 of recipes/train_default_model.sh in ONE call on a lent GPU (the device tool), from a carried
# stage-2 export; each run's changed tensors come back under $OUT as fp16 parts (recipes/train_side_by_side.py),
# unpacked here with `train_side_by_side.py unpack` (stage 3 from the stage-2 export, stage 4 from stage 3), then
# blended (recipes/blend_models.py --alpha 0.5). r16's train_a fold model was made so (docs/history/QUALITY.md, "r16"):
#   BUDGET=545 G=data-local/gpu_fold bash recipes/device_stages34.sh      # carry: $G and .whl (pydantic's wheels)
# $G holds stage2/ (the export), gre.jsonl (the Google-RE side's corpus), wiki.jsonl (the train-side Wikipedia
# leads) and adjectives.txt (recipes/salient_words.py); EXTRA="name=flags" adds a second stage-4 run side by side
# (the same time: a step is bound by one CPU core, not the GPU). Stage 4 stops at BUDGET seconds of the call
# (--minutes) if 800 steps do not fit: the device allows 600 s a call. A call returns at most 8 files: the logs are
# printed and kept out of $OUT, so the 2 parts of each run come back (one extra run at most).
set -uo pipefail
cd "$(dirname "$0")/.."  # the repository root: the modules run with `python3 -m`, the paths are relative to it
G="${G:-data-local/gpu_fold}"
BUDGET="${BUDGET:-545}"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
C="--corpus $G/gre.jsonl --corpus $G/wiki.jsonl --corpus data/sample/encyclopedia.jsonl --positives mixed \
--query-views 2 --groups-per-step 4 --group-size 16 --block-tokens 128 --title-tokens 32 --grouping similar \
--query-window 20 --query-title-dropout 0.0 --freeze-embeddings --lr 3e-5 --warmup-steps 20 --dtype bf16"
python3 -m recipes.train_side_by_side run --init "$G/stage2" --work /tmp/s3 --out "$OUT" \
    --common "$C --steps 320 --save-every 80 --keep-checkpoints 0 --seed 2 --minutes 3.5" --run "s3=" || exit 1
ck=$(python3 -c "import json;print(json.load(open('/tmp/s3/s3/latest.json'))['checkpoint'])")
echo "stage 3 done at ${SECONDS}s: $ck"
python3 -m training export --checkpoint "/tmp/s3/s3/$ck" --out /tmp/s3model || exit 1
M4=$(python3 -c "print(round(($BUDGET - $SECONDS) / 60, 2))")
runs=(--run "s4=")
[ -z "${EXTRA:-}" ] || runs+=(--run "$EXTRA")
python3 -m recipes.train_side_by_side run --init /tmp/s3model --work /tmp/s4 --out "$OUT" --common "$C --steps 800 \
--save-every 100 --keep-checkpoints 1 --seed 3 --salient-words $G/adjectives.txt --salient-rate 0.5 --minutes $M4" \
    "${runs[@]}"
echo "done at ${SECONDS}s"
mkdir -p /tmp/logs
for f in "$OUT"/*.log; do echo "== $f"; tail -c 300 "$f"; echo; mv "$f" /tmp/logs/; done
