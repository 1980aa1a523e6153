"""Tests for common.cli: a command line generated from a config model (flags, env variables, errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from common.cli import model_command, parse_bytes


class JobConfig(BaseModel):
    """Run the toy job."""

    corpus: list[Path] = Field(description="input files")
    out: Path
    block_tokens: int = Field(256, ge=8, description="tokens per block")
    dtype: Literal["float16", "int8"] = "int8"
    resume: bool = False
    shuffle: bool = True


@pytest.fixture()
def app_and_runs():
    runs = []
    app = typer.Typer(add_completion=False)

    def run(cfg: JobConfig, verbose: bool = False) -> None:
        runs.append((cfg, verbose))

    model_command(
        app,
        JobConfig,
        run,
        name="job",
        env_prefix="TOY_",
        extra={"verbose": (bool, typer.Option(False, "--verbose", "-v"))},
    )
    return app, runs


def test_flags_and_defaults(app_and_runs):
    app, runs = app_and_runs
    r = CliRunner().invoke(
        app,
        [
            "--corpus",
            "a",
            "--corpus",
            "b",
            "--out",
            "o",
            "--block-tokens",
            "16",
            "--dtype",
            "float16",
            "--resume",
            "--no-shuffle",
            "-v",
        ],
    )
    assert r.exit_code == 0, r.output
    cfg, verbose = runs[-1]
    assert cfg == JobConfig(
        corpus=[Path("a"), Path("b")], out=Path("o"), block_tokens=16, dtype="float16", resume=True, shuffle=False
    )
    assert verbose is True
    r = CliRunner().invoke(app, ["--corpus", "a", "--out", "o"])
    assert r.exit_code == 0 and runs[-1][0] == JobConfig(corpus=[Path("a")], out=Path("o"))


def test_environment_variables_and_flags_win(app_and_runs):
    app, runs = app_and_runs
    env = {"TOY_BLOCK_TOKENS": "64", "TOY_RESUME": "1", "TOY_OUT": "env_out"}
    r = CliRunner().invoke(app, ["--corpus", "a"], env=env)
    assert r.exit_code == 0, r.output
    assert (runs[-1][0].block_tokens, runs[-1][0].resume, runs[-1][0].out) == (64, True, Path("env_out"))
    r = CliRunner().invoke(app, ["--corpus", "a", "--block-tokens", "32"], env=env)
    assert runs[-1][0].block_tokens == 32


def test_help_lists_every_field_with_description_default_and_variable(app_and_runs):
    app, _ = app_and_runs
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for text in (
        "--corpus",
        "--block-tokens",
        "tokens per block",
        "(default: 256)",
        "TOY_BLOCK_TOKENS",
        "--no-shuffle",
        "[float16|int8]",
        "Run the toy job",
    ):
        assert text in r.output, text


def test_bad_values_name_the_flag_and_variable_and_exit_2(app_and_runs):
    app, runs = app_and_runs
    before = len(runs)
    r = CliRunner().invoke(app, ["--corpus", "a", "--out", "o", "--block-tokens", "4", "--dtype", "int4"])
    assert r.exit_code == 2
    assert "--block-tokens (TOY_BLOCK_TOKENS):" in r.output and "--dtype (TOY_DTYPE):" in r.output
    assert len(runs) == before  # the job never ran
    r = CliRunner().invoke(app, ["--out", "o"])
    assert r.exit_code == 2 and "--corpus" in r.output


def test_parse_bytes():
    assert parse_bytes("2G") == 2 * 2**30
    assert parse_bytes("500MB") == 500 * 2**20
    assert parse_bytes("1.5k") == 1536
    assert parse_bytes("1000") == 1000
    for bad in ("", "lots", "-1G", "0"):
        with pytest.raises(ValueError, match="size|positive"):
            parse_bytes(bad)
