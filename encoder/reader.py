"""The reader: a cross-encoder that reads a query together with passage windows and scores every window
token as the first or the last token of each mask's fill.

One sequence per (query, mask): the query laid out as the encoder lays it out (`Encoder.query_layout`:
special tokens, every mask as MASK_s MASK_e), then each window followed by the separator, the windows in
the second token type:

    [CLS] q ... MASK_s MASK_e ... q [SEP] window_1 [SEP] window_2 [SEP] ...

A reader trained with titles (card `title_tokens` > 0) reads each window after the first `title_tokens` tokens
of its document's title and a separator ("title_1 [SEP] window_1 [SEP] ..."): "He was born in Paris" then says
whose sentence it is. The title tokens are context, never a fill.

With h the transformer's last hidden states and m the mask's MASK_s position,
    start(i) = (W_s h[m] + b_s) . h[i] * scale,   end(j) = (W_e h[m+1] + b_e) . h[j] * scale,
scale = 1 / sqrt(dim). The heads start as the identity, so an untrained reader made from the NPM encoder
scores a window token as the encoder's own q . v does, but with the query and the passage read together.
A reader trained with a no-answer option (card `null`: training.reader_train --null) scores [CLS] as the fill
"none of these"; `Reader.logits` then gives every window token's logits minus [CLS]'s, so a span beats "none
of these" when its start + end is above 0 (the fill's start_max / end_max features carry that).

A reader directory: the transformer (config.json, model.safetensors: fp16), the heads (head.safetensors),
the tokenizer files, `reader.json` (`ReaderCard`) and a model card (README.md). The windows are read from
an index's stored token ids, so a reader serves only indexes whose encoder has the same vocabulary
(`vocab_fingerprint`), which `open_reader` checks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from common.errors import AppError
from encoder.device import autocast, choose_runtime, lower_weights, torch_runtime
from encoder.model import pad_sequences, padded_width
from encoder.model_files import model_fingerprint, read_config
from encoder.onnx_engine import OnnxPass, OpenVinoPass, engine_pass
from encoder.reader_files import CARD_NAME, ReaderCard, read_card, reader_tokenizer, vocab_fingerprint
from encoder.template import Template, derive_template

if TYPE_CHECKING:
    import torch

    from encoder.reader_model import ReaderModel

logger = logging.getLogger(__name__)

READER_INPUTS = ("ids", "attention", "types", "mask_at")  # ReaderModel.forward's arguments, in order
BUNDLED_READER = Path(__file__).parent / "default_reader"


@dataclass(frozen=True)
class ReadingSpec:
    """What the windows of a reading depend on: the card's settings, the separator after each window, the
    longest sequence the reader takes and, for a reader of titles (card title_tokens), the title's ids."""

    card: ReaderCard
    sep: int
    max_length: int
    title_ids: Callable[[str], np.ndarray] | None = None

    def per_window(self) -> int:
        """Sequence positions a window costs beyond its own tokens (its separator; its title and separator)."""
        return self.sep + (self.card.title_tokens + self.sep if self.card.title_tokens else 0)


@dataclass(frozen=True)
class ReaderInput:
    """One mask of one query and the windows to read for it (token ids of the index)."""

    query_ids: list[int]  # the query as Encoder.query_layout gives it
    mask_at: int  # the mask's MASK_s position in query_ids
    windows: list[np.ndarray]
    titles: list[np.ndarray] | None = None  # per window, the title tokens read before it (card title_tokens)


class TitleIds:
    """A title's first `n` token ids (cached: the same documents come back), for ReaderInput.titles."""

    def __init__(self, tokenizer, n: int, cache: int = 4096) -> None:
        self._ids: dict[str, np.ndarray]  # {title: its ids}
        self.tokenizer, self.n, self.cache, self._ids = tokenizer, n, cache, {}

    def __call__(self, title: str) -> np.ndarray:
        ids = self._ids.get(title)
        if ids is None:
            ids = np.asarray(self.tokenizer(title, add_special_tokens=False)["input_ids"][: self.n], dtype=np.int64)
            if len(self._ids) >= self.cache:
                self._ids.clear()
            self._ids[title] = ids
        return ids


def layout(item: ReaderInput, template: Template) -> tuple[list[int], list[int], int]:
    """Input ids, token types and the sequence position of the first window part (its title, if any)."""
    sep = template.single_suffix
    ids = list(item.query_ids)
    first = len(ids)
    for n, w in enumerate(item.windows):
        if item.titles is not None:
            ids += [int(t) for t in item.titles[n]] + sep
        ids += [int(t) for t in w] + sep
    types = [0] * first + [template.second_type_id] * (len(ids) - first)
    return ids, types, first


