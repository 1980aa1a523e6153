"""Where the time to ready goes, in one fresh process, in the order the server spends it:

    python -m bench.bench_ready --index data-local/bench/idx_10m

imports (numpy + faiss, the service's HTTP app), opening the index (manifest, memory maps, FAISS indexes, BM25)
while the encoder loads on a thread (fill.loading.open_parts, as the server does; torch is imported there when a
model runs on the torch engine), loading the reader (fill.loading.open_reader), and the warm-up fill the server
runs before /readyz answers 200. The last lines say whether torch and transformers were imported (a server of a
BERT model on OpenVINO imports neither; FILL_ENGINE applies as in the server). Run it twice: the first run may
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
    from service.api import create_app  # noqa: F401

    mark("import the service (FastAPI app)")
    from fill.engine import FillEngine
    from fill.loading import open_parts, open_reader
    from service.config import Settings
    from service.state import WARMUP

    config = Settings(index=args.index).engine_config()
    encoder, index, scoring = open_parts(config)
    mark(f"open the index ({index.total_tokens:,} tokens) and, beside it, the encoder ({encoder.engine})")
    reader = open_reader(config, encoder)
    mark(f"load the reader ({reader.engine if reader else 'none'})")
    FillEngine(encoder, index, scoring, reader).fill(WARMUP)
    mark("warm-up fill")
    for (_, a), (name, b) in zip(marks, marks[1:]):
        print(f"{name:50s} {b - a:6.2f} s")
    print(f"{'total':50s} {marks[-1][1] - T0:6.2f} s")
    print(f"torch imported: {'torch' in sys.modules}; transformers imported: {'transformers' in sys.modules}")


if __name__ == "__main__":
    main()
