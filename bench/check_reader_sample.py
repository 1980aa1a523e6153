"""The sample checks of a reader (docs/history/QUALITY.md "Reader v2e"): the demo's fill queries over the bundled
sample, and the made-up same-type people of tests/encoder/test_default_model.py, each in every mode; prints each
fill and the number of wrong ones (exit status 1 when any is wrong).

    python -m bench.check_reader_sample [--model DIR] [--reader-dir DIR] [--scoring SCORING.json] \\
        [--work data-local/scratch]

A check is right when every mask's top fill is the expected phrase, or, for a person the corpus lacks, when no
fill has confidence 0.5 or more (the demo's min_confidence). KNOWN_MISREADS are the bundled reader's known wrong
checks: printed as KNOWN (not counted) while wrong, as FIXED when right, and counted apart ("known: K of N").
Indexes are built once under --work with the bundled encoder, or with --model's (a candidate encoder: its indexes
under --work/NAME). The bundled reader and scoring by default; a candidate's with the flags (without --scoring,
--model's scoring.json when it has one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from indexer.build import BuildConfig, build_index
from tests.conftest import CORPUS, write_jsonl
from tests.encoder.test_default_model import SAME_TYPE

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = [
    ("Marie Curie was born in <mask> .", "Warsaw"),
    ("Paris is the capital of <mask> .", "France"),
    ("Marie Curie was born in <mask> . In 1891 she moved to <mask> .", "Warsaw|Paris"),
    ("Zorblax Quint was born in <mask> .", None),
    ("Quillon Varda was born in <mask> .", None),
]
MADE_UP = [
    ("Quillon Varda was born in <mask> .", "Marbleton"),
    ("Quillon Varda studied in <mask> .", "Fenwick"),
    ("Tobin Aschel grew up in <mask> .", "Harrowgate"),
    ("Tobin Aschel worked in <mask> .", "Lindqvist Bay"),
    ("Marie Curie was born in <mask> .", "Warsaw"),
    ("The <mask> flows through Paris .", "Seine"),
    ("Allan Peiper was born in <mask> .", "Alexandra"),
]


# (index, mode, query) of the bundled models' known wrong fills; none since encoder r17 (with r16, reader v3 read
# Pierre Curie's "born in Paris" for Marie in dense mode, where the dense search put his sentence first)
KNOWN_MISREADS: set[tuple[str, str, str]] = set()


def index(work: Path, name: str, corpus: Path, model: Path | None = None) -> Path:
    out = work / name
    if not (out / "manifest.json").exists():
        build_index(BuildConfig(corpus=corpus, out=out, model=model))
    return out


def check(engine: FillEngine, query: str, want: str | None, name: str = "") -> tuple[int, int, list[str]]:
    """(wrong checks, known misreads still wrong, printed lines) of one query in every mode over index `name`."""
    wrong, known, lines = 0, 0, []
    for mode in ("hybrid", "restricted", "dense"):
        result = engine.fill(FillRequest(text=query, top_k=3, mode=mode))
        tops = [m.candidates[0] if m.candidates else None for m in result.masks]
        got = [c.phrase if c and (want or c.confidence >= 0.5) else None for c in tops]
        ok = got == (want.split("|") if want else [None] * len(result.masks))
        is_known = (name, mode, query) in KNOWN_MISREADS
        wrong += not ok and not is_known
        known += not ok and is_known
        shown = [[(c.phrase, round(c.confidence, 2)) for c in m.candidates] for m in result.masks]
        tag = ("FIXED" if ok else "KNOWN") if is_known else ("ok " if ok else "BAD")
        lines.append(f"{tag} {mode} {query} {shown}")
    return wrong, known, lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="encoder of the indexes (default: the bundled one)")
    ap.add_argument("--reader-dir", type=Path, default=None, help="default: the bundled reader")
    ap.add_argument("--scoring", type=Path, default=None, help="default: the bundled model's scoring.json")
    ap.add_argument("--work", type=Path, default=ROOT / "data-local" / "scratch")
    args = ap.parse_args()
    work = args.work / args.model.name if args.model else args.work
    work.mkdir(parents=True, exist_ok=True)
    sample = ROOT / "data" / "sample" / "encyclopedia.jsonl"
    same_type = write_jsonl(work / "same_type.jsonl", CORPUS + SAME_TYPE)
    sets = [
        (index(work, "idx_sample", sample, args.model), SAMPLE),
        (index(work, "idx_same_type", same_type, args.model), MADE_UP),
    ]
    wrong = known = 0
    for root, checks in sets:
        engine = FillEngine.open(
            EngineConfig(index=root, model=args.model, reader_dir=args.reader_dir, scoring=args.scoring)
        )
        for query, want in checks:
            bad, still, lines = check(engine, query, want, root.name)
            wrong, known = wrong + bad, known + still
            print("\n".join(lines))
        engine.close()
    print(f"known: {known} of {len(KNOWN_MISREADS)}")
    print(f"wrong: {wrong} of {3 * sum(len(c) for _, c in sets) - len(KNOWN_MISREADS)}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
