"""recipes/salient_words.py reads WordNet's data.adj (a small file in its format here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes (servers, Ray, scripts, CLIs): `-m "not slow"` skips it


ROOT = Path(__file__).resolve().parents[2]

DATA_ADJ = """  1 This software and database is being provided to you, the LICENSEE, by
  2 Princeton University under the following license.
00001740 00 a 01 able 0 005 = 05207437 n 0000 | (usually followed by `to') having the necessary means
00002098 00 s 02 great(a) 0 big 1 000 | large in size
00002312 00 a 03 French 0 well-known 0 ad_hoc 0 000 | of France
00002527 00 s 01 the 0 000 | a function word, not an adjective here
"""


def test_one_word_lemmas_lower_cased_without_markers(tmp_path):
    (tmp_path / "wn").mkdir()
    (tmp_path / "wn" / "data.adj").write_text(DATA_ADJ, encoding="utf-8")
    out = tmp_path / "adj.txt"
    done = subprocess.run(
        [sys.executable, "-m", "recipes.salient_words", "--out", str(out), "--wordnet", str(tmp_path / "wn")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().split() == ["able", "big", "french", "great", "well-known"]


def test_missing_wordnet_is_named(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "recipes.salient_words", "--out", str(tmp_path / "x"), "--wordnet", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "wordnet-base" in done.stderr and "data.adj" in done.stderr
