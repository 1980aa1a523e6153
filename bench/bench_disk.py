"""Disk bytes per token of an index directory, every file counted, by kind of file.

    python -m bench.bench_disk --index data-local/bench/idx_10m [--json OUT]

Target: <= 450 bytes per token at d = 384 with default build settings.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    manifest = json.loads((args.index / "manifest.json").read_text(encoding="utf-8"))
    tokens = manifest["counts"]["tokens"]
    by_kind: dict[str, int] = defaultdict(int)
    for path in args.index.rglob("*"):
        if path.is_file():
            kind = path.name if path.parent.name.startswith("shard_") else f"{path.relative_to(args.index).parts[0]}"
            by_kind[kind] += path.stat().st_size
    total = sum(by_kind.values())
    print(
        f"{args.index}: {tokens:,} tokens, dim {manifest['dim']}, vectors {manifest['vector_dtype']}, "
        f"index type {manifest['index_type']} ({manifest['shards'][0]['factory']} ...)"
    )
    for kind, size in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<16} {size / 2**20:10.1f} MiB {size / tokens:8.1f} B/token")
    print(f"  {'total':<16} {total / 2**20:10.1f} MiB {total / tokens:8.1f} B/token (target <= 450)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"tokens": tokens, "bytes": total, "bytes_per_token": total / tokens, "by_kind": by_kind}, indent=2
            )
            + "\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
