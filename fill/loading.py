"""Opening an engine's parts (the encoder and the index it was built with, the fitted scoring) and
describing them (GET /info)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.errors import AppError
from encoder.model import Encoder
from encoder.model_files import model_fingerprint
from encoder.reader import BUNDLED_READER, Reader
from encoder.reader_files import CARD_NAME, vocab_fingerprint
from fill.config import EngineConfig
from fill.schemas import MODES
from fill.scoring import SCORING_NAME, Scoring
from indexer.manifest import Manifest
from indexer.phrase_index import PhraseIndex

logger = logging.getLogger(__name__)


def open_parts(
    config: EngineConfig, scoring: Scoring | None = None, dense: bool = True
) -> tuple[Encoder, PhraseIndex, Scoring]:
    """The encoder, the index (`dense` false: its shards' text side only, for an engine whose shard groups search
    elsewhere: service.ray_backend) and the scoring of an engine.
    The model defaults to the one the manifest names and must have the fingerprint the index was built with;
    `scoring` replaces the fitted scoring of `config.scoring` or of scoring.json beside the model."""
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

    def load_encoder() -> Encoder:
        fingerprint = model_fingerprint(model_dir)
        if fingerprint != manifest.model.fingerprint:
            raise AppError(
                f"model {model_dir} differs from the model the index {root} was built with "
                f"(fingerprint {manifest.model.fingerprint[:12]}); pass the right --model or rebuild"
            )
        encoder = Encoder(model_dir, device=config.device, dtype=config.dtype, engine=config.engine, lean=True)
        encoder.fingerprint = fingerprint  # checked: neither the ONNX export nor an update need hash it again
        return encoder.for_inference()

    # the encoder loads (mostly Python imports) while the index opens (mostly file mapping, GIL released)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="load-encoder") as pool:
        loading = pool.submit(load_encoder)
        index = PhraseIndex(
            root,
            verify=config.verify,
            nprobe=config.nprobe,
            ef_search=config.ef_search,
            refine=config.refine,
            dense=dense,
        )
        try:
            encoder = loading.result()
        except BaseException:
            index.close()
            raise
    if scoring is None:
        scoring = Scoring.beside(model_dir, config.scoring)
        if not scoring.lexical_weight:
            logger.warning(
                "no fitted scoring for model %s (no %s there, no --scoring): lexical weight 0, so "
                "hybrid fills as dense does, and confidence is the uncalibrated score; see fill-fit",
                model_dir.name,
                SCORING_NAME,
            )
    return encoder, index, scoring


def open_reader(config: EngineConfig, encoder: Encoder) -> Reader | None:
    """The reader of `config.reader_dir` (default: the bundled one, when present), on the encoder's device;
    None with `use_reader` false or no reader to load. Refused when it reads another vocabulary."""
    if not config.use_reader:
        return None
    path = Path(config.reader_dir) if config.reader_dir else BUNDLED_READER
    if config.reader_dir is None and not (path / CARD_NAME).is_file():
        return None
    if not path.is_dir():
        raise AppError(f"reader directory {path} (--reader-dir) does not exist")
    # Built on the encoder's inference thread, where all its passes run: torch ops run from another thread (the
    # heads' initialisation) start a second OpenMP team, and two teams on two cores slowed the encoder's pass
    # ~2x in a process whose threads spin-wait (docs/history/BENCHMARKS.md, "One OpenMP team").
    reader: Reader = encoder.on_thread(Reader, path, encoder.device, config.dtype, config.engine)
    if reader.card.vocab != vocab_fingerprint(encoder.tokenizer):
        raise AppError(
            f"reader {path} was trained on another vocabulary than the encoder {encoder.model_dir.name} "
            "(it reads the index's token ids); pass a reader made for this encoder with --reader-dir, "
            "or --no-use-reader"
        )
    return reader


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
        "model": {
            "name": encoder.model_dir.name,
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
