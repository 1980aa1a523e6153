"""Fixtures of tests/training: the tiny encoders and groups of related documents made into training blocks."""

from __future__ import annotations

import numpy as np

from corpus.tokens import tokenize_documents
from encoder.model import Encoder
from training.data import TrainBlock

GROUPS = [
    [
        ("Paris", "Paris is the capital of France. The river Seine flows through Paris."),
        ("Seine", "The river Seine flows through Paris and Rouen. Paris is the capital of France."),
        ("France", "France has many cities. Paris is the capital of France and its largest city."),
        ("Louvre", "The Louvre is a museum in Paris, near the river Seine."),
    ],
    [
        ("Berlin", "Berlin is the capital of Germany. The river Spree flows through Berlin."),
        ("Spree", "The river Spree flows through Berlin and Cottbus. Berlin is the capital of Germany."),
        ("Germany", "Germany has many cities. Berlin is the capital of Germany and its largest city."),
    ],
]


def make_groups(enc: Encoder, groups=GROUPS) -> list[list[TrainBlock]]:
    out = []
    for group in groups:
        docs = tokenize_documents(enc.tokenizer, [text for _, text in group])
        titles = enc.tokenizer([title for title, _ in group], add_special_tokens=False)["input_ids"]
        out.append(
            [
                TrainBlock(ids=d.ids, flags=d.flags, title_ids=np.asarray(t, dtype=np.int32))
                for d, t in zip(docs, titles)
            ]
        )
    return out
