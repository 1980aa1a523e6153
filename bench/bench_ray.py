"""The Ray path's cost per fill, and a simulated multi-node deployment:

    python -m bench.bench_ray --index data-local/bench/idx_10m16 --corpus data-local/debian/corpus_10m.jsonl \
        --groups 1,4,8,16 --delays 0,1,5 --n 200 [--clients 1] [--mode hybrid] [--json OUT]

In this process: first the local engine (every shard here), then for each number of shard groups G and each
delay D, the index's shards split into G groups deployed on a Ray started here (one replica each, Ray Serve)
whose every call sleeps D ms before and D ms after its work (a network hop each way), and the ingress's engine
over them (FILL_BACKEND=ray's path, service.ray_backend.RayShards). Each configuration gets 20 warm-up fills,
then --n fills of cloze probes drawn from --corpus (bench.shared.make_probes), with the API defaults but --mode, from
--clients closed-loop threads. Printed per configuration: p50 / p99 ms and fills/s; the overhead is the p50
against the local engine's; the JSON also holds the ingress's calls per fill by kind (`search_forming`: a dense or
hybrid fill's one round; `search`, or a task's type: a restricted fill's CandidateTask, a score's) with their median ms
(and, with --sizes, the median size of their answers), and the
median of 100 bare calls to the first group (`gather` of no task: Serve's own cost of a call). Every process
runs on this machine's cores: the groups do not get machines of their own, so the figures hold the fan-out,
the serialisation and the hops, not more CPU. OpenMP's threads wait passively, as in the server.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from bench.shared import make_probes


def measure(engine, bodies: list[dict], n: int, clients: int) -> dict:
    """p50 / p99 ms, fills/s and the p50 of each engine stage (`timings_ms`) of n fills from `clients`
    closed-loop threads (after 20 warm-up fills)."""
    from fill.schemas import FillRequest

    for body in bodies[:20]:
        engine.fill(FillRequest(**body))
    latencies: list[float] = []
    stages: dict[str, list[float]] = {}
    lock, at = threading.Lock(), [0]

    def client() -> None:
        while True:
            with lock:
                i = at[0]
                at[0] += 1
            if i >= n:
                return
            t0 = time.perf_counter()
            result = engine.fill(FillRequest(**bodies[i % len(bodies)]))
            with lock:
                latencies.append((time.perf_counter() - t0) * 1000)
                for stage, ms in result.timings_ms.items():
                    stages.setdefault(stage, []).append(ms)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cuts = statistics.quantiles(latencies, n=100)
    return {
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(cuts[98], 1),
        "fills_per_s": round(n / wall, 1),
        "stage_p50_ms": {stage: round(statistics.median(v), 1) for stage, v in stages.items()},
    }


class CallLog:
    """The ingress's calls to the groups (service.ray_backend.RayShards._call), timed per kind: `search` or the
    first task's type; with `sizes`, the pickled size of the results too."""

    def __init__(self, sizes: bool) -> None:
        import pickle

        from service import ray_backend

        self.calls: list[tuple[str, float, int]] = []
        original = ray_backend.RayShards._call

        def timed(shards, calls):
            t0 = time.perf_counter()
            out = original(shards, calls)
            ms = (time.perf_counter() - t0) * 1000
            first = calls[0][2][0] if calls[0][1] == "gather" and calls[0][2][0] else None
            kind = calls[0][1] if first is None else type(first[0]).__name__
            size = sum(len(pickle.dumps(x, protocol=5)) for x in out) if sizes else 0
            self.calls.append((kind, ms, size))
            return out

        ray_backend.RayShards._call = timed

    def summary(self, fills: int) -> dict:
        out = {}
        for kind in dict.fromkeys(k for k, _, _ in self.calls):
            own = [(ms, size) for k, ms, size in self.calls if k == kind]
            out[kind] = {
                "per_fill": round(len(own) / fills, 2),
                "median_ms": round(statistics.median(m for m, _ in own), 2),
                "median_kb": round(statistics.median(b for _, b in own) / 1024, 1),
            }
        self.calls.clear()
        return out


