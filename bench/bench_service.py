"""Service figures over one index, measured on the real server process (`python -m service`):

    python -m bench.bench_service --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl \
        [--baseline-index DIR] [--probes 500] [--starts 3] [--json OUT]

- time to ready: from spawning the process to the first 200 of /readyz (which runs a real fill),
  --starts times (the first start may read the files from disk; later ones find them in the page cache);
- resident RAM: VmRSS (anonymous + file-backed pages) of the server after ready and after the
  latency run; per token = (RSS - RSS of the same server over a tiny baseline index) / tokens;
- /fill latency for one client: --probes sequential POST /fill in --mode (default dense, the API's
  default until 2026-11-23, so figures compare with the earlier ones; the API default is now hybrid)
  and the other API defaults (k=1024), --settle seconds after ready and 10 warm-up requests; client-side wall time;
  p50 / p99; and the engine's own time per stage
  (the response's timings_ms: encode, search, spans, rank);
- floors, in this process on the same queries after the server has stopped: the bare encoder
  (`Encoder.encode_queries`: tokenizer + forward, the model and dtype the server runs) and the bare FAISS
  search of the same query vectors (the FAISS calls of `PhraseIndex.search` made in turn on this thread: the
  shared IVF assignment, then every shard's k hits, refine * k on ANN shards; no re-scoring), and the ratio of /fill
  p50 to the sum of their p50s: what the service adds over the
  two things it cannot skip;
- the forward floor, before the servers start and after they stop (the machine's speed drifts): one plain forward
  of the default encoder on one thread over an 18-token query, the faster p50 of fp32 and bf16 autocast
  (`_forward_floor`), and /fill p50 and p99 as multiples of the mean of the two (issue 67's measure).
Targets: ready <= 5 s at 10M tokens, <= 100 B of RAM per token, p50 <= 20 ms, p99 <= 60 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.shared import ROOT, Server, make_probes, memory


def _baseline(path: Path | None) -> Path:
    if path is not None:
        return path
    out = ROOT / "data-local" / "bench" / "idx_baseline"
    if not (out / "manifest.json").is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "indexer",
                "build",
                "--corpus",
                str(ROOT / "data/sample/encyclopedia.jsonl"),
                "--out",
                str(out),
                "--overwrite",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return out


def _floors(index: Path, texts: list[str], k: int) -> dict[str, float]:
    """p50 ms of the bare encoder and of the bare FAISS search of its vectors over `texts`."""
    import numpy as np

    from common.process import single_thread_blas
    from fill.engine import FillEngine
    from service.config import Settings

    single_thread_blas()
    engine = FillEngine.open(Settings(index=index).engine_config())  # FILL_* variables apply, as in the server
    enc, faiss_ms, vectors = [], [], []
    for text in texts:
        t = time.perf_counter()
        qv = engine.encoder.encode_queries([text])[0]
        enc.append((time.perf_counter() - t) * 1000)
        vectors.append(np.ascontiguousarray(np.concatenate([qv.q_start, qv.q_end]), dtype=np.float32))
    for q in vectors:
        t = time.perf_counter()
        assigned = engine.index.assign(q)
        for s in range(len(engine.index.shards)):
            engine.index.faiss_search(s, q, k, assigned)
        faiss_ms.append((time.perf_counter() - t) * 1000)
    engine.close()
    return {"encoder": round(statistics.median(enc), 2), "faiss": round(statistics.median(faiss_ms), 2)}


FLOOR_TEXT = "The Eiffel Tower is a wrought iron lattice tower in Paris , France ."  # 18 tokens with [CLS], [SEP]


def _forward_floor(repeats: int = 50) -> float:
    """p50 ms of one plain forward of the default encoder on one thread over an 18-token query (its special tokens
    included): the faster of fp32 and bf16 autocast; the process's thread count restored after."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from encoder.model_files import default_model_dir

    model_dir = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    inputs = tokenizer(FLOOR_TEXT, return_tensors="pt")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    best = float("inf")
    try:
        for bf16 in (False, True):
            times = []
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                for i in range(repeats + 5):
                    t = time.perf_counter()
                    model(**inputs)
                    if i >= 5:
                        times.append((time.perf_counter() - t) * 1000)
            best = min(best, statistics.median(times))
    finally:
        torch.set_num_threads(threads)
    return round(best, 2)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True, help="corpus the probe queries are drawn from")
    p.add_argument("--baseline-index", type=Path, default=None, help="tiny index for the RSS baseline")
    p.add_argument("--probes", type=int, default=500)
    p.add_argument("--mode", choices=["dense", "restricted", "hybrid"], default="dense")
    p.add_argument("--starts", type=int, default=3)
    p.add_argument(
        "--settle",
        type=float,
        default=15.0,
        help="seconds to wait after ready before the latency run (the server maps the vectors' pages "
        "in the background after ready, FILL_WARM)",
    )
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args()


def _latencies(server: Server, probes: list[str], mode: str) -> tuple[list[float], dict[str, list[float]]]:
    """Client-side ms of each /fill of `probes` but the first 10 (warm-up), and the engine's ms per stage."""
    lat: list[float] = []
    stages: dict[str, list[float]] = {}
    with httpx.Client(timeout=120) as client:
        for i, text in enumerate(probes):
            t = time.perf_counter()
            r = client.post(server.url + "/fill", json={"text": text, "mode": mode})
            if r.status_code != 200:
                raise SystemExit(f"/fill answered {r.status_code}: {r.text[:200]}")
            if i >= 10:
                lat.append((time.perf_counter() - t) * 1000)
                for stage, ms in r.json()["timings_ms"].items():
                    stages.setdefault(stage, []).append(ms)
    return lat, stages


