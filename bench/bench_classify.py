"""Closed-set scoring through the API: accuracy of POST /score on labelled sets, and /score latency against
/fill on the same index, measured on the real server process (`python -m service`).

    python -m bench.bench_classify --index data-local/classify/idx/imdb \
        --set data-local/classify/rt.jsonl --set data-local/classify/uci_yelp.jsonl \
        --template "{text} It was <mask> ." --choice positive=great --choice negative=terrible \
        [--scorer npm_single] [--mode dense] [--blocks 10] [--k 4096] [--temperature 5] [--limit 500] [--latency 200]
        [--json OUT]

The scoring options not given are left to the API's defaults.

Per set: accuracy, recall per class, the majority baseline, abstentions, ECE of the winning probability
(the same figures as `fill-eval --task classify`, which runs the engine in process). Latency: one client,
`--latency` requests of each kind in turn on the set's texts (after 10 warm-up requests each): /score with
the request above, and /fill of the same templated text with the API's defaults; p50 / p99 and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx

from bench.shared import Server
from evaluation.classify import fill_template, load_labelled, parse_choices, report


def _post(client: httpx.Client, url: str, body: dict) -> tuple[dict, float]:
    t = time.perf_counter()
    r = client.post(url, json=body)
    ms = (time.perf_counter() - t) * 1000
    if r.status_code != 200:
        raise SystemExit(f"{url}: HTTP {r.status_code}: {r.text[:300]}")
    return r.json(), ms


def accuracy(client: httpx.Client, url: str, rows: list[dict], template: str, options: dict) -> dict:
    correct, winning, latencies = [], [], []
    for row in rows:
        data, ms = _post(client, url + "/score", {"text": fill_template(template, row["text"]), **options})
        mask = data["masks"][0]
        latencies.append(ms)
        correct.append(not mask["abstained"] and mask["predicted"] == row["label"])
        winning.append(None if mask["abstained"] else max(c["probability"] for c in mask["choices"]))
    return report(rows, correct, winning, latencies)


def latency(client: httpx.Client, url: str, texts: list[str], options: dict, n: int) -> dict:
    """p50 / p99 ms of /score and of /fill over the same texts, the two kinds alternating."""
    for text in texts[:10]:
        _post(client, url + "/score", {"text": text, **options})
        _post(client, url + "/fill", {"text": text})
    times: dict[str, list[float]] = {"score": [], "fill": []}
    for i in range(n):
        text = texts[i % len(texts)]
        times["score"].append(_post(client, url + "/score", {"text": text, **options})[1])
        times["fill"].append(_post(client, url + "/fill", {"text": text})[1])
    out = {k: {"p50": statistics.median(v), "p99": sorted(v)[int(0.99 * (len(v) - 1))]} for k, v in times.items()}
    out["ratio_p50"] = out["score"]["p50"] / out["fill"]["p50"]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--set", type=Path, action="append", required=True, help="JSON lines {text, label}; repeat")
    ap.add_argument("--template", required=True, help="the query, {text} for each row's text")
    ap.add_argument("--choice", action="append", required=True, help="label or label=phrase,phrase; repeat")
    ap.add_argument("--scorer", choices=["npm", "npm_single"])
    ap.add_argument("--mode", choices=["dense", "restricted", "hybrid"])
    ap.add_argument("--blocks", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--limit", type=int, default=0, help="first N rows of each set (0: all)")
    ap.add_argument("--latency", type=int, default=200, help="requests of each kind for the latency ratio (0: skip)")
    ap.add_argument("--port", type=int, default=8931)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    choices = [c.model_dump() for c in parse_choices(args.choice)]
    given = {
        f: getattr(args, f) for f in ("scorer", "mode", "blocks", "k", "temperature") if getattr(args, f) is not None
    }
    options = {"choices": choices, "evidence": 0, **given}
    server = Server(args.index, args.port, {"FILL_MAX_CANDIDATES": str(10**9)})
    results: dict = {"options": options, "template": args.template, "sets": {}}
    try:
        server.wait_ready()
        with httpx.Client(timeout=120) as client:
            for path in args.set:
                rows = load_labelled(path)
                rows = rows[: args.limit] if args.limit else rows
                rep = accuracy(client, server.url, rows, args.template, options)
                results["sets"][path.name] = rep
                print(
                    f"{path.name}: n {rep['examples']}  accuracy {rep['accuracy']:.1f}  majority {rep['majority']:.1f}"
                    f"  abstained {rep['abstained']}  ECE {rep['calibration']['ece']:.1f}  recall "
                    + "  ".join(f"{k} {v:.1f}" for k, v in rep["recall"].items()),
                    flush=True,
                )
            if args.latency:
                texts = [fill_template(args.template, r["text"]) for r in load_labelled(args.set[0])]
                lat = results["latency_ms"] = latency(client, server.url, texts, options, args.latency)
                print(
                    f"latency ms, 1 client: /score p50 {lat['score']['p50']:.1f} p99 {lat['score']['p99']:.1f}; "
                    f"/fill p50 {lat['fill']['p50']:.1f} p99 {lat['fill']['p99']:.1f}; "
                    f"ratio of p50s {lat['ratio_p50']:.2f}"
                )
    finally:
        server.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
