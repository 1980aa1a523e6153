"""Throughput and latency of the real server under concurrent clients, batched against unbatched:

    python -m bench.bench_load --index data-local/bench/idx_10m --corpus data-local/debian/corpus_10m.jsonl \
        [--clients 1,4,16,64] [--requests 400] [--mode hybrid] [--configs batched,unbatched] [--json OUT]
        [--config NAME:KEY=VALUE,KEY=VALUE ...]

For each config a server is started (`python -m service`; unbatched = FILL_MAX_BATCH=1, each request
encoded and searched alone; batched = the defaults), made ready, left --settle seconds (it maps the
vectors' pages in the background after ready, FILL_WARM), warmed up with 20 requests, and then,
per client count C, max(--requests, 20 C) POST /fill are sent by C closed-loop clients (bench.shared.run_load)
with cloze probes drawn from --corpus (bench.shared.make_probes) and the API defaults but --mode. Printed per
config and C: fills/s, p50 / p99 ms (client side), the server's CPU time per fill and cores busy
(/proc/PID/stat), statuses, and the server's RSS before and after. The load client runs in this process
on the same 2 cores: it takes a share of the CPU from the server.
With --load N (and --clients C), it is the load test instead: N requests, statuses, RSS before / after.
--config adds a named config of server settings (e.g. `workers4:FILL_FILL_WORKERS=4`); name it in --configs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench.shared import Server, cpu_seconds, make_probes, rss_bytes, run_load

CONFIGS = {"batched": {}, "unbatched": {"FILL_MAX_BATCH": "1"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True, help="JSON-lines corpus the probes are cut from")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=400, help="requests per client count (at least 20 per client)")
    ap.add_argument("--load", type=int, default=None, help="load test: this many requests at the first --clients")
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--configs", default="batched,unbatched")
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds between ready and the warm-up")
    ap.add_argument("--config", action="append", default=[], help="NAME:KEY=VALUE,KEY=VALUE (server env)")
    args = ap.parse_args()
    configs = dict(CONFIGS)
    for spec in args.config:
        name, _, settings = spec.partition(":")
        configs[name] = dict(kv.split("=", 1) for kv in settings.split(",") if kv)
    clients = [int(c) for c in args.clients.split(",")]
    bodies = [{"text": t, "mode": args.mode} for t in make_probes(args.corpus, 500, seed=7)]
    report = {"index": args.index.name, "mode": args.mode, "cpus": os.cpu_count(), "runs": []}
    for name in args.configs.split(","):
        server = Server(args.index, args.port, configs[name])
        proc = server.proc
        try:
            server.wait_ready()
            time.sleep(args.settle)
            run_load(server.url, bodies[:20], 1, 20)  # warm-up
            rss_before = rss_bytes(proc.pid)
            for c in clients:
                total = args.load if args.load else max(args.requests, 20 * c)
                cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
                summary = run_load(server.url, bodies, c, total).summary()
                cpu, wall = cpu_seconds(proc.pid) - cpu0, time.perf_counter() - t0
                summary.update(
                    config=name,
                    rss_mb_before=round(rss_before / 2**20, 1),
                    rss_mb_after=round(rss_bytes(proc.pid) / 2**20, 1),
                    server_cpu_ms_per_fill=round(cpu * 1000 / max(1, summary["statuses"].get("200", 0)), 1),
                    server_cores=round(cpu / wall, 2),
                )
                report["runs"].append(summary)
                print(json.dumps(summary), flush=True)
                if args.load:
                    break
        finally:
            server.stop()
    print(
        f"\n{'config':10} {'clients':>7} {'fills/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/fill':>11} "
        f"{'cores':>5}  statuses  RSS MB before/after"
    )
    for r in report["runs"]:
        print(
            f"{r['config']:10} {r['concurrency']:>7} {r['fills_per_s']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} "
            f"{r['server_cpu_ms_per_fill']:>11} {r['server_cores']:>5}  {r['statuses']}  "
            f"{r['rss_mb_before']}/{r['rss_mb_after']}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
