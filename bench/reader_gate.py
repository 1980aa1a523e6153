"""What a gate that skips the reader when retrieval is confident would keep: from two fill-eval
prediction files of the same probes, one with the reader and one with `--no-reader`, per threshold t on the
unread top fill's calibrated confidence: the share of fills skipped (confidence >= t), the top-1 agreement of
the gated fills (the unread fill where skipped, the read one elsewhere) with the read fills, and the EM change.

    python -m bench.reader_gate READ.jsonl NOREAD.jsonl [--threshold 0.6 --threshold 0.9 ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.shared import top


def gate(read: list[dict], unread: list[dict], threshold: float) -> dict:
    """Skipped share, agreement with the read fills and EM change (all in points) at one threshold."""
    skip = [bool(u["confidence"]) and u["confidence"][0] >= threshold for u in unread]
    gated = [u if s else r for r, u, s in zip(read, unread, skip)]
    n = len(read)
    return {
        "threshold": threshold,
        "skipped": 100 * sum(skip) / n,
        "agreement": 100 * sum(top(g) == top(r) for g, r in zip(gated, read)) / n,
        "em_change": 100 * (sum(g["em"] for g in gated) - sum(r["em"] for r in read)) / n,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("read", type=Path)
    p.add_argument("unread", type=Path)
    p.add_argument("--threshold", type=float, action="append", default=None)
    args = p.parse_args()
    read, unread = (
        [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()] for f in (args.read, args.unread)
    )
    if [r["query"] for r in read] != [u["query"] for u in unread]:
        raise SystemExit("error: the two files hold different probes; run fill-eval with the same options")
    for t in args.threshold or [0.6, 0.7, 0.8, 0.9]:
        g = gate(read, unread, t)
        print(
            f"confidence >= {t}: skipped {g['skipped']:.1f}%, agreement {g['agreement']:.1f}%, EM {g['em_change']:+.1f}"
        )


if __name__ == "__main__":
    main()
