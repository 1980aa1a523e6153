"""Top-1 agreement of two fill-eval prediction files over the same probes (e.g. int8 vs fp16 vectors), and the
paired micro EM@1 difference (b - a, in points) with its standard error (the spread of the per-probe differences).
Files of `fill-eval --task classify --out` (rows of text, predicted, correct) are compared the same way: the
predicted label is the top-1, correct the EM.

    python -m bench.compare_predictions data-local/pred_r4_080_dense.jsonl data-local/pred_r4_080_fp16_dense.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.shared import compare, fill_row, top


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = p.parse_args()
    a = [json.loads(line) for line in args.a.read_text(encoding="utf-8").splitlines()]
    b = [json.loads(line) for line in args.b.read_text(encoding="utf-8").splitlines()]
    a, b = [fill_row(r) for r in a], [fill_row(r) for r in b]
    if [r["query"] for r in a] != [r["query"] for r in b]:
        raise SystemExit("error: the two files hold different probes; run fill-eval with the same options")
    same = sum(top(x) == top(y) for x, y in zip(a, b))
    c = compare(a, b)
    print(
        f"top-1 agreement {same}/{len(a)} = {c['agreement']:.1f}%; "
        f"EM@1 {sum(r['em'] for r in a)} vs {sum(r['em'] for r in b)} probes; "
        f"paired micro EM diff {c['micro_em_diff']:+.1f} (SE {c['micro_em_diff_se']:.1f})"
    )


if __name__ == "__main__":
    main()
