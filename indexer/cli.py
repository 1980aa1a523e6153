"""`indexer build --corpus PATH --out DIR`: the command line of the indexing job.

The flags (and INDEXER_* variables) are generated from `BuildConfig`, the job's one config object.
"""

from __future__ import annotations

import logging
import os

import typer

from common.cli import model_command
from indexer.build import BuildConfig, build_index

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build phrase indexes for mask filling.")


@app.callback()
def _root() -> None:
    """Build phrase indexes for mask filling."""


def _build(cfg: BuildConfig, verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    summary = build_index(cfg)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 reports the whole index
        typer.echo(summary.line())


model_command(app, BuildConfig, _build, name="build", env_prefix="INDEXER_",
              extra={"verbose": (bool, typer.Option(False, "--verbose", "-v", help="debug logging"))})


def main() -> None:
    app(prog_name="indexer")
