#!/usr/bin/env bash
# Main job: train + evaluate KALA (relational, FB15k-237) vs. vanilla fine-tuning on a CoNLL-2003 subset with
# the MiniLM encoder, print both F1s, reload the KALA model via AutoModelForTokenClassification and tag a
# sentence. Finishes within 10 minutes on 2 CPU cores. Outputs: outputs/main_job/ (git-ignored).
# Paths and sizes: see the KEPLM_* variables in harness/main_job.py (e.g. KEPLM_TRAIN_SAMPLES=500 for a quick run).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
exec "${PYTHON:-.venv/bin/python}" -m harness.main_job "$@"
