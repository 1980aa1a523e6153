"""Live document changes of the served index (POST /admin/documents, DELETE /admin/documents/{id}): one change at
a time under the index's writer lock, encoded with the served encoder at the update priority, stopped before its
commit when the server drains or FILL_ADMIN_TIMEOUT passes, and its new generation served without failing a
request (ServiceState.serve_update)."""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable, Protocol

from common.errors import AppError
from indexer.lock import writer_lock
from indexer.update import IndexUpdate, UpdateSummary
from service.config import Settings
from service.metrics import Metrics
from service.serving import Serving


class Served(Protocol):
    """What a change needs of the service's state (service.state.ServiceState)."""

    settings: Settings
    metrics: Metrics

    def using(self) -> AbstractContextManager[Serving]: ...

    def serve_update(self, root: Path) -> None: ...


class DocumentChanges:
    def __init__(self, state: Served) -> None:
        self.state = state
        self._draining = threading.Event()  # set by `drain` (SIGTERM): changes in flight stop uncommitted

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def apply(self, change: Callable[[IndexUpdate], UpdateSummary], what: str, adds: bool = False) -> UpdateSummary:
        """Add or delete documents of the served index's directory (under its writer lock, with the served
        encoder, encoding at the update priority) and serve the new generation: its new files are checked
        (sha256) and opened beside the shards it shares with the current one, then swapped in without failing
        a request. Not with the ray backend (its groups hold the shards): 409 saying how to update instead. A change
        that `adds` shards is refused (503) once the index holds FILL_MAX_DELTA_SHARDS delta shards."""
        settings = self.state.settings
        if settings.backend == "ray":
            raise AppError(
                "documents cannot be changed through a Ray ingress (FILL_BACKEND=ray): its shard groups "
                "hold the shards; run `indexer add` / `indexer delete` on the index, then reload",
                kind="conflict",
            )
        with self.state.using() as serving:
            engine = serving.engine
            root, deltas = engine.index.root, engine.index.manifest.delta_shards
            if adds and deltas >= settings.max_delta_shards:
                raise AppError(
                    f"index {root.name} holds {deltas} delta shards (FILL_MAX_DELTA_SHARDS "
                    f"{settings.max_delta_shards}): compact it first with `indexer compact --index "
                    f"{root.name}` (fills go on meanwhile), then POST /admin/reload",
                    kind="not_ready",
                )
            with writer_lock(root, what):
                summary = change(
                    IndexUpdate(
                        root,
                        encoder=engine.corpus_encoder,
                        opened=engine.index.shards_by_name(),
                        encode_nice=settings.update_nice,
                        check=self._check(time.perf_counter()),
                    )
                )
                self.state.serve_update(root)
        self.state.metrics.updates.labels(what.split()[0]).inc()
        return summary

    def drain(self) -> None:
        """The server is stopping (SIGTERM): document changes in flight stop before their commit (503, nothing
        changed), so the drain does not wait on them."""
        self._draining.set()

    def _check(self, t0: float) -> Callable[[], None]:
        """What a document change calls between its encoding batches: it raises once the server drains, or once
        FILL_ADMIN_TIMEOUT has passed since `t0`."""
        limit = self.state.settings.admin_timeout

        def check() -> None:
            if self._draining.is_set():
                raise AppError(
                    "the server is shutting down: this change was stopped before it was committed and "
                    "nothing changed; send it again once the server is back",
                    kind="not_ready",
                )
            if time.perf_counter() - t0 > limit:
                raise AppError(
                    f"the change took longer than {limit:g} s (FILL_ADMIN_TIMEOUT) and was stopped before "
                    "it was committed: nothing changed; send fewer documents per request, or run `indexer "
                    "add` on the index and then POST /admin/reload",
                    kind="timeout",
                )

        return check
