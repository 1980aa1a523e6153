"""The encoder: any HuggingFace encoder directory, giving one vector per token.

Corpus side: blocks of token ids (optionally preceded by a title segment) -> last hidden state of
every block token. Query side: text with `<mask>`s -> each mask becomes the tokenizer's mask token
twice (MASK_s, MASK_e); one forward pass gives q_start and q_end for every mask.

On an ONNX engine (encoder.onnx_engine) the torch model is loaded only to export it once: serving needs no torch.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar, TypeVarTuple

import numpy as np

from common.errors import AppError
from common.masks import split_on_masks
from encoder.device import autocast, choose_runtime, describe_device, lower_weights, torch_runtime
from encoder.model_files import (
    default_model_dir,
    file_table,
    load_tokenizer,
    load_transformer,
    map_file_tables,
    model_fingerprint,
    read_config,
)
from encoder.onnx_engine import OnnxPass, OpenVinoPass, engine_pass
from encoder.synonyms import WordNeighbours
from encoder.template import Template, derive_template

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

R = TypeVar("R")
Ts = TypeVarTuple("Ts")

WIDTH_STEP = 16  # a serving pass's padded length is a multiple of this many tokens (padded_width)


def padded_width(width: int, limit: int) -> int:
    """`width` rounded up to a multiple of WIDTH_STEP, at most `limit` (and never below `width`). Serving
    passes (queries, the reader's inputs) are padded to it, so the models meet a few dozen input lengths
    rather than every one: each new shape leaves kernel caches and allocator fragments that stay (a server's
    anonymous memory grew by ~300 MiB over its first 200 fills without it, docs/BENCHMARKS.md). Attention masks
    the pad tokens, so the vectors stay those of the unpadded pass up to rounding (tests/encoder/test_model.py);
    in bf16 the other matrix shapes round differently: 0.6-0.8% of the dev fills moved, between near ties."""
    return max(width, min(-(-width // WIDTH_STEP) * WIDTH_STEP, limit))


def pad_sequences(
    seqs: list[list[int]], types: list[list[int]], pad_id: int, width: int = 0, rows: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded (input ids, attention mask, token types) of sequences (int64), at least `width` x `rows`."""
    width = max(width, *(len(s) for s in seqs))
    rows = max(rows, len(seqs))
    ids = np.full((rows, width), pad_id, dtype=np.int64)
    attention = np.zeros((rows, width), dtype=np.int64)
    token_types = np.zeros((rows, width), dtype=np.int64)
    for i, (s, t) in enumerate(zip(seqs, types)):
        ids[i, : len(s)] = s
        attention[i, : len(s)] = 1
        token_types[i, : len(s)] = t
    attention[len(seqs) :, 0] = 1  # filler rows attend to one token: no row is wholly masked
    return ids, attention, token_types


@dataclass(frozen=True)
class BlockInput:
    """Token ids of one block, plus an optional context prefix (e.g. the title) that is not indexed."""

    ids: np.ndarray
    prefix_ids: np.ndarray | None = None


@dataclass(frozen=True)
class QueryVectors:
    q_start: np.ndarray  # float32 [masks, d]: the output at each mask's MASK_s (its start query)
    q_end: np.ndarray  # float32 [masks, d]: the output at its MASK_e (its end query)


class Encoder:
    """A loaded encoder on its device. Thread-safe for inference."""

    @cached_property
    def fingerprint(self) -> str:
        """model_fingerprint of its directory, computed once (a loaded model's files are not expected to change)."""
        return model_fingerprint(self.model_dir)

    @cached_property
    def word_neighbours(self) -> WordNeighbours:
        """The vocabulary's whole words in its input-embedding space (closed-set synonyms), built on first use:
        the table read from the model file where it holds it in fp16 (the values the loaded model has), else
        from the loaded model."""
        table = file_table(self.model_dir, "embeddings.word_embeddings.weight")
        if table is None:  # transformers' model or LeanBert (no get_input_embeddings): read by name
            model: Any = self.model
            layer = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else model.embeddings
            table = getattr(layer, "word_embeddings", layer).weight.detach().float().cpu().numpy()
        return WordNeighbours(self.tokenizer, table, self.phrase_ids)

    @cached_property
    def model(self) -> torch.nn.Module:
        """The transformer in torch (fp32 weights whatever the file holds; autocast lowers precision), on this
        encoder's device: loaded at construction on the torch engine, only when asked for with an ONNX engine
        (to export it)."""
        try:
            model = load_transformer(self.model_dir, self._lean)
        except Exception as exc:  # transformers raises many types; all mean "cannot load"
            raise AppError(f"cannot load model from {self.model_dir}: {exc}") from exc
        return model.to(self.device).eval()

    def __init__(
        self,
        model_dir: str | Path | None = None,
        device: str | torch.device = "auto",
        dtype: str = "auto",
        engine: str = "torch",
        lean: bool = False,
    ) -> None:
        """`lean`: for serving only, a plain BERT runs as encoder.lean_bert.LeanBert (the same hidden states,
        without importing transformers' modeling code) and its tokenizer loads lean (`load_tokenizer`); other
        models, and training, use transformers' classes."""
        self.model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        if not (self.model_dir / "config.json").is_file():
            raise AppError(
                f"model directory {self.model_dir} has no config.json; pass --model with a HuggingFace model directory"
            )
        try:
            self.tokenizer = load_tokenizer(self.model_dir, lean)
        except Exception as exc:  # transformers raises many types; all mean "cannot load"
            raise AppError(f"cannot load model from {self.model_dir}: {exc}") from exc
        if not getattr(self.tokenizer, "is_fast", False):
            raise AppError(f"{self.model_dir}: a fast tokenizer (tokenizer.json) is needed for char offsets")
        self._lean = lean
        # the torch path's device and autocast dtype, or an ONNX engine's "cpu" and precision (by name)
        self.engine, self.device, self.dtype = choose_runtime(engine, device, dtype, "query" if lean else "encoder")
        self._onnx: OnnxPass | OpenVinoPass | None = None  # an ONNX engine's pass, made by for_inference
        # transformers' config, LeanBert's or config.json's namespace: fields read by name
        self.config: Any = getattr(self.model, "config") if self.engine == "torch" else read_config(self.model_dir)
        self.dim = int(self.config.hidden_size)
        try:
            self.template: Template = derive_template(self.tokenizer)
        except ValueError as exc:
            raise AppError(f"{self.model_dir}: {exc}; the tokenizer must add its special tokens the usual way") from exc
        self.max_length = self._max_length()
        self.uses_token_types = (getattr(self.config, "type_vocab_size", 1) or 1) > 1
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._special_ids = frozenset(self.tokenizer.all_special_ids)
        self._runner: ThreadPoolExecutor | None = None  # its inference thread (`runner`), that thread's id
        self._runner_ident: int | None = None
        self._runner_lock, self._closed = threading.Lock(), False  # closed: by `close`, never to run again
        where = f"{describe_device(self.device)} ({self.engine}, {str(self.dtype).replace('torch.', '')})"
        logger.info("encoder %s on %s, dim %d, max length %d", self.model_dir, where, self.dim, self.max_length)

    @property
    def onnx_path(self) -> Path | None:
        """The ONNX file its passes run from (None on the torch path)."""
        return self._onnx.path if self._onnx is not None else None

    def _max_length(self) -> int:
        cfg = self.config
        limit = int(getattr(cfg, "max_position_embeddings", 512))
        if cfg.model_type in ("roberta", "xlm-roberta", "camembert", "mpnet"):
            limit -= 2  # positions are offset by padding_idx + 1
        tok_limit = int(getattr(self.tokenizer, "model_max_length", limit) or limit)
        return min(limit, tok_limit) if tok_limit < 1_000_000 else limit

    @property
    def block_overhead(self) -> int:
        """Special tokens around a block without prefix."""
        return len(self.template.single_prefix) + len(self.template.single_suffix)

    @property
    def pair_overhead(self) -> int:
        return len(self.template.pair_prefix) + len(self.template.pair_mid) + len(self.template.pair_suffix)

    def layout(self, block: BlockInput) -> tuple[list[int], list[int], int]:
        """Input ids, token types and the position of the first block token."""
        t = self.template
        ids = block.ids.tolist()
        if block.prefix_ids is not None and len(block.prefix_ids) > 0:
            first = t.pair_prefix + block.prefix_ids.tolist() + t.pair_mid
            second = ids + t.pair_suffix
            return first + second, [0] * len(first) + [t.second_type_id] * len(second), len(first)
        seq = t.single_prefix + ids + t.single_suffix
        return seq, [0] * len(seq), len(t.single_prefix)

    def hidden_states(self, ids: torch.Tensor, attention: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """Last hidden states of a padded batch under this encoder's autocast (gradients allowed)."""
        device, dtype = torch_runtime(self.device, self.dtype)
        kwargs = {"input_ids": ids.to(device), "attention_mask": attention.to(device)}
        if self.uses_token_types:
            kwargs["token_type_ids"] = types.to(device)
        with autocast(device, dtype):
            return self.model(**kwargs).last_hidden_state

    def _forward(self, seqs: list[list[int]], types: list[list[int]], width: int = 0, rows: int = 0) -> np.ndarray:
        """Last hidden states (float32), computed on this encoder's one inference thread: an OpenMP team per calling
        thread ran two or more teams on two cores (the encode stage took 10 ms instead of 5-6)."""
        return self.on_thread(self._forward_here, seqs, types, width, rows)

    def for_inference(self) -> "Encoder":
        """This encoder ready to serve, never to be trained: with an ONNX engine, its session (exported once); with
        torch, its Linears in the autocast dtype and fp16 tables mapped from the file (lower_weights,
        map_file_tables: the same vectors, less memory), cast on its inference thread."""
        if self.engine != "torch":
            self._onnx = engine_pass(
                self.model_dir, self.fingerprint, "encoder", self.engine, self.dtype, self._export_spec
            )
        else:
            self.on_thread(lower_weights, self.model, torch_runtime(self.device, self.dtype)[1])
            self.on_thread(map_file_tables, self.model, self.model_dir)  # its torch.equal: on the pass's OpenMP team
        return self

    def _export_spec(self) -> tuple[torch.nn.Module, dict[str, torch.Tensor], list[str]]:
        """What encoder.onnx_engine exports: the transformer's last hidden states of a padded batch."""
        import torch

        from encoder.hidden_states import HiddenStates

        ids, attention, types = pad_sequences(
            [[self.pad_id + 1] * 5, [self.pad_id + 1] * 3], [[0] * 5, [0] * 3], self.pad_id
        )
        example = {"ids": torch.from_numpy(ids), "attention": torch.from_numpy(attention)}
        if (getattr(getattr(self.model, "config", None), "type_vocab_size", 1) or 1) > 1:  # the model's, not the file's
            example["types"] = torch.from_numpy(types)
        return HiddenStates(self.model).eval(), example, ["hidden"]

    @property
    def runner(self) -> ThreadPoolExecutor:
        """This encoder's one inference thread (see _forward), started at first use: the server's batches are
        computed on it (service.batcher), the reader's passes too (fill.reading)."""
        with self._runner_lock:
            if self._runner is None:  # its thread's id asked of it: an initializer bound to self kept self for good
                self._runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encoder")
                self._runner_ident = self._runner.submit(threading.get_ident).result()
            return self._runner

    def close(self) -> None:
        """Release its inference thread and an ONNX engine's compiled model (fill.models: once no engine uses it)."""
        with self._runner_lock:
            runner, self._runner, self._onnx, self._closed = self._runner, None, None, True
        if runner is not None:  # its thread joined (its passes are done: no engine uses it), unless this is it
            runner.shutdown(wait=threading.get_ident() != self._runner_ident)

    def on_thread(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        """fn(*args) run on this encoder's inference thread (see _forward): here when called there."""
        if threading.get_ident() == self._runner_ident:
            return fn(*args)
        return self.runner.submit(fn, *args).result()

    def _forward_here(self, seqs: list[list[int]], types: list[list[int]], width: int, rows: int) -> np.ndarray:
        ids, attention, token_types = pad_sequences(seqs, types, self.pad_id, width, rows)
        if self._closed:
            raise RuntimeError(f"encoder {self.model_dir.name} is closed")
        if self._onnx is not None:
            return self._onnx.run(ids=ids, attention=attention, types=token_types)[0]
        import torch

        with torch.inference_mode():
            hidden = self.hidden_states(*(torch.from_numpy(a) for a in (ids, attention, token_types)))
            return hidden.float().cpu().numpy()

    def encode_blocks(self, blocks: list[BlockInput], here: bool = False) -> list[np.ndarray]:
        """One float32 vector per block token (special and prefix tokens excluded), per block. With `here` the
        forward pass runs on the calling thread (its own OpenMP team) instead of the inference thread, so a long
        document encoding beside a server (indexer.update) does not queue the queries' passes behind it."""
        layouts = [self.layout(b) for b in blocks]
        for (seq, _, _), b in zip(layouts, blocks):
            if len(seq) > self.max_length:
                raise AppError(
                    f"block of {len(seq)} tokens exceeds the model limit {self.max_length}; lower --block-tokens"
                )
        forward = self._forward_here if here else self._forward
        hidden = forward([s for s, _, _ in layouts], [t for _, t, _ in layouts], 0, 0)
        return [hidden[i, first : first + len(b.ids)] for i, ((_, _, first), b) in enumerate(zip(layouts, blocks))]

    def query_layout(self, text: str) -> tuple[list[int], list[int]]:
        """Token ids of a query with every mask replaced by MASK_s MASK_e, and the MASK_s positions."""
        mask_id = self.tokenizer.mask_token_id
        if mask_id is None:
            raise AppError(f"{self.model_dir}: tokenizer has no mask token")
        segments = split_on_masks(text)
        if len(segments) < 2:
            raise AppError("text contains no <mask>", kind="validation", field="text")
        ids: list[int] = list(self.template.single_prefix)
        positions: list[int] = []
        for i, seg in enumerate(segments):
            seg = seg.rstrip()
            if i == 0:
                seg = seg.lstrip()
            if seg:
                ids += self.tokenizer(seg, add_special_tokens=False)["input_ids"]
            if i < len(segments) - 1:
                positions.append(len(ids))
                ids += [mask_id, mask_id]
        ids += self.template.single_suffix
        if len(ids) > self.max_length:
            raise AppError(
                f"query is {len(ids)} tokens long; the model accepts at most {self.max_length}",
                kind="validation",
                field="text",
            )
        return ids, positions

    def phrase_ids(self, phrases: list[str]) -> list[list[int]]:
        """The token ids of each phrase as it is tokenized inside running text, after a space (a byte-level BPE
        gives a word after a space other ids than at the start of a text; WordPiece does not care); one
        tokenizer call for all."""
        lead = "a "
        enc = self.tokenizer([lead + p.strip() for p in phrases], add_special_tokens=False, return_offsets_mapping=True)
        return [
            [i for i, (a, b) in zip(ids, offsets) if b > len(lead) and b > a]
            for ids, offsets in zip(enc["input_ids"], enc["offset_mapping"])
        ]

    def content_tokens(self, ids: list[int]) -> frozenset[int]:
        """The distinct ids of a query layout, special tokens (masks, [CLS], [SEP], ...) left out."""
        return frozenset(ids) - self._special_ids

    def encode_queries(self, texts: list[str]) -> list[QueryVectors]:
        """(q_start, q_end) for every mask of every text; all in one forward pass."""
        return self.encode_layouts([self.query_layout(t) for t in texts])

    def encode_layouts(
        self, layouts: list[tuple[list[int], list[int]]], shape: Callable[[int, int], tuple[int, int]] | None = None
    ) -> list[QueryVectors]:
        """`encode_queries` of texts already laid out by `query_layout`: one forward pass for all.
        `shape(rows, width)` gives the padded (rows, width) of the batch (default: as they are); the width is
        then rounded up by `padded_width`."""
        rows, width = len(layouts), max(len(ids) for ids, _ in layouts)
        if shape is not None:
            rows, width = shape(rows, width)
        width = padded_width(min(width, self.max_length), self.max_length)
        seqs = [ids for ids, _ in layouts]
        hidden = self._forward(seqs, [[0] * len(ids) for ids in seqs], width, rows)
        out = []
        for i, (_, positions) in enumerate(layouts):
            pos = np.asarray(positions)
            out.append(QueryVectors(q_start=hidden[i, pos].copy(), q_end=hidden[i, pos + 1].copy()))
        return out
