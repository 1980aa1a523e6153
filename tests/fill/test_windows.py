"""fill.windows: the reader's windows around a mask's top phrases, their spans formed by the shards, and the
shard side's imports (no torch: a shard group's process loads no model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus.tokens import WORD_END, WORD_START
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.windows import mask_windows, window_spans
from tests.fill.test_reading import retrieved

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine(tiny_index):
    e = FillEngine.open(EngineConfig(index=tiny_index, use_reader=False))
    yield e
    e.close()


def test_windows_hold_the_top_phrases_inside_their_blocks_disjoint_and_within_budget(engine):
    ranked, _, _ = retrieved(engine)
    shards = engine.shards
    windows = mask_windows(ranked, phrases=6, window=2, budget=40)
    assert windows and sum(w.b - w.a for w in windows) <= 40
    for w in windows:
        block = shards.shard(w.shard_no).block_of(np.array([w.a, w.b - 1]))
        assert block[0] == block[1]  # one block each
    for v, w in zip(windows, windows[1:]):
        assert (v.shard_no, v.b) <= (w.shard_no, w.a) or v.shard_no < w.shard_no  # sorted, disjoint
    best = ranked.pool.where(ranked.shown[0].occurrences[0])
    part, j = best
    assert any(w.shard_no == part.shard_no and w.a <= part.first[j] and part.last[j] < w.b for w in windows)
    assert mask_windows(ranked, phrases=6, window=2, budget=1) == []  # nothing fits


def test_window_spans_are_every_valid_span_inside_the_windows(engine):
    ranked, _, _ = retrieved(engine)
    shards = engine.shards
    windows = mask_windows(ranked, phrases=4, window=3, budget=200)
    spans = window_spans(shards, windows, max_len=3)
    got = {(s, int(a), int(b)) for s, f, last in zip(spans.shard_nos, spans.first, spans.last) for a, b in zip(f, last)}
    want = set()
    for w in windows:
        flags = np.asarray(shards.shard(w.shard_no).flags)
        for a in range(w.a, w.b):
            for b in range(a, min(w.b, a + 3)):
                if flags[a] & WORD_START and flags[b] & WORD_END:
                    want.add((w.shard_no, a, b))
    assert got == want


@pytest.mark.slow  # starts a process
def test_the_shard_sides_modules_load_no_torch():
    """What a shard group's process imports (service.ray_group's own imports besides ray, and the modules of every
    task it unpickles) must not bring torch or transformers (~200 MB of RSS per replica), nor the encoder."""
    code = (
        "import sys; import fill.shard_group, fill.candidates, fill.windows, fill.evidence, fill.choices, "
        "indexer.phrase_index; print(sorted({'torch', 'transformers', 'encoder.model'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    out = subprocess.run(
        [sys.executable, "-c", code.replace("fill.windows", "fill.reading")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "encoder.model" in out.stdout  # the check sees the encoder's module where the reader's brings it


def test_window_spans_bring_each_windows_document_title_when_asked(engine):
    from fill.windows import Window

    shards = engine.shards
    windows, want = [], []
    for shard_no in range(len(engine.index.shards)):
        shard = shards.shard(shard_no)
        for row, first, end in shard.blocks:  # the first tokens of every block
            windows.append(Window(shard_no, int(first), int(min(end, first + 3))))
            want.append(shard.docs.column("title")[int(row)].as_py() or "")
    assert window_spans(shards, windows, max_len=3).titles is None
    assert window_spans(shards, windows, max_len=3, titles=True).titles == want
    assert {"Allan Peiper", "Paris", ""} <= set(want)
