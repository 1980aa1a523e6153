"""`HiddenStates`: a transformer's last hidden states as a module of plain tensors, what encoder.onnx_engine
exports of an encoder (torch: imported only to export a model or to run the torch engine)."""

from __future__ import annotations

import torch


class HiddenStates(torch.nn.Module):
    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, ids: torch.Tensor, attention: torch.Tensor, types: torch.Tensor | None = None) -> torch.Tensor:
        kwargs = {"input_ids": ids, "attention_mask": attention}
        if types is not None:
            kwargs["token_type_ids"] = types
        return self.transformer(**kwargs).last_hidden_state
