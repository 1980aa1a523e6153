"""The server's RSS over rounds of load, to tell a leak (steady growth) from a settling high-water mark:

    python -m bench.bench_rss_rounds --index data-local/bench/idx_baseline --corpus data/sample/encyclopedia.jsonl \
        [--rounds 8] [--requests 1000] [--clients 32] [--env FILL_MAX_BATCH=1 ...]

Starts `python -m service` (with --env settings), then runs --rounds rounds of --requests hybrid fills
from --clients closed-loop clients (bench.shared.run_load, probes from --corpus), printing after each round
fills/s, VmRSS and RssAnon (MB)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.shared import Server, make_probes, memory, run_load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--port", type=int, default=8798)
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    args = ap.parse_args()
    server = Server(args.index, args.port, dict(e.split("=", 1) for e in args.env))
    proc = server.proc
    try:
        server.wait_ready()
        bodies = [{"text": t, "mode": "hybrid"} for t in make_probes(args.corpus, 500, seed=7)]
        for i in range(args.rounds):
            result = run_load(server.url, bodies, args.clients, args.requests)
            mem = memory(proc.pid)
            print(
                f"round {i}: {result.summary()['fills_per_s']} fills/s, statuses {dict(result.statuses)}, "
                f"RSS {mem['VmRSS'] / 2**20:.1f} MB, anonymous {mem['RssAnon'] / 2**20:.1f} MB",
                flush=True,
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
