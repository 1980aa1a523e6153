"""Snapshot the engine's fills over fixed probes, and compare two snapshots (a speed change must not
change a fill):

    python -m bench.snapshot_fills take --index data-local/bench/idx_10m \
        --corpus data-local/debian/corpus_10m.jsonl --n 500 --out data-local/bench/snap_before.jsonl
    (change the engine)
    python -m bench.snapshot_fills take ... --out data-local/bench/snap_after.jsonl
    python -m bench.snapshot_fills compare data-local/bench/snap_before.jsonl data-local/bench/snap_after.jsonl

With `--backend ray [--groups N]` the snapshot is taken through shard groups on a Ray started in the process
(FILL_BACKEND=ray): compared with a local snapshot, every result must be equal field for field.

`take` runs every probe in each of --modes with the API defaults, and the first --variants probes also with
a second option set (top_k 20, alpha 0.5, sum aggregation, case-insensitive, evidence 5, k 2048,
max_span_tokens 16), in process (FillEngine, no HTTP); with --scores N, the first N probes are also scored
as closed-set (POST /score: great / terrible) with the API defaults and with a second option set (the npm
scorer, evidence 3, no synonyms, no calibration, temperature 2). Each line is a FillResult (a ScoreResult)
without its timings.
`compare` prints the top-1 agreement per mode, how many results are equal field for field, and the largest
score / confidence difference. Take both snapshots with the same BLAS threads: the engine now runs BLAS
on one thread, engines before 2026-11-24 used all cores unless OMP_NUM_THREADS=1, and the thread count
moves scores in their last digits (up to 1e-8), never a top-1 fill.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VARIANT = {
    "top_k": 20,
    "alpha": 0.5,
    "aggregate": "sum",
    "case_sensitive": False,
    "evidence": 5,
    "k": 2048,
    "max_span_tokens": 16,
}
# --scores: closed-set scores (POST /score) of the first N probes, with the API defaults and with these
SCORE_CHOICES = ["great", "terrible"]
SCORE_VARIANT = {"scorer": "npm", "evidence": 3, "synonyms": 0, "calibrate": False, "temperature": 2.0}


def take(args: argparse.Namespace) -> None:
    from bench.shared import make_probes
    from common.process import single_thread_blas
    from fill.schemas import FillRequest, ScoreRequest
    from service.config import Settings
    from service.state import open_engine

    if args.probes is not None:
        texts = [json.loads(line)["query"] for line in args.probes.read_text(encoding="utf-8").splitlines()][: args.n]
    else:
        texts = make_probes(args.corpus, args.n)
    single_thread_blas()
    # FILL_* variables apply, as in the server; --backend ray: the shard groups on a Ray started here
    engine = open_engine(
        Settings(index=args.index, backend=args.backend, ray_groups=args.groups, ray_replicas=args.replicas)
    )
    cases = [(mode, "default", {}, len(texts)) for mode in args.modes]
    cases += [(mode, "variant", VARIANT, args.variants) for mode in args.modes]
    cases += [(mode, "score", {}, args.scores) for mode in args.modes if args.scores]
    cases += [(mode, "score-variant", SCORE_VARIANT, args.scores) for mode in args.modes if args.scores]
    tmp = args.out.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for mode, name, options, n in cases:
            for i, text in enumerate(texts[:n]):
                if name.startswith("score"):
                    result = engine.score(ScoreRequest(text=text, mode=mode, choices=SCORE_CHOICES, **options))
                else:
                    result = engine.fill(FillRequest(text=text, mode=mode, **options))
                record = {
                    "probe": i,
                    "mode": mode,
                    "options": name,
                    "text": text,
                    **result.model_dump(exclude={"took_ms", "timings_ms"}),
                }
                out.write(json.dumps(record) + "\n")
    tmp.replace(args.out)
    engine.close()
    print(
        f"wrote {args.out}: {len(texts)} probes x {len(args.modes)} modes, +{min(args.variants, len(texts))} "
        f"x {len(args.modes)} with the variant options"
        + (f", {min(args.scores, len(texts))} x {len(args.modes)} x 2 closed-set scores" if args.scores else "")
    )


def _numbers(a, b, path=""):
    """Largest absolute difference of the floats of two equal-shaped JSON values (None: shapes differ)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b)
    if type(a) is not type(b):
        return None
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return None
        diffs = [_numbers(a[k], b[k]) for k in a]
    elif isinstance(a, list):
        if len(a) != len(b):
            return None
        diffs = [_numbers(x, y) for x, y in zip(a, b)]
    else:
        return 0.0 if a == b else None
    return None if any(d is None for d in diffs) else max(diffs, default=0.0)


def _top(record: dict) -> list:
    """Per mask, the top phrase of a fill (the predicted label of a closed-set score; None: abstained)."""
    if "filled" not in record:
        return [m["predicted"] for m in record["masks"]]
    return [m["candidates"][0]["phrase"] if m["candidates"] else None for m in record["masks"]]


def compare(args: argparse.Namespace) -> None:
    a = [json.loads(line) for line in args.a.read_text(encoding="utf-8").splitlines()]
    b = [json.loads(line) for line in args.b.read_text(encoding="utf-8").splitlines()]
    if [(r["mode"], r["options"], r["text"]) for r in a] != [(r["mode"], r["options"], r["text"]) for r in b]:
        raise SystemExit("error: the snapshots hold different probes or modes; take both with the same options")
    groups: dict[tuple[str, str], list[tuple[dict, dict]]] = {}
    for x, y in zip(a, b):
        groups.setdefault((x["mode"], x["options"]), []).append((x, y))
    failed = False
    for (mode, options), pairs in groups.items():
        agree = sum(_top(x) == _top(y) for x, y in pairs)
        equal = sum(x == y for x, y in pairs)
        diffs = [_numbers(x, y) for x, y in pairs]
        same_shape = sum(d is not None for d in diffs)
        worst = max((d for d in diffs if d is not None), default=0.0)
        failed |= agree < len(pairs) or same_shape < len(pairs)
        print(
            f"{mode:10s} {options:13s} {len(pairs):4d} probes: top-1 agreement {agree}/{len(pairs)}; "
            f"equal field for field {equal}; same phrases, evidence and order {same_shape}; "
            f"largest score/confidence difference {worst:.3g}"
        )
    if failed:
        raise SystemExit(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("take")
    t.add_argument("--index", type=Path, required=True)
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--corpus", type=Path, help="JSON-lines corpus to draw cloze queries from (bench.shared.make_probes)"
    )
    src.add_argument("--probes", type=Path, help="fill-eval probe file (its `query` fields)")
    t.add_argument("--n", type=int, default=500)
    t.add_argument("--variants", type=int, default=100, help="probes also run with the variant options")
    t.add_argument("--modes", nargs="+", default=["dense", "restricted", "hybrid"])
    t.add_argument("--scores", type=int, default=0, help="probes also scored against great / terrible (POST /score)")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument(
        "--backend",
        choices=["local", "ray"],
        default="local",
        help="ray: the same fills through shard groups on Ray Serve (FILL_BACKEND=ray)",
    )
    t.add_argument("--groups", type=int, default=2, help="shard groups (--backend ray)")
    t.add_argument("--replicas", type=int, default=1, help="replicas per group (--backend ray)")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = p.parse_args()
    take(args) if args.command == "take" else compare(args)


if __name__ == "__main__":
    main()
