"""Live corpus updates on the real server: how soon an added fact is filled, what an update costs the fills
running beside it, fill latency against the number of delta shards, and what `indexer compact` costs and gives:

    python -m bench.bench_updates --index data-local/bench/idx_3m --corpus data-local/debian/corpus_3m.jsonl \
        [--work /tmp/bench_updates] [--sizes 1,100,10000] [--clients 4] [--json OUT]

The index is copied to --work (the updates change it) and served (`python -m service`, API keys on, the defaults
otherwise), left --settle seconds (the background page warming and sha256 check), then:
  steady      --clients closed-loop clients send cloze probes of --corpus (bench.shared.make_probes) for --steady
              seconds: p50 / p99 ms; measured again before each size's updates (`steady_before`: the index with the
              delta shards of the updates so far), the baseline of that size's p99
  updates     per size N (--repeat times when N < 1,000), under the same load: POST /admin/documents with N new
              documents (the first "Ada Quint<tag> was born in Porto.", the others of other people and cities),
              then fills of the first one's fact until the top phrase is Porto: the POST's seconds, the seconds from
              sending the POST to the first right fill,
              and p50 / p99 / failures of the load's fills that overlapped a POST
  deltas      one client's p50 / p99 over --single requests with 0 delta shards, then after 1, 10 and --many
              one-document updates (the N-document ones included)
  delete      DELETE /admin/documents/{id} seconds; the fact is gone from the next fill
  compact     `indexer compact` beside the running server (seconds), the empty reload that serves it (seconds,
              every file's sha256 checked), and one client's p50 / p99 after
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from bench.shared import ROOT, Server, make_probes

KEY = "bench-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}
CITIES = ["Porto", "Lisbon", "Oslo", "Lyon", "Tartu", "Graz", "Turin", "Ghent", "Bergen", "Utrecht"]


def pct(values: list[float], p: float) -> float | None:
    v = sorted(values)
    return round(v[min(len(v) - 1, int(p * len(v)))], 1) if v else None


class Load:
    """Closed-loop clients in a thread, each request recorded as (start, end, status)."""

    def __init__(self, url: str, bodies: list[dict], clients: int) -> None:
        self.url, self.bodies, self.clients = url, bodies, clients
        self.records: list[tuple[float, float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=120, headers=HEADERS) as client:

            async def worker(w: int) -> None:
                i = w
                while not self._stop.is_set():
                    t0 = time.perf_counter()
                    try:
                        status = (await client.post("/fill", json=self.bodies[i % len(self.bodies)])).status_code
                    except httpx.TransportError:
                        status = -1
                    self.records.append((t0, time.perf_counter(), status))
                    i += self.clients

            await asyncio.gather(*(worker(w) for w in range(self.clients)))

    def start(self) -> "Load":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def window(self, a: float, b: float) -> dict:
        """The requests that overlapped [a, b]: p50 / p99 ms of the 200s, and the others counted."""
        rows = [r for r in self.records if r[1] >= a and r[0] <= b]
        ms = [(e - s) * 1000 for s, e, st in rows if st == 200]
        return {
            "requests": len(rows),
            "failed": sum(st != 200 for _, _, st in rows),
            "p50_ms": pct(ms, 0.5),
            "p99_ms": pct(ms, 0.99),
        }


def single(url: str, bodies: list[dict], n: int) -> dict:
    ms = []
    with httpx.Client(base_url=url, timeout=120, headers=HEADERS) as client:
        for body in bodies[:n]:
            t0 = time.perf_counter()
            assert client.post("/fill", json=body).status_code == 200
            ms.append((time.perf_counter() - t0) * 1000)
    return {"requests": n, "p50_ms": pct(ms, 0.5), "p99_ms": pct(ms, 0.99)}


def top_phrase(client: httpx.Client, text: str) -> str | None:
    r = client.post("/fill", json={"text": text})
    cands = r.json()["masks"][0]["candidates"] if r.status_code == 200 else []
    return cands[0]["phrase"] if cands else None


def update(url: str, load: Load, size: int, tag: str) -> dict:
    """POST `size` documents under load; seconds to the first fill of the first one's fact."""
    # the fact checked is the first document's, the only "Ada ..." born in Porto; the others are "Bea ..." born in
    # other cities (near-identical made-up names would let a fill take another document's city)
    docs = [
        {
            "id": f"{tag}-{i}",
            "title": f"Bea Quint{tag}x{i}",
            "text": f"Bea Quint{tag}x{i} was born in {CITIES[1 + i % (len(CITIES) - 1)]}.",
        }
        for i in range(size)
    ]
    docs[0] = {"id": f"{tag}-0", "title": f"Ada Quint{tag}", "text": f"Ada Quint{tag} was born in {CITIES[0]}."}
    query = f"Ada Quint{tag} was born in <mask> ."
    with httpx.Client(base_url=url, timeout=600, headers=HEADERS) as client:
        t0 = time.perf_counter()
        r = client.post("/admin/documents", json=docs)
        t_post = time.perf_counter()
        assert r.status_code == 200, r.text
        tries, found = 0, None
        while time.perf_counter() - t_post < 60:
            tries += 1
            found = top_phrase(client, query)
            if found == CITIES[0]:
                break
        t_fill = time.perf_counter()
    return {
        "documents": size,
        "post_s": round(t_post - t0, 3),
        "filled_s": round(t_fill - t0, 3),
        "fill_tries": tries,
        "right": found == CITIES[0],
        "generation": r.json()["generation"],
        "t0": t0,
        "t_post": t_post,
    }


