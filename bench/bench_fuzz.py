"""The schema-driven fuzz run at benchmark size: tests/service/test_fuzz.py with more examples.

    python -m bench.bench_fuzz [--examples 400]

Runs the fuzz test (schemathesis strategies from the app's own OpenAPI, positive and negative, every
operation, over the test suite's tiny index) with FUZZ_EXAMPLES=--examples and prints the number of
generated cases by operation and status, and the number of 5xx (the test fails on any)."""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=400, help="examples per operation and generation mode")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        count_file = Path(tmp) / "cases.txt"
        env = {**os.environ, "FUZZ_EXAMPLES": str(args.examples), "FUZZ_COUNT_FILE": str(count_file)}
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/service/test_fuzz.py"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
        lines = count_file.read_text().splitlines() if count_file.exists() else []
    by = collections.Counter(tuple(line.split()) for line in lines)
    server_errors = sum(n for (_, _, status), n in by.items() if int(status) >= 500)
    for (method, path, status), n in sorted(by.items()):
        print(f"{n:6d}  {method} {path} -> {status}")
    print(f"cases: {len(lines)}  5xx: {server_errors}  pytest exit: {done.returncode}  seconds: {seconds:.0f}")
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:])
        raise SystemExit(1)


if __name__ == "__main__":
    main()
