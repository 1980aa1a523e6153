#!/usr/bin/env bash
# Engines against the torch path: the same fills through fill-eval with each engine, over indexes
# built with the torch path, then per engine and mode the share of probes whose top-1 fill is the torch
# path's, the macro EM@1 and the ECE:
#   bash bench/engine_agreement.sh            (ENGINES, MODES, SETS, IDX, MODEL, READER, OUT override)
# Defaults: the held Wikipedia-leads cloze (991) and Google-RE held (600) over the r15 held flat indexes that
# recipes/eval_encoder.sh builds (data-local/eval/r15), the bundled reader and scoring, one thread per process
# (OMP_NUM_THREADS=1; the engines' sessions take torch's thread count). Latencies in the reports are not
# the engines' speed (bench/engine_speed.py measures that on a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
ENGINES="${ENGINES:-torch onnx onnx-int8}"
MODES="${MODES:-hybrid}"
SETS="${SETS:-wiki_held gre_held}"
IDX="${IDX:-$WORK/eval/r15}"
MODEL="${MODEL:-encoder/default_model}"
OUT="${OUT:-$WORK/engines}"
mkdir -p "$OUT"
declare -A PROBES=([gre_held]="--probes $WORK/google_re/held/probes.jsonl --per-relation 200"
                   [wiki_held]="--probes $WORK/wiki_leads/held/probes.jsonl"
                   [debian]="--probes $WORK/debian/cloze.jsonl")
for engine in $ENGINES; do
    for mode in $MODES; do
        for set in $SETS; do
            # shellcheck disable=SC2086
            [ -f "$OUT/$engine.$mode.$set.json" ] || OMP_NUM_THREADS=1 "$VENV/bin/fill-eval" \
                --index "$IDX/idx_$set" --model "$MODEL" ${PROBES[$set]} --mode "$mode" --engine "$engine" \
                ${READER:+--reader-dir "$READER"} --report "$OUT/$engine.$mode.$set.json" \
                --out "$OUT/$engine.$mode.$set.jsonl" | tail -n 1
        done
    done
done
"$VENV/bin/python" - "$OUT" "$ENGINES" "$MODES" "$SETS" <<'EOF'
import json, sys
out, engines, modes, sets = sys.argv[1], *(a.split() for a in sys.argv[2:])
print(f"{'engine':<10} {'mode':<10} {'probes':>6} {'top-1 = torch':>13} " + " ".join(f"{s + ' EM':>14}" for s in sets)
      + " " + " ".join(f"{s + ' ECE':>14}" for s in sets))
for engine in engines:
    for mode in modes:
        same = n = 0
        ems, eces = [], []
        for s in sets:
            base = [json.loads(x) for x in open(f"{out}/torch.{mode}.{s}.jsonl", encoding="utf-8")]
            rows = [json.loads(x) for x in open(f"{out}/{engine}.{mode}.{s}.jsonl", encoding="utf-8")]
            same += sum(a["predictions"][:1] == b["predictions"][:1] for a, b in zip(base, rows))
            n += len(rows)
            rep = json.load(open(f"{out}/{engine}.{mode}.{s}.json", encoding="utf-8"))
            ems.append(rep["macro_em@1"])
            eces.append(rep["calibration"]["ece"])
        print(f"{engine:<10} {mode:<10} {n:>6} {100 * same / n:>13.1f} " + " ".join(f"{e:>14.1f}" for e in ems)
              + " " + " ".join(f"{e:>14.1f}" for e in eces))
EOF
