"""Read docker-compose.yml and the Dockerfiles the way Docker would, to run a service's command as a local
process: compose's variable substitution, the container paths of its mounts and image mapped to local
folders, the image's ENV, the Dockerfile instructions."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
APP_PREFIXES = ("FILL_", "INDEXER_", "ENCODER_")

# $$ | ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error} | $NAME
_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*))"
)


class InterpolationError(ValueError):
    pass


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """`value` (a string, or lists and mappings of them) with compose's variable substitution applied:
    `:-` takes the default when the variable is unset or empty, `-` only when unset; `:?`/`?` fail."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m["escaped"]:
            return "$"
        name = m["braced"] or m["named"]
        op, arg = m["op"], m["arg"]
        current = env.get(name)
        missing = current is None or (current == "" and op is not None and op.startswith(":"))
        if op in (":-", "-"):
            return arg if missing else current
        if op in (":?", "?") and missing:
            raise InterpolationError(f"{name}: {arg or 'required'}")
        return current or ""

    return _VARIABLE.sub(one, value)


def load_compose(env: dict[str, str] | None = None) -> dict:
    """docker-compose.yml parsed, with variables substituted from `env` (default: none set, so every
    `${VAR:-default}` gives its default, as `docker-compose up` does on a machine that sets none)."""
    raw = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return interpolate(raw, env or {})


def docker_compose() -> str | None:
    return shutil.which("docker-compose")


def compose_variables() -> set[str]:
    """Every variable docker-compose.yml reads."""
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    return {m["braced"] or m["named"] for m in _VARIABLE.finditer(text) if not m["escaped"]}


def run_docker_compose(*args: str) -> subprocess.CompletedProcess:
    """`docker-compose -f docker-compose.yml ARGS` with none of the file's variables set."""
    env = {k: v for k, v in os.environ.items() if k not in compose_variables()}
    return subprocess.run(
        [docker_compose(), "-f", str(COMPOSE_FILE), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def dockerfile_env(path: Path) -> dict[str, str]:
    """The image's ENV variables of the form KEY=VALUE (PATH left out: the local one stays)."""
    env: dict[str, str] = {}
    for instr, args in dockerfile_instructions(path):
        if instr == "ENV":
            for item in args.split():
                key, sep, value = item.partition("=")
                if sep and key != "PATH":
                    env[key] = value.strip('"')
    return env


def dockerfile_workdir(path: Path) -> str:
    workdirs = [args for instr, args in dockerfile_instructions(path) if instr == "WORKDIR"]
    assert workdirs, f"{path} sets no WORKDIR"
    return workdirs[-1]


class LocalService:
    """One compose service, turned into a local command line and environment.

    Container paths are mapped to local ones: the image's WORKDIR (where the Dockerfile copies the
    repository's files) to the repository root, a named volume to a folder of `volume_dirs` (shared
    by every service that mounts it), a bind mount to its host folder."""

    def __init__(self, compose: dict, name: str, volume_dirs: dict[str, Path]) -> None:
        self.name = name
        self.spec = compose["services"][name]
        dockerfile = ROOT / self.spec["build"]["context"] / self.spec["build"]["dockerfile"]
        self.dockerfile = dockerfile
        self.mounts: dict[str, Path] = {dockerfile_workdir(dockerfile): ROOT}
        for entry in self.spec.get("volumes", []):
            source, target = entry.split(":")[:2]
            if source in compose.get("volumes", {}):
                self.mounts[target] = volume_dirs[source]
            else:
                self.mounts[target] = (ROOT / source).resolve()

    def local_path(self, value: str) -> str:
        """A container path (or a string starting with one) rewritten to the local folder it maps to."""
        for target in sorted(self.mounts, key=len, reverse=True):
            if value == target or value.startswith(target.rstrip("/") + "/"):
                return str(self.mounts[target]) + value[len(target.rstrip("/")) :]
        return value

    def argv(self) -> list[str]:
        command = self.spec["command"]
        assert isinstance(command, list), f"{self.name}: write `command` in exec form (a list)"
        program = command[0]
        local = sys.executable if program == "python" else str(Path(sys.executable).parent / program)
        assert Path(local).exists(), f"{self.name}: {program} is not installed next to {sys.executable}"
        return [local] + [self.local_path(a) for a in command[1:]]

    def environment(self, **overrides: str) -> dict[str, str]:
        """This machine's environment without the app's own variables, then the image's ENV, then the
        service's `environment` (container paths mapped), then `overrides`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(APP_PREFIXES)}
        env.update(dockerfile_env(self.dockerfile))
        declared = self.spec.get("environment", {})
        assert isinstance(declared, dict), f"{self.name}: write `environment` as a mapping"
        env.update({k: self.local_path(str(v)) for k, v in declared.items()})
        env.update(overrides)
        return env
