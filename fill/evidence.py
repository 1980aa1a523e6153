"""Evidence: where the shown phrases occur. The only stage after the candidates that reads a shard again
(document ids and texts), and only for the occurrences it returns."""

from __future__ import annotations

from dataclasses import dataclass

from fill.ranker import CandidatePool
from fill.schemas import Evidence

CONTEXT_CHARS = 80


def context_window(text: str, start: int, end: int, width: int = CONTEXT_CHARS) -> str:
    """The phrase with up to `width` chars either side, cut at white space, '...' marking cuts."""
    a, b = max(0, start - width), min(len(text), end + width)
    if a > 0:
        space = text.find(" ", a, start)
        a = space + 1 if space != -1 else a
    if b < len(text):
        space = text.rfind(" ", end, b)
        b = space if space != -1 else b
    snippet = " ".join(text[a:b].split())
    return ("... " if a > 0 else "") + snippet + (" ..." if b < len(text) else "")


@dataclass
class Occurrence:
    doc_id: str
    block: int  # global block number
    start: int  # the phrase's chars in the document text
    end: int
    text: str  # the document text


class EvidenceReader:
    """Locates the spans of one mask's pool in their documents (each document read once)."""

    def __init__(self, shards: list, pool: CandidatePool) -> None:
        self.shards = shards
        self.pool = pool
        self._texts: dict[tuple[int, int], str] = {}

    def locate(self, i: int) -> Occurrence:
        part, j = self.pool.where(i)
        shard, row = self.shards[part.shard_no], int(part.row[j])
        text = self._texts.get((part.shard_no, row))
        if text is None:
            text = self._texts[(part.shard_no, row)] = shard.doc_text(row)
        start = int(part.char[j])
        return Occurrence(shard.doc_id(row), int(part.block[j]), start, start + int(part.keys.length[j]), text)

    def evidence(self, occurrences: list[int], limit: int) -> list[Evidence]:
        """Up to `limit` occurrences (pool spans, best first) as evidence, each place in a document once."""
        out, seen = [], set()
        for i in occurrences:
            if len(out) >= limit:
                break
            o = self.locate(i)
            if (o.doc_id, o.start, o.end) in seen:
                continue
            seen.add((o.doc_id, o.start, o.end))
            out.append(Evidence(doc_id=o.doc_id, block=o.block, start=o.start, end=o.end,
                                context=context_window(o.text, o.start, o.end), score=float(self.pool.score[i])))
        return out
