"""Hard reader examples made from examples fill-reader-data wrote (with titles), for the two misreadings the
reader v2 candidates show on the bundled sample (docs/history/QUALITY.md "Reader v2e"):

    python -m recipes.prepare_hard_examples --examples data-local/reader_v2/titled/examples0.jsonl ... \
        --out data-local/reader_v2/hard

relatives.jsonl       a RELATIVE's sentence added to the windows: another example's answer window (same query
                      words where there is one: "He was born in Paris"), its document's title and its name in
                      the window renamed to the donor's first name and THIS subject's last name ("Pierre
                      Curie" read for "Marie Curie was born in <mask>"); the gold stays in the subject's window.
relatives_null.jsonl  the same with the subject's own answer windows taken out: the relative's sentence is all
                      there is, and the answer is "none of these" (train with --null).
two_mask.jsonl        two queries about one document joined into one text with two masks ("... born in
                      <mask> . ... moved to <mask> ."), one example per mask, each reading the windows of both
                      (the other mask's answer windows are the negatives); the pairs are queries from one
                      document, as --probes gives their titles.

An example is taken for relatives when its gold window's title is a name of two or three words that the query
names. Token ids, flags and titles are those of the index the examples came from (bert-style uncased
WordPiece: a word's tokens do not depend on its neighbours, so a name is replaced token for token).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path

from transformers import AutoTokenizer

from common.files import write_bytes_atomic
from corpus.tokens import WORD_END, WORD_START
from encoder.model_files import default_model_dir

NAME = re.compile(r"[a-z]+(?: [a-z]+){1,2}")
NOT_NAME = {"of", "the", "and", "de", "in", "on", "for", "a", "an", "to", "at", "by", "with", "from"}
MAX_QUERY = 128
MAX_WINDOW_TOKENS = 260
TITLE_TOKENS = 10  # a title's tokens kept, as fill-reader-data --title-tokens (default) records them


def find(seq: list[int], part: list[int]) -> list[int]:
    """Start positions of `part` in `seq`."""
    n = len(part)
    return [i for i in range(len(seq) - n + 1) if n and seq[i : i + n] == part]


def answer_ids(ex: dict) -> list[list[int]]:
    """The token ids of each distinct gold span."""
    out = []
    for w, i, j in ex["gold"]:
        ids = list(ex["windows"][w][i : j + 1])
        if ids not in out:
            out.append(ids)
    return out


def gold_window(ex: dict) -> int:
    return int(ex["gold"][0][0])


class Names:
    """Token ids and word flags of names (uncased WordPiece)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids).strip()

    def ids(self, name: str) -> tuple[list[int], list[int]]:
        ids, flags = [], []
        for word in name.split():
            part = self.tokenizer(word, add_special_tokens=False)["input_ids"]
            f = [0] * len(part)
            f[0] |= WORD_START
            f[-1] |= WORD_END
            ids += part
            flags += f
        return ids, flags


def replace(
    window: list[int], flags: list[int], old: list[int], new: list[int], new_flags: list[int]
) -> tuple[list[int], list[int]]:
    """Every word-aligned occurrence of `old` in the window replaced by `new` (with its flags)."""
    out_w, out_f, i = [], [], 0
    while i < len(window):
        end = i + len(old)
        if old and window[i:end] == old and flags[i] & WORD_START and flags[end - 1] & WORD_END:
            out_w += new
            out_f += new_flags
            i = end
        else:
            out_w.append(window[i])
            out_f.append(flags[i])
            i += 1
    return out_w, out_f


def person(ex: dict, names: Names) -> str | None:
    """The gold window's title when it is a name of two or three words the query names."""
    if not ex["gold"] or not ex.get("titles"):
        return None
    title = names.text(ex["titles"][gold_window(ex)])
    if not NAME.fullmatch(title) or NOT_NAME & set(title.split()):
        return None
    return title if title in names.text(ex["query_ids"]) else None


