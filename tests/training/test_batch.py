"""Tests for training.data.make_batch: NPM training batches (queries = masked blocks, candidates = unmasked blocks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import training.data as data_mod
from encoder.model import Encoder
from tests.training.conftest import GROUPS, make_groups
from training.data import STOPWORDS, BatchConfig, TrainBlock, content_token_mask, make_batch
from training.masking import MaskingConfig


@pytest.fixture()
def recorder(monkeypatch):
    """Records what training.data's mask_group returned, group by group."""
    calls = []
    real = data_mod.mask_group

    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out)
        return out

    monkeypatch.setattr(data_mod, "mask_group", wrapper)
    return calls


def _layout(enc: Encoder, ids: list[int], title: list[int] | None) -> tuple[list[int], list[int], int]:
    """Expected (ids, token types, first block position) written out from the template."""
    t = enc.template
    if title:
        first = t.pair_prefix + title + t.pair_mid
        second = ids + t.pair_suffix
        return first + second, [0] * len(first) + [t.second_type_id] * len(second), len(first)
    return t.single_prefix + ids + t.single_suffix, [0] * (len(ids) + enc.block_overhead), len(t.single_prefix)


def check_batch(batch, groups, recorded, enc: Encoder, single: bool = False, title_in_query: bool | None = None):
    """Every structural property of a batch, against the masks mask_group actually produced."""
    mask_id = enc.tokenizer.mask_token_id
    per_span = 1 if single else 2
    blocks = [b for g in groups for b in g]
    masked = [mb for out in recorded for mb in out]
    group_of = [gi for gi, g in enumerate(groups) for _ in g]
    base_of = [sum(len(g) for g in groups[:gi]) for gi in group_of]
    assert len(recorded) == len(groups) and len(masked) == len(blocks)
    B = len(blocks)
    lq, lc = batch.q_ids.shape[1], batch.c_ids.shape[1]
    assert batch.q_ids.shape[0] == batch.c_ids.shape[0] == B
    q_flat, c_flat = batch.q_ids.reshape(-1), batch.c_ids.reshape(-1)

    # candidates: every block token, exactly, in order; titles and special tokens are context only
    n = sum(len(b.ids) for b in blocks)
    assert batch.cand_at.shape == batch.cand_seq.shape == (n,)
    cand_first = []
    for s, block in enumerate(blocks):
        seq, types, first = _layout(
            enc, block.ids.tolist(), block.title_ids.tolist() if block.title_ids is not None else None
        )
        assert batch.c_ids[s, : len(seq)].tolist() == seq
        assert batch.c_types[s, : len(seq)].tolist() == types
        assert batch.c_attn[s].tolist() == [1] * len(seq) + [0] * (lc - len(seq))
        assert torch.all(batch.c_ids[s, len(seq) :] == enc.pad_id)
        cols = torch.nonzero(batch.cand_seq == s).flatten()
        assert cols.tolist() == list(range(cols[0].item(), cols[0].item() + len(block.ids)))
        cand_first.append(cols[0].item())
        assert batch.cand_at[cols].tolist() == [s * lc + first + p for p in range(len(block.ids))]
        assert c_flat[batch.cand_at[cols]].tolist() == block.ids.tolist()
    special = set(enc.tokenizer.all_special_ids)
    assert not special & set(c_flat[batch.cand_at].tolist())
    assert batch.c_attn.reshape(-1)[batch.cand_at].all()

    # queries: the masked block, MASK_s (MASK_e) at start_at (end_at), one row per span in order
    rows = [(s, pos, span) for s, mb in enumerate(masked) for pos, span in zip(mb.mask_positions, mb.spans)]
    m = len(rows)
    assert batch.masks == m
    assert batch.start_at.shape == batch.end_at.shape == batch.q_seq.shape == (m,)
    assert batch.pos_start.shape == batch.pos_end.shape == (m, n)
    assert int((batch.q_ids == mask_id).sum()) == per_span * m
    firsts_q = {}
    for s, (block, mb) in enumerate(zip(blocks, masked)):
        full = int(batch.q_attn[s].sum())
        title = block.title_ids.tolist() if block.title_ids is not None else []
        if full == len(mb.ids) + enc.block_overhead:
            has_title = False
        else:
            assert title and full == len(mb.ids) + enc.pair_overhead + len(title)
            has_title = True
        if title_in_query is not None:
            assert has_title == title_in_query
        seq, types, firsts_q[s] = _layout(enc, mb.ids, title if has_title else None)
        assert batch.q_ids[s, : len(seq)].tolist() == seq
        assert batch.q_types[s, : len(seq)].tolist() == types
        assert batch.q_attn[s].tolist() == [1] * len(seq) + [0] * (lq - len(seq))
    for r, (s, pos, span) in enumerate(rows):
        assert batch.q_seq[r].item() == s
        assert batch.start_at[r].item() == s * lq + firsts_q[s] + pos
        assert batch.end_at[r].item() == batch.start_at[r].item() + (0 if single else 1)
        assert q_flat[batch.start_at[r]].item() == mask_id and q_flat[batch.end_at[r]].item() == mask_id
        ids = blocks[s].ids
        length = span.end - span.start + 1
        want_s = {cand_first[base_of[s] + ob] + p for ob, p in span.positives}
        want_e = {cand_first[base_of[s] + ob] + p + length - 1 for ob, p in span.positives}
        got_s = set(torch.nonzero(batch.pos_start[r]).flatten().tolist())
        got_e = set(torch.nonzero(batch.pos_end[r]).flatten().tolist())
        assert got_s == want_s and got_e == want_e and got_s
        cols_s, cols_e = sorted(got_s), sorted(got_e)
        assert (c_flat[batch.cand_at[cols_s]] == int(ids[span.start])).all()
        assert (c_flat[batch.cand_at[cols_e]] == int(ids[span.end])).all()
        # never in the query's own sequence, always in its own group
        assert (batch.cand_seq[cols_s] != s).all() and (batch.cand_seq[cols_e] != s).all()
        assert {group_of[q] for q in batch.cand_seq[cols_s + cols_e].tolist()} == {group_of[s]}
    assert batch.tokens == int(batch.q_attn.sum() + batch.c_attn.sum())


