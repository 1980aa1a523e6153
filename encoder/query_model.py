"""The query model an index is served with: a copy of its corpus encoder whose query side was tuned against the
frozen index (`encoder tune-queries`). It encodes the queries only; documents (the build, live adds) are always
encoded by the corpus encoder whose fingerprint the index's manifest records.

A query model is a model directory with a card, query_model.json, naming the fingerprint of the corpus encoder it
was tuned for. Which one serves an index (`resolve_query_model`): `--query-model DIR` when given ("off": the corpus
encoder itself); else the index's own, `IDX/query_model/` (what tune-queries pairs with the index it tuned on); else
the bundled default query model when it was tuned for the index's corpus encoder; else the corpus encoder. A query
model made for another corpus encoder is refused, naming both.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from common.errors import AppError

CARD = "query_model.json"
INDEX_QUERY_MODEL = "query_model"  # its place inside an index directory (no index file: gc leaves it)
BUNDLED_QUERY_MODEL = Path(__file__).resolve().parent / "default_query_model"
OFF = "off"


class QueryModelCard(BaseModel):
    """What a query model is: the corpus encoder it serves, and how it was tuned."""

    corpus_fingerprint: str = Field(description="model_fingerprint of the corpus encoder the index was built with")
    corpus_model: str = Field("", description="that encoder's directory name")
    base: str = Field("", description="the model the tuning started from")
    index: str = Field("", description="the index it was tuned against (its directory name)")
    objective: str = Field("", description="where its queries came from: self-supervised, or the queries file")
    steps: int = 0
    queries_seen: int = 0
    minutes: float = 0.0
    dev: dict[str, float] = Field(default_factory=dict, description="the run's held-out figures of its best step")


def read_card(model_dir: Path) -> QueryModelCard | None:
    """A directory's query-model card, None when it has none; an AppError when it cannot be read."""
    path = Path(model_dir) / CARD
    if not path.is_file():
        return None
    try:
        return QueryModelCard.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValidationError) as exc:
        raise AppError(f"query model card {path} cannot be read ({exc}); tune it again with encoder tune-queries")


def resolve_query_model(index_root: Path, corpus_fingerprint: str, requested: str | None = None) -> Path | None:
    """The directory of the query model that serves the index (None: its corpus encoder), as the module says."""
    if requested == OFF:
        return None
    if requested:
        path = Path(requested)
        card = read_card(path) if path.is_dir() else None
        if card is None:
            raise AppError(
                f"query model {path} (--query-model) is not a directory with a {CARD}; pass one written by "
                "encoder tune-queries, or off"
            )
        return _checked(path, card, corpus_fingerprint)
    own = Path(index_root) / INDEX_QUERY_MODEL
    card = read_card(own) if own.is_dir() else None
    if card is not None:
        return _checked(own, card, corpus_fingerprint)
    bundled = read_card(BUNDLED_QUERY_MODEL) if BUNDLED_QUERY_MODEL.is_dir() else None
    if bundled is not None and bundled.corpus_fingerprint == corpus_fingerprint:
        return BUNDLED_QUERY_MODEL
    return None


def _checked(path: Path, card: QueryModelCard, corpus_fingerprint: str) -> Path:
    if card.corpus_fingerprint != corpus_fingerprint:
        raise AppError(
            f"query model {path} was tuned for the corpus encoder {card.corpus_fingerprint[:12]} "
            f"({card.corpus_model or 'unnamed'}), but the index was built with {corpus_fingerprint[:12]}; tune one "
            "for this index with encoder tune-queries, pass --query-model off, or remove it"
        )
    return path
