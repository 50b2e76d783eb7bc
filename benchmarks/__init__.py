"""keplm's benchmarks, one package run from the repository root: ``python -m benchmarks <name> [options]``.

``BENCHMARKS`` names each benchmark's module and what it measures; ``python -m benchmarks --help`` lists them and
``python -m benchmarks <name> --help`` gives a benchmark's options. The package is not part of the keplm wheel
(``setup.cfg`` packages ``keplm`` only). Nothing here imports torch, so that listing the benchmarks, and the
pipeline benchmark's fresh-process build workers (which time their own imports), start light.
"""

from __future__ import annotations

import os
import sys

#: command name -> (module under ``benchmarks``, one line on what it measures)
BENCHMARKS = {
    "kala": ("kala", "KALA's training step (relational, pointwise) vs vanilla / +1-layer BERT, side by side"),
    "profile-kala": ("profile_kala", "ops, kernel launches and host syncs per KALA training step (kala --profile)"),
    "roof": ("roof", "Roof-Transformer's training step: cached vs joint knowledge, vs one encoder with it appended"),
    "trelm": ("trelm", "TRELM's pre-training step: plain MLM vs TRELM without and with knowledge routing"),
    "pipeline": ("pipeline", "raw-text keplm-ner / keplm-qa pipelines: KALA relational vs vanilla throughput"),
    "build-kg": ("build_kg", "knowledge construction (linking + graph features) on CoNLL-2003 train vs FB15k-237"),
    "startup": ("startup", "import keplm, keplm --help and run_ner.py --help beside transformers' own import times"),
    "distributed-memory": (
        "distributed_memory",
        "per-process peak memory of a 2-process KALA run: DDP vs FSDP2 vs a row-sharded table, by entity-memory size",
    ),
}


def worker_command(benchmark: str, argv: list[str], *worker: str) -> tuple[list[str], dict]:
    """The command line and environment of a benchmark's worker process: the parent's own ``python -m benchmarks
    <benchmark> <argv>`` plus the worker options, run in the parent's folder (relative paths in ``argv`` keep their
    meaning) with the repository root on ``PYTHONPATH``, so that the package imports wherever the parent started."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return [sys.executable, "-m", "benchmarks", benchmark, *argv, *worker], env
