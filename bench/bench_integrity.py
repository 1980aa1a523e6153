"""Hardening checks re-run on the real server (`python -m service`, API keys on):

    python -m bench.bench_integrity --index data-local/eval/default_model/idx_imdb [--updates 200] [--json OUT]

The index is copied to --work (the updates change it), then:
  ready        seconds to /readyz 200 with FILL_CHECK_BEFORE_READY true (every file's sha256 before ready, the
               default) and false (ready at once, checked in the background), and the index's bytes
  descriptors  the server's open descriptors (/proc/PID/fd) at ready and after --updates one-document POST
               /admin/documents (FILL_MAX_DELTA_SHARDS, 64 by default, refuses adds past the cap with 503: counted)
  corruption   a shard's vectors.npy zeroed in place through a shared map while served: seconds until /readyz
               answers 503 naming it (FILL_RECHECK_SECONDS, 10 by default), and the fills answered meanwhile
  sigterm      on a fresh copy, a --sigterm-mb MB document POSTed and the server sent SIGTERM --sigterm-after
               seconds later: the client's status, content type and Retry-After, whether the generation changed, the
               process's exit status and the seconds from the signal to the exit
--checks picks some of them (default: all).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from bench.shared import Server, disk_bytes

KEY = {"Authorization": "Bearer bench-key"}
ENV = {"FILL_API_KEYS": "bench-key", "FILL_ADMIN_KEYS": "bench-key"}  # the admin routes need an admin key


def ready_seconds(index: Path, port: int, before_ready: bool) -> float:
    server = Server(index, port, {**ENV, "FILL_CHECK_BEFORE_READY": str(before_ready).lower()})
    try:
        return server.wait_ready()
    finally:
        server.stop()


def descriptors(server: Server, updates: int) -> dict:
    fds = lambda: len(os.listdir(f"/proc/{server.proc.pid}/fd"))  # noqa: E731
    out = {"at_ready": fds(), "statuses": {}}
    with httpx.Client(base_url=server.url, headers=KEY, timeout=120) as client:
        for i in range(updates):
            r = client.post("/admin/documents", json=[{"id": f"bench-{i}", "text": f"Bench document {i} is here."}])
            out["statuses"][r.status_code] = out["statuses"].get(r.status_code, 0) + 1
            if i + 1 in (1, 10, 50, 64, updates):
                out[f"after_{i + 1}"] = fds()
    return out


def corruption(server: Server, index: Path) -> dict:
    shard = sorted(p for p in index.iterdir() if p.name.startswith("shard_"))[0]
    with httpx.Client(base_url=server.url, headers=KEY, timeout=60) as client:
        mapped = np.load(shard / "vectors.npy", mmap_mode="r+")
        mapped[:] = 0
        mapped.flush()
        del mapped
        t0, fills = time.perf_counter(), 0
        while time.perf_counter() - t0 < 120:
            r = client.get("/readyz")
            if r.status_code == 503:
                return {
                    "seconds": round(time.perf_counter() - t0, 2),
                    "fills_meanwhile": fills,
                    "readyz": r.json()["error"][:160],
                }
            fills += client.post("/fill", json={"text": "It was <mask> ."}).status_code == 200
            time.sleep(0.1)
    return {"seconds": None, "fills_meanwhile": fills}


def sigterm(index: Path, port: int, megabytes: float, after: float) -> dict:
    server = Server(index, port, ENV)
    server.wait_ready()
    sentence = "Sentence {} of a very long document about harbours and ships. "
    text = "".join(sentence.format(i) for i in range(int(megabytes * 2**20 / len(sentence))))
    out: dict = {}

    def post() -> None:
        r = httpx.post(server.url + "/admin/documents", json=[{"id": "big", "text": text}], headers=KEY, timeout=300)
        out.update(
            status=r.status_code,
            content_type=r.headers.get("content-type"),
            retry_after=r.headers.get("retry-after"),
            error=r.text[:160],
        )

    thread = threading.Thread(target=post)
    thread.start()
    time.sleep(after)
    t0 = time.perf_counter()
    server.proc.send_signal(signal.SIGTERM)
    thread.join(300)
    out["exit_status"] = server.proc.wait(300)
    out["seconds_to_exit"] = round(time.perf_counter() - t0, 2)
    out["generation"] = json.loads((index / "manifest.json").read_text())["generation"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_integrity"))
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--sigterm-mb", type=float, default=2.4)
    ap.add_argument("--sigterm-after", type=float, default=4.0)
    ap.add_argument("--checks", default="ready,descriptors,corruption,sigterm")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    checks = set(args.checks.split(","))
    index = args.work / "idx"
    shutil.rmtree(args.work, ignore_errors=True)
    shutil.copytree(args.index, index)
    result: dict = {"index_bytes": disk_bytes(index)}
    if "ready" in checks:
        result["ready_s"] = {
            "check_before_ready": round(ready_seconds(index, args.port, True), 2),
            "checked_in_background": round(ready_seconds(index, args.port, False), 2),
        }
        print(json.dumps(result), flush=True)
    if checks & {"descriptors", "corruption"}:
        server = Server(index, args.port, ENV)
        try:
            server.wait_ready()
            for name, run in (
                ("descriptors", lambda: descriptors(server, args.updates)),
                ("corruption", lambda: corruption(server, index)),
            ):
                if name in checks:
                    result[name] = run()
                    print(json.dumps(result[name]), flush=True)
        finally:
            server.stop()
    if "sigterm" in checks:
        fresh = args.work / "idx_sigterm"
        shutil.copytree(args.index, fresh)
        result["sigterm"] = sigterm(fresh, args.port, args.sigterm_mb, args.sigterm_after)
        print(json.dumps(result["sigterm"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
