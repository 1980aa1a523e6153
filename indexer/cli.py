"""`indexer build --corpus PATH --out DIR`: the command line of the indexing job."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from indexer.errors import IndexerError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build phrase indexes for mask filling.")


@app.callback()
def _root() -> None:
    """Build phrase indexes for mask filling."""


@app.command()
def build(
    corpus: Annotated[Path, typer.Option(help="corpus: HF save_to_disk dir, .arrow, .parquet, .jsonl, .txt or dir of .txt", envvar="INDEXER_CORPUS")],
    out: Annotated[Path, typer.Option(help="output index directory", envvar="INDEXER_OUT")],
    model: Annotated[Optional[Path], typer.Option(help="HuggingFace encoder directory (default: bundled model)", envvar="INDEXER_MODEL")] = None,
    block_tokens: Annotated[int, typer.Option(help="corpus tokens per block", envvar="INDEXER_BLOCK_TOKENS")] = 256,
    shard_tokens: Annotated[int, typer.Option(help="tokens per shard", envvar="INDEXER_SHARD_TOKENS")] = 1_000_000,
    title_tokens: Annotated[int, typer.Option(help="title tokens prefixed to blocks as context (0: none)", envvar="INDEXER_TITLE_TOKENS")] = 32,
    index_type: Annotated[str, typer.Option(help="ANN index per shard: auto, flat, ivfpq, ivfsq, hnsw, or a FAISS factory string (inner product)", envvar="INDEXER_INDEX_TYPE")] = "auto",
    memory_budget: Annotated[Optional[str], typer.Option(help="RAM for the ANN indexes with --index-type auto, e.g. 2G or 500M", envvar="INDEXER_MEMORY_BUDGET")] = None,
    vector_dtype: Annotated[str, typer.Option(help="re-scoring vectors: int8 (default, 386 B/token at d=384) or float16", envvar="INDEXER_VECTOR_DTYPE")] = "int8",
    batch_tokens: Annotated[
        Optional[int], typer.Option(help="padded tokens per encoder batch [default: 2048 on CPU, 16384 on GPU]",
                                    envvar="INDEXER_BATCH_TOKENS")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N", envvar="INDEXER_DEVICE")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, fp32, bf16 or fp16", envvar="INDEXER_DTYPE")] = "auto",
    overwrite: Annotated[bool, typer.Option(help="replace an existing different index in --out")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logging")] = False,
) -> None:
    """Embed every token of a corpus into sharded FAISS indexes plus stored vectors."""
    from pydantic import ValidationError

    from indexer.ann import parse_bytes
    from indexer.build import BuildConfig, build_index

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = BuildConfig(
            corpus=corpus, out=out, model=model, block_tokens=block_tokens, shard_tokens=shard_tokens,
            title_tokens=title_tokens, index_type=index_type, batch_tokens=batch_tokens,
            memory_budget=None if memory_budget is None else parse_bytes(memory_budget), vector_dtype=vector_dtype,
            device=device, dtype=dtype, overwrite=overwrite,
        )
        summary = build_index(cfg)
    except ValidationError as exc:
        _fail("; ".join(f"--{'-'.join(str(x) for x in e['loc']).replace('_', '-')}: {e['msg']}" for e in exc.errors()))
    except (IndexerError, ValueError) as exc:
        _fail(str(exc))
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 reports the whole index
        typer.echo(summary.line())


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def main() -> None:
    app(prog_name="indexer")


if __name__ == "__main__":
    sys.exit(main())
