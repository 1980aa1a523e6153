"""bench/reader_gate.py: what skipping the reader above a confidence would keep."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_jsonl

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]


def _rows(tops: list[str], confidence: list[float]) -> list[dict]:
    return [
        {"query": f"q{i} <mask>", "predictions": [t], "confidence": [c], "em": t == "Paris"}
        for i, (t, c) in enumerate(zip(tops, confidence))
    ]


def test_the_gate_keeps_the_unread_fill_only_above_the_threshold(tmp_path):
    read = write_jsonl(tmp_path / "read.jsonl", _rows(["Paris", "Paris", "Rome", "Paris"], [0.5] * 4))
    unread = write_jsonl(tmp_path / "unread.jsonl", _rows(["Paris", "Lyon", "Rome", "Nice"], [0.95, 0.85, 0.2, 0.5]))
    done = subprocess.run(
        [sys.executable, "-m", "bench.reader_gate", str(read), str(unread), "--threshold", "0.9", "--threshold", "0.8"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "confidence >= 0.9: skipped 25.0%, agreement 100.0%, EM +0.0"  # the skipped fill agrees
    assert lines[1] == "confidence >= 0.8: skipped 50.0%, agreement 75.0%, EM -25.0"  # Lyon replaces Paris
    other = write_jsonl(tmp_path / "other.jsonl", _rows(["Paris"], [0.9]))
    bad = subprocess.run(
        [sys.executable, "-m", "bench.reader_gate", str(read), str(other)], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode != 0 and "different probes" in bad.stderr
