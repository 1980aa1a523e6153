"""A closed-loop load generator for POST /fill: `concurrency` clients on one asyncio loop, each sending
its next request when its previous one is answered, until `total` requests are sent. Used by
bench/bench_load.py (figures) and tests/bench/test_load.py (the bounded CI load test)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from common.masks import count_masks


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


def rss_bytes(pid: int) -> int:
    """VmRSS of a process."""
    return memory(pid)["VmRSS"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
