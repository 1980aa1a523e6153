"""The cost of checking block checksums on read (indexer.checksums), per fill, against the same fills unchecked:

    python -m bench.bench_checksums --index data-local/trex_dev/index --probes data-local/trex_dev/probes.jsonl \
        [--n 200] [--mode hybrid] [--work data-local/bench/checksums]

--work gets a copy of the index made of symbolic links to its files plus each shard's checksums.npy (written here,
so an index built before the checksums can be measured without rebuilding it); both indexes are opened and warmed
in one process (the same pages) and every probe is filled by both, alternating which goes first. Prints the
p50 and mean of each and their ratios, and checks that both answer the same.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import time
from pathlib import Path

from common.files import file_record
from common.process import single_thread_blas
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.schemas import FillRequest
from indexer.checksums import SUMS_FILE, write_sums
from indexer.manifest import MANIFEST_NAME, FileInfo, Manifest


def checked_copy(index: Path, work: Path) -> Path:
    """`work`: `index`'s files linked, every shard given its block checksums, the manifest listing them."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    manifest = Manifest.load(index)
    for path in index.iterdir():
        if path.is_file() and path.name != MANIFEST_NAME:
            (work / path.name).symlink_to(path.resolve())
    shards = []
    for info in manifest.shards:
        (work / info.name).mkdir()
        for name in info.files:
            (work / info.name / name).symlink_to((index / info.name / name).resolve())
        write_sums(work / info.name, list(info.files))
        files = {**info.files, SUMS_FILE: FileInfo(**file_record(work / info.name / SUMS_FILE))}
        shards.append(info.model_copy(update={"files": files}))
    manifest.model_copy(update={"shards": shards}).save(work)
    return work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--probes", type=Path, required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--mode", default=None)
    ap.add_argument("--work", type=Path, default=Path("data-local/bench/checksums"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    single_thread_blas()
    t = time.perf_counter()
    checked_root = checked_copy(args.index, args.work)
    sums_s = time.perf_counter() - t
    engines = {
        name: FillEngine.open(EngineConfig(index=root))
        for name, root in (("plain", args.index), ("checked", checked_root))
    }
    assert all(s.checked for s in engines["checked"].index.shards) and not any(
        s.checked for s in engines["plain"].index.shards
    )
    for engine in engines.values():
        engine.index.warm(pages=True)
    texts = [json.loads(line)["query"] for line in args.probes.read_text().splitlines()[: args.n]]
    options = {"mode": args.mode} if args.mode else {}
    times: dict[str, list[float]] = {"plain": [], "checked": []}
    same = 0
    for i, text in enumerate(texts):
        order = ["plain", "checked"] if i % 2 == 0 else ["checked", "plain"]
        answers = {}
        for name in order:
            t = time.perf_counter()
            answers[name] = engines[name].fill(FillRequest(text=text, **options))
            times[name].append(time.perf_counter() - t)
        top = {n: [c.phrase for m in a.masks for c in m.candidates[:1]] for n, a in answers.items()}
        same += top["plain"] == top["checked"]
    p50 = {n: statistics.median(v) * 1000 for n, v in times.items()}
    mean = {n: statistics.fmean(v) * 1000 for n, v in times.items()}
    print(
        json.dumps(
            {
                "index": str(args.index),
                "fills": len(texts),
                "mode": args.mode or "default",
                "sums_written_s": round(sums_s, 1),
                "p50_ms": {n: round(v, 2) for n, v in p50.items()},
                "mean_ms": {n: round(v, 2) for n, v in mean.items()},
                "p50_ratio": round(p50["checked"] / p50["plain"], 4),
                "mean_ratio": round(mean["checked"] / mean["plain"], 4),
                "same_top_fill": same,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
