#!/usr/bin/env bash
# Reader v3 (typed reading; docs/QUALITY.md "T-REx dev half"): the bundled reader v2e trained further on typed,
# relation-like queries made from our own text (bench/prepare_typed_queries.py: an answer WordNet types as a
# language, an instrument, a city, an occupation ..., asked with the type named, or as subject + the words
# before it), over an index that holds the answer's own sentence (read in other wording than the query's):
#   bash bench/train_reader_typed.sh            # data here (2 cores), training here or, with GPU=1, only the data
# Text: the TRAIN side of the Wikipedia leads without its dev fold (bench/prepare_encoder_text.py --sources wiki)
# and the Google-RE train side's snippets; never the held sides, never a probe set or its templates.
# Steps: 1. the queries; 2. a flat index of that text (bundled encoder); 3. fill-reader-data, half of the queries
# read as restricted mode reads them, half as hybrid (dense hits from other documents: same-type negatives);
# 4. general cloze windows of that text (bench/probes.py) read as restricted mode reads them;
# 5. encoder train-reader from the bundled reader (here, or on a lent GPU: bench/device_reader.sh with
# G=$W/gpu, which this script fills with the examples).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
W="$WORK/typed"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -f "$WORK/encoder_text/wiki.jsonl" ] || "$VENV/bin/python" bench/prepare_encoder_text.py --work "$WORK" \
    --sources wiki --no-join --exclude /dev/null
[ -f "$WORK/google_re/train/corpus.jsonl" ] || "$VENV/bin/python" bench/prepare_google_re.py \
    --data "${GOOGLE_RE:-../shared/data/google_re}" --out "$WORK/google_re"
mkdir -p "$W/gpu"
[ -f "$W/probes.jsonl" ] || "$VENV/bin/python" bench/prepare_typed_queries.py --corpus "$WORK/encoder_text/wiki.jsonl" \
    --corpus "$WORK/google_re/train/corpus.jsonl" --out "$W/probes.jsonl" --per-type "${PER_TYPE:-1000}"
[ -f "$W/corpus.jsonl" ] || cat "$WORK/encoder_text/wiki.jsonl" "$WORK/google_re/train/corpus.jsonl" > "$W/corpus.jsonl"
[ -f "$W/index/manifest.json" ] || INDEXER_INDEX_TYPE=flat "$VENV/bin/indexer" build --corpus "$W/corpus.jsonl" \
    --out "$W/index" --overwrite 2>/dev/null | tail -1
awk 'NR % 2 == 1' "$W/probes.jsonl" > "$W/probes_a.jsonl"
awk 'NR % 2 == 0' "$W/probes.jsonl" > "$W/probes_b.jsonl"
for spec in "a:restricted" "b:hybrid"; do
    IFS=: read -r half mode <<< "$spec"
    [ -f "$W/gpu/ex_$half.jsonl" ] || OMP_NUM_THREADS=1 "$VENV/bin/fill-reader-data" --index "$W/index" \
        --probes "$W/probes_$half.jsonl" --out "$W/gpu/ex_$half.jsonl" --mode "$mode" --window 10 --phrases 16 \
        --max-tokens 200 &
done
wait
# beside them, general cloze windows of the same text left in the index (bench/probes.py), as v2b's were
[ -f "$W/cloze.jsonl" ] || "$VENV/bin/python" bench/probes.py --corpus "$W/corpus.jsonl" --n 2500 --seed 5 \
    --out "$W/cloze.jsonl"
[ -f "$W/gpu/ex_cloze.jsonl" ] || OMP_NUM_THREADS=1 "$VENV/bin/fill-reader-data" --index "$W/index" \
    --probes "$W/cloze.jsonl" --out "$W/gpu/ex_cloze.jsonl" --mode restricted --window 10 --phrases 16 --max-tokens 200
[ "${GPU:-0}" = 1 ] && exit 0
examples=(); for f in "$W"/gpu/*.jsonl; do examples+=(--examples "$f"); done
"$VENV/bin/encoder" train-reader "${examples[@]}" \
    --init encoder/default_reader --out "$W/run" --batch-size 32 --freeze-embeddings --title-tokens 10 --null \
    --window 10 --phrases 16 --max-tokens 200 --seed 0 --epochs "${EPOCHS:-1}" --lr "${LR:-3e-5}" --resume
echo "reader: $W/run/reader"