# ---------------------------------------------------------------- make_batch


def test_batch_structure_bert(bert, recorder):
    groups = make_groups(bert)
    cfg = MaskingConfig(budget=0.3)
    total = 0
    for seed in range(4):
        recorder.clear()
        batch = make_batch(groups, bert, np.random.default_rng(seed), BatchConfig(cfg, query_title_dropout=0.5))
        check_batch(batch, groups, recorder, bert)
        total += batch.masks
    assert total >= 8


def test_batch_structure_roberta(roberta, recorder):
    groups = make_groups(roberta)
    recorder.clear()
    cfg = BatchConfig(MaskingConfig(budget=0.3), query_title_dropout=0.0)
    batch = make_batch(groups, roberta, np.random.default_rng(0), cfg)
    check_batch(batch, groups, recorder, roberta, title_in_query=True)
    assert batch.masks > 0


def test_masked_spans_become_two_masks_at_start_at(bert, recorder):
    groups = make_groups(bert)
    cfg = BatchConfig(MaskingConfig(budget=0.3), query_title_dropout=1.0)
    batch = make_batch(groups, bert, np.random.default_rng(3), cfg)
    mask_id = bert.tokenizer.mask_token_id
    q = batch.q_ids.reshape(-1)
    assert batch.masks > 0
    assert (q[batch.start_at] == mask_id).all()
    assert (q[batch.start_at + 1] == mask_id).all()
    assert torch.equal(batch.end_at, batch.start_at + 1)
    assert int((batch.q_ids == mask_id).sum()) == 2 * batch.masks


