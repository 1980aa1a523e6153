"""`python -m service --index DIR [--host H] [--port P]`; every flag is also a FILL_* variable."""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError


def parse_args(argv: list[str] | None = None):
    from service.config import Settings

    try:
        env = Settings()
    except ValidationError as exc:
        print(f"error: bad FILL_* environment variable: {exc}", file=sys.stderr)
        sys.exit(2)
    p = argparse.ArgumentParser(prog="python -m service", description="Serve POST /fill over a phrase index.")
    p.add_argument("--index", default=env.index, help="index directory (FILL_INDEX)")
    p.add_argument("--host", default=env.host, help="bind address (FILL_HOST)")
    p.add_argument("--port", type=int, default=env.port, help="port (FILL_PORT)")
    p.add_argument("--model", default=env.model, help="encoder directory; default: the manifest's (FILL_MODEL)")
    p.add_argument("--device", default=env.device, help="auto, cpu, cuda (FILL_DEVICE)")
    p.add_argument("--dtype", default=env.dtype, help="auto, fp32, bf16, fp16 (FILL_DTYPE)")
    p.add_argument("--verify", action=argparse.BooleanOptionalAction, default=env.verify,
                   help="check index checksums at start (FILL_VERIFY)")
    p.add_argument("--nprobe", type=int, default=env.nprobe, help="IVF lists searched per query (FILL_NPROBE)")
    p.add_argument("--ef-search", type=int, default=env.ef_search, help="HNSW search breadth (FILL_EF_SEARCH)")
    p.add_argument(
        "--refine", type=int, default=env.refine, help="ANN shards return refine * k hits, re-scored exactly (FILL_REFINE)"
    )
    p.add_argument("--max-concurrency", type=int, default=env.max_concurrency, help="(FILL_MAX_CONCURRENCY)")
    p.add_argument("--log-level", default=env.log_level, help="(FILL_LOG_LEVEL)")
    args = p.parse_args(argv)
    if args.index is None:
        p.error("--index is required (or set FILL_INDEX)")
    try:
        return Settings(**vars(args))
    except ValidationError as exc:
        p.error(str(exc))


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from indexer.manifest import Manifest
    from indexer.errors import IndexerError
    from service.api import create_app

    settings = parse_args(argv)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        Manifest.load(settings.index)  # fail fast on a wrong path; the heavy load happens in the background
    except IndexerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)


if __name__ == "__main__":
    main()