def bare_call_ms(handle, calls: int = 100) -> float:
    """The median ms of a call to a group that runs no task."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        handle.gather.remote([]).result()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def ray_engine(index: Path, groups: int, delay_ms: float, app: str):
    from ray import serve

    from fill.engine import FillEngine
    from fill.shard_group import ShardGroup
    from indexer.manifest import Manifest
    from service.config import Settings
    from service.ray_backend import Group, RayShards
    from service.ray_group import ShardGroupReplica, app_name, group_plan

    handles = []
    for number, shard_nos in enumerate(group_plan(len(Manifest.load(index).shards), groups)):
        name = app_name(app, number)
        bound = ShardGroupReplica.bind(str(index.resolve()), shard_nos, None, None, None, True, delay_ms, "bench")
        handles.append(Group(name, shard_nos, serve.run(bound, name=name, route_prefix=None)))
    time.sleep(5)  # a pause after the deployments (the replicas warmed their pages before answering)
    engine = FillEngine.open(
        Settings(index=index).engine_config(), shards=lambda i: RayShards(handles, 30.0, ShardGroup(i))
    )
    return engine, [h.name for h in handles]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--groups", default="1,4,8,16")
    ap.add_argument("--delays", default="0,1,5", help="ms slept by a group before and after each call")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--sizes", action="store_true", help="also the pickled size of the groups' answers")
    return ap.parse_args()


def ray_runs(args: argparse.Namespace, bodies: list[dict]) -> list[dict]:
    """Per number of groups and delay: the shard groups deployed on the Ray started here, measured, deleted."""
    from ray import serve

    log = CallLog(args.sizes)
    runs = []
    for g in [int(x) for x in args.groups.split(",")]:
        for d in [float(x) for x in args.delays.split(",")]:
            engine, names = ray_engine(args.index, g, d, f"b{g}d{int(d)}")
            figures = measure(engine, bodies, args.n, args.clients)
            calls = log.summary(args.n + 20)
            bare = bare_call_ms(engine.shards.groups[0].handle)
            runs.append({"config": "ray", "groups": len(names), "delay_ms": d, **figures, "calls": calls})
            runs[-1]["bare_call_ms"] = bare
            print(json.dumps(runs[-1]), flush=True)
            engine.close()
            for name in names:
                serve.delete(name)
    return runs


def print_runs(runs: list[dict]) -> None:
    base = runs[0]["p50_ms"]
    print(
        f"\n{'config':6} {'groups':>6} {'delay ms':>8} {'p50 ms':>7} {'p99 ms':>7} {'fills/s':>7} {'p50 - local':>11}"
    )
    for r in runs:
        print(
            f"{r['config']:6} {r['groups']:>6} {r['delay_ms']:>8g} {r['p50_ms']:>7} {r['p99_ms']:>7} "
            f"{r['fills_per_s']:>7} {r['p50_ms'] - base:>11.1f}"
        )


def main() -> None:
    args = parse_args()
    from common.process import passive_openmp

    passive_openmp()  # as `python -m service` does, before torch and FAISS load (here and in the Ray it starts)
    import ray
    from ray import serve

    from common.process import single_thread_blas
    from fill.engine import FillEngine
    from service.config import Settings

    single_thread_blas()
    bodies = [{"text": t, "mode": args.mode} for t in make_probes(args.corpus, max(args.n, 100), seed=11)]
    local = FillEngine.open(Settings(index=args.index).engine_config())
    runs = [{"config": "local", "groups": 0, "delay_ms": 0, **measure(local, bodies, args.n, args.clients)}]
    local.close()
    print(json.dumps(runs[-1]), flush=True)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    serve.start(proxy_location="Disabled")
    runs += ray_runs(args, bodies)
    print_runs(runs)
    if args.json:
        args.json.write_text(
            json.dumps({"index": args.index.name, "mode": args.mode, "clients": args.clients, "runs": runs}, indent=1)
        )
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
