"""The reader's reading accuracy: of the probes whose answer is in the reader's input, the share filled right.

    fill-reader-data --index IDX --probes P --out read.jsonl ...          # which probes have the answer in front
    fill-eval --index IDX --probes P --out predictions.jsonl ...          # the fills, with or without the reader
    python -m bench.reading_accuracy --read read.jsonl --predictions predictions.jsonl [--predictions more.jsonl]

Prints, per predictions file, the share of probes whose answer the reader reads ("answer read"), EM@1 over all
probes, and EM@1 over the read ones (the reading accuracy: "had the answer in front of it for 63% of probes and
chose it for 54% of those"). EM@1 is fill-eval's: the top prediction equals an answer, normalized.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evaluation.evaluate import normalize


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def accuracy(read: set[str], predictions: list[dict]) -> dict:
    right = [
        bool(p["predictions"]) and normalize(p["predictions"][0]) in {normalize(a) for a in p["answers"]}
        for p in predictions
    ]
    in_front = [p["query"] in read for p in predictions]
    n_read = sum(in_front)
    return {
        "probes": len(predictions),
        "answer_read": round(100 * n_read / max(1, len(predictions)), 1),
        "em@1": round(100 * sum(right) / max(1, len(predictions)), 1),
        "reading_accuracy": round(100 * sum(r for r, f in zip(right, in_front) if f) / max(1, n_read), 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--read", type=Path, required=True, help="fill-reader-data's examples of the probes")
    p.add_argument("--predictions", type=Path, action="append", required=True, help="fill-eval --out of the probes")
    args = p.parse_args()
    read = {r["query"] for r in rows(args.read)}
    for path in args.predictions:
        print(json.dumps({"predictions": str(path), **accuracy(read, rows(path))}))


if __name__ == "__main__":
    main()
