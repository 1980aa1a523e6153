"""Fairness under heavy requests: a client sending default fills while other clients loop an
expensive request.

    python -m bench.bench_fairness --index data-local/bench/idx_3m --corpus data-local/debian/corpus_3m.jsonl \
        [--heavy-clients 4] [--light N] [--configs lanes,one_lane,before] [--json OUT]

For each config a server is started (`python -m service`, the config's FILL_* variables), made ready and left
--settle seconds; then (1) one client sends --light default fills (hybrid, cloze probes from --corpus) alone,
(2) the same while --heavy-clients clients loop the heavy request until the light client is done. Printed: the
light client's p50 / p99 alone and beside the heavy load, the heavy requests answered (and their p50) and
their statuses. Configs: `lanes` (the defaults: the search budget and the heavy lane at nice 10), `lanes_nice0` (the
heavy
lane at the usual priority), `one_lane` (no heavy
lane: FILL_HEAVY_WEIGHT=1e9), `before` (no search budget and no lane, as before this issue: the heavy request
is the outside test's 16 masks, dense, k 4480, max_span_tokens 1, refused by the default budget). The heavy
request of `lanes` and `one_lane` is the most expensive the default budget accepts: 8 masks, dense, k 1024,
max_span_tokens 1 (16,384 hits searched: FILL_MAX_SEARCH).
"""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

from bench.shared import Server, make_probes, run_load

ACCEPTED = {"text": " and ".join(["<mask>"] * 8) + " .", "mode": "dense", "k": 1024, "max_span_tokens": 1}
OUTSIDE = {"text": " and ".join(["<mask>"] * 16) + " .", "mode": "dense", "k": 4480, "max_span_tokens": 1}
CONFIGS = {
    "lanes": ({}, ACCEPTED),
    "lanes_nice0": ({"FILL_HEAVY_NICE": "0"}, ACCEPTED),
    "one_lane": ({"FILL_HEAVY_WEIGHT": "1000000000"}, ACCEPTED),
    "before": (
        {"FILL_HEAVY_WEIGHT": "1000000000", "FILL_MAX_SEARCH": "1000000000", "FILL_REQUEST_TIMEOUT": "60"},
        OUTSIDE,
    ),
}


def beside_heavy(url: str, light: list[dict], heavy: dict, clients: int) -> tuple[dict, dict]:
    """The light client's summary while `clients` clients loop `heavy`, and the heavy clients' summary."""
    done, heavy_runs = threading.Event(), []

    def loop_heavy() -> None:
        while not done.is_set():
            heavy_runs.append(run_load(url, [heavy], clients, clients, timeout=120))

    thread = threading.Thread(target=loop_heavy)
    thread.start()
    try:
        light_summary = run_load(url, light, 1, len(light)).summary()
    finally:
        done.set()
        thread.join(300)
    statuses: dict[str, int] = {}
    latencies = sorted(x for r in heavy_runs for x in r.latencies_ms)
    for r in heavy_runs:
        for status, n in r.statuses.items():
            statuses[str(status)] = statuses.get(str(status), 0) + n
    return light_summary, {
        "answered": len(latencies),
        "statuses": statuses,
        "p50_ms": round(latencies[len(latencies) // 2], 1) if latencies else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--heavy-clients", type=int, default=4)
    ap.add_argument("--light", type=int, default=60, help="default fills sent by the light client")
    ap.add_argument("--configs", default="lanes,one_lane,before")
    ap.add_argument("--port", type=int, default=8793)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import time

    light = [{"text": t} for t in make_probes(args.corpus, args.light, seed=3)]
    report = {"index": args.index.name, "runs": []}
    for name in args.configs.split(","):
        env, heavy = CONFIGS[name]
        server = Server(args.index, args.port, env)
        try:
            server.wait_ready()
            time.sleep(args.settle)
            run_load(server.url, light[:10], 1, 10)  # warm-up
            alone = run_load(server.url, light, 1, len(light)).summary()
            loaded, heavy_summary = beside_heavy(server.url, light, heavy, args.heavy_clients)
        finally:
            server.stop()
        run = {
            "config": name,
            "heavy": heavy,
            "light_alone": alone,
            "light_beside_heavy": loaded,
            "heavy_answers": heavy_summary,
        }
        report["runs"].append(run)
        print(json.dumps(run), flush=True)
    print(
        f"\n{'config':9} {'light alone p50/p99 ms':>23} {'beside heavy p50/p99 ms':>24} {'heavy answered':>14} "
        f"{'heavy p50 ms':>12}  heavy statuses"
    )
    for r in report["runs"]:
        a, b, h = r["light_alone"], r["light_beside_heavy"], r["heavy_answers"]
        print(
            f"{r['config']:9} {a['p50_ms']:>11} / {a['p99_ms']:<9} {b['p50_ms']:>12} / {b['p99_ms']:<9} "
            f"{h['answered']:>14} {h['p50_ms']!s:>12}  {h['statuses']}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