def _measure(args: argparse.Namespace, base_index: Path) -> dict:
    """Starts, memory and /fill latency of the server over --index; the baseline server's start and memory."""
    forward_before = _forward_floor()
    base = Server(base_index, args.port)
    base_ready = base.wait_ready()
    rss_base = memory(base.proc.pid)
    base.stop()
    ready = []
    for _ in range(args.starts - 1):
        s = Server(args.index, args.port)
        ready.append(s.wait_ready())
        s.stop()
    server = Server(args.index, args.port)
    ready.append(server.wait_ready())
    rss_ready = memory(server.proc.pid)
    time.sleep(args.settle)
    probes = make_probes(args.corpus, args.probes + 10)
    lat, stages = _latencies(server, probes, args.mode)
    rss_after = memory(server.proc.pid)
    server.stop()
    return {
        "base_ready": base_ready,
        "rss_base": rss_base,
        "ready": ready,
        "rss_ready": rss_ready,
        "lat": lat,
        "stages": stages,
        "rss_after": rss_after,
        "floors": _floors(args.index, probes[10:], 1024),
        "forward": [forward_before, _forward_floor()],
    }


def _figures(m: dict, tokens: int, base_tokens: int) -> dict:
    lat, stages, floors, rss_base, rss_after = m["lat"], m["stages"], m["floors"], m["rss_base"], m["rss_after"]
    q = statistics.quantiles(lat, n=100)
    per_token = {k: (rss_after[k] - rss_base[k]) / (tokens - base_tokens) for k in rss_after}
    return {
        "tokens": tokens,
        "ready_seconds": [round(x, 2) for x in m["ready"]],
        "baseline_tokens": base_tokens,
        "baseline_ready_seconds": round(m["base_ready"], 2),
        "rss_baseline": rss_base,
        "rss_ready": m["rss_ready"],
        "rss_after_probes": rss_after,
        "rss_bytes_per_token_after_probes": {k: round(v, 1) for k, v in per_token.items()},
        "fill_ms_p50": round(q[49], 1),
        "fill_ms_p99": round(q[98], 1),
        "fill_ms_mean": round(statistics.mean(lat), 1),
        "probes": len(lat),
        "stage_ms_p50": {k: round(statistics.median(v), 1) for k, v in stages.items()},
        "stage_ms_mean": {k: round(statistics.mean(v), 1) for k, v in stages.items()},
        "floor_ms_p50": floors,
        "fill_over_floors": round(q[49] / (floors["encoder"] + floors["faiss"]), 2),
        "forward_floor_ms": m["forward"],
        "fill_over_forward": [round(x / statistics.mean(m["forward"]), 2) for x in (q[49], q[98])],
    }


def _print(index: Path, m: dict, fig: dict) -> None:
    mib = lambda b: f"{b / 2**20:,.0f} MiB"  # noqa: E731
    lat, floors, tokens, base_tokens = m["lat"], m["floors"], fig["tokens"], fig["baseline_tokens"]
    rss_base, rss_ready, rss_after = m["rss_base"], m["rss_ready"], m["rss_after"]
    per_token = fig["rss_bytes_per_token_after_probes"]
    q = statistics.quantiles(lat, n=100)
    print(f"index {index}: {tokens:,} tokens")
    print(
        f"time to ready: {', '.join(f'{x:.2f} s' for x in m['ready'])} (target <= 5 s); the same server over the "
        f"{base_tokens:,}-token baseline index: {m['base_ready']:.2f} s"
    )
    print(
        f"RSS baseline ({base_tokens:,} tokens): {mib(rss_base['VmRSS'])}; ready: {mib(rss_ready['VmRSS'])} "
        f"(anon {mib(rss_ready['RssAnon'])}, file {mib(rss_ready['RssFile'])}); after {len(lat)} fills: "
        f"{mib(rss_after['VmRSS'])} (anon {mib(rss_after['RssAnon'])}, file {mib(rss_after['RssFile'])})"
    )
    print(
        f"RSS per token after the fills: {per_token['VmRSS']:.1f} B (anon {per_token['RssAnon']:.1f} B, "
        f"file-backed {per_token['RssFile']:.1f} B) (target <= 100 B)"
    )
    print(
        f"/fill one client, {len(lat)} probes: p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, "
        f"mean {statistics.mean(lat):.1f} ms "
        f"(targets 20 / 60 ms)"
    )
    print(
        "engine stages, p50 / mean ms: "
        + ", ".join(f"{k} {fig['stage_ms_p50'][k]:.1f} / {fig['stage_ms_mean'][k]:.1f}" for k in m["stages"])
    )
    print(
        f"floors p50: bare encoder {floors['encoder']:.1f} ms, bare FAISS search {floors['faiss']:.1f} ms; "
        f"/fill p50 over their sum: {fig['fill_over_floors']:.2f}x"
    )
    before, after = fig["forward_floor_ms"]
    p50, p99 = fig["fill_over_forward"]
    print(
        f"forward floor (one thread, 18 tokens, the faster of fp32 / bf16): {before:.2f} ms before, {after:.2f} ms "
        f"after; /fill p50 {p50:.2f}x, p99 {p99:.2f}x their mean"
    )


def main() -> None:
    args = parse_args()
    tokens = json.loads((args.index / "manifest.json").read_text())["counts"]["tokens"]
    base_index = _baseline(args.baseline_index)
    base_tokens = json.loads((base_index / "manifest.json").read_text())["counts"]["tokens"]
    measured = _measure(args, base_index)
    figures = _figures(measured, tokens, base_tokens)
    _print(args.index, measured, figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
