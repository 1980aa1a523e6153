"""A BERT encoder's forward pass for serving, without transformers' modeling code (a faster start: time to ready).

Importing `transformers.models.bert.modeling_bert` pulls in torch._dynamo, torch.distributed, sympy and
scipy through transformers' integrations: ~1.3 s of a server's start on 2 cores, more than loading the
weights. Serving needs none of it: this module is BertModel's inference path (embeddings, then per layer
self-attention through torch's scaled_dot_product_attention with the same boolean padding mask, the output
projections with their residual LayerNorms, the GELU feed-forward), the same modules under the same parameter
names, so the state dict of a `BertModel` checkpoint loads as it is and the ops run in the same order: the
hidden states equal transformers' to the bit, in fp32 and under autocast (tests/encoder/test_lean_bert.py).

Only plain BERT configurations are served this way (`lean_bert` returns None for anything else: other model
types, relative positions, decoders, other activations); training always uses transformers' model.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

WEIGHTS = "model.safetensors"


class _Linear(nn.Linear):
    def reset_parameters(self) -> None:  # no initial weights to draw: the file's replace them
        pass


class _Embedding(nn.Embedding):
    def reset_parameters(self) -> None:
        pass


class LeanOutput(NamedTuple):
    last_hidden_state: torch.Tensor


class _Embeddings(nn.Module):
    def __init__(self, c: SimpleNamespace) -> None:
        super().__init__()
        self.word_embeddings = _Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = _Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = _Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, ids: torch.Tensor, types: torch.Tensor | None) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)[None, :]
        if types is None:
            types = torch.zeros_like(ids)
        x = self.word_embeddings(ids) + self.token_type_embeddings(types)
        return self.LayerNorm(x + self.position_embeddings(positions))


class _SelfAttention(nn.Module):
    def __init__(self, c: SimpleNamespace) -> None:
        super().__init__()
        self.heads, self.head_size = c.num_attention_heads, c.hidden_size // c.num_attention_heads
        self.query = _Linear(c.hidden_size, c.hidden_size)
        self.key = _Linear(c.hidden_size, c.hidden_size)
        self.value = _Linear(c.hidden_size, c.hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        shape = (*x.shape[:-1], -1, self.head_size)
        q, k, v = (proj(x).view(*shape).transpose(1, 2) for proj in (self.query, self.key, self.value))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.head_size**-0.5, is_causal=False
        )
        out = out.reshape(out.shape[0], -1, x.shape[1], self.head_size).transpose(1, 2).contiguous()
        return out.reshape(*x.shape[:-1], -1).contiguous()


class _Projection(nn.Module):
    """dense, then LayerNorm(dense(x) + residual): BertSelfOutput and BertOutput."""

    def __init__(self, n_in: int, c: SimpleNamespace) -> None:
        super().__init__()
        self.dense = _Linear(n_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, c: SimpleNamespace) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _Projection(c.hidden_size, c)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class _Intermediate(nn.Module):
    def __init__(self, c: SimpleNamespace) -> None:
        super().__init__()
        self.dense = _Linear(c.hidden_size, c.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, c: SimpleNamespace) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _Projection(c.intermediate_size, c)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class _Layers(nn.Module):
    def __init__(self, c: SimpleNamespace) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))


class LeanBert(nn.Module):
    """BertModel's last hidden states; `config` holds config.json's fields (what the callers read of it)."""

    def __init__(self, config: SimpleNamespace) -> None:
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Layers(config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> LeanOutput:
        x = self.embeddings(input_ids, token_type_ids)
        mask = None  # transformers' sdpa mask: none without padding, else [rows, 1, width, width] booleans
        exporting = torch.jit.is_tracing() or torch.compiler.is_compiling()  # no data-dependent branch then
        if attention_mask is not None and (exporting or not bool(attention_mask.all())):
            rows, width = input_ids.shape
            mask = attention_mask.bool()[:, None, None, :].expand(rows, 1, width, width)
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return LeanOutput(x)


def _supported(c: dict) -> bool:
    return (
        c.get("model_type") == "bert"
        and c.get("hidden_act") == "gelu"
        and c.get("position_embedding_type", "absolute") in (None, "absolute")
        and not c.get("is_decoder")
        and not c.get("add_cross_attention")
        and c.get("hidden_size", 0) % max(c.get("num_attention_heads", 1), 1) == 0
    )


def lean_bert(model_dir: Path) -> LeanBert | None:
    """The directory's BERT (fp32 weights whatever the file holds) as a LeanBert, or None when its
    configuration is not plain BERT or its weights are not one safetensors file (then load it with
    transformers)."""
    from safetensors.torch import load_file

    try:
        raw = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not _supported(raw) or not (model_dir / WEIGHTS).is_file():
        return None
    config = SimpleNamespace(**{"type_vocab_size": 2, "layer_norm_eps": 1e-12, **raw})
    model = LeanBert(config)
    state = {k.removeprefix("bert."): v.float() for k, v in load_file(str(model_dir / WEIGHTS)).items()}
    state = {k: v for k, v in state.items() if not k.startswith(("pooler.", "embeddings.position_ids"))}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        return None
    return model.eval()
