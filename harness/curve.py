"""The real-data learning curve (design: docs/learning_curve.md): NER test F1 against the training-set size for
vanilla, KALA relational (keplm's defaults), KALA with the paper's eq. 3 and +1 layer, paired by seed.

    python -m harness.experiments curve --jobs 2                 # the whole design, resumable (--resume)
    python -m harness.experiments curve --datasets conll --sizes 50 100 --seeds 1
    python -m harness.experiments curve-table outputs/curve --plot docs/figures

Every run is ``run_scripts/run_ner.py`` on a nested random draw of the training split (``--train_sample_seed`` =
the seed: the same sentences for every system at a seed, a smaller size a subset of a larger one) with a step
budget (:func:`train_steps`), early stopping on the fixed validation sentences, and the fixed test sentences;
every KALA model is then checked with ``keplm check-knowledge``. The checkpoints are deleted after each run (the
final model stays). Runs land in ``<output_dir>/<dataset>/n<size>/seed<N>/<system>``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from harness import kala
from harness.runs import check_names, run_resumable

#: dataset → the KALA preset it starts from (KG, linking case) and its fixed validation / test sentences
DATASETS = {"conll": {"preset": "conll", "eval": "500", "predict": "2000"},
            "ncbi": {"preset": "ncbi", "eval": "500", "predict": "all"},
            "wnut": {"preset": "wnut", "eval": "500", "predict": "all"}}
DEFAULT_DATASETS = ("conll", "ncbi")
SIZES = (50, 100, 250, 500, 1000, 2500)
#: system → run_ner.py arguments
SYSTEMS = {"vanilla": ["--system", "vanilla"], "relational": ["--system", "relational"],
           "relational_eq3": ["--system", "relational", "--relation_message", "entity"],
           "more_params": ["--system", "more_params"]}
KNOWLEDGE_SYSTEMS = ("relational", "relational_eq3")
#: +1 layer runs at these sizes only (the design's budget)
MORE_PARAMS_SIZES = (100, 1000)
BATCH = 16
#: the step budget: 20 epochs (the paper's NER fine-tuning), at least MIN_STEPS, at most MAX_STEPS
EPOCHS, MIN_STEPS, MAX_STEPS = 20, 150, 320
EVALUATIONS = 5  # validation evaluations per run (early stopping's checkpoints)
PATIENCE = 2
CHECK_EXAMPLES = 100  # test sentences keplm check-knowledge reads per KALA model


def train_steps(size: int) -> int:
    """Optimizer steps for ``size`` training sentences: 20 epochs, clipped to [150, 320] (2,500 sentences: 2
    epochs, the main job's budget)."""
    return min(max(math.ceil(EPOCHS * size / BATCH), MIN_STEPS), MAX_STEPS)


def run_commands(dataset: str, size: int, seed: str, system: str, run_dir: str, data_dir: str = "../shared/data",
                 model: str | None = None) -> list[list[str]]:
    """The run-script command of one (dataset, size, seed, system) run, then (KALA) its knowledge check, then the
    deletion of its checkpoints."""
    spec = DATASETS[dataset]
    steps = train_steps(size)
    every = str(math.ceil(steps / EVALUATIONS))
    cfg = kala.make_settings(spec["preset"], data_dir, model=model, train=str(size), eval=spec["eval"],
                             predict=spec["predict"], batch=str(BATCH), check_knowledge=CHECK_EXAMPLES)
    options = [*SYSTEMS[system][2:], "--train_sample_seed", seed, "--max_steps", str(steps),
               "--eval_strategy", "steps", "--eval_steps", every, "--save_strategy", "steps", "--save_steps", every,
               "--save_total_limit", "1", "--load_best_model_at_end", "--metric_for_best_model", "f1",
               "--early_stopping_patience", str(PATIENCE)]
    base_system = SYSTEMS[system][1]
    cmds = [kala.command(cfg, base_system, seed, run_dir) + options]
    if system in KNOWLEDGE_SYSTEMS:
        cmds.append(kala.check_command(cfg, run_dir))
    cmds.append([sys.executable, "-c", "import shutil, glob, sys; [shutil.rmtree(p) for p in "
                 "glob.glob(sys.argv[1] + '/checkpoint-*')]", run_dir])
    return cmds


def plan(datasets, sizes, seeds, systems) -> list[tuple[str, int, str, str]]:
    """(dataset, size, seed, system) in queue order: seed-major, so a cut queue leaves every size with the same
    seeds; +1 layer only at ``MORE_PARAMS_SIZES``."""
    return [(dataset, size, seed, system) for seed in seeds for dataset in datasets for size in sizes
            for system in systems if system != "more_params" or size in MORE_PARAMS_SIZES]


def run_dir(output_dir: str, dataset: str, size: int, seed: str, system: str) -> str:
    return os.path.join(output_dir, dataset, f"n{size}", f"seed{seed}", system)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(seeds=["1", "2", "3", "4", "5"])
    parser.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS), choices=sorted(DATASETS))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))


def run(args: argparse.Namespace, output_dir: str) -> list[dict]:
    """Queue every planned run (``--resume`` skips the finished ones); the runs' results are read by
    ``curve-table``."""
    systems = check_names(args.systems.split(","), SYSTEMS, "systems")
    if any(size < 1 for size in args.sizes):
        raise ValueError(f"--sizes must be positive, got {args.sizes}")
    jobs = []
    for dataset, size, seed, system in plan(args.datasets, args.sizes, args.seeds, systems):
        where = run_dir(output_dir, dataset, size, seed, system)
        jobs.append((f"{dataset}/n{size}/seed{seed}/{system}",
                     run_commands(dataset, size, seed, system, where, args.data_dir, args.model), where + ".log"))
    run_resumable(jobs, output_dir, args.jobs, args.resume)
    return []
