"""How a reader calibration fitted on several kinds of text holds on each: per fitting set, the ECE of the top
fill (points, 10 bins, as fill-eval) for a calibration fitted on all the sets (in sample) and for one fitted
on the others (the set left out), with every feature and with some left out (docs/history/QUALITY.md, "The reader",
why the `overlap` feature):

    python -m recipes.calibration_sets data-local/reader/fills_wikidev.npz data-local/reader/fills_devcloze.npz \
        data-local/reader/fills_gre_trainb.npz [--modes hybrid restricted dense] [--drop overlap]

The files are fills saved by `fill-fit --part reader --save-fills` (recipes/train_reader.sh writes these three).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluation.calibration import calibration
from evaluation.fit import fit_confidence, load_fills
from fill.scoring import FEATURES


def set_eces(sets: dict[str, tuple[list, list]], fitted_on: list[str], tested_on: list[str]) -> dict[str, float]:
    """ECE of the top fill per set of `tested_on`, for a calibration fitted on the sets of `fitted_on`."""
    cal = fit_confidence([f for s in fitted_on for f in sets[s][0]], [lab for s in fitted_on for lab in sets[s][1]])
    out = {}
    for s in tested_on:
        feats, labels = sets[s]
        conf = [float(cal(f[:1])[0]) for f in feats if len(f)]
        ok = [bool(lab[0]) for f, lab in zip(feats, labels) if len(f)]
        out[s] = round(calibration(conf, ok)["ece"], 1)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fills", type=Path, nargs="+", help="fills of fill-fit --save-fills, one file per fitting set")
    ap.add_argument("--modes", nargs="+", default=["hybrid", "restricted", "dense"])
    ap.add_argument("--drop", nargs="*", default=[], choices=FEATURES, help="features left out (set to 0)")
    args = ap.parse_args(argv)
    drop = [FEATURES.index(f) for f in args.drop]
    names = [p.stem for p in args.fills]
    for mode in args.modes:
        sets = {}
        for name, path in zip(names, args.fills):
            feats, labels = load_fills(path, mode)
            for f in feats:
                f[:, drop] = 0.0  # a constant column: standardised to 0, it weighs nothing
            sets[name] = (feats, labels)
        in_sample = set_eces(sets, names, names)
        left_out = {s: set_eces(sets, [o for o in names if o != s], [s])[s] for s in names}
        print(f"{mode}: " + "; ".join(f"{s} in sample {in_sample[s]}, left out {left_out[s]}" for s in names))


if __name__ == "__main__":
    main()
