"""The models an engine opened (its encoder and its reader), shared by the engines that use the very same ones: its
index's next generation (`FillEngine.next_generation`) and a reload of an index built with the same model files
and settings (fill.loading: the served engine's models are reused, neither loaded nor compiled again). The last
engine using a model closes it (its inference thread and compiled model released): before, every reload left the
old encoder's thread, compiled model and cache file open for good (docs/OPERATIONS.md, "Reload and drain")."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Generic, Hashable, Protocol, TypeVar

if TYPE_CHECKING:
    from encoder.model import Encoder
    from encoder.reader import Reader


class Closable(Protocol):
    def close(self) -> None: ...


M = TypeVar("M", bound=Closable)


class Shared(Generic[M]):
    """One loaded model and the key it was loaded by (what another engine must ask for to use it: its directory, the
    fingerprint of its files, its runtime settings), with the count of the engines using it: the last `release`
    closes it."""

    def __init__(self, model: M | None, key: Hashable, load: Callable[[], M] | None = None) -> None:
        """`model`, or None and `load`: the model is loaded at its first use (the corpus encoder beside a query
        model: only an update of the index needs it)."""
        self._model, self.key, self._load = model, key, load
        self._users = 1
        self._lock = threading.Lock()

    @property
    def model(self) -> M:
        """The model (loaded now if it was not yet)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    assert self._load is not None, "a shared model needs a model or a way to load one"
                    self._model = self._load()
        return self._model

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def users(self) -> int:
        return self._users

    def share(self, key: Hashable | None = None) -> Shared[M] | None:
        """This model for one more engine (None when it is closed already, or loaded by another `key`)."""
        with self._lock:
            if self._users == 0 or (key is not None and key != self.key):
                return None
            self._users += 1
            return self

    def release(self) -> None:
        """One engine less; the last closes the model."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            last = self._users == 0
        if last and self._model is not None:
            self._model.close()


class Models:
    """An engine's shared encoder (of its queries), reader (None: it reads with none) and corpus encoder (None: the
    query encoder is the corpus encoder; else the one documents are encoded with, loaded at its first use),
    released once by its close."""

    def __init__(
        self, encoder: Shared[Encoder], reader: Shared[Reader] | None = None, corpus: Shared[Encoder] | None = None
    ) -> None:
        self.encoder, self.reader, self.corpus = encoder, reader, corpus
        self._released = False

    def share(self) -> Models:
        """The same models for another engine (FillEngine.next_generation); RuntimeError once they are closed."""
        encoder = self.encoder.share()
        reader = self.reader.share() if self.reader is not None else None
        corpus = self.corpus.share() if self.corpus is not None else None
        closed = (self.reader is not None and reader is None) or (self.corpus is not None and corpus is None)
        if encoder is None or closed:
            for got in (encoder, reader, corpus):
                if got is not None:
                    got.release()
            raise RuntimeError("the engine's models are closed")
        return Models(encoder, reader, corpus)

    def release(self) -> None:
        """This engine's use of its models ended (a second call does nothing)."""
        if self._released:
            return
        self._released = True
        for m in (self.encoder, self.reader, self.corpus):
            if m is not None:
                m.release()