def _updates(url: str, load: Load, size: int, repeat: int) -> dict:
    """`repeat` updates of `size` documents under load: the slowest POST and fill, and the load's fills that
    overlapped any of the POSTs."""
    runs = [update(url, load, size, f"s{size}r{r}") for r in range(repeat)]
    windows = [(run.pop("t0"), run.pop("t_post")) for run in runs]
    rows = [r for r in load.records if any(r[1] >= a and r[0] <= b for a, b in windows)]
    ms = [(e - s) * 1000 for s, e, st in rows if st == 200]
    return {
        "documents": size,
        "updates": repeat,
        "post_s_max": max(r["post_s"] for r in runs),
        "post_s_p50": sorted(r["post_s"] for r in runs)[len(runs) // 2],
        "filled_s_max": max(r["filled_s"] for r in runs),
        "all_right": all(r["right"] for r in runs),
        "load_during_posts": {
            "requests": len(rows),
            "failed": sum(st != 200 for _, _, st in rows),
            "p50_ms": pct(ms, 0.5),
            "p99_ms": pct(ms, 0.99),
        },
        "generation": runs[-1]["generation"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_updates"))
    ap.add_argument("--sizes", default="1,100,10000")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=20, help="updates of each size under 1,000 documents")
    ap.add_argument("--steady", type=float, default=30.0)
    ap.add_argument("--single", type=int, default=100)
    ap.add_argument("--many", type=int, default=30)
    ap.add_argument("--settle", type=float, default=60.0)
    ap.add_argument("--port", type=int, default=8793)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    shutil.copytree(args.index, args.work / "idx")
    bodies = [{"text": t} for t in make_probes(args.corpus, 300, seed=11)]
    server = Server(args.work / "idx", args.port, {"FILL_ADMIN_KEYS": KEY})  # it adds documents: an admin key
    report: dict = {"index": args.index.name, "clients": args.clients}
    try:
        report["ready_s"] = round(server.wait_ready(), 1)
        time.sleep(args.settle)
        report["deltas"] = {"0": single(server.url, bodies, args.single)}
        load = Load(server.url, bodies, args.clients).start()
        time.sleep(args.steady)
        report["steady"] = load.window(time.perf_counter() - args.steady, time.perf_counter())
        report["updates"] = []
        for size in map(int, args.sizes.split(",")):
            time.sleep(args.steady)  # the steady state of the index as it is now (its delta shards so far)
            steady = load.window(time.perf_counter() - args.steady, time.perf_counter())
            report["updates"].append(
                {**_updates(server.url, load, size, args.repeat if size < 1000 else 1), "steady_before": steady}
            )
        load.stop()
        have = sum(u["updates"] for u in report["updates"])
        report["deltas"][str(have)] = single(server.url, bodies, args.single)
        report["deltas"].update(_more_deltas(server.url, bodies, args, have))
        report["delete"] = _delete(server.url, f"s{report['updates'][0]['documents']}r0")
        report["compact"] = _compact(server.url, bodies, args)
    finally:
        server.stop()
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def _more_deltas(url: str, bodies: list[dict], args, have: int) -> dict:
    out = {}
    with httpx.Client(base_url=url, timeout=600, headers=HEADERS) as client:
        for target in (10, args.many):
            while have < target:
                r = client.post("/admin/documents", json=[{"id": f"one-{have}", "text": f"Filler document {have}."}])
                assert r.status_code == 200, r.text
                have += 1
            out[str(have)] = single(url, bodies, args.single)
    return out


def _delete(url: str, tag: str) -> dict:
    """Delete the first update's fact document; its id is in no evidence of the next fill."""
    with httpx.Client(base_url=url, timeout=600, headers=HEADERS) as client:
        t0 = time.perf_counter()
        r = client.delete(f"/admin/documents/{tag}-0")
        seconds = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        fill = client.post("/fill", json={"text": f"Ada Quint{tag} was born in <mask> .", "top_k": 20, "evidence": 5})
        gone = fill.status_code == 200 and f'"{tag}-0"' not in fill.text
    return {"seconds": round(seconds, 3), "fact_gone": gone}


def _compact(url: str, bodies: list[dict], args) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "indexer", "compact", "--index", str(args.work / "idx")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    compact_s = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    with httpx.Client(base_url=url, timeout=600, headers=HEADERS) as client:
        t0 = time.perf_counter()
        r = client.post("/admin/reload", json={})
        reload_s = time.perf_counter() - t0
        assert r.status_code == 200, r.text
    return {
        "compact_s": round(compact_s, 1),
        "summary": proc.stdout.strip().splitlines()[-1],
        "reload_s": round(reload_s, 1),
        "after": single(url, bodies, args.single),
    }


if __name__ == "__main__":
    main()
