"""The index as the corpus grows: disk, time to ready, memory and /fill latency at several sizes, in one run.

    python -m bench.bench_scale --corpus data-local/trex_dev/corpus.jsonl --out data-local/scale [--build-only] \
        --sizes 3m,10m,30m,100m [--probes 100] [--fills 200] [--noise 0.25] [--shard-tokens N] [--index-type auto]
        [--vector-dtype int8]

For each size, the corpus (JSON lines) is repeated with new document ids up to that many tokens
(`corpus_<size>.jsonl`), and indexed by the real `indexer build` (tokenizer, blocks, shard writer, FAISS training
and adds, BM25, checksums, manifest) with one change: the encoder's forward pass is replaced by vectors drawn from
real ones (`Resampler`: each token gets a real vector of the same vocabulary id, from the real encoder over the
first --calibration tokens, plus Gaussian noise of --noise times the per-dimension spread), so IVF lists are as
uneven as a real index's and 100M tokens build without 100M tokens of forward passes. The indexes are then
served by the real server (`python -m service`, a process each) and measured together (`serve_all`): disk per
token; each server's seconds to ready and to the end of its background warm-up (pages mapped, files hashed), timed
while it starts alone; /fill p50 and p99 over the same --probes queries (bench.shared.make_probes of the corpus;
--fills in all, after 10 to warm up), each probe sent to every server in turn, so the machine's drift (this
machine's speed moved 20% between two runs minutes apart) falls on every size alike and the ratios to the smallest
are those of one moment; and each server's resident anonymous and file-backed memory after them. The slope of
anonymous memory between the smallest and each larger size is printed in bytes per token.

`--indexes NAME=DIR,...` measures indexes built elsewhere instead (e.g. the T-REx dev half grown to 30M tokens with
the real encoder, recipes/prepare_trex_grown.sh), in the order given, with the same probes and fills.

Resumable: a size whose corpus or index exists is not made again; when every size has a row in `results.jsonl`,
those are shown again, otherwise every size is measured (together) and the file replaced."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from bench.shared import Server, disk_bytes, make_probes, memory
from common.files import write_bytes_atomic

SUFFIX = {"k": 10**3, "m": 10**6, "b": 10**9}
IDLE_S = 2.0  # after the fills, before the memory is read: longer than IdleTrim's 0.5 s


def parse_size(text: str) -> int:
    text = text.strip().lower()
    return int(float(text[:-1]) * SUFFIX[text[-1]]) if text[-1] in SUFFIX else int(text)


def size_name(size: int) -> str:
    """The name of a size in the files' names and the results: exact (3m, 20k, 12345)."""
    for unit, name in ((10**6, "m"), (10**3, "k")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True, help="JSON-lines corpus to grow")
    ap.add_argument("--out", type=Path, required=True, help="folder of the corpora, indexes and results")
    ap.add_argument("--sizes", default="3m,10m,30m,100m", help="comma-separated token counts (k, m, b suffixes)")
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--fills", type=int, default=200, help="timed fills (at least 1)")
    ap.add_argument("--calibration", type=int, default=200_000, help="tokens encoded for real to draw vectors from")
    ap.add_argument("--noise", type=float, default=0.25, help="noise added, times the per-dimension spread")
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--shard-tokens", type=int, default=None, help="as indexer build's (default: its default)")
    ap.add_argument("--index-type", default="auto", help="as indexer build's")
    ap.add_argument("--vector-dtype", default="int8", help="as indexer build's")
    ap.add_argument("--indexes", help="NAME=DIR,...: measure these built indexes instead of building --sizes")
    ap.add_argument(
        "--build-only",
        action="store_true",
        help="build the --sizes' indexes, measure none (e.g. in the background, measured later on a quiet machine)",
    )
    args = ap.parse_args()
    if args.fills < 1 or args.probes < 1:
        ap.error("--fills and --probes must be at least 1")
    return args


def grow_corpus(base: Path, tokens: int, base_tokens: int, out: Path) -> Path:
    """`base` repeated with ids `<id>~<copy>` until about `tokens` tokens (the last copy cut short)."""
    if out.is_file():
        return out
    lines = [line for line in base.read_text(encoding="utf-8").splitlines() if line.strip()]
    per_line = base_tokens / len(lines)
    total = math.ceil(tokens / per_line)
    tmp = out.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for i in range(total):
            record = json.loads(lines[i % len(lines)])
            record["id"] = f"{record['id']}~{i // len(lines)}"
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return out


