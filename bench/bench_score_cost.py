"""What a closed-set score costs against a default fill, in process: the budget's cost
(fill.budget.Budget.cost) must track the measured time, so that no accepted /score is heavier than the heavy
lane's guarantee says.

    python -m bench.bench_score_cost --index data-local/eval/default_model/idx_imdb [--repeats 5] [--json OUT]

Each request is run --repeats times after one warm-up; printed per request: the median ms, that over the default
fill's median (a one-mask hybrid fill with the default fields), the budget's cost, the phrase matches
(masks x queries x retrieved tokens x phrase lookups) and whether the default budget accepts it. The phrases
are distinct words of the index's own documents, so they match as often as real verbalizers do.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from common.errors import AppError
from fill.budget import Budget
from fill.engine import FillEngine
from fill.schemas import FillRequest, ScoreRequest
from service.config import Settings

SENTENCE = "The film was <mask> and the acting was good ."


def words_of(engine: FillEngine, n: int) -> list[str]:
    """n distinct lower-case words of the index's first documents."""
    seen: dict[str, None] = {}
    for shard in engine.index.shards:
        for text in shard.docs.column("text").to_pylist():
            for w in re.findall(r"[a-z]{3,12}", text.lower()):
                seen.setdefault(w)
                if len(seen) == n:
                    return list(seen)
    return list(seen)


def requests(words: list[str]) -> dict[str, FillRequest | ScoreRequest]:
    def choices(labels: int, phrases: int) -> list[dict]:
        return [{"label": f"c{c}", "phrases": words[c * phrases : (c + 1) * phrases]} for c in range(labels)]

    masks16 = " ".join(["<mask>"] * 16) + " ."
    heavy = {"mode": "hybrid", "k": 512, "blocks": 6, "evidence": 0}
    return {
        "default fill (unit)": FillRequest(text=SENTENCE),
        "score, 2 choices, defaults": ScoreRequest(text=SENTENCE, choices=["great", "terrible"]),
        "score, 64 x 16 phrases, defaults": ScoreRequest(text=SENTENCE, choices=choices(64, 16)),
        "score, 64 x 32 phrases, defaults": ScoreRequest(text=SENTENCE, choices=choices(64, 32)),
        "score, 16 masks, 2 choices, hybrid k 512 blocks 6": ScoreRequest(
            text=masks16, choices=["great", "terrible"], **heavy
        ),
        "score, 16 masks, 64 x 16, hybrid k 512 blocks 6 (at the matches budget)": ScoreRequest(
            text=masks16, choices=choices(64, 16), **heavy
        ),
        "score, 16 masks, 64 x 32, hybrid k 512 blocks 6 (the outside run's, evidence 0)": ScoreRequest(
            text=masks16, choices=choices(64, 32), **heavy
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings(index=args.index)
    engine = FillEngine.open(settings.engine_config())
    budget = Budget(settings.max_candidates, settings.max_evidence, settings.max_search, settings.max_matches)
    block_tokens = engine.index.manifest.build.block_tokens
    rows, unit = [], None
    for name, request in requests(words_of(engine, 64 * 32)).items():
        run = engine.fill if isinstance(request, FillRequest) else engine.score
        planned = engine.plan(request)
        mode, phrases = planned.mode, planned.phrases  # (the server counts a score's tokenized phrases)
        run(request)
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            run(request)
            times.append((time.perf_counter() - t) * 1000)
        ms = statistics.median(times)
        unit = unit or ms
        try:
            budget.check(request, mode, block_tokens, phrases)
            accepted = "yes"
        except AppError as exc:
            accepted = "no: " + exc.message.split(",")[0]
        rows.append(
            {
                "request": name,
                "ms": round(ms, 1),
                "default_fills": round(ms / unit, 2),
                "weight": round(Budget.cost(request, mode, block_tokens, phrases), 2),
                "matches": Budget.matches(request, mode, block_tokens, phrases),
                "accepted": accepted,
            }
        )
        print(
            f"| {name} | {ms:.1f} | {ms / unit:.2f} | {rows[-1]['weight']} | {rows[-1]['matches']:,} | {accepted} |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    engine.close()


if __name__ == "__main__":
    main()
