"""Where does the gold answer rank among ALL tokens of a single-shard index, by exact score?

    python -m bench.gold_rank --index data-local/idx_NAME --google-re ../shared/data/google_re \
        --corpus data-local/google_re/corpus.jsonl [--per-relation 30]

For each Google-RE probe: the first token of the answer's first occurrence in the subject's own
snippet (the corpus document titled with the probe's subject) is ranked against every token for
q_start, its last token for q_end. Separates retrieval errors (gold ranked low) from aggregation
errors (gold ranked first but another phrase wins after summing over occurrences).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import defaultdict
from pathlib import Path

import numpy as np

from common.process import single_thread_blas
from evaluation.evaluate import GOOGLE_RE_TEMPLATES, load_probes, subsample
from fill.engine import FillEngine
from service.config import Settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--google-re", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True, help="corpus.jsonl of recipes/prepare_google_re.py")
    ap.add_argument("--per-relation", type=int, default=30)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    single_thread_blas()
    engine = FillEngine.open(Settings(index=args.index).engine_config())  # FILL_* variables apply, as in the server
    if len(engine.index.shards) != 1:
        raise SystemExit("error: this diagnostic reads one shard; build the index with a single shard")
    shard = engine.index.shards[0]
    vectors = np.asarray(shard.vectors, dtype=np.float32)
    rows_of_title: dict[str, list[int]] = defaultdict(list)
    for row, line in enumerate(open(args.corpus, encoding="utf-8")):
        rows_of_title[json.loads(line)["title"]].append(row)
    probes = subsample(load_probes(google_re=args.google_re), args.per_relation)
    ranks = []
    for p in probes:
        tail = GOOGLE_RE_TEMPLATES[p["relation"]].split("[X]", 1)[1].replace("[Y]", "<mask>")
        subject = p["query"][: -len(tail)]
        qv = engine.encoder.encode_queries([p["query"]])[0]
        start_scores, end_scores = vectors @ qv.q_start[0], vectors @ qv.q_end[0]
        best = None
        for row in rows_of_title.get(subject, []):
            text = shard.doc_text(row)
            at = text.find(p["answers"][0])
            if at < 0:
                continue
            for _, first, end in shard.blocks[shard.blocks[:, 0] == row]:
                offs = shard.offsets[first:end]
                inside = np.flatnonzero((offs[:, 0] >= at) & (offs[:, 1] <= at + len(p["answers"][0])))
                if inside.size:
                    a, b = first + inside[0], first + inside[-1]
                    pair = (int((start_scores > start_scores[a]).sum()), int((end_scores > end_scores[b]).sum()))
                    best = pair if best is None else min(best, pair)
        if best is not None:
            ranks.append(best)
    r = np.array(ranks)
    print(f"gold located for {len(r)} of {len(probes)} probes")
    for k in (1, 10, 100, 1024):
        print(f"gold in top-{k}: start {np.mean(r[:, 0] < k):.2f}  end {np.mean(r[:, 1] < k):.2f}")


if __name__ == "__main__":
    main()
