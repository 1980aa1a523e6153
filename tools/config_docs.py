"""docs/CONFIGURATION.md, the reference of every job's settings, generated from the jobs' config objects.

    python -m tools.config_docs --write     # regenerate docs/CONFIGURATION.md
    python -m tools.config_docs --check     # exit 1 when docs/CONFIGURATION.md is stale
    python -m tools.config_docs             # print the reference

Each job (`python -m service`, the console scripts of pyproject.toml and their subcommands) is a typer
command; those made by `common.cli.model_command` carry the pydantic model their flags come from
(`command_config`), and their flags and environment variables are named here by the same helpers the command
line uses (`common.cli.declared_flags`, `common.cli.envvar`). A command's own flags and arguments (not fields
of its model: `--verbose`, `indexer merge`'s indexes, `encoder export`'s) are read from its signature. The
text is deterministic: no path of this machine, no time. tests/tools/test_config_docs.py fails when the file
differs from a fresh rendering.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from typer.models import ArgumentInfo, OptionInfo

from common.cli import CommandConfig, declared_flags, envvar
from common.files import write_bytes_atomic

ROOT = Path(__file__).resolve().parent.parent

DOC = ROOT / "docs" / "CONFIGURATION.md"
REGENERATE = "python -m tools.config_docs --write"

# (the program as typed, the module holding its typer `app`): `python -m service` and pyproject's [project.scripts]
PROGRAMS = (
    ("python -m service", "service.server"),
    ("indexer", "indexer.cli"),
    ("encoder", "training.cli"),
    ("fill-eval", "evaluation.evaluate"),
    ("fill-fit", "evaluation.fit"),
    ("fill-reader-data", "evaluation.reader_data"),
)

INTRO = """\
Every job reads one config object (a pydantic model): each of its fields is a flag of the job and an
environment variable (a flag given wins over its variable; neither given, the default applies). A bool is
`--name` / `--no-name` as a flag and `true` / `false` in its variable; a list takes its flag once per item.
Rows without a variable (—) are flags or arguments of the command alone, not fields of its config object.
Constraints (≥, ≤, ...) are checked by the model: a value outside them is an error naming the flag (exit 2)."""

OPTIONAL = "*none*"
REQUIRED = "**required**"


class Job(typing.NamedTuple):
    command: str  # as typed, e.g. `indexer build`
    callback: Any  # the typer command's function
    help: str


def jobs() -> list[Job]:
    """Every command of every program, in PROGRAMS' order and each program's registration order."""
    out = []
    for program, module in PROGRAMS:
        app = importlib.import_module(module).app
        single = len(app.registered_commands) == 1 and app.registered_callback is None and not app.registered_groups
        for info in app.registered_commands:
            name = info.name or info.callback.__name__.lower().replace("_", "-")  # typer's naming
            command = program if single else f"{program} {name}"
            out.append(Job(command, info.callback, info.help or inspect.getdoc(info.callback) or ""))
    return out


def first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n")[0].split())


def type_text(annotation: Any) -> str:
    """An annotation as short text: `int`, `Path | None`, `list[float]`, `local | ray` (a Literal's values)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin in (list, tuple, set):
        return f"{origin.__name__}[{', '.join(type_text(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def constraints(metadata: list[Any]) -> list[str]:
    """A field's bounds, lengths and pattern as `≥ 1`, `length ≥ 1`, `pattern ...`."""
    out = []
    for item in metadata:
        for attr, text in (
            ("gt", "> {}"),
            ("ge", "≥ {}"),
            ("lt", "< {}"),
            ("le", "≤ {}"),
            ("min_length", "length ≥ {}"),
            ("max_length", "length ≤ {}"),
            ("pattern", "pattern `{}`"),
        ):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(text.format(value))
    return out


def value_text(value: Any) -> str:
    """A default as written: `true`, `8000`, `""`, `[0.0, 0.5]`; a path of this checkout relative to it."""
    if value is None:
        return OPTIONAL
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, Path):
        return f"`{(value.relative_to(ROOT) if value.is_relative_to(ROOT) else value).as_posix()}`"
    if isinstance(value, (list, tuple, set)):
        return "`[" + ", ".join(value_text(v).strip("`") for v in value) + "]`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{value}`"


