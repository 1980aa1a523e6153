"""`encoder train`: train an encoder with the NPM objective (single process or `torchrun`).

torchrun --nproc_per_node 2 -m training train --corpus a.jsonl --out runs/x   (gloo on CPU, nccl on GPU)
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from common.distributed import join
from common.errors import AppError
from encoder.device import choose_device, distributed_backend, grad_scaler, torch_runtime
from encoder.model import Encoder
from encoder.model_files import base_model_dir
from training.checkpoints import checkpoint_dir, latest_checkpoint, read_state, write_checkpoint
from training.data import Batch, TrainBlock, content_token_mask, load_blocks, make_batch, read_word_list
from training.grouping import similar_order
from training.loss import npm_loss
from training.query_pairs import PairBatches, load_pairs, match_pairs
from training.train_config import TrainConfig
from training.train_setup import batch_config, lr_lambda, param_groups

logger = logging.getLogger(__name__)


def _group_order(n_groups: int, epoch: int, cfg: TrainConfig, lengths: np.ndarray) -> np.ndarray:
    order = np.random.default_rng([cfg.seed, epoch]).permutation(n_groups)
    if cfg.group_by_length:  # sort inside windows of 64 groups: less padding, still shuffled
        for a in range(0, n_groups, 64):
            window = order[a : a + 64]
            order[a : a + 64] = window[np.argsort(lengths[window], kind="stable")]
    return order


class Trainer:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        place = join(distributed_backend())
        self.rank, self.world, local = place.rank, place.world, place.local_rank
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        device = choose_device(cfg.device, local)
        resume_dir = latest_checkpoint(self.cfg.out) if cfg.resume else None
        self.encoder = Encoder(resume_dir or cfg.init or base_model_dir(), device=device, dtype=cfg.dtype)
        self.model = self.encoder.model
        self.model.train()
        self.scale = 1.0 / math.sqrt(self.encoder.dim)
        content = content_token_mask(self.encoder.tokenizer)
        self.content = content if cfg.content_spans_only else None
        n_blocks = self._make_groups(content)
        self.batching = batch_config(cfg)
        self.opt = torch.optim.AdamW(param_groups(self.model, cfg), lr=cfg.lr)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(cfg))
        self.scaler = grad_scaler(*torch_runtime(self.encoder.device, self.encoder.dtype))  # enabled for fp16 only
        self.step = 0
        self.position = 0  # micro-batches consumed (all processes together)
        self.memory = torch.zeros((0, self.encoder.dim))  # recent candidate vectors (memory_tokens)
        self.memory_doc = torch.zeros(0, dtype=torch.long)
        if resume_dir is not None:
            self._load_state(resume_dir)
        logger.info(
            "training: %d blocks, %d groups, world %d, start step %d", n_blocks, len(self.groups), self.world, self.step
        )

    # ---- data -------------------------------------------------------------------------------
    def _make_groups(self, content: np.ndarray) -> int:
        """The corpus's blocks cut into `groups` (each block `views` times; `content`: the vocabulary's content
        tokens, for `grouping` similar) and their `lengths` in tokens; returns the number of blocks."""
        cfg = self.cfg
        listed = read_word_list(cfg.salient_words) if cfg.salient_words else frozenset()
        blocks = load_blocks(
            cfg.corpus, self.encoder.tokenizer, cfg.block_tokens, cfg.title_tokens, cfg.max_span, listed
        )
        self.pairs = self._pairs(blocks) if cfg.query_pairs else None
        if cfg.single:
            blocks = [TrainBlock(b.ids, np.full_like(b.flags, 3), b.title_ids, b.doc) for b in blocks]
        distinct = max(1, cfg.group_size // cfg.views)
        if cfg.grouping == "similar":  # same order on every process: it depends on the seed only
            order = similar_order([b.ids[content[b.ids]] for b in blocks], distinct, np.random.default_rng(cfg.seed))
            blocks = [blocks[i] for i in order]
        self.groups = [
            [b for b in blocks[i : i + distinct] for _ in range(cfg.views)] for i in range(0, len(blocks), distinct)
        ]
        self.groups = [g for g in self.groups if len(g) >= 2]
        if len(self.groups) < self.world * cfg.groups_per_step:
            raise AppError(
                f"corpus {', '.join(map(str, cfg.corpus))} gives {len(self.groups)} groups; need at least "
                f"{self.world * cfg.groups_per_step}: add text or lower --group-size / --groups-per-step"
            )
        self.lengths = np.array([sum(len(b.ids) for b in g) for g in self.groups])
        return len(blocks)

    def _pairs(self, blocks: list[TrainBlock]) -> PairBatches:
        """The query pairs whose documents are among the corpus's (matched to their blocks by document id)."""
        by_key: dict[str, list[TrainBlock]] = {}
        for b in blocks:
            by_key.setdefault(b.key, []).append(b)
        assert self.cfg.query_pairs is not None  # (called with query pairs only)
        rows = load_pairs(self.cfg.query_pairs)
        pairs = match_pairs(rows, by_key, self.encoder)
        logger.info("query pairs: %d of %d have an answer in their document's blocks", len(pairs), len(rows))
        return PairBatches(pairs, by_key, self.encoder, self.cfg.pair_batch, self.cfg.seed)

    def _groups_at(self, position: int) -> tuple[list[list[TrainBlock]], np.random.Generator]:
        per = self.cfg.groups_per_step
        stride = per * self.world
        per_epoch = len(self.groups) // stride
        epoch, slot = divmod(position, per_epoch)
        order = _group_order(len(self.groups), epoch, self.cfg, self.lengths)
        a = slot * stride + self.rank * per
        rng = np.random.default_rng([self.cfg.seed, position, self.rank])
        return [self.groups[i] for i in order[a : a + per]], rng

    def batch_at(self, position: int) -> Batch:
        groups, rng = self._groups_at(position)
        return make_batch(groups, self.encoder, rng, self.batching, self.content)

    # ---- loss -------------------------------------------------------------------------------
    def loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(L_start, L_end) of a batch; with `memory_tokens`, the batch's candidates then join the memory."""
        dev = self.encoder.device
        hq = self.encoder.hidden_states(batch.q_ids, batch.q_attn, batch.q_types).float()
        hc = self.encoder.hidden_states(batch.c_ids, batch.c_attn, batch.c_types).float()
        d = hq.shape[-1]
        q_start = hq.reshape(-1, d)[batch.start_at.to(dev)]
        q_end = hq.reshape(-1, d)[batch.end_at.to(dev)]
        cands = hc.reshape(-1, d)[batch.cand_at.to(dev)]
        allowed = batch.cand_seq[None, :] != batch.q_seq[:, None]
        if batch.own_allowed is not None:
            allowed |= batch.own_allowed[:, None]
        allowed = allowed.to(dev)
        pos_s, pos_e = batch.pos_start.to(dev), batch.pos_end.to(dev)
        fresh, fresh_doc = cands.detach(), batch.cand_doc
        if self.world > 1:
            cands, allowed, pos_s, pos_e = self._gather(cands, allowed, pos_s, pos_e)
        if self.cfg.memory_tokens and self.memory.shape[0]:
            extra = (self.memory_doc[None, :] != batch.q_doc[:, None]).to(dev)  # never a positive's document
            none = torch.zeros_like(extra)
            cands = torch.cat([cands, self.memory.to(dev)])
            allowed = torch.cat([allowed, extra], 1)
            pos_s, pos_e = torch.cat([pos_s, none], 1), torch.cat([pos_e, none], 1)
        l_start, l_end = npm_loss(q_start, q_end, cands, pos_s, pos_e, allowed, self.scale)
        if self.cfg.memory_tokens:  # newest first; this process's fresh candidates only
            self.memory = torch.cat([fresh.cpu(), self.memory])[: self.cfg.memory_tokens]
            self.memory_doc = torch.cat([fresh_doc, self.memory_doc])[: self.cfg.memory_tokens]
        return (l_start, l_start) if self.cfg.single else (l_start, l_end)

    def pair_loss(self, step: int) -> torch.Tensor:
        """The loss of the query pairs of `step` (this process's batch): starts and ends, summed."""
        assert self.pairs is not None  # (called with query pairs only)
        batch = self.pairs.batch_at(step * self.world + self.rank)
        dev = self.encoder.device
        hq = self.encoder.hidden_states(batch.q_ids, batch.q_attn, batch.q_types).float()
        hc = self.encoder.hidden_states(batch.c_ids, batch.c_attn, batch.c_types).float()
        d = hq.shape[-1]
        cands = hc.reshape(-1, d)[batch.cand_at.to(dev)]
        allowed = torch.ones(batch.pos_start.shape, dtype=torch.bool, device=dev)
        l_start, l_end = npm_loss(
            hq.reshape(-1, d)[batch.start_at.to(dev)],
            hq.reshape(-1, d)[batch.end_at.to(dev)],
            cands,
            batch.pos_start.to(dev),
            batch.pos_end.to(dev),
            allowed,
            self.scale,
        )
        return l_start + l_end

    def _gather(self, cands, allowed, pos_s, pos_e):
        """Candidates of all processes (with gradient); other processes' tokens are negatives only."""
        from torch.distributed.nn.functional import all_gather

        n = torch.tensor([cands.shape[0]], device=cands.device)
        sizes = [torch.zeros_like(n) for _ in range(self.world)]
        dist.all_gather(sizes, n)
        width = int(max(s.item() for s in sizes))
        padded = torch.zeros((width, cands.shape[1]), device=cands.device, dtype=cands.dtype)
        padded = torch.cat([cands, padded[cands.shape[0] :]]) if cands.shape[0] < width else cands
        parts = all_gather(padded)
        m = allowed.shape[0]
        cols_allowed, cols_ps, cols_pe = [], [], []
        for r, size in enumerate(sizes):
            size = int(size.item())
            if r == self.rank:

                def fill(x):
                    return torch.cat([x, torch.zeros((m, width - size), dtype=torch.bool, device=x.device)], 1)

                cols_allowed.append(fill(allowed))
                cols_ps.append(fill(pos_s))
                cols_pe.append(fill(pos_e))
            else:
                valid = torch.zeros((m, width), dtype=torch.bool, device=allowed.device)
                valid[:, :size] = True
                cols_allowed.append(valid)
                cols_ps.append(torch.zeros_like(valid))
                cols_pe.append(torch.zeros_like(valid))
        return torch.cat(parts), torch.cat(cols_allowed, 1), torch.cat(cols_ps, 1), torch.cat(cols_pe, 1)

    # ---- steps ------------------------------------------------------------------------------
    def train_step(self) -> dict:
        t0 = time.perf_counter()
        totals = {"loss_start": 0.0, "loss_end": 0.0, "masks": 0, "tokens": 0}
        for _ in range(self.cfg.grad_accum):
            batch = self.batch_at(self.position)
            self.position += 1
            l_start, l_end = self.loss(batch)
            self.scaler.scale((l_start + l_end) / self.cfg.grad_accum).backward()
            totals["loss_start"] += float(l_start.detach()) / self.cfg.grad_accum
            totals["loss_end"] += float(l_end.detach()) / self.cfg.grad_accum
            totals["masks"] += batch.masks
            totals["tokens"] += batch.tokens
        if self.pairs is not None:
            pair_loss = self.pair_loss(self.step)
            self.scaler.scale(self.cfg.pair_weight * pair_loss).backward()
            totals["loss_pairs"] = float(pair_loss.detach())
        if self.world > 1:
            for p in self.model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= self.world
        self.scaler.unscale_(self.opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.scaler.step(self.opt)  # skipped (and the scale lowered) when fp16 gradients overflowed
        self.scaler.update()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        return {
            "step": self.step,
            "loss": totals["loss_start"] + totals["loss_end"],
            **totals,
            "lr": self.sched.get_last_lr()[0],
            "grad_norm": float(grad_norm),
            "seconds": time.perf_counter() - t0,
        }

    def run(self) -> Path | None:
        from tqdm import tqdm

        cfg = self.cfg
        cfg.out.mkdir(parents=True, exist_ok=True)
        log = open(cfg.out / "metrics.jsonl", "a", encoding="utf-8") if self.rank == 0 else None
        stop = min(cfg.steps, cfg.until or cfg.steps)
        deadline = time.monotonic() + cfg.minutes * 60 if cfg.minutes else None
        bar = tqdm(total=stop, initial=self.step, desc="train", disable=self.rank != 0, dynamic_ncols=True)
        last = None
        while self.step < stop:
            if deadline is not None and self._agree(time.monotonic() >= deadline):
                logger.info("time budget of %.1f min spent at step %d", cfg.minutes, self.step)
                if last is None or self.step % cfg.save_every:
                    last = self.save()
                break
            rec = self.train_step()
            bar.update(1)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens'] * self.world / rec['seconds']:.0f}")
            if log:
                log.write(json.dumps(rec) + "\n")
                log.flush()
            if self.step % cfg.save_every == 0 or self.step == stop:
                last = self.save()
        bar.close()
        if log:
            log.close()
        return (
            last if last is not None else latest_checkpoint(self.cfg.out)
        )  # nothing left to train: the run's last checkpoint

    def _agree(self, flag: bool) -> bool:
        """Rank 0's `flag` on every process (so that all stop at the same step)."""
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)], device=self.encoder.device)
        dist.broadcast(t, 0)
        return bool(t.item())

    # ---- checkpoints ------------------------------------------------------------------------
    def save(self) -> Path:
        """Write checkpoint-STEP (HF format + trainer state) atomically (training.checkpoints); rank 0 writes, all
        wait."""
        final = checkpoint_dir(self.cfg.out, self.step)
        if self.rank == 0:
            state = {
                "step": self.step,
                "position": self.position,
                "optimizer": self.opt.state_dict(),
                "scheduler": self.sched.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
                "scaler": self.scaler.state_dict(),
                "memory": self.memory,
                "memory_doc": self.memory_doc,
            }
            config = self.cfg.model_dump_json(indent=2)
            tokenizer, keep = self.encoder.tokenizer, self.cfg.keep_checkpoints
            write_checkpoint(self.cfg.out, self.step, self.model, tokenizer, config, state, keep)
        if self.world > 1:
            dist.barrier()
        return final

    def _load_state(self, ckpt: Path) -> None:
        state = read_state(ckpt)
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        for group, base in zip(self.opt.param_groups, self.sched.base_lrs):  # this run's schedule, not the saved lr
            group["lr"] = base * self.sched.lr_lambdas[0](self.sched.last_epoch)
        self.step, self.position = state["step"], state["position"]
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.memory = state.get("memory", self.memory)
        self.memory_doc = state.get("memory_doc", self.memory_doc)
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        logger.info("resumed from %s at step %d", ckpt, self.step)


def train(cfg: TrainConfig) -> Path | None:
    return Trainer(cfg).run()
