"""Write a JSON-lines corpus of about N tokens (default model's tokenizer), documents in a seeded shuffled order.

    python -m recipes.subset_corpus --corpus data-local/debian/corpus.jsonl --tokens 10500000 \
        --out data-local/debian/corpus_10m.jsonl

Benchmarks need a corpus of a fixed size; this takes whole documents until the token count is reached.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, required=True, help="JSON-lines corpus with a 'text' field")
    p.add_argument("--tokens", type=int, required=True, help="stop once this many text tokens are taken")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    from transformers import AutoTokenizer

    from encoder.model_files import default_model_dir

    tok = AutoTokenizer.from_pretrained(str(default_model_dir()), local_files_only=True)
    lines = args.corpus.read_text(encoding="utf-8").splitlines()
    random.Random(args.seed).shuffle(lines)
    taken, total = [], 0
    for a in range(0, len(lines), 2000):
        chunk = lines[a : a + 2000]
        counts = [
            len(ids) for ids in tok([json.loads(x)["text"] for x in chunk], add_special_tokens=False)["input_ids"]
        ]
        for line, n in zip(chunk, counts):
            if total >= args.tokens:
                break
            taken.append(line)
            total += n
        if total >= args.tokens:
            break
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("\n".join(taken) + "\n", encoding="utf-8")
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(taken)} documents, {total} tokens (of {len(lines)} documents)")


if __name__ == "__main__":
    main()