def test_positive_columns_hold_first_and_last_span_tokens(bert, recorder):
    groups = make_groups(bert)
    cfg = BatchConfig(MaskingConfig(budget=0.3), query_title_dropout=1.0)
    batch = make_batch(groups, bert, np.random.default_rng(1), cfg)
    blocks = [b for g in groups for b in g]
    spans = [sp for out in recorder for mb in out for sp in mb.spans]
    seq_of_row = batch.q_seq.tolist()
    c = batch.c_ids.reshape(-1)
    assert len(spans) == batch.masks > 0
    for r, span in enumerate(spans):
        ids = blocks[seq_of_row[r]].ids
        cs = torch.nonzero(batch.pos_start[r]).flatten()
        ce = torch.nonzero(batch.pos_end[r]).flatten()
        assert len(cs) == len(ce) == len(span.positives) > 0
        assert (c[batch.cand_at[cs]] == int(ids[span.start])).all()
        assert (c[batch.cand_at[ce]] == int(ids[span.end])).all()
        assert (batch.cand_seq[cs] != seq_of_row[r]).all()
    assert batch.pos_start.sum() > 0


def test_query_title_dropout(bert, recorder):
    groups = make_groups(bert)
    cfg = MaskingConfig(budget=0.3)
    drop = make_batch(groups, bert, np.random.default_rng(0), BatchConfig(cfg, query_title_dropout=1.0))
    check_batch(drop, groups, recorder, bert, title_in_query=False)
    assert (drop.q_types == 0).all()
    blocks = [b for g in groups for b in g]
    for s, b in enumerate(blocks):  # query = [CLS] masked block [SEP]; candidates keep the title
        assert drop.q_ids[s, 0].item() == bert.tokenizer.cls_token_id
        n_title = len(b.title_ids)
        assert drop.c_ids[s, 1 : 1 + n_title].tolist() == b.title_ids.tolist()
        assert drop.c_types[s].max().item() == 1
    recorder.clear()
    keep = make_batch(groups, bert, np.random.default_rng(0), BatchConfig(cfg, query_title_dropout=0.0))
    check_batch(keep, groups, recorder, bert, title_in_query=True)
    assert (keep.q_types.max(dim=1).values == 1).all()
    # candidates are identical whatever the query title dropout
    assert torch.equal(drop.c_ids, keep.c_ids) and torch.equal(drop.cand_at, keep.cand_at)


def test_untitled_rate_drops_titles_on_both_sides(bert):
    groups = make_groups(bert)
    cfg = MaskingConfig(budget=0.3)
    blocks = [b for g in groups for b in g]
    none = make_batch(
        groups, bert, np.random.default_rng(0), BatchConfig(cfg, query_title_dropout=0.0, untitled_rate=1.0)
    )
    assert (none.q_types == 0).all() and (none.c_types == 0).all()  # no title segment anywhere
    for s, b in enumerate(blocks):  # candidates: [CLS] block [SEP]
        assert none.c_ids[s, 1 : 1 + len(b.ids)].tolist() == b.ids.tolist()
    default = make_batch(groups, bert, np.random.default_rng(0), BatchConfig(cfg, query_title_dropout=0.0))
    zero = make_batch(
        groups, bert, np.random.default_rng(0), BatchConfig(cfg, query_title_dropout=0.0, untitled_rate=0.0)
    )
    assert torch.equal(default.q_ids, zero.q_ids) and torch.equal(default.c_ids, zero.c_ids)  # same stream
    some = make_batch(
        groups, bert, np.random.default_rng(3), BatchConfig(cfg, query_title_dropout=0.0, untitled_rate=0.5)
    )
    titled = some.c_types.max(dim=1).values == 1
    assert 0 < int(titled.sum()) < len(blocks)  # seeded: some blocks keep their title, some do not


