"""Turn the LAMA Google-RE files into (1) a corpus of de-duplicated evidence snippets and (2) probes.

    python bench/prepare_google_re.py --data ../shared/data/google_re --out data-local/google_re

corpus.jsonl: {"id", "title", "text"}, title from the snippet's Wikipedia URL, sorted by title so
snippets about the same subject are consecutive. probes.jsonl: {"relation", "query", "answers"}
with LAMA's templates. Neither file is committed (CC-BY-NC data).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from urllib.parse import unquote

TEMPLATES = {
    "place_of_birth": "[X] was born in [Y] .",
    "date_of_birth": "[X] (born [Y]).",
    "place_of_death": "[X] died in [Y] .",
}


def title_of(url: str) -> str:
    return unquote(url.rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    snippets: dict[str, str] = {}
    probes = []
    for relation, template in TEMPLATES.items():
        for line in open(args.data / f"{relation}_test.jsonl", encoding="utf-8"):
            d = json.loads(line)
            for ev in d["evidences"]:
                snippets.setdefault(ev["snippet"], title_of(ev.get("url", "")))
            query = template.replace("[X]", d["sub_label"]).replace("[Y]", "<mask>")
            answers = [d["obj_label"], *d.get("obj_aliases", [])]
            probes.append({"relation": relation, "query": query, "answers": answers})
    rows = sorted(snippets.items(), key=lambda kv: (kv[1], kv[0]))
    with open(args.out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i, (text, title) in enumerate(rows):
            f.write(json.dumps({"id": f"grs-{i}", "title": title, "text": text}, ensure_ascii=False) + "\n")
    with open(args.out / "probes.jsonl", "w", encoding="utf-8") as f:
        for p in probes:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    print(f"{len(rows)} snippets -> {args.out / 'corpus.jsonl'}; {len(probes)} probes -> {args.out / 'probes.jsonl'}")


if __name__ == "__main__":
    main()
