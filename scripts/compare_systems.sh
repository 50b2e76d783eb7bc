#!/usr/bin/env bash
# All four systems of the KALA paper (vanilla, +1 layer, pointwise, relational) on the main job's CoNLL-2003
# subset, for several seeds (CPU scale). Each seed is one main-job run with KEPLM_SYSTEMS set; the summaries
# land in outputs/compare/seed<N>/summary.json and scripts/summarize_runs.py turns them into mean ± std.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${KEPLM_SEEDS:-"1 2 3"}
for seed in $seeds; do
  KEPLM_SEED=$seed KEPLM_SYSTEMS=${KEPLM_SYSTEMS:-vanilla,more_params,pointwise,relational} \
    KEPLM_OUTPUT_DIR=outputs/compare/seed$seed bash scripts/main_job.sh
done
"${PYTHON:-.venv/bin/python}" scripts/summarize_runs.py outputs/compare/seed*/summary.json