def window_positions(item: ReaderInput, sep_len: int) -> np.ndarray:
    """Sequence positions of the window tokens, in window order (titles and separators left out), from the
    first."""
    out, at = [], 0
    for n, w in enumerate(item.windows):
        if item.titles is not None:
            at += len(item.titles[n]) + sep_len
        out.append(np.arange(at, at + len(w)))
        at += len(w) + sep_len
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def batch_tensors(
    items: list[ReaderInput], template: Template, pad_id: int, limit: int = 0
) -> tuple[tuple[np.ndarray, ...], list[np.ndarray]]:
    """(ids, attention, types, mask_at) of a batch (int64), and each item's window token positions in its row;
    with a `limit` (serving), the batch's length is rounded up by encoder.model.padded_width, at most `limit`."""
    layouts = [layout(item, template) for item in items]
    longest = max(len(s) for s, _, _ in layouts)
    ids, attention, types = pad_sequences(
        [s for s, _, _ in layouts], [t for _, t, _ in layouts], pad_id, padded_width(longest, limit) if limit else 0
    )
    mask_at = np.asarray([item.mask_at for item in items], dtype=np.int64)
    sep_len = len(template.single_suffix)
    positions = [first + window_positions(item, sep_len) for item, (_, _, first) in zip(items, layouts)]
    return (ids, attention, types, mask_at), positions


class Reader:
    """A loaded reader on its device, for inference. `logits` is thread-safe only when called from one
    thread at a time (the engine calls it on the encoder's inference thread)."""

    def __init__(
        self,
        reader_dir: Path,
        device: str | torch.device = "auto",
        dtype: str = "auto",
        engine: str = "torch",
        fingerprint: str | None = None,
    ) -> None:
        """`fingerprint`: the directory's model_fingerprint when the caller computed it already (else computed
        here, for an ONNX engine's export)."""
        self.dir = Path(reader_dir)
        self.card = read_card(self.dir)
        self.tokenizer = reader_tokenizer(self.dir, lean=True)
        if vocab_fingerprint(self.tokenizer) != self.card.vocab:
            raise AppError(f"reader {self.dir}: its tokenizer is not the one its {CARD_NAME} names; re-export it")
        self.engine, self.device, self.dtype = choose_runtime(engine, device, dtype, "reader")
        self.template = derive_template(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.title_ids = TitleIds(self.tokenizer, self.card.title_tokens) if self.card.title_tokens else None
        config = read_config(self.dir, fix="pass a directory written by `encoder train-reader`")
        self.max_length = int(getattr(config, "max_position_embeddings", 512))
        self.model: ReaderModel | None = None
        self._onnx: OnnxPass | OpenVinoPass | None = None
        self._closed = False  # by `close`: it reads no more
        if self.engine != "torch":  # the engine holds its own weights: a torch copy is built only to export it
            fingerprint = fingerprint if fingerprint is not None else model_fingerprint(self.dir)
            self._onnx = engine_pass(self.dir, fingerprint, "reader", self.engine, self.dtype, self._export_spec)
        else:
            from encoder.reader_model import load_model

            self.model = load_model(self.dir, lean=True, tokenizer=self.tokenizer)[0].to(self.device).eval()
            lower_weights(self.model, torch_runtime(self.device, self.dtype)[1])  # for inference: the same logits

    @property
    def onnx_path(self) -> Path | None:
        """The ONNX file its passes run from (None on the torch path)."""
        return self._onnx.path if self._onnx is not None else None

    def close(self) -> None:
        """Release its model (an ONNX engine's compiled model; fill.models: once no engine uses it)."""
        self._onnx, self.model, self._closed = None, None, True

    @property
    def name(self) -> str:
        return self.dir.name

    def _export_spec(self) -> tuple[torch.nn.Module, dict[str, torch.Tensor], list[str]]:
        """What encoder.onnx_engine exports: the start and end logits of a padded batch (fp32 weights)."""
        items = [
            ReaderInput([self.pad_id + 1] * 6, 1, [np.full(4, self.pad_id + 1)]),
            ReaderInput([self.pad_id + 1] * 5, 2, [np.full(3, self.pad_id + 1)] * 2),
        ]
        import torch

        from encoder.reader_model import load_model

        arrays, _ = batch_tensors(items, self.template, self.pad_id)
        model = load_model(self.dir, lean=True, tokenizer=self.tokenizer)[0].eval()
        return model, {name: torch.from_numpy(a) for name, a in zip(READER_INPUTS, arrays)}, ["start", "end"]

    @property
    def spec(self) -> ReadingSpec:
        return ReadingSpec(self.card, len(self.template.single_suffix), self.max_length, self.title_ids)

    def logits(self, items: list[ReaderInput]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per item, the start and end logits (float64) of its window tokens, windows concatenated (minus the
        no-answer logits, those of position 0, for a reader trained with them: card `null`)."""
        if not items:
            return []
        if self._closed:
            raise RuntimeError(f"reader {self.name} is closed")
        arrays, positions = batch_tensors(items, self.template, self.pad_id, self.max_length)
        if self._onnx is not None:
            start, end = self._onnx.run(**dict(zip(READER_INPUTS, arrays)))
        else:
            import torch

            assert self.model is not None  # the torch engine's (made in __init__)
            device, dtype = torch_runtime(self.device, self.dtype)
            with torch.inference_mode(), autocast(device, dtype):
                start, end = self.model(*(torch.from_numpy(a).to(device) for a in arrays))
            start, end = start.float().cpu().numpy(), end.float().cpu().numpy()
        if self.card.null:
            start, end = start - start[:, :1], end - end[:, :1]
        return [(start[i, p].astype(np.float64), end[i, p].astype(np.float64)) for i, p in enumerate(positions)]
