#!/usr/bin/env bash
# Train readers on a lent GPU (the device tool) in ONE call, from a carried example set, side by side (a step is
# bound by one CPU core, not the GPU), and send back each one's changes from INIT as fp16 parts (a call returns
# at most 8 files of at most 16 MiB): its transformer's changed tensors (recipes/train_side_by_side.py's
# changed_tensors / write_parts, two parts with the word embeddings fixed), its heads and its card. On the device
# (carry: $G and .whl, pydantic's wheels for Python 3.12):
#   G=data-local/typed/gpu RUNS="a=--epochs 1 --lr 3e-5;b=--epochs 2 --lr 5e-5" bash recipes/device_reader.sh
# then here, per run NAME:
#   .venv/bin/python -m recipes.train_side_by_side unpack --init encoder/default_reader \
#       --parts OUT/NAME.part*.safetensors --out data-local/models/reader_NAME
#   cp OUT/NAME.head.safetensors data-local/models/reader_NAME/head.safetensors
#   cp OUT/NAME.reader.json data-local/models/reader_NAME/reader.json
# $G holds the example files (*.jsonl or *.jsonl.gz, from fill-reader-data, recipes/train_reader_typed.sh). INIT defaults to the
# bundled reader; the card (window 10, 16 phrases, 200 tokens, titles, null) is what it serves with.
set -uo pipefail
cd "$(dirname "$0")/.."  # the repository root: the modules run with `python3 -m`, the paths are relative to it
G="${G:-data-local/typed/gpu}"
INIT="${INIT:-encoder/default_reader}"  # v3 came from v2e: INIT=data-local/models/reader_v2e (train_reader_typed.sh)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
mkdir -p /tmp/examples
for f in "$G"/*.jsonl.gz; do [ -e "$f" ] && gunzip -c "$f" > "/tmp/examples/$(basename "$f" .gz)"; done
examples=(); for f in "$G"/*.jsonl /tmp/examples/*.jsonl; do [ -e "$f" ] && examples+=(--examples "$f"); done
IFS=';' read -r -a runs <<< "${RUNS:-a=--epochs 1 --lr 3e-5}"
for spec in "${runs[@]}"; do
    name="${spec%%=*}"
    # shellcheck disable=SC2086
    python3 -m training train-reader "${examples[@]}" --init "$INIT" --out "/tmp/run_$name" --batch-size 32 \
        --freeze-embeddings --title-tokens 10 --null --window 10 --phrases 16 --max-tokens 200 --seed 0 \
        ${spec#*=} > "/tmp/run_$name.log" 2>&1 &
done
wait
echo "trained at ${SECONDS}s"
for spec in "${runs[@]}"; do
    name="${spec%%=*}"
    echo "== $name"; tail -n 3 "/tmp/run_$name.log"
    python3 - "$INIT" "/tmp/run_$name/reader" "$OUT" "$name" <<'EOF'
import shutil, sys
from pathlib import Path
from recipes.train_side_by_side import changed_tensors, write_parts
init, run, out, name = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
parts = write_parts(changed_tensors(init, run), out, name, 15.0)
shutil.copy(run / "head.safetensors", out / f"{name}.head.safetensors")
shutil.copy(run / "reader.json", out / f"{name}.reader.json")
print("parts", [p.name for p in parts])
EOF
done