def relative_window(
    ex: dict, subject: str, donor: dict, donor_name: str, names: Names
) -> tuple[list[int], list[int], list[int]] | None:
    """The donor's answer window renamed to the donor's first name(s) + the subject's last name: (window, flags,
    title ids); None when it would hold the example's own answer."""
    w = gold_window(donor)
    window, flags = list(donor["windows"][w]), list(donor["flags"][w])
    relative = " ".join(donor_name.split()[:-1] + subject.split()[-1:])
    full, full_f = names.ids(relative)
    for old, (new, new_f) in [
        (names.ids(donor_name)[0], (full, full_f)),
        (names.ids(donor_name.split()[-1])[0], names.ids(subject.split()[-1])),
    ]:
        window, flags = replace(window, flags, old, new, new_f)
    if any(find(window, a) for a in answer_ids(ex)):
        return None
    return window, flags, full[:TITLE_TOKENS]


def with_window(ex: dict, at: int, window: list[int], flags: list[int], title: list[int]) -> dict:
    """The example with a window inserted at position `at` (gold spans after it shifted)."""
    out = dict(ex)
    out["windows"] = ex["windows"][:at] + [window] + ex["windows"][at:]
    out["flags"] = ex["flags"][:at] + [flags] + ex["flags"][at:]
    out["titles"] = ex["titles"][:at] + [title] + ex["titles"][at:]
    out["gold"] = [[w + (w >= at), i, j] for w, i, j in ex["gold"]]
    return trim(out)


def trim(ex: dict) -> dict:
    """Windows without gold dropped from the end while the windows exceed MAX_WINDOW_TOKENS."""
    keep = list(range(len(ex["windows"])))
    gold = {w for w, _, _ in ex["gold"]}
    while sum(len(ex["windows"][k]) for k in keep) > MAX_WINDOW_TOKENS:
        drop = next((k for k in reversed(keep) if k not in gold), None)
        if drop is None:
            break
        keep.remove(drop)
    new = {k: n for n, k in enumerate(keep)}
    out = dict(ex)
    for key in ("windows", "flags", "titles"):
        out[key] = [ex[key][k] for k in keep]
    out["gold"] = [[new[w], i, j] for w, i, j in ex["gold"]]
    return out


def without_gold_windows(ex: dict) -> dict:
    gold = {w for w, _, _ in ex["gold"]}
    keep = [k for k in range(len(ex["windows"])) if k not in gold]
    out = {**ex, "gold": []}
    for key in ("windows", "flags", "titles"):
        out[key] = [ex[key][k] for k in keep]
    return out


def relatives(examples: list[dict], names: Names, rng: random.Random, n: int) -> tuple[list[dict], list[dict]]:
    """(answered, no-answer) relative examples (module doc), at most n of each."""
    people = [(ex, s, names.text(ex["query_ids"]).replace(s, "")) for ex in examples if (s := person(ex, names))]
    by_pattern = defaultdict(list)  # the query's words without its subject -> the people asked so
    for person_ in people:
        by_pattern[person_[2]].append(person_)
    rng.shuffle(people)
    answered, null = [], []
    for ex, subject, words in people:
        if len(answered) >= n:
            break
        pool = by_pattern[words] if rng.random() < 0.8 else people
        pool = [d for d in pool if d[1].split()[-1] != subject.split()[-1]] or [
            d for d in people if d[1].split()[-1] != subject.split()[-1]
        ]
        if not pool:
            continue
        donor, donor_name, _ = rng.choice(pool)
        made = relative_window(ex, subject, donor, donor_name, names)
        if made is None:
            continue
        answered.append(with_window(ex, rng.randint(0, len(ex["windows"])), *made))
        rest = without_gold_windows(ex)
        null.append(with_window(rest, rng.randint(0, len(rest["windows"])), *made))
    return answered, null


