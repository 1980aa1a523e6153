"""The server process: `serve(settings)` runs uvicorn over the app (service.api) and the typer command
`python -m service` (service.__main__) that calls it with flags and FILL_* variables from `Settings`.

Start-up failures have one behaviour: the process prints `error: <message>` and exits with code 2,
whether the failure is found before the server starts (a wrong path, a bad manifest, an unreadable keys
file) or while the model and index load in the background (a damaged file, a wrong model). SIGTERM
drains: the listener closes, requests in flight finish (up to FILL_REQUEST_TIMEOUT + 5 s more), then
the process ends by the signal (uvicorn re-raises it: exit status 143); a document change in flight (POST
/admin/documents) stops before its commit at once and gets a JSON 503 with Retry-After (nothing changed).
SIGHUP reloads the index directory without failing a request."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import typer
import uvicorn

from common.cli import model_command
from common.errors import AppError
from common.process import limit_arenas, raise_open_files_limit, single_thread_blas
from indexer.manifest import Manifest
from service.api import create_app
from service.config import ENV_PREFIX, Settings
from service.observe import configure_logging
from service.state import ServiceState, ray_backend
from service.wire import http_protocol

app = typer.Typer(add_completion=False)
logger = logging.getLogger("service")


def serve(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    limit_arenas(settings.malloc_arenas)  # before the engine's threads start
    single_thread_blas()
    before, after = raise_open_files_limit()
    if after != before:
        logger.info("open files limit raised from %d to %d (the hard limit)", before, after)
    Manifest.load(settings.index_dir())  # fail fast on a wrong path; the heavy load happens in the background
    if settings.backend == "ray":
        connect_ray(settings)
    fatal: list[str] = []
    server: uvicorn.Server | None = None

    def on_fatal(message: str) -> None:
        fatal.append(message)
        if server is not None:
            server.should_exit = True

    state = ServiceState(settings, on_fatal=on_fatal)
    config = uvicorn.Config(
        create_app(settings, state, load=True),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
        http=http_protocol(settings),
        timeout_graceful_shutdown=settings.request_timeout + 5,  # type: ignore[arg-type]  # seconds; a float works
    )
    server = DrainingServer(config, state)

    def on_hangup(*_: object) -> None:  # reload off the signal handler, which must return at once
        threading.Thread(target=_reload, args=(state,), name="reload", daemon=True).start()

    signal.signal(signal.SIGHUP, on_hangup)
    server.run()
    if fatal:
        raise AppError(fatal[0])


class DrainingServer(uvicorn.Server):
    """uvicorn's server that tells the service state when a signal starts the drain (ServiceState.drain)."""

    def __init__(self, config: uvicorn.Config, state: ServiceState) -> None:
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.state.documents.drain()
        super().handle_exit(sig, frame)


def connect_ray(settings: Settings) -> None:
    """Join (or start) the Ray cluster from the main thread: a Ray started here lives as long as the thread that
    started it (its processes get the parent-death signal when that thread ends), so not from the loading thread."""
    ray_backend().connect(settings)


def _reload(state: ServiceState) -> None:
    try:
        logger.info("SIGHUP: reloading %s", state.settings.index_dir().name)
        state.reload_or_report()
    except AppError:
        pass  # logged by reload_or_report; the previous index keeps serving


model_command(app, Settings, serve, name="serve", env_prefix=ENV_PREFIX)
