"""The model side of tune-queries: which model a run starts from, the tuned model written as a query model
(fp16 safetensors, tokenizer, card: encoder.query_model), and its pairing with the index."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Callable

from common.errors import AppError
from common.files import atomic_path
from encoder.model_files import model_fingerprint
from encoder.query_model import CARD, INDEX_QUERY_MODEL, QueryModelCard, read_card
from indexer.manifest import Manifest
from training.tune_config import TuneConfig


def starting_model(cfg: TuneConfig, manifest: Manifest, resolve: Callable[..., Path | None]) -> Path:
    """`--init`, else the model serving the index's queries now (`resolve`: encoder.query_model's rule), else its
    corpus encoder. The model must be the index's corpus encoder or a query model made for it."""
    corpus = Path(manifest.model.path)
    if cfg.init is None:
        found = resolve(cfg.index, manifest.model.fingerprint)
        if found is not None:
            return found
        if not corpus.is_dir():
            raise AppError(
                f"the index {cfg.index} was built with the model at {corpus}, which does not exist here; pass --init "
                "with that model's directory"
            )
        init = corpus
    else:
        init = cfg.init
    card = read_card(init) if init.is_dir() else None
    if card is not None:
        if card.corpus_fingerprint != manifest.model.fingerprint:
            raise AppError(
                f"--init {init} is a query model for the corpus encoder {card.corpus_fingerprint[:12]}, but the index "
                f"was built with {manifest.model.fingerprint[:12]}; start from the index's own encoder"
            )
        return init
    if not (init / "config.json").is_file() or model_fingerprint(init) != manifest.model.fingerprint:
        raise AppError(
            f"--init {init} is neither the encoder the index {cfg.index} was built with (fingerprint "
            f"{manifest.model.fingerprint[:12]}) nor a query model made for it; pass one of those"
        )
    return init


def export_query_model(model, tokenizer, card: QueryModelCard, out: Path) -> Path:
    """A model (torch, being trained) as a query model directory: fp16 weights, tokenizer, card; atomically."""
    half = copy.deepcopy(model).half().eval()
    with atomic_path(out) as tmp:
        half.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / CARD).write_text(card.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return out


def install(model_dir: Path, index_root: Path) -> Path:
    """A copy of the query model at the index's own place for one (IDX/query_model), replacing any there in one
    step: a server opening the index from then on serves its queries with it. No index file is written."""
    target = Path(index_root) / INDEX_QUERY_MODEL
    with atomic_path(target) as tmp:
        shutil.copytree(model_dir, tmp, dirs_exist_ok=True)
    return target
