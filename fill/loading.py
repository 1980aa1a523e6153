"""Opening an engine's parts (the encoder and the index it was built with, the fitted scoring, the reader) and
describing them (GET /info). An engine's encoder and reader are shared (fill.models): a reload uses the served
engine's again where they come from the same files with the same settings."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.errors import AppError
from encoder.model import Encoder
from encoder.model_files import model_fingerprint
from encoder.query_model import read_card, resolve_query_model
from encoder.reader import BUNDLED_READER, Reader
from encoder.reader_files import CARD_NAME, vocab_fingerprint
from fill.config import EngineConfig
from fill.models import Models, Shared
from fill.schemas import MODES
from fill.scoring import SCORING_NAME, Scoring
from indexer.manifest import Manifest
from indexer.phrase_index import PhraseIndex

logger = logging.getLogger(__name__)


def open_parts(
    config: EngineConfig, scoring: Scoring | None = None, dense: bool = True
) -> tuple[Encoder, PhraseIndex, Scoring]:
    """`open_shared_parts`, the query encoder as a model of its own (its caller's to keep)."""
    models, index, scoring = open_shared_parts(config, scoring, dense)
    return models.encoder.model, index, scoring


def open_reader(config: EngineConfig, encoder: Encoder) -> Reader | None:
    """`shared_reader`, as a model of its own (its caller's to keep)."""
    shared = shared_reader(config, encoder)
    return shared.model if shared is not None else None


def open_shared_parts(
    config: EngineConfig, scoring: Scoring | None = None, dense: bool = True, reuse: Models | None = None
) -> tuple[Models, PhraseIndex, Scoring]:
    """The encoders (`Models` without a reader yet), the index (`dense` false: its shards' text side only, for an
    engine whose shard groups search elsewhere: service.ray_backend) and the scoring of an engine.
    The corpus encoder defaults to the one the manifest names and must have the fingerprint the index was built
    with; the queries are encoded by the query model that serves the index (encoder.query_model), when there is one,
    and the corpus encoder is then loaded only when an update needs it. A model of `reuse` (a served engine's) is
    used again when it was loaded from the same files with the same settings. `scoring` replaces the fitted scoring
    of `config.scoring` or of scoring.json beside the query model (else beside the corpus encoder)."""
    root = config.index_dir()
    manifest = Manifest.load(root)
    model_dir = Path(config.model) if config.model else Path(manifest.model.path)
    if not model_dir.is_dir():
        if config.model:
            raise AppError(f"model directory {model_dir} (--model) does not exist")
        raise AppError(
            f"the index was built with the model at {model_dir}, which does not exist here; pass "
            "--model with that model's directory"
        )
    query_dir = resolve_query_model(root, manifest.model.fingerprint, config.query_model)
    # the encoder loads (mostly Python imports) while the index opens (mostly file mapping, GIL released)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="load-encoder") as pool:
        loading = pool.submit(load_encoders, config, model_dir, query_dir, manifest, reuse)
        try:
            index = PhraseIndex(
                root,
                verify=config.verify,
                nprobe=config.nprobe,
                ef_search=config.ef_search,
                refine=config.refine,
                dense=dense,
            )
        except BaseException:
            if loading.exception() is None:  # (waits for it)
                loading.result().release()
            raise
        try:
            models = loading.result()
        except BaseException:
            index.close()
            raise
    if scoring is None:
        beside = query_dir if query_dir is not None and (query_dir / SCORING_NAME).is_file() else model_dir
        scoring = Scoring.beside(beside, config.scoring)
        if not scoring.lexical_weight:
            logger.warning(
                "no fitted scoring for model %s (no %s there, no --scoring): lexical weight 0, so "
                "hybrid fills as dense does, and confidence is the uncalibrated score; see fill-fit",
                beside.name,
                SCORING_NAME,
            )
    return models, index, scoring


def load_encoders(
    config: EngineConfig, model_dir: Path, query_dir: Path | None, manifest: Manifest, reuse: Models | None
) -> Models:
    """The query encoder ready to serve (the corpus encoder when `query_dir` is None) and, beside a query model, the
    corpus encoder to load at its first use; the corpus encoder refused when its fingerprint is not the index's.
    Each is `reuse`'s when loaded from the same files with the same settings."""
    fingerprint = model_fingerprint(model_dir)
    if fingerprint != manifest.model.fingerprint:
        raise AppError(
            f"model {model_dir} differs from the model the index {config.index_dir()} was built with "
            f"(fingerprint {manifest.model.fingerprint[:12]}); pass the right --model or rebuild"
        )
    served_corpus = None if reuse is None else reuse.corpus if reuse.corpus is not None else reuse.encoder
    corpus = _encoder(config, model_dir, fingerprint, served_corpus, query_dir)
    if query_dir is None:
        return Models(corpus)
    query = _encoder(config, query_dir, model_fingerprint(query_dir), reuse.encoder if reuse else None)
    return Models(query, corpus=corpus)


def _encoder(
    config: EngineConfig, model_dir: Path, fingerprint: str, reuse: Shared[Encoder] | None, lazy: Path | None = None
) -> Shared[Encoder]:
    """The encoder of a directory with that fingerprint, `reuse` when it is that one with the same settings, else
    loaded now (with `lazy`: at its first use)."""
    key = ("encoder", str(model_dir.resolve()), fingerprint, config.device, config.dtype, config.engine)
    shared = reuse.share(key) if reuse is not None else None
    if shared is not None:
        logger.info("encoder %s: the one served already (the same files and settings)", model_dir.name)
        return shared

    def load() -> Encoder:
        encoder = Encoder(model_dir, device=config.device, dtype=config.dtype, engine=config.engine, lean=True)
        encoder.fingerprint = fingerprint  # checked: neither the ONNX export nor an update need hash it again
        return encoder.for_inference()

    if lazy is not None:
        return Shared(None, key, load)
    return Shared(load(), key)


def shared_reader(config: EngineConfig, encoder: Encoder, reuse: Models | None = None) -> Shared[Reader] | None:
    """The reader of `config.reader_dir` (default: the bundled one, when present), on the encoder's device (the one
    of `reuse` when loaded from the same files with the same settings); None with `use_reader` false or no reader to
    load. Refused when it reads another vocabulary."""
    if not config.use_reader:
        return None
    path = Path(config.reader_dir) if config.reader_dir else BUNDLED_READER
    if config.reader_dir is None and not (path / CARD_NAME).is_file():
        return None
    if not path.is_dir():
        raise AppError(f"reader directory {path} (--reader-dir) does not exist")
    fingerprint = model_fingerprint(path)
    card = (path / CARD_NAME).read_bytes() if (path / CARD_NAME).is_file() else b""
    key = ("reader", str(path.resolve()), fingerprint, card, str(encoder.device), config.dtype, config.engine)
    shared = reuse.reader.share(key) if reuse is not None and reuse.reader is not None else None
    if shared is None:
        # Built on the encoder's inference thread, where all its passes run: torch ops run from another thread (the
        # heads' initialisation) start a second OpenMP team, and two teams on two cores slowed the encoder's pass
        # ~2x in a process whose threads spin-wait (docs/history/BENCHMARKS.md, "One OpenMP team").
        made = encoder.on_thread(Reader, path, encoder.device, config.dtype, config.engine, fingerprint)
        shared = Shared(made, key)
    if shared.model.card.vocab != vocab_fingerprint(encoder.tokenizer):
        shared.release()
        raise AppError(
            f"reader {path} was trained on another vocabulary than the encoder {encoder.model_dir.name} "
            "(it reads the index's token ids); pass a reader made for this encoder with --reader-dir, "
            "or --no-use-reader"
        )
    return shared


def describe_served(
    index: PhraseIndex, encoder: Encoder, scoring: Scoring, default_mode: str, reader: Reader | None = None
) -> dict[str, Any]:
    """What is being served: the index, the model and how it runs, the build settings (names, not the
    server's absolute paths)."""
    m = index.manifest
    build = m.build.model_dump(mode="json")
    return {
        "index": index.root.name,
        "created_at": m.created_at,
        "generation": m.generation,
        "updated_at": m.updated_at,
        "query_model": _query_card(encoder),
        "model": {
            "name": Path(m.model.path).name,
            "fingerprint": m.model.fingerprint,
            "type": m.model.model_type,
            "device": str(encoder.device),
            "dtype": str(encoder.dtype).replace("torch.", ""),
        },
        "dim": m.dim,
        "index_type": m.index_type,
        "factories": sorted({s.factory for s in m.shards}),
        "vector_dtype": m.vector_dtype,
        "counts": m.counts.model_dump(),
        "build": {k: Path(v).name if isinstance(v, str) and Path(v).is_absolute() else v for k, v in build.items()},
        "default_mode": default_mode,
        "scoring": {
            "lexical_weight": {mode: scoring.weight(mode) for mode in MODES},
            "calibrated": {mode: mode in scoring.confidence for mode in MODES},
            "fitted": scoring.fitted,
        },
        "reader": {
            "on": reader is not None,
            "name": reader.name if reader is not None else None,
            "weight": {mode: scoring.reader_weight_of(mode) for mode in MODES},
            "calibrated": {mode: mode in scoring.reader_confidence for mode in MODES},
            "card": reader.card.model_dump(exclude={"trained"}) if reader is not None else None,
        },
    }


def _query_card(encoder: Encoder) -> dict[str, Any] | None:
    """The query model that encodes the queries (its name and card), None when it is the corpus encoder."""
    card = read_card(encoder.model_dir)
    return None if card is None else {"name": encoder.model_dir.name, **card.model_dump()}
