#!/usr/bin/env bash
# Build throughput on a lent GPU machine (the device tool): `indexer build` with default settings on its GPU
# (the encoder on CUDA, FAISS on its 16 CPU cores) over a corpus and then on its 16 CPU cores alone over its first
# 1M tokens,
# each with bench/bench_build.py; then the CUDA fill path against the CPU one on the GPU-built index (dense fills,
# no reader, the same probes). Figures for the on-paper table in docs/BENCHMARKS.md, "Build on a lent GPU".
#
# The working tree that travels is limited to 64 MiB, so the call carries $G (prepared here by
#   .venv/bin/python -m recipes.device_build pack --model encoder/default_model --corpus CORPUS --out data-local/gpu_build
# : the encoder with its word-embedding matrix as int8 rows, restored to fp16 there, and the corpus gzipped) and
# .whl (faiss-cpu, pydantic, pydantic-settings and their needs), and the tracked encoder/default_* folders stay
# behind (`git rm -r --cached` them for the call, then `git reset` them).
#   bash recipes/device_build.sh        # on the device, with G=data-local/gpu_build (carry: $G and .whl)
set -uo pipefail
cd "$(dirname "$0")/.."  # the repository root: the modules run with `python3 -m`, the paths are relative to it
G="${G:-data-local/gpu_build}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; nproc; lscpu | grep -m1 "Model name"
python3 -m recipes.device_build unpack --packed "$G" --out /tmp/model || exit 1
gunzip -c "$G/corpus.jsonl.gz" > /tmp/corpus.jsonl
python3 -m bench.bench_build --corpus /tmp/corpus.jsonl --out /tmp/idx_gpu --model /tmp/model \
    --json "$OUT/build_gpu.json" 2>&1 | grep -v "it/s\]$" | tail -20
echo "gpu build done at ${SECONDS}s"
head -n 12111 /tmp/corpus.jsonl > /tmp/c1m.jsonl    # the first shard's documents (1.0M tokens): the CPU is slower
CUDA_VISIBLE_DEVICES="" python3 -m bench.bench_build --corpus /tmp/c1m.jsonl --out /tmp/idx_cpu --model /tmp/model \
    --device cpu --forward-tokens 300000 --json "$OUT/build_cpu16_1m.json" 2>&1 | grep -v "it/s\]$" | tail -20
echo "cpu build done at ${SECONDS}s"
for dev in cuda cpu; do
    python3 -m evaluation.evaluate --index /tmp/idx_gpu --probes "$G/probes.jsonl" --mode dense --no-reader \
        --device "$dev" --report "$OUT/fill_$dev.json" --out "/tmp/fill_$dev.jsonl" 2>&1 | tail -3
done
python3 -m bench.compare_predictions /tmp/fill_cpu.jsonl /tmp/fill_cuda.jsonl
echo "done at ${SECONDS}s"
