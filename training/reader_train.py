"""`encoder train-reader`: train the reader (encoder.reader) on examples written by `fill-reader-data`.

An example is one mask of a self-supervised cloze query with the windows the fill engine reads for it
(fill.reading) and where its answer occurs in them (JSON lines):

    {"query_ids": [...], "mask_at": 5, "windows": [[ids], ...], "flags": [[bits], ...], "gold": [[w, i, j], ...]}

`flags` are the index's boundary bits of the window tokens (corpus.tokens: WORD_START, WORD_END); gold
[w, i, j] says window w's tokens i..j (inclusive) are an occurrence of the answer. The loss of a mask is the
multi-positive cross-entropy of its start logits over the window tokens that start a word, the gold spans'
first tokens being the positives, plus the same for the end logits over word ends (Splinter / NPM: the
other windows, around the search's own wrong candidates, are the negatives). With `--null` the reader
learns "none of these" too: the sequence's first position ([CLS]) is a start and an end candidate of every
example, and the only positive of an example with no gold span (fill-reader-data --absent / --unanswered;
without `--null` such examples are skipped). One process; a checkpoint
(model, optimiser, position) every `save_every` steps, from which `--resume` goes on.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, Field

from common.errors import AppError
from common.files import atomic_path, write_json_atomic
from corpus.tokens import WORD_END, WORD_START
from encoder.device import choose_device
from encoder.model_files import default_model_dir
from encoder.reader import ReaderInput, batch_tensors
from encoder.reader_files import ReaderCard, vocab_fingerprint
from encoder.reader_model import load_model, save_reader
from encoder.template import derive_template

logger = logging.getLogger(__name__)

STATE = "reader_state.pt"


class ReaderTrainConfig(BaseModel):
    """One object per job (saved in the reader's card)."""

    examples: list[Path] = Field(description="example files written by fill-reader-data; repeat for several")
    out: Path = Field(description="run directory: checkpoint, metrics.jsonl, and the reader in out/reader")
    init: Path | None = Field(
        None, description="encoder or reader directory to start from (default: the bundled encoder)"
    )
    layers: int | None = Field(None, ge=1, description="keep the first N transformer layers (default: all)")
    epochs: float = Field(1.0, gt=0)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(5e-5, gt=0)
    warmup: float = Field(0.06, ge=0, lt=1, description="fraction of the steps with a rising learning rate")
    weight_decay: float = 0.01
    clip: float = 1.0
    minutes: float | None = Field(None, gt=0, description="stop after this many minutes (time budget)")
    save_every: int = Field(100, ge=1)
    resume: bool = False
    seed: int = 0
    device: str = "auto"
    freeze_embeddings: bool = Field(False, description="keep the word embeddings fixed (those of the init encoder)")
    bucket: int = Field(
        50,
        ge=0,
        description="batches of similar length: sort each run of this many batches by "
        "length, then shuffle the batches (0: plain shuffled batches, padded to the longest)",
    )
    title_tokens: int = Field(
        0,
        ge=0,
        le=64,
        description="read each window after the first N tokens of its "
        "document title (the examples' `titles`; 0: no titles)",
    )
    null: bool = Field(
        False,
        description="train a no-answer option ([CLS] as the fill 'none of these'): "
        "examples without a gold span target it",
    )
    window: int = Field(10, description="the windows' settings the examples were made with (recorded in the card)")
    phrases: int = 8
    max_tokens: int = 160


def read_examples(paths: list[Path], null: bool = False, titles: bool = False) -> list[dict]:
    """Every example of the files, checked for the fields the loss needs (without `null`, those with no
    gold span are skipped, and counted in the log)."""
    out, skipped = [], 0
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise AppError(f"cannot read examples {path}: {exc}; write them with fill-reader-data") from exc
        for n, line in enumerate(lines, 1):
            try:
                ex = json.loads(line)
                if not (isinstance(ex["gold"], list) and ex["windows"] and len(ex["windows"]) == len(ex["flags"])):
                    raise ValueError("no windows, or windows and flags differ in number")
                if titles and len(ex.get("titles") or ()) != len(ex["windows"]):
                    raise ValueError("no title per window (--title-tokens needs examples written with titles)")
            except (ValueError, KeyError, TypeError) as exc:
                raise AppError(f"{path}:{n}: not a reader example ({exc}); write them with fill-reader-data") from exc
            if ex["gold"] or null:
                out.append(ex)
            else:
                skipped += 1
    if skipped:
        logger.warning("%d examples without a gold span skipped (train with --null to use them)", skipped)
    if not out:
        raise AppError(f"no examples in {', '.join(map(str, paths))}")
    return out


def example_length(ex: dict) -> int:
    """An example's tokens in its reader sequence, separators aside (query, windows, titles): what a batch
    pads its rows to."""
    return len(ex["query_ids"]) + sum(len(w) for w in ex["windows"]) + sum(len(t) for t in ex.get("titles") or ())


def targets(
    examples: list[dict], positions: list[np.ndarray], width: int, null: bool = False
) -> tuple[torch.Tensor, ...]:
    """Per row of a batch: (start allowed, start gold, end allowed, end gold) as [rows, width] booleans
    (with `null`, position 0 is allowed in every row and the gold of a row without gold spans)."""
    rows = len(examples)
    out = [torch.zeros((rows, width), dtype=torch.bool) for _ in range(4)]
    if null:
        out[0][:, 0] = out[2][:, 0] = True
    for r, (ex, pos) in enumerate(zip(examples, positions)):
        if null and not ex["gold"]:
            out[1][r, 0] = out[3][r, 0] = True
        flags = np.concatenate([np.asarray(f, dtype=np.int64) for f in ex["flags"]])
        out[0][r, pos[(flags & WORD_START) != 0]] = True
        out[2][r, pos[(flags & WORD_END) != 0]] = True
        base = np.cumsum([0] + [len(w) for w in ex["windows"]])
        for w, i, j in ex["gold"]:
            out[1][r, pos[base[w] + i]] = True
            out[3][r, pos[base[w] + j]] = True
    return tuple(out)


def multi_positive_ce(logits: torch.Tensor, allowed: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean over rows of -log(sum of softmax over `allowed` at `gold`)."""
    neg = torch.finfo(logits.dtype).min
    allowed = allowed | gold
    everything = torch.logsumexp(logits.masked_fill(~allowed, neg), dim=1)
    positive = torch.logsumexp(logits.masked_fill(~gold, neg), dim=1)
    return (everything - positive).mean()


class ReaderTrainer:
    def __init__(self, cfg: ReaderTrainConfig) -> None:
        self.cfg = cfg
        self.examples = read_examples(cfg.examples, cfg.null, cfg.title_tokens > 0)
        self.device = choose_device(cfg.device)
        start = self._start_dir()
        self.model, self.tokenizer = load_model(start)
        transformer: Any = self.model.transformer  # transformers' model: its layers, config, embeddings read by name
        if cfg.layers is not None and start != cfg.out / "checkpoint":  # a checkpoint has its layers already
            layers = transformer.encoder.layer
            transformer.encoder.layer = layers[: cfg.layers]
            transformer.config.num_hidden_layers = min(cfg.layers, len(layers))
        if cfg.freeze_embeddings:
            transformer.get_input_embeddings().weight.requires_grad_(False)
        self.model.to(self.device).train()
        self.template = derive_template(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.steps = max(1, math.ceil(len(self.examples) * cfg.epochs / cfg.batch_size))
        trained = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trained, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm = max(1, int(cfg.warmup * self.steps))
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min((s + 1) / warm, max(0.0, (self.steps - s) / max(1, self.steps - warm)))
        )
        self.step = 0
        if cfg.resume and (cfg.out / "checkpoint" / STATE).is_file():
            state = torch.load(cfg.out / "checkpoint" / STATE, weights_only=True)
            self.optimizer.load_state_dict(state["optimizer"])
            self.schedule.load_state_dict(state["schedule"])
            self.step = int(state["step"])
        self.order = self._order()

    def _start_dir(self) -> Path:
        checkpoint = self.cfg.out / "checkpoint"
        if self.cfg.resume and (checkpoint / STATE).is_file():
            return checkpoint
        return self.cfg.init or default_model_dir()

    def _order(self) -> np.ndarray:
        """The examples' order over all epochs (fixed by the seed, so a resumed run continues it). With
        `bucket`, each run of `bucket` batches is sorted by length and its batches shuffled: a batch pads
        to its longest row, so similar lengths cut the padding (the CPU's cost) without a fixed order."""
        rng = np.random.default_rng(self.cfg.seed)
        size = self.cfg.batch_size
        need = self.steps * size
        rounds = math.ceil(need / len(self.examples))
        order = np.concatenate([rng.permutation(len(self.examples)) for _ in range(rounds)])[:need]
        if self.cfg.bucket <= 1:
            return order
        lengths = np.array([example_length(ex) for ex in self.examples])
        run = size * self.cfg.bucket
        out: list[np.ndarray] = []
        for at in range(0, need, run):
            chunk = order[at : at + run]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches = [chunk[i : i + size] for i in range(0, len(chunk), size)]
            out.extend(batches[i] for i in rng.permutation(len(batches)))
        return np.concatenate(out)

    def loss(self, batch: list[dict]) -> torch.Tensor:
        n = self.cfg.title_tokens
        items = [
            ReaderInput(
                ex["query_ids"],
                int(ex["mask_at"]),
                [np.asarray(w) for w in ex["windows"]],
                [np.asarray(t[:n], dtype=np.int64) for t in ex["titles"]] if n else None,
            )
            for ex in batch
        ]
        tensors, positions = batch_tensors(items, self.template, self.pad_id)
        start, end = self.model(*(torch.from_numpy(t).to(self.device) for t in tensors))
        wanted = targets(batch, positions, start.shape[1], self.cfg.null)
        s_ok, s_gold, e_ok, e_gold = (t.to(self.device) for t in wanted)
        return multi_positive_ce(start, s_ok, s_gold) + multi_positive_ce(end, e_ok, e_gold)

    def run(self) -> Path:
        cfg, started = self.cfg, time.monotonic()
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed + self.step)
        cfg.out.mkdir(parents=True, exist_ok=True)
        with open(cfg.out / "metrics.jsonl", "a", encoding="utf-8") as log:
            loss: torch.Tensor | float  # a batch's loss, then its value
            while self.step < self.steps:
                at = self.step * cfg.batch_size
                loss = self.loss([self.examples[i] for i in self.order[at : at + cfg.batch_size]])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip)
                self.optimizer.step()
                self.schedule.step()
                self.step += 1
                loss = float(loss.detach())
                log.write(
                    json.dumps({"step": self.step, "loss": round(loss, 5), "lr": self.schedule.get_last_lr()[0]}) + "\n"
                )
                if self.step % 10 == 0:
                    log.flush()
                    logger.info("step %d/%d loss %.4f", self.step, self.steps, loss)
                if self.step % cfg.save_every == 0:
                    self.save_checkpoint()
                if cfg.minutes is not None and time.monotonic() - started > cfg.minutes * 60:
                    logger.info("time budget reached at step %d", self.step)
                    break
        return self.export()

    def card(self) -> ReaderCard:
        return ReaderCard(
            vocab=vocab_fingerprint(self.tokenizer),
            window=self.cfg.window,
            phrases=self.cfg.phrases,
            max_tokens=self.cfg.max_tokens,
            null=self.cfg.null,
            title_tokens=self.cfg.title_tokens,
            trained={
                "config": self.cfg.model_dump(mode="json"),
                "steps": self.step,
                "of_steps": self.steps,
                "examples": len(self.examples),
            },
        )

    def save_checkpoint(self) -> None:
        with atomic_path(self.cfg.out / "checkpoint") as tmp:
            self.model.eval()
            save_reader(self.model, self.tokenizer, self.card(), tmp, half=False)
            self.model.train()
            torch.save(
                {"optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(), "step": self.step},
                tmp / STATE,
            )

    def export(self) -> Path:
        """The reader as it is now, in out/reader (fp16), replaced atomically."""
        out = self.cfg.out / "reader"
        with atomic_path(out) as tmp:
            self.model.eval()
            save_reader(self.model, self.tokenizer, self.card(), tmp)
        write_json_atomic(self.cfg.out / "done.json", {"step": self.step, "steps": self.steps})
        return out


def train_reader(cfg: ReaderTrainConfig) -> Path:
    """Train, and return the exported reader directory."""
    return ReaderTrainer(cfg).run()
