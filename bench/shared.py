"""Helpers the benchmarks share (imported as `from bench.shared import ...`; nothing here runs on its own):

- cloze probes drawn from a corpus (`make_probes`, `make_cloze`; bench/probes.py writes them as a probe file);
- the real server as a process (`Server`) and the repository root (`ROOT`);
- a closed-loop load generator for POST /fill (`run_load`, used by bench/bench_load.py and tests/bench/test_load.py)
  and a process's memory and CPU time from /proc (`memory`, `rss_bytes`, `cpu_seconds`);
- two fill-eval prediction files compared (`top`, `compare`, `fill_row`; bench/compare_predictions.py).

httpx (a test dependency) is imported where a request is sent: what only draws probes or compares files runs
without it (on a lent GPU machine, recipes/device_build.sh).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from common.masks import count_masks

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"[A-Za-z][a-z]{3,}")


# -- cloze probes ----------------------------------------------------------------------------------------------


def make_probes(corpus: Path, n: int, seed: int = 0, window: int = 24) -> list[str]:
    """n queries from a JSON-lines corpus: seeded documents, a ~24-word window, one alphabetic word -> <mask>.
    The figures compare systems on the same queries, so the queries only need to look like real fill queries."""
    return [query for query, _ in make_cloze(corpus, n, seed, window)]


def make_cloze(corpus: Path, n: int, seed: int = 0, window: int = 24) -> list[tuple[str, str]]:
    """Like make_probes, with the masked word of each query."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    probes: list[tuple[str, str]] = []
    for _ in range(50 * n):
        if len(probes) == n:
            break
        words = json.loads(lines[rng.randrange(len(lines))]).get("text", "").split()
        if len(words) < 8:
            continue
        a = rng.randrange(max(1, len(words) - window))
        chunk = words[a : a + window]
        slots = [i for i, w in enumerate(chunk) if WORD.fullmatch(w)]
        if not slots:
            continue
        slot = rng.choice(slots)
        answer, chunk[slot] = chunk[slot], "<mask>"
        probes.append((" ".join(chunk), answer))
    return probes


# -- the server as a process -----------------------------------------------------------------------------------


class Server:
    """`python -m service` over `index` on `port` (FILL_LOG_LEVEL warning, `env` added), started at once."""

    def __init__(self, index: Path, port: int, env: dict[str, str] | None = None) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "FILL_LOG_LEVEL": "warning", **(env or {})}
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service", "--index", str(index), "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = 600) -> float:
        """Seconds from the start to the first 200 of /readyz."""
        return self._wait_until(lambda r: r.status_code == 200, "/readyz", timeout, "ready")

    def wait_warm(self, timeout: float = 3600) -> float:
        """Seconds from the start until the server's background warm-up is done (/metrics `index_warm 1`: pages
        mapped, files hashed), so what is timed next is the steady state."""
        return self._wait_until(lambda r: "index_warm 1.0" in r.text, "/metrics", timeout, "warm")

    def _wait_until(self, done, path: str, timeout: float, what: str) -> float:
        """Seconds from the start until `done(GET path's response)`; SystemExit if the server exits or time runs out."""
        import httpx

        with httpx.Client(timeout=60) as client:
            while time.perf_counter() - self.t0 < timeout:
                if self.proc.poll() is not None:
                    raise SystemExit(f"server exited with {self.proc.returncode}")
                try:
                    if done(client.get(self.url + path)):
                        return time.perf_counter() - self.t0
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        raise SystemExit(f"server not {what} in time")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


# -- load: `concurrency` clients on one asyncio loop, each sending its next request when its previous one is
# answered, until `total` requests are sent ---------------------------------------------------------------------


