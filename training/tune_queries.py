"""`encoder tune-queries`: the query side tuned against a frozen index (DensePhrases' query-side fine-tuning in NPM's
terms, ../shared/DESIGN.md 11).

A copy of the model that serves the index's queries is trained; the index and its corpus encoder never change (its
files are only read). A step lays out a batch of queries as a fill does (each mask as MASK_s MASK_e), encodes them
with gradients, searches the index with the start and the end vectors (training.tune_targets: the top k, exact
scores, the query's own block left out, plus occurrences of the answer the search missed) and maximises, for the
start and the end separately, the marginal likelihood of the tokens where an occurrence of an answer starts / ends
(training.loss.per_query_nce). Queries: made from the index's own documents, or a file (training.tune_data).

A run lives in its directory (`TuneConfig.run_dir`): a checkpoint every `save_minutes` (model, optimiser, place in
the queries, minutes trained), metrics.jsonl (a line per logged step and per checkpoint, with the held-out figures),
the best model by the held-out figures (`query_model/`, fp16, with its card), which `pair` installs as the index's
query model (encoder.query_model). The same command with --resume goes on from the last checkpoint.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.errors import AppError
from common.files import write_json_atomic
from encoder.model import Encoder, pad_sequences, padded_width
from encoder.query_model import QueryModelCard, resolve_query_model
from indexer.phrase_index import PhraseIndex
from training.checkpoints import latest_checkpoint, read_state, write_checkpoint
from training.loss import per_query_nce
from training.tune_config import TuneConfig
from training.tune_data import Shape, TuneQuery, file_queries, is_dev, self_supervised
from training.tune_model import export_query_model, install, starting_model
from training.tune_targets import Asked, SideTargets, side_targets

logger = logging.getLogger(__name__)

LOG_EVERY = 20  # steps between log lines
EVAL_BATCH = 64


class Tuner:
    """One run of tune-queries (`TuneConfig`): set up, then `run`."""

    def __init__(self, cfg: TuneConfig) -> None:
        self.cfg = cfg
        self.dir = cfg.run_dir()
        self.index = PhraseIndex(cfg.index)
        init = starting_model(cfg, self.index.manifest, resolve_query_model)
        self.encoder = Encoder(init, device=cfg.device, engine="torch")
        self.model = self.encoder.model.train()
        if cfg.freeze_embeddings:
            for p in getattr(self.model, "embeddings", self.model).parameters():
                p.requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
        self.train, self.dev = self._queries()
        self.state: dict[str, Any] = {
            "step": 0,
            "seen": 0,
            "seconds": 0.0,
            "epoch": 0,
            "at": 0,
            "best": None,
            "init": str(init),
        }
        self.order = self._order(0)
        self.state["norms"] = self.starting_norms()  # (a resumed run reads its own from its checkpoint)

    def _queries(self) -> tuple[Asked, Asked]:
        cfg = self.cfg
        if cfg.queries is not None:
            pairs = file_queries(cfg.queries, self.encoder.phrase_ids)
            train = [q for q in pairs if not is_dev(q.text)]
            dev = [q for q in pairs if is_dev(q.text)][: cfg.dev_queries]
        else:
            shape = Shape(
                max_query_tokens=cfg.max_query_tokens,
                word_share=cfg.word_share,
                drop=cfg.drop_words,
                own_block=cfg.own_block,
            )
            train = self_supervised(self.index, cfg.self_queries, cfg.seed, False, shape)
            dev = self_supervised(self.index, cfg.dev_queries, cfg.seed + 1, True, shape)
        sample = cfg.queries is not None  # a file's answers are kept however common (some of their places)
        asked = (
            Asked(self.index, train, cfg.max_occurrences, sample, cfg.seed),
            Asked(self.index, dev, cfg.max_occurrences, sample, cfg.seed),
        )
        logger.info("queries: %d to train on, %d held out (of %d / %d made)", *map(len, asked), len(train), len(dev))
        if not len(asked[0]):
            raise AppError(
                f"no training query of {cfg.queries or 'the index ' + str(cfg.index)} has an answer that the index "
                "holds (outside the query's own block with --no-own-block); pass --queries with answers it holds"
            )
        return asked

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.train)))
        random.Random(self.cfg.seed * 1000 + epoch).shuffle(order)
        return order

    def resume(self) -> bool:
        """Go on from the run's last checkpoint; False when it has none."""
        last = latest_checkpoint(self.dir)
        if last is None:
            return False
        state = read_state(last)
        with torch.no_grad():
            from safetensors.torch import load_file

            self.model.load_state_dict(load_file(str(last / "model.safetensors")))
        self.optimizer.load_state_dict(state["optimizer"])
        self.state = state["run"]
        self.order = self._order(self.state["epoch"])
        logger.info(
            "resumed %s at step %d (%.1f min trained)", last.name, self.state["step"], self.state["seconds"] / 60
        )
        return True

    def vectors(self, batch: list[TuneQuery]) -> tuple[torch.Tensor, torch.Tensor]:
        """The start and end query vectors of a batch, laid out as a fill lays them out (the first mask of each)."""
        layouts = [self.encoder.query_layout(q.text) for q in batch]
        width = padded_width(max(len(ids) for ids, _ in layouts), self.encoder.max_length)
        seqs = [i for i, _ in layouts]
        ids, attention, types = pad_sequences(seqs, [[0] * len(i) for i in seqs], self.encoder.pad_id, width)
        hidden = self.encoder.hidden_states(*(torch.from_numpy(a) for a in (ids, attention, types))).float()
        at = torch.tensor([p[0] for _, p in layouts])
        rows = torch.arange(len(batch))
        return hidden[rows, at], hidden[rows, at + 1]

    def targets(self, asked: Asked, rows: list[int], q_s: torch.Tensor, q_e: torch.Tensor) -> list[SideTargets]:
        excluded = [asked.queries[i].block for i in rows]
        return [
            side_targets(
                self.index, q.detach().numpy(), [keys[i] for i in rows], excluded, self.cfg.k, self.cfg.extra_positives
            )
            for q, keys in ((q_s, asked.starts), (q_e, asked.ends))
        ]

    def loss(self, q: torch.Tensor, t: SideTargets, side: int) -> torch.Tensor:
        """The side's marginal likelihood loss of the queries' directions at the starting model's mean norm, plus
        `norm_weight` times the squared relative change of their norms. On the raw vectors the loss fell fastest by
        shrinking them (a flatter softmax over candidates that mostly outscore the positives): norms 13.6 -> 0.8 in
        164 steps on the T-REx dev index, the held-out best token right 6.1% -> 1.5%."""
        norm = float(self.state["norms"][side])
        length = q.norm(dim=1, keepdim=True).clamp_min(1e-6)
        nce = per_query_nce(
            q / length * norm,
            torch.from_numpy(t.vectors),
            torch.from_numpy(t.positive),
            torch.from_numpy(t.allowed),
            self.index.scale,
        )
        return nce + self.cfg.norm_weight * ((length.squeeze(1) / norm - 1.0) ** 2).mean()

    @torch.no_grad()
    def starting_norms(self) -> list[float]:
        """The mean norm of the start and of the end query vectors of the starting model (up to 256 training
        queries)."""
        batch = [self.train.queries[i] for i in range(min(256, len(self.train)))]
        self.model.eval()
        try:
            q_s, q_e = self.vectors(batch)
        finally:
            self.model.train()
        return [float(q_s.norm(dim=1).mean()), float(q_e.norm(dim=1).mean())]

    def step(self) -> dict[str, float]:
        """One optimiser step on the next batch of the training queries."""
        cfg, s = self.cfg, self.state
        if s["at"] >= len(self.order):
            s["epoch"], s["at"] = s["epoch"] + 1, 0
            self.order = self._order(s["epoch"])
        rows = self.order[s["at"] : s["at"] + cfg.batch_size]
        s["at"] += len(rows)
        q_s, q_e = self.vectors([self.train.queries[i] for i in rows])
        start, end = self.targets(self.train, rows, q_s, q_e)
        l_s, l_e = self.loss(q_s, start, 0), self.loss(q_e, end, 1)
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr()
        self.optimizer.zero_grad(set_to_none=True)
        (l_s + l_e).backward()
        torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], cfg.clip)
        self.optimizer.step()
        s["step"] += 1
        s["seen"] += len(rows)
        return {
            "loss": float((l_s + l_e).detach()),
            "start_top1": float(start.top_is_positive.mean()),
            "end_top1": float(end.top_is_positive.mean()),
            "found": float((start.found > 0).mean()),
        }

    def lr(self) -> float:
        """Linear warm-up, then a linear decay to a tenth over the run's budget (minutes, else steps)."""
        cfg, s = self.cfg, self.state
        warm = min(1.0, (s["step"] + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        done = self.done_fraction()
        return cfg.lr * warm * (1.0 - 0.9 * done)

    def done_fraction(self) -> float:
        cfg, s = self.cfg, self.state
        parts = []
        if cfg.minutes is not None:
            parts.append(s["seconds"] / (cfg.minutes * 60))
        if cfg.steps is not None:
            parts.append(s["step"] / cfg.steps)
        return min(1.0, max(parts)) if parts else 0.0

    @torch.no_grad()
    def evaluate(self, asked: Asked) -> dict[str, float]:
        """Held-out figures: the loss, and how often the search's best start / end token is a positive."""
        self.model.eval()
        sums = {"loss": 0.0, "start_top1": 0.0, "end_top1": 0.0, "both_top1": 0.0}
        try:
            for a in range(0, len(asked), EVAL_BATCH):
                rows = list(range(a, min(len(asked), a + EVAL_BATCH)))
                q_s, q_e = self.vectors([asked.queries[i] for i in rows])
                start, end = self.targets(asked, rows, q_s, q_e)
                sums["loss"] += float(self.loss(q_s, start, 0) + self.loss(q_e, end, 1)) * len(rows)
                sums["start_top1"] += float(start.top_is_positive.sum())
                sums["end_top1"] += float(end.top_is_positive.sum())
                sums["both_top1"] += float((start.top_is_positive & end.top_is_positive).sum())
        finally:
            self.model.train()
        return {name: round(v / max(1, len(asked)), 4) for name, v in sums.items()}

    def checkpoint(self) -> dict[str, float]:
        """A checkpoint, the held-out figures, and the best model exported when they are the best so far."""
        dev = self.keep_best()
        state = {"optimizer": self.optimizer.state_dict(), "run": self.state}
        write_checkpoint(
            self.dir,
            self.state["step"],
            self.model,
            self.encoder.tokenizer,
            self.cfg.model_dump_json(),
            state,
            self.cfg.keep,
        )
        return dev

    def keep_best(self) -> dict[str, float]:
        """The held-out figures now; the model exported as the run's query model when they are the best so far
        (more queries whose best start and best end are both right, then the lower loss; the first always, and
        every one of a run without held-out queries)."""
        dev = self.evaluate(self.dev) if len(self.dev) else {}
        best = self.state["best"]

        def rank(d: dict) -> tuple[float, float]:
            return (d.get("both_top1", 0.0), -d.get("loss", 0.0))

        if best is None or not dev or rank(dev) > rank(best):  # no held-out queries: the latest
            self.state["best"] = dict(dev, step=self.state["step"])
            export_query_model(self.model, self.encoder.tokenizer, self.card(), self.dir / "query_model")
        return dev

    def card(self) -> QueryModelCard:
        """The card of the model as it is now."""
        manifest, state, cfg = self.index.manifest, self.state, self.cfg
        return QueryModelCard(
            corpus_fingerprint=manifest.model.fingerprint,
            corpus_model=Path(manifest.model.path).name,
            base=Path(state["init"]).name,
            index=cfg.index.name,
            objective=f"queries file {cfg.queries.name}" if cfg.queries else "self-supervised",
            steps=state["step"],
            queries_seen=state["seen"],
            minutes=round(state["seconds"] / 60, 2),
            dev={k: float(v) for k, v in (state["best"] or {}).items()},
        )

    def finished(self) -> bool:
        return self.done_fraction() >= 1.0

    def run(self) -> Path:
        """Train until the budget is spent, checkpointing on the way; the best model's directory."""
        from tqdm import tqdm

        cfg, s = self.cfg, self.state
        metrics = self.dir / "metrics.jsonl"
        if s["best"] is None:  # the starting model's figures, and the model to beat
            self._log(metrics, {"step": s["step"], "dev": self.keep_best()})
        last_save, saved, dev = time.monotonic(), -1, {}
        bar = tqdm(total=1000, unit="‰", desc="tune-queries", initial=int(self.done_fraction() * 1000))
        figures: list[dict[str, float]] = []
        while not self.finished():
            t = time.perf_counter()
            figures.append(self.step())
            s["seconds"] += time.perf_counter() - t
            rate = s["seen"] / max(s["seconds"], 1e-9)
            bar.update(int(self.done_fraction() * 1000) - bar.n)
            bar.set_postfix(queries_s=f"{rate:.1f}", loss=f"{figures[-1]['loss']:.3f}")
            if s["step"] % LOG_EVERY == 0:
                self._log(metrics, self._summary(figures, rate))
                figures = []
            if time.monotonic() - last_save >= cfg.save_minutes * 60:
                dev = self.checkpoint()
                self._log(metrics, {"step": s["step"], "dev": dev})
                last_save, saved = time.monotonic(), s["step"]
        bar.close()
        if saved != s["step"]:  # (not twice at one step)
            dev = self.checkpoint()
        self._log(metrics, {"step": s["step"], "dev": dev, "final": True})
        return self.dir / "query_model"

    def _summary(self, figures: list[dict[str, float]], rate: float) -> dict:
        mean = {k: round(float(np.mean([f[k] for f in figures])), 4) for k in figures[0]}
        left = (1 - self.done_fraction()) * (self.cfg.minutes or 0)
        return dict(
            step=self.state["step"], **mean, queries_s=round(rate, 2), lr=self.lr(), minutes_left=round(left, 1)
        )

    def _log(self, path: Path, line: dict) -> None:
        logger.info("%s", json.dumps(line))
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def tune_queries(cfg: TuneConfig) -> Path:
    """Run (or resume) tune-queries; the tuned model's directory (paired with the index unless `pair` is off)."""
    tuner = Tuner(cfg)
    tuner.dir.mkdir(parents=True, exist_ok=True)
    if cfg.resume:
        tuner.resume()
    elif latest_checkpoint(tuner.dir) is not None:
        raise AppError(f"{tuner.dir} holds a tune-queries run; pass --resume to go on with it, or another --out")
    write_json_atomic(tuner.dir / "config.json", json.loads(cfg.model_dump_json()))
    best = tuner.run()
    if cfg.pair:
        install(best, cfg.index)
    tuner.index.close()
    return best
