"""`indexer build --corpus PATH --out DIR`, `indexer add | delete | compact | verify --index DIR`, `indexer recode
--index DIR --out DIR`, `indexer merge --out DIR IN1 IN2 ...`: the command lines of the indexing jobs.

The flags (and INDEXER_* variables) of each are generated from its one config object (`BuildConfig`,
`AddConfig`, `DeleteConfig`, `CompactConfig`, `RecodeConfig`, `MergeConfig`, `VerifyConfig`; merge's indexes are
its arguments).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import typer

from common.cli import model_command
from indexer.build import BuildConfig, build_index
from indexer.compact import CompactConfig, run_compact
from indexer.merge import MergeConfig, merge_indexes
from indexer.recode import RecodeConfig, run_recode
from indexer.update import AddConfig, DeleteConfig, run_add, run_delete
from indexer.verify import VerifyConfig, verify_index

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build phrase indexes for mask filling.")


@app.callback()
def _root() -> None:
    """Build phrase indexes for mask filling."""


def _build(cfg: BuildConfig, verbose: bool = False) -> None:
    _logging(verbose)
    summary = build_index(cfg)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 reports the whole index
        typer.echo(summary.line())


model_command(
    app,
    BuildConfig,
    _build,
    name="build",
    env_prefix="INDEXER_",
    extra={"verbose": (bool, typer.Option(False, "--verbose", "-v", help="debug logging"))},
)


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _add(cfg: AddConfig, verbose: bool = False) -> None:
    _logging(verbose)
    typer.echo(run_add(cfg).line())


def _delete(cfg: DeleteConfig, verbose: bool = False) -> None:
    _logging(verbose)
    typer.echo(run_delete(cfg).line())


def _compact(cfg: CompactConfig, verbose: bool = False) -> None:
    _logging(verbose)
    typer.echo(run_compact(cfg).line())


def _recode(cfg: RecodeConfig, verbose: bool = False) -> None:
    _logging(verbose)
    typer.echo(run_recode(cfg).line())


def _verify(cfg: VerifyConfig, verbose: bool = False) -> None:
    _logging(verbose)
    typer.echo(verify_index(cfg).line())


for _name, _config, _run in (
    ("add", AddConfig, _add),
    ("delete", DeleteConfig, _delete),
    ("compact", CompactConfig, _compact),
    ("recode", RecodeConfig, _recode),
    ("verify", VerifyConfig, _verify),
):
    model_command(
        app,
        _config,
        _run,
        name=_name,
        env_prefix="INDEXER_",
        extra={"verbose": (bool, typer.Option(False, "--verbose", "-v", help="debug logging"))},
    )


def _merge(cfg: MergeConfig, inputs: list[Path] | None = None, verbose: bool = False) -> None:
    _logging(verbose)
    typer.echo(merge_indexes(cfg.model_copy(update={"inputs": list(inputs or [])})).line())


model_command(
    app,
    MergeConfig,
    _merge,
    name="merge",
    env_prefix="INDEXER_",
    exclude=("inputs",),
    extra={
        "inputs": (list[Path], typer.Argument(..., help="the indexes to merge, in order", show_default=False)),
        "verbose": (bool, typer.Option(False, "--verbose", "-v", help="debug logging")),
    },
)


def main() -> None:
    app(prog_name="indexer")
