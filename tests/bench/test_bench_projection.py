"""bench/bench_projection.py: the projection is fitted, measured, and an index re-coded behind it fills."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from tests.conftest import write_jsonl

pytestmark = pytest.mark.slow  # a build and a script in a subprocess

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "encyclopedia.jsonl"


@pytest.fixture(scope="module")
def sample_index(tmp_path_factory, tiny_bert_dir) -> Path:
    from indexer.build import BuildConfig, build_index

    out = tmp_path_factory.mktemp("projection") / "idx"
    build_index(
        BuildConfig(
            corpus=SAMPLE, out=out, model=tiny_bert_dir, block_tokens=64, index_type="flat", vector_dtype="int8"
        )
    )
    return out


def test_a_projection_is_fitted_measured_and_an_index_recoded_behind_it_fills(tmp_path, sample_index, tiny_bert_dir):
    probes = write_jsonl(
        tmp_path / "probes.jsonl",
        [
            {"relation": "r", "query": "The capital of France is <mask> .", "answers": ["Paris"]},
            {"relation": "r", "query": "Water is made of hydrogen and <mask> .", "answers": ["oxygen"]},
            {"relation": "s", "query": "The largest planet is <mask> .", "answers": ["Jupiter"]},
        ],
    )
    out = tmp_path / "out"
    args = ["--model", str(tiny_bert_dir), "--train-index", str(sample_index), "--train-probes", str(probes)]
    args += ["--train-cloze", str(SAMPLE), "--cloze", "40", "--eval-index", str(sample_index)]
    args += ["--eval-probes", str(probes), "--dims", "8", "--steps", "20", "--codes", "IVF2,SQ8", "--baseline"]
    args += ["IVF2,SQ8", "--out", str(out), "--recode-from", str(sample_index), "--recode-dim", "8"]
    args += ["--recode-inner", "IVF2,SQ8"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_projection", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"IVF2,SQ8", "P8", "P8 IVF2,SQ8"}
    for figures in results.values():
        assert 0 <= figures["top1_kept"] <= 1 and figures["logit_mae_top16"] >= 0
    assert results["IVF2,SQ8"]["code_bytes"] > 32 > results["P8 IVF2,SQ8"]["code_bytes"]  # 32 dims vs 8
    p = np.load(out / "P8.npy")
    assert p.shape == (8, 32)

    recoded = out / "index_p8"
    manifest = json.loads((recoded / "manifest.json").read_text())
    assert manifest["vector_dtype"] == "none"
    shard = faiss.read_index(str(recoded / "shard_00000" / "index.faiss"))
    transform = faiss.downcast_VectorTransform(faiss.downcast_index(shard).chain.at(0))
    assert (transform.d_in, transform.d_out) == (32, 8)
    assert np.allclose(faiss.vector_to_array(transform.A).reshape(8, 32), p)

    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.schemas import FillRequest

    engine = FillEngine.open(EngineConfig(index=recoded, model=tiny_bert_dir, device="cpu", dtype="fp32"))
    fill = engine.fill(FillRequest(text="The capital of France is <mask> .", mode="dense"))
    assert fill.masks[0].candidates  # retrieved through the projection and scored from its codes
