"""Where the time to ready goes, in one fresh process, in the order the server spends it:

    python -m bench.bench_ready --index data-local/bench/idx_10m

imports (numpy + faiss, torch, the service's HTTP app; transformers is not imported by a server of a BERT model:
the last line says whether anything imported it), opening the index (manifest,
memory maps, FAISS indexes, BM25) while the encoder loads on a thread (fill.loading.open_parts, as the server
does), loading the reader (fill.loading.open_reader), and the warm-up fill the server runs before /readyz
answers 200. Run it twice: the first run may
read the files from disk, later ones find them in the page cache.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402


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
    from service.api import create_app  # noqa: F401

    mark("import the service (FastAPI app)")
    from fill.config import EngineConfig
    from fill.engine import FillEngine
    from fill.loading import open_parts, open_reader
    from service.state import WARMUP

    config = EngineConfig(index=args.index)
    encoder, index, scoring = open_parts(config)
    mark(f"open the index ({index.total_tokens:,} tokens, {len(index.shards)} shards) and, beside it, the encoder")
    reader = open_reader(config, encoder)
    mark(f"load the reader ({reader.engine if reader else 'none'})")
    FillEngine(encoder, index, scoring, reader).fill(WARMUP)
    mark("warm-up fill")
    for (_, a), (name, b) in zip(marks, marks[1:]):
        print(f"{name:50s} {b - a:6.2f} s")
    print(f"{'total':50s} {marks[-1][1] - T0:6.2f} s")
    print(f"transformers imported: {'transformers' in sys.modules}")


if __name__ == "__main__":
    main()