class Resampler:
    """Vectors drawn from real ones by vocabulary id (a real vector of the same id, or of any id for an id never
    seen), plus Gaussian noise of `noise` x each dimension's spread; `encode_blocks` stands in for the encoder's."""

    def __init__(self, ids: np.ndarray, vectors: np.ndarray, noise: float, seed: int = 0) -> None:
        order = np.argsort(ids, kind="stable")
        self.vectors = vectors[order].astype(np.float32)
        self.ids = ids[order]
        self.scale = (noise * self.vectors.std(axis=0)).astype(np.float32)
        self.rng = np.random.default_rng(seed)

    @classmethod
    def fit(cls, encoder, corpus: Path, tokens: int, noise: float, cache: Path) -> Resampler:
        """From the real `encoder` over the first `tokens` tokens of `corpus` (cached in `cache`)."""
        if not cache.is_file():
            from corpus.blocking import iter_blocks
            from corpus.readers import read_corpus
            from encoder.model import BlockInput

            inputs, seen = [], 0
            for block in iter_blocks(read_corpus(corpus), encoder.tokenizer, 256):
                inputs.append(BlockInput(ids=block.tokens.ids, prefix_ids=None))
                seen += len(block.tokens.ids)
                if seen >= tokens:
                    break
            vecs = [v for i in range(0, len(inputs), 32) for v in encoder.encode_blocks(inputs[i : i + 32])]
            ids = np.concatenate([np.asarray(b.ids, dtype=np.int64) for b in inputs])
            np.savez(cache.with_suffix(".tmp.npz"), ids=ids, vectors=np.concatenate(vecs).astype(np.float16))
            cache.with_suffix(".tmp.npz").replace(cache)
        data = np.load(cache)
        return cls(data["ids"], data["vectors"], noise)

    def encode_blocks(self, blocks, here: bool = False) -> list[np.ndarray]:
        ids = np.concatenate([np.asarray(b.ids, dtype=np.int64) for b in blocks])
        lo, hi = np.searchsorted(self.ids, ids, "left"), np.searchsorted(self.ids, ids, "right")
        count = hi - lo
        anywhere = self.rng.integers(0, self.ids.size, ids.size)
        rows = np.where(count > 0, lo + (self.rng.random(ids.size) * count).astype(np.int64), anywhere)
        out = (
            self.vectors[rows]
            + self.rng.standard_normal(rows.size * self.scale.size, np.float32).reshape(rows.size, -1) * self.scale
        )
        return np.split(out, np.cumsum([len(b.ids) for b in blocks])[:-1])


def build(corpus: Path, out: Path, resampler: Resampler, args: argparse.Namespace) -> float:
    """Seconds `indexer build` took over `corpus` with the resampled vectors (0 when `out` is already built)."""
    from indexer.build import BuildConfig, BuildJob
    from indexer.manifest import MANIFEST_NAME

    if (out / MANIFEST_NAME).is_file():
        return 0.0
    options = {"index_type": args.index_type, "vector_dtype": args.vector_dtype}
    if args.shard_tokens:
        options["shard_tokens"] = args.shard_tokens
    cfg = BuildConfig(corpus=corpus, out=out, **options)
    t = time.perf_counter()
    job = BuildJob(cfg)
    job.encoder.encode_blocks = resampler.encode_blocks  # type: ignore[method-assign]  # the one change
    job.run()
    return time.perf_counter() - t


def serve_all(indexes: list[tuple[str, Path]], probes: list[str], fills: int, port: int) -> dict[str, dict]:
    """Serve every index at once (ports port, port + 1, ...), each started alone (its seconds to ready and to the
    end of its warm-up timed while the others idle), then fill `fills` queries (cycling `probes`, after 10 to warm
    up) on every server in turn, each probe on all of them before the next (the order rotated each round), so the
    machine's drift falls on every size alike; then read each one's memory. Figures by name."""
    import httpx

    servers: dict[str, Server] = {}
    figures: dict[str, dict] = {}
    try:
        for j, (name, index) in enumerate(indexes):
            server = servers[name] = Server(index, port + j)
            ready = server.wait_ready(timeout=3600)
            anon_ready = memory(server.proc.pid)["RssAnon"] / 2**20
            figures[name] = {"ready_s": round(ready, 2), "warm_s": round(server.wait_warm(timeout=3600), 2)}
            figures[name]["anon_ready_mib"] = anon_ready
        took: dict[str, list[float]] = {name: [] for name in servers}
        names = list(servers)
        with httpx.Client(timeout=600) as client:
            for i in range(10 + fills):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    t = time.perf_counter()
                    r = client.post(servers[name].url + "/fill", json={"text": probes[i % len(probes)]})
                    if r.status_code != 200:
                        raise SystemExit(f"/fill on {name} answered {r.status_code}: {r.text[:300]}")
                    if i >= 10:
                        took[name].append((time.perf_counter() - t) * 1000)
        time.sleep(IDLE_S)  # each server hands its allocator's free memory back once idle (common.process.IdleTrim)
        for name, server in servers.items():
            after = memory(server.proc.pid)
            figures[name].update(
                p50_ms=round(float(np.percentile(took[name], 50)), 1),
                p99_ms=round(float(np.percentile(took[name], 99)), 1),
                anon_mib=after["RssAnon"] / 2**20,
                file_mib=after["RssFile"] / 2**20,
            )
    finally:
        for server in servers.values():
            server.stop()
    return figures


