"""`fill-reader-data`: training examples for the reader (training.reader_train) from self-supervised cloze
queries over an index of TRAIN-side text (recipes/train_reader.sh).

    fill-reader-data --index DIR --probes queries.jsonl --out examples.jsonl [--window 10 --phrases 8]

For every query (one <mask>, its answers), the fill engine retrieves as it does for a fill (without the
reader) and picks the windows the reader would read (fill.reading: the same code); the example records them,
each one's document title (token ids, `--title-tokens`) and every span in them whose stripped text is an
answer. Queries whose answer is in no window give no example (their share is printed, "answer read": the
ceiling of what a reader can fix) unless `--unanswered` asks for them: then they are no-answer examples
(empty `gold`), as every query is with `--absent` (queries about subjects the index does not hold: the
relation's sentences about OTHER subjects are what the reader reads, and must not fill from). A reader
trained with such examples (`encoder train-reader --null`) scores "none of these" too.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import cast

import numpy as np
import typer
from pydantic import Field

from common.cli import model_command
from common.files import write_bytes_atomic
from common.process import single_thread_blas
from encoder.reader import ReadingSpec, TitleIds
from encoder.reader_files import ReaderCard, vocab_fingerprint
from evaluation.evaluate import load_probes, normalize
from fill.config import EngineConfig
from fill.engine import FillEngine
from fill.reading import MaskReading, plan_reading
from fill.schemas import FillOptions, FillRequest, Mode
from fill.shard_group import ShardGroup
from fill.windows import reader_parts

logger = logging.getLogger(__name__)


class ReaderDataConfig(EngineConfig):
    """Reader training examples from cloze queries over an index of training text."""

    index: Path = Field(description="index of the training text (the queries' own sentences left out)")
    probes: Path = Field(description='JSON lines {"relation", "query" (one <mask>), "answers"}')
    out: Path = Field(description="examples, JSON lines (encoder train-reader --examples)")
    mode: Mode | None = Field(None, description="retrieval mode (default: the engine's)")
    window: int = Field(10, ge=0, le=64, description="tokens read on either side of a candidate span")
    phrases: int = Field(8, ge=1, le=64, description="candidate phrases whose best occurrence is read")
    max_tokens: int = Field(160, ge=16, le=480, description="window tokens per query, at most")
    max_span_tokens: int = Field(10, ge=1, le=32)
    title_tokens: int = Field(
        10,
        ge=0,
        le=64,
        description="tokens of each window's document title recorded "
        "(`titles`) for a reader of titles (train-reader --title-tokens; 0: none)",
    )
    unanswered: bool = Field(
        False, description="also write queries whose answer is in no window, as no-answer examples (empty gold)"
    )
    absent: bool = Field(
        False,
        description="the queries' subjects are not in the index: every query is a "
        "no-answer example, whatever its windows hold",
    )
    use_reader: bool = Field(False, description="(retrieval only: the windows do not depend on a reader)")


def gold_spans(reading: MaskReading, answers: list[str]) -> list[list[int]]:
    """[window, i, j] of every span of the reading's windows whose stripped text is one of `answers`."""
    zeros = np.zeros(sum(len(w) for w in reading.item.windows))
    gold = {normalize(a) for a in answers}
    out = []
    for part in reader_parts(reading.spans, zeros, zeros):
        for j in range(part.size):
            if normalize(part.keys.text(j)) not in gold:
                continue
            first, last = int(part.first[j]), int(part.last[j])
            w = next(
                n for n, win in enumerate(reading.windows) if win.shard_no == part.shard_no and win.a <= first < win.b
            )
            out.append([w, first - reading.windows[w].a, last - reading.windows[w].a])
    return out


def examples(
    engine: FillEngine,
    probes: list[dict],
    spec: ReadingSpec,
    options: FillOptions,
    unanswered: bool = False,
    absent: bool = False,
) -> list[dict]:
    """The examples of the probes: one per probe whose answer is in its windows (with `unanswered`, one
    per probe; with `absent`, one per probe, none with gold spans)."""
    shards = cast(ShardGroup, engine.shards)  # opened by run, not elsewhere: its own ShardGroup (.shard)
    out = []
    for probe in probes:
        request = FillRequest(text=probe["query"], **options.model_dump(exclude={"reader"}), reader=False)
        prepared = engine.prepare([engine.plan(request)])[0]
        planned, ranked = prepared.planned, engine.retrieve(prepared, read=True)[0]
        reading = plan_reading(spec, shards, planned.ids, planned.mask_at[0], ranked[0], options.max_span_tokens)
        if reading is None:
            continue
        gold = [] if absent else gold_spans(reading, probe["answers"])
        if gold or unanswered or absent:
            out.append(
                {
                    "query_ids": planned.ids,
                    "mask_at": planned.mask_at[0],
                    "windows": [w.tolist() for w in reading.item.windows],
                    "flags": [np.asarray(shards.shard(w.shard_no).flags[w.a : w.b]).tolist() for w in reading.windows],
                    **({"titles": [t.tolist() for t in reading.item.titles]} if reading.item.titles else {}),
                    "gold": gold,
                    "answers": probe["answers"],
                    "query": probe["query"],
                }
            )
    return out


def run_reader_data(cfg: ReaderDataConfig) -> None:
    logging.basicConfig(level=logging.WARNING)
    probes = load_probes(cfg.probes)
    single_thread_blas()
    engine = FillEngine.open(cfg.engine_config())
    card = ReaderCard(
        vocab=vocab_fingerprint(engine.encoder.tokenizer),
        window=cfg.window,
        phrases=cfg.phrases,
        max_tokens=cfg.max_tokens,
        title_tokens=cfg.title_tokens,
    )
    spec = ReadingSpec(
        card,
        len(engine.encoder.template.single_suffix),
        engine.encoder.max_length,
        TitleIds(engine.encoder.tokenizer, cfg.title_tokens),
    )
    rows = examples(
        engine,
        probes,
        spec,
        FillOptions(mode=cfg.mode, max_span_tokens=cfg.max_span_tokens),
        cfg.unanswered,
        cfg.absent,
    )
    read = sum(1 for r in rows if r["gold"])
    write_bytes_atomic(cfg.out, "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
    print(
        f"{len(probes)} queries, answer read for {read} ({100 * read / max(len(probes), 1):.1f}%), "
        f"{len(rows) - read} no-answer examples -> {cfg.out}"
    )


app = typer.Typer(add_completion=False)
model_command(app, ReaderDataConfig, run_reader_data, name="fill-reader-data", env_prefix="FILL_READER_DATA_")


def main(argv: list[str] | None = None) -> None:
    app(args=argv, prog_name="fill-reader-data")


if __name__ == "__main__":
    main()
