"""The reader's torch side: `ReaderModel` (the transformer and its two heads, what `encoder train-reader` trains
and encoder.onnx_engine exports), loading it from a reader directory and saving one. Serving on an ONNX engine
never imports it (encoder.reader.Reader runs the export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from common.errors import AppError
from common.files import write_json_atomic
from encoder.model_files import load_transformer
from encoder.reader_files import CARD_NAME, HEAD_NAME, ReaderCard, reader_tokenizer


class ReaderModel(torch.nn.Module):
    """The transformer and the two heads."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer
        config: Any = transformer.config  # transformers' config or LeanBert's namespace: fields read by name
        dim = int(config.hidden_size)
        self.start = torch.nn.Linear(dim, dim)
        self.end = torch.nn.Linear(dim, dim)
        for head in (self.start, self.end):
            torch.nn.init.eye_(head.weight)
            torch.nn.init.zeros_(head.bias)
        self.scale = dim**-0.5
        self.uses_token_types = (getattr(transformer.config, "type_vocab_size", 1) or 1) > 1

    def forward(
        self, ids: torch.Tensor, attention: torch.Tensor, types: torch.Tensor, mask_at: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end logits [rows, width] of every sequence position for the mask at `mask_at` [rows]."""
        kwargs = {"input_ids": ids, "attention_mask": attention}
        if self.uses_token_types:
            kwargs["token_type_ids"] = types
        h = self.transformer(**kwargs).last_hidden_state
        rows = torch.arange(h.shape[0], device=h.device)
        q_start = self.start(h[rows, mask_at])
        q_end = self.end(h[rows, mask_at + 1])
        return (torch.einsum("bd,btd->bt", q_start, h) * self.scale, torch.einsum("bd,btd->bt", q_end, h) * self.scale)


def load_model(reader_dir: Path, lean: bool = False, tokenizer=None) -> tuple[ReaderModel, Any]:
    """The reader model (fp32) and its tokenizer (`tokenizer`, when given), from a reader directory (or an
    encoder directory, whose heads then start as the identity). `lean`: for inference only, a plain BERT
    transformer runs as encoder.lean_bert.LeanBert (as Encoder's `lean`)."""
    from safetensors.torch import load_file

    tokenizer = tokenizer if tokenizer is not None else reader_tokenizer(reader_dir)
    try:
        transformer = load_transformer(reader_dir, lean)
    except Exception as exc:  # transformers raises many types; all mean "cannot load"
        raise AppError(f"cannot load reader from {reader_dir}: {exc}") from exc
    model = ReaderModel(transformer)
    if (reader_dir / HEAD_NAME).is_file():
        heads = {k: v.float() for k, v in load_file(str(reader_dir / HEAD_NAME)).items()}
        try:
            model.start.load_state_dict({"weight": heads["start.weight"], "bias": heads["start.bias"]})
            model.end.load_state_dict({"weight": heads["end.weight"], "bias": heads["end.bias"]})
        except (KeyError, RuntimeError) as exc:
            raise AppError(
                f"{reader_dir / HEAD_NAME} does not hold heads for this transformer ({exc}); re-export the reader"
            ) from exc
    return model, tokenizer


def save_reader(model: ReaderModel, tokenizer, card: ReaderCard, out: Path, half: bool = True) -> None:
    """Write a reader directory (fp16 weights, or fp32 for a checkpoint) into `out`, which must exist
    (callers write atomically)."""
    from safetensors.torch import save_file

    dtype = torch.float16 if half else torch.float32
    transformer: Any = model.transformer.to(dtype)  # transformers' model (save_pretrained)
    transformer.save_pretrained(out, safe_serialization=True)
    model.transformer.float()
    heads = {
        f"{name}.{k}": v.detach().to(dtype).contiguous()
        for name, head in (("start", model.start), ("end", model.end))
        for k, v in head.state_dict().items()
    }
    save_file(heads, str(out / HEAD_NAME))
    tokenizer.save_pretrained(out)
    write_json_atomic(out / CARD_NAME, card.model_dump(mode="json"))
