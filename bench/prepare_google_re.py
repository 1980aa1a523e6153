"""Turn the LAMA Google-RE files into (1) a corpus of de-duplicated evidence snippets and (2) probes.

    python bench/prepare_google_re.py --data ../shared/data/google_re --out data-local/google_re

corpus.jsonl: {"id", "title", "text"}, title from the snippet's Wikipedia URL, sorted by title so
snippets about the same subject are consecutive. probes.jsonl: {"relation", "query", "answers"}
with LAMA's templates (service.evaluate.load_probes). Neither file is committed (CC-BY-NC data).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from urllib.parse import unquote

from service.evaluate import GOOGLE_RE_TEMPLATES, load_probes



def title_of(url: str) -> str:
    return unquote(url.rstrip("/").rsplit("/", 1)[-1]).replace("_", " ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    snippets: dict[str, str] = {}
    for relation in GOOGLE_RE_TEMPLATES:
        for line in open(args.data / f"{relation}_test.jsonl", encoding="utf-8"):
            for ev in json.loads(line)["evidences"]:
                snippets.setdefault(ev["snippet"], title_of(ev.get("url", "")))
    probes = load_probes(google_re=args.data)
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
