#!/usr/bin/env bash
# The recipe of the bundled default model (encoder/default_model), one command on this machine
# (2 CPU cores, fp32; ~95 min of training, see encoder/default_model/README.md):
#   bash bench/train_default_model.sh [GOOGLE_RE_DIR]
# Data: the de-duplicated Google-RE evidence snippets (Wikipedia text; the reference corpus of the
# dev benchmark; the probes' templates are never trained on) plus the bundled sample corpus.
# Objective: NPM span masking and in-batch contrastive loss, with "self" positives (a masked span's
# own position in the unmasked block, plus its other occurrences in the same document; the same
# phrase in other documents is a negative) and short query windows (20-40 tokens of the masked
# block), so that token vectors bind the phrase to its subject and queries look like real queries.
set -euo pipefail
cd "$(dirname "$0")/.."
GRE="${1:-../shared/data/google_re}"
WORK="${WORK:-data-local}"
VENV="${VENV:-.venv}"
STEPS="${STEPS:-640}"
"$VENV/bin/python" bench/prepare_google_re.py --data "$GRE" --out "$WORK/google_re"
"$VENV/bin/encoder" train \
    --corpus "$WORK/google_re/corpus.jsonl" --corpus data/sample/encyclopedia.jsonl \
    --out "$WORK/runs/r2" --steps "$STEPS" --lr 1e-4 --warmup-steps 60 \
    --positives self --query-window 40 --query-views 2 --groups-per-step 2 \
    --group-size 16 --block-tokens 128 --title-tokens 32 --query-title-dropout 0.5 \
    --save-every 160 --keep-checkpoints 0 --seed 0 --resume
"$VENV/bin/encoder" export --checkpoint "$WORK/runs/r2/checkpoint-$(printf %06d "$STEPS")" --out encoder/default_model
