"""Where the time to ready goes, in one fresh process, in the order the server spends it:

    python bench/bench_ready.py --index data-local/bench/idx_10m

imports (numpy + faiss, torch, transformers, the service's HTTP app), opening the index (manifest,
memory maps, FAISS indexes, BM25), loading the encoder (its model class's import on first use, the
weights), and the warm-up fill the server runs before /readyz answers 200. Run it twice: the first run may
read the files from disk, later ones find them in the page cache.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    args = p.parse_args()
    marks = [("start", T0)]

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter()))

    import faiss  # noqa: F401
    import numpy  # noqa: F401
    mark("import numpy + faiss")
    import torch  # noqa: F401
    mark("import torch")
    import transformers  # noqa: F401
    mark("import transformers")
    from service.api import create_app  # noqa: F401
    mark("import the service (FastAPI app)")
    from indexer.phrase_index import PhraseIndex
    index = PhraseIndex(args.index)
    mark(f"open the index ({index.total_tokens:,} tokens, {len(index.shards)} shards)")
    from encoder.model import Encoder
    encoder = Encoder(Path(index.manifest.model.path))
    mark("load the encoder (model class import + weights)")
    from fill.engine import FillEngine
    from service.state import WARMUP
    FillEngine(encoder, index).fill(WARMUP)
    mark("warm-up fill")
    for (_, a), (name, b) in zip(marks, marks[1:]):
        print(f"{name:50s} {b - a:6.2f} s")
    print(f"{'total':50s} {marks[-1][1] - T0:6.2f} s")


if __name__ == "__main__":
    main()
