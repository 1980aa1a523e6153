#!/usr/bin/env bash
# Reader v3 (typed reading; docs/QUALITY.md "T-REx dev half"): reader v2e trained further on typed,
# relation-like queries made from our own text (recipes/prepare_typed_queries.py: an answer WordNet types as a
# language, an instrument, a city, an occupation ..., asked with the type named, or as subject + the words
# before it), over an index that holds the answer's own sentence (read in other wording than the query's):
#   bash recipes/train_reader_typed.sh            # data here (2 cores), training here or, with GPU=1, only the data
# Text: the TRAIN side of the Wikipedia leads without its dev fold (recipes/prepare_encoder_text.py --sources wiki)
# and the Google-RE train side's snippets; never the held sides, never a probe set or its templates.
# Steps: 1. the queries; 2. a flat index of that text (bundled encoder); 3. fill-reader-data, half of the queries
# read as restricted mode reads them, half as hybrid (dense hits from other documents: same-type negatives);
# 4. general cloze windows of that text (bench/probes.py) read as restricted mode reads them;
# 5. encoder train-reader from v2e (INIT; here, or on a lent GPU: recipes/device_reader.sh with G=$W/gpu and
# INIT, which this script fills with the examples); 6. the blend with v2e (recipes/blend_models.py --alpha 0.5).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
W="$WORK/typed"
INIT="${INIT:-$WORK/models/reader_v2e}"  # the reader v3 was trained from: v2e, as bundled at f9eb8a6
if [ ! -f "$INIT/reader.json" ]; then
    mkdir -p "$INIT.src"
    git archive f9eb8a6 encoder/default_reader | tar -x -C "$INIT.src"
    mv "$INIT.src/encoder/default_reader" "$INIT" && rm -rf "$INIT.src"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -f "$WORK/encoder_text/wiki.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_encoder_text --work "$WORK" \
    --sources wiki --no-join --exclude /dev/null
[ -f "$WORK/google_re/train/corpus.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_google_re \
    --data "${GOOGLE_RE:-../shared/data/google_re}" --out "$WORK/google_re"
mkdir -p "$W/gpu"
[ -f "$W/probes.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_typed_queries --corpus "$WORK/encoder_text/wiki.jsonl" \
    --corpus "$WORK/google_re/train/corpus.jsonl" --out "$W/probes.jsonl" --per-type "${PER_TYPE:-1000}"
[ -f "$W/corpus.jsonl" ] || cat "$WORK/encoder_text/wiki.jsonl" "$WORK/google_re/train/corpus.jsonl" > "$W/corpus.jsonl"
[ -f "$W/index/manifest.json" ] || INDEXER_INDEX_TYPE=flat "$VENV/bin/indexer" build --corpus "$W/corpus.jsonl" \
    --out "$W/index" --overwrite 2>/dev/null | tail -1
# the examples were read with the scoring bundled with v2e (lexical weight 2), as at f9eb8a6
[ -f "$W/scoring_f9eb8a6.json" ] || git show f9eb8a6:encoder/default_model/scoring.json > "$W/scoring_f9eb8a6.json"
awk 'NR % 2 == 1' "$W/probes.jsonl" > "$W/probes_a.jsonl"
awk 'NR % 2 == 0' "$W/probes.jsonl" > "$W/probes_b.jsonl"
for spec in "a:restricted" "b:hybrid"; do
    IFS=: read -r half mode <<< "$spec"
    [ -f "$W/gpu/ex_$half.jsonl" ] || OMP_NUM_THREADS=1 "$VENV/bin/fill-reader-data" --index "$W/index" \
        --probes "$W/probes_$half.jsonl" --out "$W/gpu/ex_$half.jsonl" --mode "$mode" \
        --scoring "$W/scoring_f9eb8a6.json" --window 10 --phrases 16 --max-tokens 200 &
done
wait
# beside them, general cloze windows of the same text left in the index (bench/probes.py), as v2b's were
[ -f "$W/cloze.jsonl" ] || "$VENV/bin/python" -m bench.probes --corpus "$W/corpus.jsonl" --n 2500 --seed 5 \
    --out "$W/cloze.jsonl"
[ -f "$W/gpu/ex_cloze.jsonl" ] || OMP_NUM_THREADS=1 "$VENV/bin/fill-reader-data" --index "$W/index" \
    --probes "$W/cloze.jsonl" --out "$W/gpu/ex_cloze.jsonl" --mode restricted --scoring "$W/scoring_f9eb8a6.json" \
    --window 10 --phrases 16 --max-tokens 200
[ "${GPU:-0}" = 1 ] && exit 0
examples=(); for f in "$W"/gpu/*.jsonl; do examples+=(--examples "$f"); done
"$VENV/bin/encoder" train-reader "${examples[@]}" \
    --init "$INIT" --out "$W/run" --batch-size 32 --freeze-embeddings --title-tokens 10 --null \
    --window 10 --phrases 16 --max-tokens 200 --seed 0 --epochs "${EPOCHS:-1}" --lr "${LR:-3e-5}" --resume
# 6. v3 = the fine-tune blended half and half with v2e, weight by weight (the heads too)
"$VENV/bin/python" -m recipes.blend_models --base "$INIT" --tuned "$W/run/reader" --alpha 0.5 --out "$W/reader_v3"
"$VENV/bin/python" - "$INIT" "$W/run/reader" "$W/reader_v3" <<'EOF'
import sys
from safetensors.torch import load_file, save_file
base, tuned = (load_file(f"{d}/head.safetensors") for d in sys.argv[1:3])
save_file({k: (0.5 * base[k].float() + 0.5 * tuned[k].float()).to(base[k].dtype).contiguous() for k in base},
          f"{sys.argv[3]}/head.safetensors")
EOF
echo "reader: $W/reader_v3 (copy its model.safetensors, head.safetensors and reader.json into encoder/default_reader)"