def test_single_mode(bert, recorder):
    groups = make_groups(bert)
    batch = make_batch(
        groups,
        bert,
        np.random.default_rng(2),
        BatchConfig(MaskingConfig(budget=0.3, max_span=1), query_title_dropout=0.5, single=True),
    )
    check_batch(batch, groups, recorder, bert, single=True)
    assert batch.masks > 0
    assert torch.equal(batch.end_at, batch.start_at)
    assert int((batch.q_ids == bert.tokenizer.mask_token_id).sum()) == batch.masks
    assert torch.equal(batch.pos_start, batch.pos_end)  # one-token spans


def test_deterministic_for_a_seed(bert):
    groups = make_groups(bert)
    a = make_batch(groups, bert, np.random.default_rng(7), BatchConfig(MaskingConfig(budget=0.3)))
    b = make_batch(groups, bert, np.random.default_rng(7), BatchConfig(MaskingConfig(budget=0.3)))
    for name in ("q_ids", "q_types", "c_ids", "start_at", "end_at", "cand_at", "pos_start", "pos_end"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_batch_without_shared_ngrams(bert):
    groups = make_groups(bert, [[("A", "Alpha beta gamma."), ("B", "Delta epsilon zeta!")]])
    batch = make_batch(groups, bert, np.random.default_rng(0), BatchConfig(MaskingConfig()))
    assert batch.masks == 0
    assert batch.pos_start.shape == (0, batch.cand_at.numel())
    assert (batch.q_ids == bert.tokenizer.mask_token_id).sum() == 0


# ---------------------------------------------------------------- content spans, documents, windows


def test_content_spans_only(bert, recorder):
    # blocks sharing only function words and punctuation, plus one content word ("museum")
    groups = make_groups(
        bert,
        [
            [
                ("", "It was the one of the, and it was the museum of them."),
                ("", "The other of the two, and the museum is in it."),
                ("", "And so it is the, as it was in the one."),
            ]
        ],
    )
    content = content_token_mask(bert.tokenizer)
    cfg = BatchConfig(MaskingConfig(budget=0.5))
    stop_only = 0
    for seed in range(30):
        recorder.clear()
        batch = make_batch(groups, bert, np.random.default_rng(seed), cfg, content=content)
        check_batch(batch, groups, recorder, bert)
        blocks = [b for g in groups for b in g]
        for mb, block in zip(recorder[0], blocks):
            for span in mb.spans:
                assert content[block.ids[span.start : span.end + 1]].any()
        recorder.clear()
        make_batch(groups, bert, np.random.default_rng(seed), cfg, content=None)
        for mb, block in zip(recorder[0], blocks):
            stop_only += sum(not content[block.ids[s.start : s.end + 1]].any() for s in mb.spans)
    assert stop_only > 0  # without the content mask, function-word spans do get masked
    assert {"the", "of", "and", "is"} <= set(STOPWORDS)


def test_by_document_positives_stay_inside_a_document(bert):
    """Two copies of a block (one document) plus another document sharing phrases: positives never cross."""
    (group,) = make_groups(bert, [GROUPS[0][:2]])
    a, b = group
    views = [
        TrainBlock(a.ids, a.flags, a.title_ids, doc=0),
        TrainBlock(a.ids, a.flags, a.title_ids, doc=0),
        TrainBlock(b.ids, b.flags, b.title_ids, doc=1),
    ]
    cfg = BatchConfig(MaskingConfig(budget=0.3), by_document=True)
    for seed in range(5):
        batch = make_batch([views], bert, np.random.default_rng(seed), cfg)
        assert batch.masks > 0
        rows, cols = torch.nonzero(batch.pos_start | batch.pos_end, as_tuple=True)
        q_doc = torch.tensor([v.doc for v in views])[batch.q_seq[rows]]
        c_doc = torch.tensor([v.doc for v in views])[batch.cand_seq[cols]]
        assert (q_doc == c_doc).all() and (batch.q_seq[rows] != batch.cand_seq[cols]).all()
        assert set(batch.q_seq.tolist()) <= {0, 1}  # the lone document has nothing to mask


def test_self_positives_and_query_windows(bert, recorder):
    """Queries are windows of their masked block; a span's positive is its own position in the candidates."""
    groups = [
        [TrainBlock(b.ids, b.flags, b.title_ids, doc=10 * g + i) for i, b in enumerate(group)]
        for g, group in enumerate(make_groups(bert))
    ]
    blocks = [b for g in groups for b in g]
    mask_id = bert.tokenizer.mask_token_id
    for seed in range(10):
        recorder.clear()
        batch = make_batch(
            groups,
            bert,
            np.random.default_rng(seed),
            BatchConfig(
                MaskingConfig(budget=0.3),
                query_title_dropout=1.0,
                by_document=True,
                include_self=True,
                query_window=8,
                query_views=2,
            ),
        )
        assert batch.own_allowed.all() and batch.masks > 0
        assert batch.q_ids.shape[0] == 2 * len(blocks) and batch.c_ids.shape[0] == len(blocks)
        assert len(recorder) == 2 * len(groups)  # one masking per group and query view
        q_flat, c_flat = batch.q_ids.reshape(-1), batch.c_ids.reshape(-1)
        assert (q_flat[batch.start_at] == mask_id).all() and (q_flat[batch.end_at] == mask_id).all()
        assert int(batch.q_attn.sum(1).max()) <= 8 + 2 * 4 + bert.block_overhead  # a window; masks add <= 1 each
        # query rows come group by group, view by view, block by block, span by span
        expected = []
        for g, group in enumerate(groups):
            base = sum(len(x) for x in groups[:g])
            for calls in recorder[2 * g : 2 * g + 2]:
                for local, mb in enumerate(calls):
                    expected += [(base + local, s) for s in mb.spans]
        assert len(expected) == batch.masks
        for row, (seq, span) in enumerate(expected):
            assert int(batch.q_seq[row]) == seq
            (cols,) = torch.nonzero(batch.pos_start[row], as_tuple=True)
            (end_cols,) = torch.nonzero(batch.pos_end[row], as_tuple=True)
            assert (batch.cand_seq[cols] == seq).all()  # one document per block: positives in its own block
            ids = blocks[seq].ids
            assert [(int(c_flat[batch.cand_at[c]])) for c in cols] == [int(ids[span.start])] * len(cols)
            assert int(ids[span.end]) in {int(c_flat[batch.cand_at[c]]) for c in end_cols}
            assert len(cols) == len(span.positives)


def test_alternate_views_mix_self_and_npm_positives(bert):
    """`alternate`: even query views have self positives (own block allowed), odd views NPM's (other blocks only)."""
    groups = [
        [TrainBlock(b.ids, b.flags, b.title_ids, doc=10 * g + i) for i, b in enumerate(group)]
        for g, group in enumerate(make_groups(bert))
    ]
    n_blocks = sum(len(g) for g in groups)
    cfg = BatchConfig(
        MaskingConfig(budget=0.3),
        query_title_dropout=1.0,
        by_document=True,
        include_self=True,
        query_views=2,
        alternate=True,
    )
    seen_npm = seen_self = 0
    for seed in range(8):
        batch = make_batch(groups, bert, np.random.default_rng(seed), cfg)
        assert batch.q_ids.shape[0] == 2 * n_blocks
        own = batch.own_allowed
        rows, cols = torch.nonzero(batch.pos_start | batch.pos_end, as_tuple=True)
        same_block = batch.q_seq[rows] == batch.cand_seq[cols]
        # a query row whose own block is not allowed never has a positive there; self rows always do
        assert not (same_block & ~own[rows]).any()
        for r in torch.nonzero(own).flatten().tolist():
            assert (same_block & (rows == r)).any()
        seen_npm += int((~own).sum())
        seen_self += int(own.sum())
    assert seen_npm > 0 and seen_self > 0
