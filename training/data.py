"""Training data for the NPM objective: groups of consecutive blocks, masked into query/candidate batches."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.errors import AppError
from corpus.blocking import iter_blocks
from corpus.readers import read_corpus
from corpus.tokens import WORD_END, WORD_START
from encoder.model import BlockInput, pad_sequences
from encoder.stopwords import STOPWORDS
from training.masking import MaskedBlock, MaskingConfig, mask_group
from training.salient import salient_spans

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainBlock:
    ids: np.ndarray  # int32 block tokens
    flags: np.ndarray  # uint8 word-boundary flags
    title_ids: np.ndarray | None
    doc: int = -1  # document number across all corpora (blocks of one document share it)
    salient: np.ndarray | None = None  # inclusive token ranges of entity-like runs (`training.salient`)
    key: str = ""  # the document's id in its corpus


def load_blocks(
    corpora: list[Path],
    tokenizer,
    block_tokens: int,
    title_tokens: int,
    max_span: int = 10,
    listed: frozenset[str] = frozenset(),
) -> list[TrainBlock]:
    """All blocks of all corpora, in corpus order (so consecutive blocks are related).

    Each block carries its salient spans of at most `max_span` tokens, read from the text (`listed`: words
    that are salient spans too, see `training.salient`).
    """
    blocks: list[TrainBlock] = []
    for path in corpora:
        base = blocks[-1].doc + 1 if blocks else 0
        for b in iter_blocks(read_corpus(path), tokenizer, block_tokens, title_tokens):
            t = b.tokens
            blocks.append(
                TrainBlock(
                    ids=t.ids,
                    flags=t.flags,
                    title_ids=b.title_ids,
                    doc=base + b.doc.row,
                    salient=salient_spans(b.doc.text or "", t.offsets, t.flags, max_span, listed),
                    key=b.doc.id,
                )
            )
        logger.info("loaded %s: %d blocks so far", path, len(blocks))
    return blocks


def read_word_list(path: Path) -> frozenset[str]:
    """A salient-word list: one word a line (lower-cased here; blank lines and `#` comments skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise AppError(
            f"salient word list {path}: cannot read it ({exc}); give a UTF-8 file of one word a line "
            "(recipes/salient_words.py writes one)"
        ) from exc
    words = frozenset(w.strip().lower() for w in lines if w.strip() and not w.lstrip().startswith("#"))
    if not words:
        raise AppError(f"salient word list {path} holds no word: give one word a line")
    return words


def content_token_mask(tokenizer) -> np.ndarray:
    """bool per vocabulary id: True when the token carries content (has a letter or digit, not a stopword)."""
    vocab = tokenizer.get_vocab()
    content = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, idx in vocab.items():
        content[idx] = any(ch.isalnum() for ch in token)
    for word in STOPWORDS:
        for variant in (word, " " + word, word.capitalize(), " " + word.capitalize()):
            ids = tokenizer(variant, add_special_tokens=False)["input_ids"]
            if len(ids) == 1:
                content[ids[0]] = False
    for idx in tokenizer.all_special_ids:
        content[idx] = False
    return content


@dataclass
class Batch:
    q_ids: torch.Tensor  # [B, Lq] masked sequences (queries)
    q_attn: torch.Tensor
    q_types: torch.Tensor
    c_ids: torch.Tensor  # [B, Lc] unmasked sequences (candidates)
    c_attn: torch.Tensor
    c_types: torch.Tensor
    start_at: torch.Tensor  # [M] flat index (b * Lq + pos) of each MASK_s
    end_at: torch.Tensor  # [M] flat index of each MASK_e (the next token; the same one for NPM-single)
    cand_at: torch.Tensor  # [N] flat index (b * Lc + pos) of each candidate token
    cand_seq: torch.Tensor  # [N] sequence of each candidate
    q_seq: torch.Tensor  # [M] sequence of each query
    cand_doc: torch.Tensor  # [N] document number of each candidate's block
    q_doc: torch.Tensor  # [M] document number of each query's block
    pos_start: torch.Tensor  # bool [M, N]
    pos_end: torch.Tensor  # bool [M, N]
    own_allowed: torch.Tensor | None = None  # bool [M]: may each query match tokens of its own block (include_self)?

    @property
    def masks(self) -> int:
        return int(self.start_at.numel())

    @property
    def tokens(self) -> int:
        return int(self.q_attn.sum() + self.c_attn.sum())


def choose_window(flags: np.ndarray, rng: np.random.Generator, width: int) -> tuple[int, int]:
    """A random word-aligned token range [a, b) of about `width // 2 .. width` tokens (the whole block if shorter)."""
    n = len(flags)
    if n <= width:
        return 0, n
    length = int(rng.integers(max(1, width // 2), width + 1))
    starts = np.flatnonzero(flags[: n - length + 1] & WORD_START)
    a = int(starts[rng.integers(len(starts))]) if len(starts) else 0
    ends = np.flatnonzero(flags[a : a + length] & WORD_END)
    b = a + int(ends[-1]) + 1 if len(ends) else min(n, a + length)
    return a, b


@dataclass(frozen=True)
class BatchConfig:
    """How `make_batch` masks a group and lays out its queries (the defaults besides `masking` are NPM's).

    With `by_document` a span's positives are only its occurrences in blocks of the SAME document
    (e.g. another view of the block); the same phrase elsewhere in the batch is a negative.

    With `include_self` a query may also match its own block's unmasked copy, and the span's own
    position there is a positive (with `by_document`, so are its other occurrences in the document).

    With `query_window` each query is a random window of the masked block of at most that many
    tokens (spans are masked inside it), so queries are short like real fill queries; the
    candidates stay whole blocks. `query_views` masked queries are drawn per block. With
    `inline_title` a query's title (when kept) is written in front of its text as one segment,
    the way a user writes a subject into a query, instead of as a separate first segment.

    With `untitled_rate` a share of the blocks is seen without its title on BOTH sides (queries and
    candidates), as in a corpus without titles.

    With `alternate` the query views of a block alternate between the two objectives: even views as
    set above (`by_document`, `include_self`), odd views with NPM's own positives (the n-gram's occurrences
    in the OTHER blocks of the group, any document; the query may not match its own block). The first
    rewards reading a passage again, the second predicting a phrase from context (what closed-set
    scoring and text the index does not hold need); with self positives alone a query can match its own
    context and never learn what the masked phrase is.

    With `single` (NPM-single) each masked token is one mask token, and the "end" query is the
    same output as the start query.
    """

    masking: MaskingConfig
    query_title_dropout: float = 0.5  # chance that a query is laid out without its block's title
    single: bool = False
    by_document: bool = False
    include_self: bool = False
    query_window: int = 0
    query_views: int = 1
    inline_title: bool = False
    untitled_rate: float = 0.0
    alternate: bool = False


def make_batch(
    groups: list[list[TrainBlock]],
    encoder,
    rng: np.random.Generator,
    cfg: BatchConfig,
    content: np.ndarray | None = None,
) -> Batch:
    """Mask each group; queries are the masked blocks, candidates every token of the unmasked blocks.

    `content` (bool per vocabulary id, `content_token_mask`) lets only spans holding a content token be
    masked. The options are `BatchConfig`'s."""
    allowed = None if content is None else (lambda key: bool(content[list(key)].any()))
    rows = BatchRows(encoder, cfg, allowed)
    for group in groups:
        if cfg.untitled_rate > 0:  # drawn only when asked for: the default keeps the random stream unchanged
            group = [
                TrainBlock(b.ids, b.flags, None, b.doc, b.salient) if rng.random() < cfg.untitled_rate else b
                for b in group
            ]
        for view in range(cfg.query_views):
            rows.add_queries(group, rng, npm_view=cfg.alternate and view % 2 == 1)
        rows.add_candidates(group)
    return rows.batch()


class BatchRows:
    """The sequences of a batch and where its queries, candidates and positives lie, group by group."""

    def __init__(self, encoder, cfg: BatchConfig, allowed) -> None:
        self.encoder, self.cfg, self.allowed = encoder, cfg, allowed
        self.q_seqs: list[list[int]] = []
        self.q_types: list[list[int]] = []
        self.c_seqs: list[list[int]] = []
        self.c_types: list[list[int]] = []
        self.starts: list[tuple[int, int]] = []  # (query sequence, position of MASK_s)
        self.q_seq: list[int] = []  # block (candidate sequence) each query row comes from
        self.q_doc: list[int] = []
        self.q_own: list[bool] = []  # may the query row match its own block?
        self.cand_doc: list[int] = []
        self.cand_first: list[int] = []  # offset of each sequence's block tokens in the candidate list
        self.cand_at: list[tuple[int, int]] = []  # (candidate sequence, position)
        self.cand_seq: list[int] = []
        self.pending: list[tuple[int, int, int, int]] = []  # (query row, block in batch, start, length)
        self.seq_base = 0  # batch number of the current group's first block

    def add_queries(self, group: list[TrainBlock], rng: np.random.Generator, npm_view: bool = False) -> None:
        """One masked query per block of the group (one `mask_group` over the group, within windows if asked).

        `npm_view`: NPM's positives for this view (other blocks of the group), whatever the config says."""
        cfg = self.cfg
        by_document, include_self = (False, False) if npm_view else (cfg.by_document, cfg.include_self)
        regions = [choose_window(b.flags, rng, cfg.query_window) for b in group] if cfg.query_window > 0 else None
        masked = mask_group(
            [b.ids for b in group],
            [b.flags for b in group],
            self.encoder.tokenizer.mask_token_id,
            rng,
            cfg.masking,
            self.allowed,
            1 if cfg.single else 2,
            docs=[b.doc for b in group] if by_document else None,
            include_self=include_self,
            regions=regions,
            salient=[b.salient for b in group],
        )
        for local, (block, mb) in enumerate(zip(group, masked)):
            region = regions[local] if regions is not None else (0, len(block.ids))
            self._add_query(self.seq_base + local, block, mb, region, rng, include_self)

    def _add_query(
        self, seq: int, block: TrainBlock, mb: MaskedBlock, region: tuple[int, int], rng: np.random.Generator, own: bool
    ) -> None:
        """The query of a masked block cropped to `region`, its title kept or dropped; one query row per span."""
        a, b = region
        crop = mb.ids[a : len(mb.ids) - (len(block.ids) - b)]
        title = block.title_ids if rng.random() >= self.cfg.query_title_dropout else None
        if self.cfg.inline_title and title is not None and len(title):
            crop, a, title = title.tolist() + crop, a - len(title), None
        ids, types, first = self.encoder.layout(BlockInput(ids=np.asarray(crop, dtype=np.int64), prefix_ids=title))
        for pos, span in zip(mb.mask_positions, mb.spans):
            row = len(self.starts)
            self.starts.append((len(self.q_seqs), first + pos - a))
            self.q_seq.append(seq)
            self.q_doc.append(block.doc)
            self.q_own.append(own)
            for other, p in span.positives:
                self.pending.append((row, self.seq_base + other, p, span.end - span.start + 1))
        self.q_seqs.append(ids)
        self.q_types.append(types)

    def add_laid_out_query(self, ids: list[int], position: int, doc: int, positives) -> None:
        """A query laid out already (`Encoder.query_layout`: its MASK_s at `position`) with no block of its own in
        the batch, so every candidate may match it; `positives`: (block in batch, first token, last token)."""
        row = len(self.starts)
        self.starts.append((len(self.q_seqs), position))
        self.q_seq.append(-1)
        self.q_doc.append(doc)
        self.q_own.append(False)
        self.pending.extend((row, seq, first, last - first + 1) for seq, first, last in positives)
        self.q_seqs.append(ids)
        self.q_types.append([0] * len(ids))

    def add_candidates(self, group: list[TrainBlock]) -> None:
        """Every token of the group's unmasked blocks (their titles as context only); the next group follows."""
        for local, block in enumerate(group):
            seq = self.seq_base + local
            ids, types, first = self.encoder.layout(BlockInput(ids=block.ids, prefix_ids=block.title_ids))
            self.c_seqs.append(ids)
            self.c_types.append(types)
            self.cand_first.append(len(self.cand_at))
            self.cand_at.extend((seq, first + p) for p in range(len(block.ids)))
            self.cand_seq.extend([seq] * len(block.ids))
            self.cand_doc.extend([block.doc] * len(block.ids))
        self.seq_base += len(group)

    def positives(self) -> tuple[torch.Tensor, torch.Tensor]:
        """bool [M, N]: the candidates that are the first / the last token of each query's positives."""
        pos_s = [(row, self.cand_first[seq] + p) for row, seq, p, _ in self.pending]
        pos_e = [(row, self.cand_first[seq] + p + length - 1) for row, seq, p, length in self.pending]
        m, n = len(self.starts), len(self.cand_at)
        ps = torch.zeros((m, n), dtype=torch.bool)
        pe = torch.zeros((m, n), dtype=torch.bool)
        if pos_s:
            ps[tuple(torch.tensor(pos_s).T)] = True
            pe[tuple(torch.tensor(pos_e).T)] = True
        return ps, pe

    def batch(self) -> Batch:
        pad_id, end_shift = self.encoder.pad_id, 0 if self.cfg.single else 1
        q_ids, q_attn, q_ty = map(torch.from_numpy, pad_sequences(self.q_seqs, self.q_types, pad_id))
        c_ids, c_attn, c_ty = map(torch.from_numpy, pad_sequences(self.c_seqs, self.c_types, pad_id))
        pos_start, pos_end = self.positives()
        lq, lc = q_ids.shape[1], c_ids.shape[1]
        return Batch(
            q_ids=q_ids,
            q_attn=q_attn,
            q_types=q_ty,
            c_ids=c_ids,
            c_attn=c_attn,
            c_types=c_ty,
            start_at=torch.tensor([b * lq + p for b, p in self.starts], dtype=torch.long),
            end_at=torch.tensor([b * lq + p + end_shift for b, p in self.starts], dtype=torch.long),
            cand_at=torch.tensor([b * lc + p for b, p in self.cand_at], dtype=torch.long),
            cand_seq=torch.tensor(self.cand_seq, dtype=torch.long),
            q_seq=torch.tensor(self.q_seq, dtype=torch.long),
            cand_doc=torch.tensor(self.cand_doc, dtype=torch.long),
            q_doc=torch.tensor(self.q_doc, dtype=torch.long),
            pos_start=pos_start,
            pos_end=pos_end,
            own_allowed=torch.tensor(self.q_own, dtype=torch.bool),
        )
