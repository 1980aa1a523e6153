"""tools/config_docs.py: docs/CONFIGURATION.md is the fresh rendering of every job's config object, and it names
each job's settings with the flags and variables the command lines use."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

import pytest

from tools import config_docs

ROOT = Path(__file__).resolve().parents[2]

# a known setting of each job, as (its row's first cells): setting, flag, variable
KNOWN = {
    "python -m service": "| `port` | `--port` | `FILL_PORT` |",
    "indexer build": "| `corpus` | `--corpus` | `INDEXER_CORPUS` |",
    "indexer add": "| `index` | `--index` | `INDEXER_INDEX` |",
    "indexer delete": "| `ids` | `--ids` | `INDEXER_IDS` |",
    "indexer compact": "| `index` | `--index` | `INDEXER_INDEX` |",
    "indexer recode": "| `vector_dtype` | `--vector-dtype` | `INDEXER_VECTOR_DTYPE` |",
    "indexer verify": "| `index` | `--index` | `INDEXER_INDEX` |",
    "indexer merge": "| `copy_files` | `--copy-files/--no-copy-files` | `INDEXER_COPY_FILES` |",
    "encoder train": "| `steps` | `--steps` | `ENCODER_STEPS` |",
    "encoder adapt": "| `minutes` | `--minutes` | `ENCODER_ADAPT_MINUTES` |",
    "encoder train-reader": "| `examples` | `--examples` | `ENCODER_READER_EXAMPLES` |",
    "encoder tune-queries": "| `index` | `--index` | `ENCODER_TUNE_INDEX` |",
    "encoder export": "| `checkpoint` | `--checkpoint` |",
    "encoder export-onnx": "| `engine` | `--engine` |",
    "fill-eval": "| `top_k` | `--top-k` | `FILL_EVAL_TOP_K` |",
    "fill-fit": "| `grid` | `--grid` | `FILL_FIT_GRID` |",
    "fill-reader-data": "| `probes` | `--probes` | `FILL_READER_DATA_PROBES` |",
}


@pytest.fixture(scope="module")
def rendered() -> str:
    return config_docs.render()


def _sections(text: str) -> dict[str, str]:
    """{command: its section} of the reference (each section starts `## `command``)."""
    return {part.split("`")[1]: part for part in text.split("\n## ")[1:]}


def test_configuration_md_is_the_fresh_rendering(rendered):
    written = config_docs.DOC.read_text(encoding="utf-8") if config_docs.DOC.is_file() else ""
    if written != rendered:
        diff = difflib.unified_diff(
            written.splitlines(), rendered.splitlines(), "docs/CONFIGURATION.md", "fresh rendering", lineterm="", n=1
        )
        pytest.fail(f"docs/CONFIGURATION.md is stale: run `{config_docs.REGENERATE}`\n" + "\n".join(list(diff)[:40]))


def test_every_job_has_its_section_with_a_known_setting(rendered):
    sections = _sections(rendered)
    assert sorted(sections) == sorted(KNOWN)
    for command, row in KNOWN.items():
        assert row in sections[command], f"{command}: no row starting {row}"
    assert "`FILL_PORT` | `int` (≥ 0, ≤ 65535) | `8000` | port |" in sections["python -m service"]
    assert "| `corpus` | `--corpus` | `INDEXER_CORPUS` | `Path` | **required** |" in sections["indexer build"]
    assert "`--verbose`, `-v` | — | `bool` | `false` | debug logging |" in sections["indexer build"]
    assert "| `inputs` | `INPUTS ...` (arguments) | — |" in sections["indexer merge"]
    assert "`scoring`" not in sections["fill-fit"].split("| Setting |")[1]  # excluded from fill-fit's flags
    assert str(ROOT) not in rendered


def test_every_console_script_is_a_program_of_the_reference():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    modules = {module for _, module in config_docs.PROGRAMS}
    missing = {name: target for name, target in scripts.items() if target.split(":")[0] not in modules}
    assert missing == {}, "add these console scripts to tools/config_docs.py's PROGRAMS"


def test_check_reports_a_stale_file(tmp_path, monkeypatch, capsys, rendered):
    stale = tmp_path / "CONFIGURATION.md"
    stale.write_text(rendered.replace("| `8000` |", "| `8001` |"), encoding="utf-8")
    monkeypatch.setattr(config_docs, "DOC", stale)
    assert config_docs.main(["--check"]) == 1
    assert config_docs.REGENERATE in capsys.readouterr().err
    assert config_docs.main(["--write"]) == 0 and config_docs.main(["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == rendered
