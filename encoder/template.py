"""The special tokens a tokenizer puts around one sequence or a pair, learnt by encoding known texts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    """Special tokens around one sequence (`single`) or a pair (`pair`, used for title + block)."""

    single_prefix: list[int]
    single_suffix: list[int]
    pair_prefix: list[int]
    pair_mid: list[int]
    pair_suffix: list[int]
    second_type_id: int  # token_type id of the second segment of a pair (0 for RoBERTa-style)


def _find(hay: list[int], needle: list[int], start: int = 0) -> int:
    for i in range(start, len(hay) - len(needle) + 1):
        if hay[i : i + len(needle)] == needle:
            return i
    raise ValueError("tokenizer template could not be derived")


def derive_template(tokenizer) -> Template:
    """Learn where the tokenizer puts its special tokens by encoding known texts."""
    a = tokenizer("hello", add_special_tokens=False)["input_ids"]
    b = tokenizer("world", add_special_tokens=False)["input_ids"]
    single = tokenizer("hello")["input_ids"]
    pa = _find(single, a)
    pair_enc = tokenizer("hello", "world")
    pair = pair_enc["input_ids"]
    p = _find(pair, a)
    q = _find(pair, b, p + len(a))
    types = pair_enc.get("token_type_ids") or [0] * len(pair)
    return Template(
        single_prefix=single[:pa],
        single_suffix=single[pa + len(a) :],
        pair_prefix=pair[:p],
        pair_mid=pair[p + len(a) : q],
        pair_suffix=pair[q + len(b) :],
        second_type_id=int(types[q]),
    )
