#!/usr/bin/env bash
# All four systems of the KALA paper (vanilla, +1 layer, pointwise, relational) on the main job's CoNLL-2003
# subset and KG (FB15k-237), seeds 1 2 3 (CPU scale). Results: outputs/compare/seed<N>/summary.json, then a
# mean ± std table from harness/summarize_runs.py. Other datasets: harness/experiments.py --preset wnut|ncbi|squad.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m harness.experiments --preset conll --kg "fb15k237:../shared/data/kg/fb15k-237" \
  --output_dir outputs/compare --seeds ${KEPLM_SEEDS:-1 2 3} "$@"
"$PY" -m harness.summarize_runs outputs/compare/seed*/summary.json
