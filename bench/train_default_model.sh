#!/usr/bin/env bash
# The recipe of the bundled default model (encoder/default_model), one command on this machine
# (2 CPU cores, ~55 min of training):
#   bash bench/train_default_model.sh [GOOGLE_RE_DIR]
# Data: the de-duplicated Google-RE evidence snippets (Wikipedia text; the reference corpus of the
# dev benchmark; the probes' templates are never trained on) plus the bundled sample corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
GRE="${1:-../shared/data/google_re}"
WORK="${WORK:-data-local}"
VENV="${VENV:-.venv}"
"$VENV/bin/python" bench/prepare_google_re.py --data "$GRE" --out "$WORK/google_re"
"$VENV/bin/encoder" train \
    --corpus "$WORK/google_re/corpus.jsonl" --corpus data/sample/encyclopedia.jsonl \
    --out "$WORK/runs/default" --steps 800 --lr 1e-4 --warmup-steps 80 \
    --group-size 16 --block-tokens 128 --title-tokens 32 --query-title-dropout 0.5 \
    --save-every 200 --keep-checkpoints 0 --seed 0 --resume
"$VENV/bin/encoder" export --checkpoint "$WORK/runs/default/checkpoint-000800" --out encoder/default_model