def cell(text: str) -> str:
    """Text for one table cell: one line, its pipes escaped, and `<` outside `code` too (not read as HTML)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def field_rows(config: CommandConfig) -> list[list[str]]:
    """[setting, flag, variable, type, default, description] of each field of the model that is a flag."""
    rows = []
    for name, field in config.fields().items():
        kind = f"`{type_text(field.annotation)}`"
        bounds = constraints(field.metadata)
        if bounds:
            kind += f" ({', '.join(bounds)})"
        if field.is_required():
            default = REQUIRED
        else:
            default = value_text(field.default if field.default_factory is None else field.default_factory())
        rows.append(
            [
                f"`{name}`",
                f"`{declared_flags(name, field)}`",
                f"`{envvar(config.env_prefix, name)}`",
                kind,
                default,
                field.description or "",
            ]
        )
    return rows


def _parameter_info(parameter: inspect.Parameter) -> tuple[Any, Any, Any]:
    """(annotation, OptionInfo or ArgumentInfo, default) of a typer parameter, written either way:
    `x: T = typer.Option(default, ...)` or `x: Annotated[T, typer.Option(...)] = default`."""
    annotation, default = parameter.annotation, parameter.default
    if isinstance(default, (OptionInfo, ArgumentInfo)):
        return annotation, default, default.default
    for meta in typing.get_args(annotation)[1:] if typing.get_origin(annotation) is typing.Annotated else ():
        if isinstance(meta, (OptionInfo, ArgumentInfo)):
            return annotation, meta, default
    return annotation, None, default


def own_rows(callback: Any, skip: set[str]) -> list[list[str]]:
    """[setting, flag, variable, type, default, description] of the command's parameters not in `skip`."""
    rows = []
    hints = typing.get_type_hints(callback, include_extras=True)  # annotations written as text, evaluated
    for name, parameter in inspect.signature(callback).parameters.items():
        if name in skip:
            continue
        annotation, info, default = _parameter_info(parameter.replace(annotation=hints.get(name, parameter.annotation)))
        if isinstance(info, ArgumentInfo):
            flag = f"`{name.upper()} ...` (arguments)" if typing.get_origin(annotation) is list else f"`{name.upper()}`"
        else:
            flag = ", ".join(f"`{d}`" for d in (info.param_decls if info else ())) or f"`--{name.replace('_', '-')}`"
        required = default is ... or default is inspect.Parameter.empty
        variable = f"`{info.envvar}`" if info is not None and isinstance(info.envvar, str) else "—"
        rows.append(
            [
                f"`{name}`",
                flag,
                variable,
                f"`{type_text(annotation)}`",
                REQUIRED if required else value_text(default),
                (info.help if info else "") or "",
            ]
        )
    return rows


def table(rows: list[list[str]], with_variables: bool) -> list[str]:
    head = ["Setting", "CLI flag", "Environment variable", "Type", "Default", "Description"]
    keep = [i for i in range(len(head)) if with_variables or i != 2]
    lines = ["| " + " | ".join(head[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    lines += ["| " + " | ".join(cell(row[i]) for i in keep) + " |" for row in rows]
    return lines


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped but - and _, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def section(job: Job) -> list[str]:
    config: CommandConfig | None = getattr(job.callback, "command_config", None)
    lines = [f"## `{job.command}`", "", first_paragraph(job.help), ""]
    if config is None:
        lines += ["No config object: flags only, no environment variables.", ""]
        return lines + table(own_rows(job.callback, set()), with_variables=False) + [""]
    model = config.model
    lines.append(
        f"Config object: `{model.__module__}.{model.__qualname__}`; environment variables "
        f"`{envvar(config.env_prefix, '')}*`."
    )
    if config.exclude:
        lines.append(
            "Fields of the model that are not flags of this job: " + ", ".join(f"`{n}`" for n in config.exclude) + "."
        )
    rows = field_rows(config) + own_rows(job.callback, set(config.fields()))
    return lines + [""] + table(rows, with_variables=True) + [""]


def render() -> str:
    """The whole of docs/CONFIGURATION.md."""
    all_jobs = jobs()
    lines = [
        "# Configuration reference",
        "",
        f"Generated from the jobs' config objects by `{REGENERATE}`: do not edit it by hand "
        "(tests/tools/test_config_docs.py fails when it is stale).",
        "",
        INTRO,
        "",
        "Jobs:",
        "",
    ]
    lines += [f"- [`{job.command}`](#{anchor(job.command)})" for job in all_jobs]
    lines.append("")
    for job in all_jobs:
        lines += section(job)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    shown = DOC.relative_to(ROOT) if DOC.is_relative_to(ROOT) else DOC
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {shown}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {shown} is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        write_bytes_atomic(DOC, text.encode("utf-8"))  # temporary name, fsync, rename
        print(f"wrote {shown}", file=sys.stderr)
    elif args.check:
        if not DOC.is_file() or DOC.read_text(encoding="utf-8") != text:
            print(f"{shown} is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
