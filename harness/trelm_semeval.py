#!/usr/bin/env python
"""TRELM's downstream check (paper §4.2, relation extraction; CPU-sized): fine-tune the checkpoints of
``harness/trelm_experiments.py`` on SemEval-2010 Task 8 relation classification, each with the seed it was
pre-trained with.

    python -m harness.trelm_semeval --seeds 1 2 3 --jobs 2
    python -m harness.summarize_runs outputs/trelm_semeval/seed*/summary.json

Encoders: ``base`` (the encoder the pre-training runs started from, not pre-trained further) and each pre-training
variant found in ``--pretraining_dir/seed<N>/<variant>`` (``mlm``, ``trelm``, ablations). Every run fine-tunes the
same seeded sample of ``--train`` training sentences through ``run_scripts/run_relation_classification.py``,
validates on 800 training sentences held out by a fixed seed and scores all 2,717 test sentences (official macro-F1).
Summaries as ``harness/experiments.py`` writes them (``seed<N>/summary.json``, no machine paths).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from harness.experiments import DEFAULT_MODEL, completed_runs, model_path, run_resumable, seed_summary
from harness.trelm_experiments import VARIANTS

#: every encoder a seed's summary lists when it was fine-tuned, whichever invocation (``--variants``) ran it
ENCODERS = ("base", *VARIANTS)

DEFAULTS = {"model": DEFAULT_MODEL, "pretraining_dir": "outputs/trelm_experiments",
            "dataset": "../shared/data/semeval2010_task8", "train": "2400", "epochs": "2", "lr": "3e-4",
            "batch": "16", "variants": "base,mlm,trelm"}


def encoder(cfg: dict, variant: str, seed: str) -> str:
    """The checkpoint a variant fine-tunes: the base encoder, or the variant's pre-training output of ``seed``."""
    if variant == "base":
        return model_path(cfg["model"])
    path = os.path.join(cfg["pretraining_dir"], f"seed{seed}", variant)
    if not Path(path, "config.json").is_file():
        raise SystemExit(f"no pre-trained {variant} checkpoint for seed {seed} in {path}: run "
                         "harness/trelm_experiments.py first")
    return path


def command(cfg: dict, variant: str, seed: str, output_dir: str) -> list[str]:
    """The run-script command line of one (encoder, seed) fine-tuning run."""
    return [
        sys.executable, os.path.join("run_scripts", "run_relation_classification.py"),
        "--model_name_or_path", encoder(cfg, variant, seed), "--dataset_name", cfg["dataset"],
        "--max_train_samples", cfg["train"], "--train_sample_seed", "0", "--do_train", "--do_eval", "--do_predict",
        "--output_dir", output_dir, "--num_train_epochs", cfg["epochs"], "--learning_rate", cfg["lr"],
        "--warmup_steps", "0.1", "--per_device_train_batch_size", cfg["batch"], "--per_device_eval_batch_size", "64",
        "--seed", seed, "--save_strategy", "no", "--logging_steps", "25", "--report_to", "none", "--disable_tqdm",
        "1", "--use_cpu",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", default=["1", "2", "3"])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each on 2 cores)")
    parser.add_argument("--output_dir", default="outputs/trelm_semeval")
    parser.add_argument("--resume", action="store_true", help="skip runs whose all_results.json exists")
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key}", default=value, help=f"default: {value}")
    args = parser.parse_args(argv)
    cfg = {key: getattr(args, key) for key in DEFAULTS}
    variants = cfg["variants"].split(",")
    jobs = [(f"seed{seed}/{variant}",
             command(cfg, variant, seed, os.path.join(args.output_dir, f"seed{seed}", variant)),
             os.path.join(args.output_dir, f"seed{seed}", f"{variant}.log"))
            for seed in args.seeds for variant in variants]
    start = time.time()
    durations = run_resumable(jobs, args.output_dir, args.jobs, args.resume)
    for seed in args.seeds:
        seed_dir = os.path.join(args.output_dir, f"seed{seed}")
        seed_summary({**cfg, "task": "semeval2010_task8"}, completed_runs(seed_dir, ENCODERS), seed, seed_dir,
                     durations)
    print(f"[trelm_semeval] {len(args.seeds)} seed(s) in {time.time() - start:.0f}s; table: "
          f"python -m harness.summarize_runs {args.output_dir}/seed*/summary.json")


if __name__ == "__main__":
    main()