def build_size(args, size: int, base_tokens: int, resampler_of) -> tuple[Path, float]:
    """One size's corpus and index (built if missing, by `resampler_of()`'s vectors): (index, seconds built)."""
    name = size_name(size)
    corpus = grow_corpus(args.corpus, size, base_tokens, args.out / f"corpus_{name}.jsonl")
    index = args.out / f"idx_{name}"
    seconds = build(corpus, index, resampler_of(), args) if not (index / "manifest.json").is_file() else 0.0
    if args.build_only:
        print(f"built {index} in {seconds:.0f} s", flush=True)
    return index, seconds


def measure(args, indexes: list[tuple[str, Path, float]], probes: list[str]) -> list[dict]:
    """The built indexes' figures (disk, then served together: serve_all), in the order given."""
    from indexer.manifest import Manifest

    served = serve_all([(name, index) for name, index, _ in indexes], probes, args.fills, args.port)
    rows = []
    for name, index, build_s in indexes:
        manifest = Manifest.load(index)
        tokens = manifest.counts.tokens
        row = {"size": name, "tokens": tokens, "shards": len(manifest.shards), "build_s": round(build_s)}
        row["disk_b_per_token"] = round(disk_bytes(index) / tokens, 1)
        rows.append({**row, **served[name]})
    return rows


def print_rows(rows: list[dict]) -> None:
    first = rows[0]
    print(
        "size    tokens      shards disk B/tok ready s warm s p50 ms p99 ms anon MiB file MiB anon B/tok over the first"
    )
    for r in rows:
        extra = r["tokens"] - first["tokens"]
        slope = (r["anon_mib"] - first["anon_mib"]) * 2**20 / extra if extra else float("nan")
        print(
            f"{r['size']:<7} {r['tokens']:>11,} {r['shards']:>6} {r['disk_b_per_token']:>10.1f} {r['ready_s']:>7.1f} "
            f"{r.get('warm_s', float('nan')):>6.1f} "
            f"{r['p50_ms']:>6.1f} {r['p99_ms']:>6.1f} {r['anon_mib']:>8.0f} {r['file_mib']:>8.0f} {slope:>8.1f}"
            f"  (p50 {r['p50_ms'] / first['p50_ms']:.2f}x, p99 {r['p99_ms'] / first['p99_ms']:.2f}x)"
        )


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    rows_done = [json.loads(line) for line in results.read_text().splitlines()] if results.is_file() else []
    done = {row["size"]: row for row in rows_done}
    probes = make_probes(args.corpus, args.probes, seed=0)
    resampler: Resampler | None = None

    def resampler_of() -> Resampler:  # the real encoder loaded only when an index is to be built
        nonlocal resampler
        if resampler is None:
            from encoder.model import Encoder
            from encoder.model_files import default_model_dir

            encoder = Encoder(default_model_dir(), device="cpu").for_inference()
            resampler = Resampler.fit(encoder, args.corpus, args.calibration, args.noise, args.out / "resample.npz")
        return resampler

    if args.indexes:
        given = [part.split("=", 1) for part in args.indexes.split(",")]
        if any(len(pair) != 2 or not (Path(pair[1]) / "manifest.json").is_file() for pair in given):
            raise SystemExit(f"--indexes {args.indexes}: give NAME=DIR pairs of built indexes (DIR/manifest.json)")
        indexes = [(name, Path(d), 0.0) for name, d in given]
    else:
        base_tokens = base_token_count(args.corpus)
        sizes = sorted(parse_size(s) for s in args.sizes.split(","))
        indexes = [(size_name(n), *build_size(args, n, base_tokens, resampler_of)) for n in sizes]
        if args.build_only:
            return
    if all(name in done for name, _, _ in indexes):  # measured before: shown again
        rows = [done[name] for name, _, _ in indexes]
    else:  # measured together, so that their ratios come from one run
        rows = measure(args, indexes, probes)
        write_bytes_atomic(results, "".join(json.dumps(row) + "\n" for row in rows).encode())
    for row in rows:
        print(json.dumps(row), flush=True)
    print_rows(rows)


def base_token_count(corpus: Path) -> int:
    """Tokens of `corpus` by the default model's tokenizer (what the build will count, special tokens aside)."""
    from encoder.model_files import default_model_dir, load_tokenizer

    tokenizer = load_tokenizer(default_model_dir())
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])


if __name__ == "__main__":
    main()