def joined(a: dict, b: dict, names: Names) -> list[dict]:
    """The two examples' queries as one text with two masks: one example per mask (module doc)."""
    ids = list(a["query_ids"][:-1]) + list(b["query_ids"][1:])
    at = {"a": int(a["mask_at"]), "b": len(a["query_ids"]) - 2 + int(b["mask_at"])}
    out = []
    for key, ex, other in (("a", a, b), ("b", b, a)):
        added = [k for k in sorted({w for w, _, _ in other["gold"]}) if other["windows"][k] not in ex["windows"]]
        new = {**ex, "query_ids": ids, "mask_at": at[key], "query": names.text(ids)}
        for key2 in ("windows", "flags", "titles"):
            new[key2] = list(ex[key2]) + [other[key2][k] for k in added]
        gold = [list(g) for g in ex["gold"]]
        for k in range(len(ex["windows"]), len(new["windows"])):
            for span in answer_ids(ex):
                gold += [[k, i, i + len(span) - 1] for i in find(new["windows"][k], span)]
        new["gold"] = gold
        out.append(trim(new))
    return out


def query_titles(probes: list[Path], names: Names) -> dict[str, str]:
    """The decoded query ids (as Encoder.query_layout lays the query out) -> the probe's document title."""
    out = {}
    for path in probes:
        for line in path.read_text(encoding="utf-8").splitlines():
            p = json.loads(line)
            if p.get("title"):
                ids = names.tokenizer(p["query"].replace("<mask>", " [MASK] [MASK] "))["input_ids"]
                out[names.text(ids)] = p["title"]
    return out


def two_masks(
    examples: list[dict], titles: dict[str, str], names: Names, rng: random.Random, n: int, per_doc: int = 6
) -> list[dict]:
    """At most n examples from pairs of answered examples whose queries come from one document (`titles`:
    query_titles), at most per_doc pairs a document."""
    by_doc = defaultdict(list)
    for ex in examples:
        title = titles.get(names.text(ex["query_ids"]))
        if ex["gold"] and title:
            by_doc[title].append(ex)
    pairs = [rng.sample(d, 2) for d in by_doc.values() if len(d) >= 2 for _ in range(min(per_doc, len(d) // 2))]
    rng.shuffle(pairs)
    out = []
    for a, b in pairs:
        if len(out) >= n:
            break
        if len(a["query_ids"]) + len(b["query_ids"]) - 2 > MAX_QUERY:
            continue
        ans_a, ans_b = answer_ids(a), answer_ids(b)
        if any(x == y for x in ans_a for y in ans_b):
            continue
        if any(find(list(b["query_ids"]), x) for x in ans_a) or any(find(list(a["query_ids"]), y) for y in ans_b):
            continue
        out += joined(a, b, names)
    return out


def write(path: Path, examples: list[dict]) -> None:
    write_bytes_atomic(path, "".join(json.dumps(ex) + "\n" for ex in examples).encode("utf-8"))
    print(f"{len(examples)} examples -> {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=Path, action="append", required=True, help="titled example files; repeat")
    ap.add_argument("--out", type=Path, required=True, help="folder for the three files")
    ap.add_argument(
        "--probes",
        type=Path,
        action="append",
        default=[],
        help="the probes the examples were made from, with their document titles (two-mask pairs); repeat",
    )
    ap.add_argument("--model", type=Path, default=None, help="tokenizer's directory (default: the bundled encoder)")
    ap.add_argument("--relatives", type=int, default=4000, help="relative examples, answered and no-answer each")
    ap.add_argument("--two-mask", type=int, default=4000, help="two-mask examples (two per pair)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    names = Names(AutoTokenizer.from_pretrained(str(args.model or default_model_dir())))
    examples = [json.loads(line) for path in args.examples for line in path.read_text(encoding="utf-8").splitlines()]
    rng = random.Random(args.seed)
    answered, null = relatives(examples, names, rng, args.relatives)
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "relatives.jsonl", answered)
    write(args.out / "relatives_null.jsonl", null)
    write(args.out / "two_mask.jsonl", two_masks(examples, query_titles(args.probes, names), names, rng, args.two_mask))


if __name__ == "__main__":
    main()
