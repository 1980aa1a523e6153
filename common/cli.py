"""Command lines generated from a job's one config object (a pydantic model).

Every field of the model becomes a flag (`block_tokens` -> `--block-tokens`) that is also an
environment variable (`INDEXER_BLOCK_TOKENS`), with the field's description as help and its
default shown. Values arrive as text and are validated by the model itself, so a flag, its
variable and a programmatic config are checked by one definition; a bad value is an AppError
naming the flag (exit code 2 through `cli_errors`).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Optional, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from common.errors import AppError, cli_errors

M = TypeVar("M", bound=BaseModel)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def envvar(env_prefix: str, name: str) -> str:
    """The environment variable of field `name` (`INDEXER_` + `block_tokens` -> `INDEXER_BLOCK_TOKENS`)."""
    return (env_prefix + name).upper()


def declared_flags(name: str, field) -> str:
    """The flag of a model field as declared: `--name`, or `--name/--no-name` for a bool."""
    if _unwrap(field.annotation)[0] is bool:
        return f"{flag(name)}/--no-{name.replace('_', '-')}"
    return flag(name)


@dataclass(frozen=True)
class CommandConfig:
    """What `model_command` made a command from (kept on the command as `command_config`; read by
    tools/config_docs.py, the generated settings reference)."""

    model: type[BaseModel]
    env_prefix: str
    exclude: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The model's fields that are flags: {name: FieldInfo}, in the model's order."""
        return {n: f for n, f in self.model.model_fields.items() if n not in self.exclude}


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether it is a list)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _unwrap(args[0])
    if origin in (list, tuple, set):
        return (args[0] if args else str), True
    return annotation, False


def _metavar(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return "[" + "|".join(str(a) for a in typing.get_args(annotation)) + "]"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "[" + "|".join(str(m.value) for m in annotation) + "]"
    names = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH"}
    if annotation in names:
        return names[annotation]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return "|".join(_metavar(a) for a in args) if args else "VALUE"


def _parameter(name: str, field, env_prefix: str) -> inspect.Parameter:
    annotation, many = _unwrap(field.annotation)
    required = field.default is PydanticUndefined and field.default_factory is None
    help_text = field.description or ""
    if not required and annotation is not bool:
        shown = field.default if field.default_factory is None else field.default_factory()
        if shown is not None:
            help_text += f" (default: {shown.value if isinstance(shown, Enum) else shown})"
    variable = envvar(env_prefix, name)
    hint: Any  # a type form (Optional[...]), read by typer
    if annotation is bool:
        option = typer.Option(None, declared_flags(name, field), help=help_text, envvar=variable, show_default=False)
        hint = Optional[bool]
    else:
        option = typer.Option(
            ... if required else None,
            flag(name),
            help=help_text,
            envvar=variable,
            metavar=_metavar(annotation),
            show_default=False,
        )
        hint = Optional[list[str]] if many else Optional[str]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=hint)


def describe_errors(exc: ValidationError, env_prefix: str = "") -> str:
    """A ValidationError as '--flag-name (PREFIX_FLAG_NAME): message; ...' (the flag each error is about)."""
    parts = []
    for e in exc.errors():
        name = "_".join(str(x) for x in e["loc"][:1])
        where = flag(name) + (f" ({envvar(env_prefix, name)})" if env_prefix and name else "")
        parts.append(f"{where}: {str(e['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def parse_config(model: type[M], values: dict[str, Any], env_prefix: str = "") -> M:
    """The model from the flags that were given (None: not given, the model's default applies)."""
    try:
        return model(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        raise AppError(describe_errors(exc, env_prefix), kind="validation") from None


def model_command(
    app: typer.Typer,
    model: type[M],
    run: Callable[..., None],
    *,
    name: str | None = None,
    env_prefix: str,
    exclude: tuple[str, ...] = (),
    extra: dict[str, tuple[Any, Any]] | None = None,
    help: str | None = None,
) -> None:
    """Register `name` on `app`: flags from `model`'s fields (minus `exclude`) plus `extra` ({name:
    (annotation, typer.Option)}); `run(config, **extra values)` is called inside `cli_errors`."""
    config = CommandConfig(model, env_prefix, tuple(exclude))
    params = [_parameter(n, f, env_prefix) for n, f in config.fields().items()]
    extra = extra or {}
    for n, (hint, option) in extra.items():
        params.append(inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=hint))

    def command(**kwargs: Any) -> None:
        with cli_errors():
            own = {k: kwargs.pop(k) for k in list(kwargs) if k not in extra}
            run(parse_config(model, own, env_prefix), **kwargs)

    setattr(command, "__signature__", inspect.Signature(params))  # typer reads the flags from the signature
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = help or (model.__doc__ or "").strip()
    command.__name__ = name or model.__name__.lower()
    setattr(command, "command_config", config)  # what the flags came from, for the generated reference
    app.command(name)(command)


def parse_bytes(text: str) -> int:
    """'2G', '500M', '64k' or a plain number of bytes (binary units); ValueError otherwise."""
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1] if t and t[-1] in units else ""
    try:
        value = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as 2G, 500M or 1000000") from None
    if value <= 0:
        raise ValueError(f"{text!r} must be positive")
    return int(value)
