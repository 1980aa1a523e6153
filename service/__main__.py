"""`python -m service --index DIR [--host H] [--port P] ...`: flags and FILL_* variables from `Settings`."""

from __future__ import annotations

import logging

import typer
import uvicorn

from common.cli import model_command
from indexer.manifest import Manifest
from service.api import create_app
from service.config import ENV_PREFIX, Settings
from service.limits import header_timeout_protocol

app = typer.Typer(add_completion=False)


def serve(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    Manifest.load(settings.index_dir())  # fail fast on a wrong path; the heavy load happens in the background
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level,
                http=header_timeout_protocol(settings.header_timeout))


model_command(app, Settings, serve, name="serve", env_prefix=ENV_PREFIX)


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="python -m service")


if __name__ == "__main__":
    main()