@dataclass
class LoadResult:
    concurrency: int
    sent: int
    seconds: float
    statuses: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)  # of the 200s
    transport_errors: int = 0
    transport_error_kinds: Counter = field(default_factory=Counter)  # exception class: message, counted
    bad_bodies: int = 0  # 200s whose body is not a fill of the request's masks

    @property
    def ok(self) -> int:
        return self.statuses.get(200, 0)

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)

        def pct(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None

        return {
            "concurrency": self.concurrency,
            "sent": self.sent,
            "seconds": round(self.seconds, 2),
            "fills_per_s": round(self.ok / self.seconds, 1) if self.seconds else None,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "p50_ms": pct(0.5),
            "p99_ms": pct(0.99),
            "mean_ms": round(statistics.fmean(lat), 1) if lat else None,
            "transport_errors": self.transport_errors,
            "bad_bodies": self.bad_bodies,
            **({"transport_error_kinds": dict(self.transport_error_kinds)} if self.transport_errors else {}),
        }


async def _run(url: str, bodies: list[dict], concurrency: int, total: int, headers: dict, timeout: float) -> LoadResult:
    import httpx

    result = LoadResult(concurrency, total, 0.0)
    next_i = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits, headers=headers) as client:

        async def worker() -> None:
            nonlocal next_i
            while next_i < total:
                body = bodies[next_i % len(bodies)]
                next_i += 1
                t0 = time.perf_counter()
                try:
                    r = await client.post("/fill", json=body)
                except httpx.TransportError as exc:
                    result.transport_errors += 1
                    result.transport_error_kinds[f"{type(exc).__name__}: {exc}"] += 1
                    continue
                result.statuses[r.status_code] += 1
                if r.status_code == 200:
                    result.latencies_ms.append((time.perf_counter() - t0) * 1000)
                    data = r.json()
                    if len(data.get("masks", ())) != count_masks(body["text"]):
                        result.bad_bodies += 1
                elif r.status_code == 429:
                    await asyncio.sleep(min(float(r.headers.get("retry-after", "1")), 1.0) / 10)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.seconds = time.perf_counter() - t0
    return result


def run_load(
    url: str, bodies: list[dict], concurrency: int, total: int, headers: dict | None = None, timeout: float = 60.0
) -> LoadResult:
    """`total` POST /fill requests (the bodies in turn) from `concurrency` closed-loop clients."""
    return asyncio.run(_run(url, bodies, concurrency, total, headers or {}, timeout))


def memory(pid: int) -> dict[str, int]:
    """A process's resident memory in bytes from /proc/PID/status: VmRSS (all), RssAnon, RssFile."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    if "VmRSS" not in fields:
        raise ValueError(f"no VmRSS for pid {pid}")
    return fields


def disk_bytes(index: Path) -> int:
    """The bytes of every file under an index directory."""
    return sum(p.stat().st_size for p in index.rglob("*") if p.is_file())


def rss_bytes(pid: int) -> int:
    """VmRSS of a process."""
    return memory(pid)["VmRSS"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- prediction files ------------------------------------------------------------------------------------------


def top(row: dict) -> str:
    """A fill row's top-1 prediction ("" when it abstained)."""
    return row["predictions"][0] if row["predictions"] else ""


def compare(a: list[dict], b: list[dict]) -> dict:
    """Fill rows of the same probes: top-1 agreement (%), the paired micro EM difference b - a and its standard
    error (points)."""
    diff = [float(y["em"]) - float(x["em"]) for x, y in zip(a, b)]
    mean = sum(diff) / len(diff)
    se = math.sqrt(sum((d - mean) ** 2 for d in diff) / (len(diff) - 1) / len(diff)) if len(diff) > 1 else 0.0
    return {
        "agreement": 100 * sum(top(x) == top(y) for x, y in zip(a, b)) / len(a),
        "micro_em_diff": 100 * mean,
        "micro_em_diff_se": 100 * se,
    }


def fill_row(row: dict) -> dict:
    """A classify row (text, predicted, correct) as a fill row (query, predictions, em); a fill row as it is."""
    if "query" in row:
        return row
    return {"query": row["text"], "predictions": [row["predicted"] or ""], "em": bool(row["correct"])}
