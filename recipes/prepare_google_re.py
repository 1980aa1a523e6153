"""Turn the LAMA Google-RE files into the two sides of the subject-disjoint split, each a corpus of
de-duplicated evidence snippets and its probes.

    python -m recipes.prepare_google_re --data ../shared/data/google_re --out data-local/google_re

A probe's subject is on the TRAIN side when the first hex digit of sha256(sub_label) is 0-7, else on
the HELD side (`evaluation.evaluate.google_re_side`); a snippet goes to the side of the probes citing it
(no snippet is cited from both sides; one that were would be left out). Writes, for SIDE in train, held:
  SIDE/corpus.jsonl  {"id", "title", "text"}, title from the snippet's Wikipedia URL, sorted by title so
                     snippets about the same subject are consecutive;
  SIDE/probes.jsonl  {"relation", "query", "answers"} with LAMA's templates;
and held_untitled/ (the held side's snippets without their titles, and its probes), a reference
corpus like a user's untitled one; and the two folds of the train side, train_a/ (first hex digit 0-3)
and train_b/ (4-7), split the same way: a model trained on train_a is fitted (scoring weights,
confidence) on train_b, text it never saw. Train on `train*/` only; report on `held*/` only. Nothing
here is committed (CC-BY-NC data).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote

from common.files import write_bytes_atomic
from evaluation.evaluate import GOOGLE_RE_TEMPLATES, load_probes, on_side

SIDES = ("train", "held", "train_a", "train_b")


def title_of(url: str) -> str:
    return unquote(url.rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")


def split_snippets(data: Path) -> dict[str, list[tuple[str, str]]]:
    """side -> sorted (title, text) of the snippets cited only by probes of that side (or fold)."""
    sides: dict[str, dict[str, set[bool]]] = {side: defaultdict(set) for side in SIDES}
    titles: dict[str, str] = {}
    for relation in GOOGLE_RE_TEMPLATES:
        for line in open(data / f"{relation}_test.jsonl", encoding="utf-8"):
            probe = json.loads(line)
            for ev in probe["evidences"]:
                titles.setdefault(ev["snippet"], title_of(ev.get("url", "")))
                for side in SIDES:
                    sides[side][ev["snippet"]].add(on_side(probe["sub_label"], side))
    return {
        side: sorted((titles[text], text) for text, where in cited.items() if where == {True})
        for side, cited in sides.items()
    }


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    for side, rows in split_snippets(args.data).items():
        (args.out / side).mkdir(parents=True, exist_ok=True)
        corpus = [{"id": f"grs-{side}-{i}", "title": title, "text": text} for i, (title, text) in enumerate(rows)]
        probes = load_probes(google_re=args.data, side=side)
        write_bytes_atomic(args.out / side / "corpus.jsonl", _jsonl(corpus))
        write_bytes_atomic(args.out / side / "probes.jsonl", _jsonl(probes))
        print(
            f"{side}: {len(corpus)} snippets -> {args.out / side / 'corpus.jsonl'}; "
            f"{len(probes)} probes -> {args.out / side / 'probes.jsonl'}"
        )
        if side == "held":
            (args.out / "held_untitled").mkdir(parents=True, exist_ok=True)
            untitled = [{"id": d["id"], "text": d["text"]} for d in corpus]
            write_bytes_atomic(args.out / "held_untitled" / "corpus.jsonl", _jsonl(untitled))
            write_bytes_atomic(args.out / "held_untitled" / "probes.jsonl", _jsonl(probes))


if __name__ == "__main__":
    main()
