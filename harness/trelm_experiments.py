#!/usr/bin/env python
"""TRELM vs plain MLM at equal wall-clock (paper §4.2-4.3), several seeds, sized for a 2-core CPU.

    python -m harness.trelm_experiments --seeds 1 2 3 --jobs 2
    python -m harness.trelm_experiments --seeds 1 --variants trelm_no_injection,trelm_no_routing --jobs 2
    python -m harness.trelm_report outputs/trelm_experiments --plot docs/figures/trelm-p-at-1.png

Variants: ``mlm`` (plain masked-LM pre-training of the same encoder on the same corpus), ``trelm`` (every mechanism:
injection of the TransE vectors, CKA loss, memory bank, knowledge routing) and one-change ablations
``trelm_no_injection`` / ``trelm_no_routing`` (paper Table 6). Every run trains for the same number of seconds
(``--max_train_seconds``; the probe's time is not counted) on the same corpus sample (T-REx evidences + FewRel
from ``--data_dir``, the seeded held-out facts removed, ``--train`` sentences or ``all``; ``--gpu`` trains on the
GPU instead of the CPU) and probes LAMA T-REx P@1 on seen and held-out facts every ``--probe_every_steps`` steps
(``probe_curve.json``). The KG embeddings (``--kg``) must have
been trained without the held-out facts (``keplm train-kge --exclude_facts``, see docs/trelm.md); the run script
refuses them otherwise. Runs go through ``run_scripts/run_pretraining.py`` via ``harness/experiments.py``'s queue;
each seed's ``summary.json`` holds the settings (no machine paths), every run's ``all_results.json``, probe curve
and wall time (``durations.json`` keeps them across ``--resume``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from harness.experiments import (
    DEFAULT_MODEL,
    completed_runs,
    model_path,
    run_resumable,
    sample_limit,
    seed_summary,
)

VARIANTS = {
    "mlm": ["--system", "mlm"],
    "trelm": ["--system", "trelm"],
    "trelm_no_injection": ["--system", "trelm", "--no_injection"],
    "trelm_no_routing": ["--system", "trelm", "--no_routing"],
}
DEFAULTS = {"model": DEFAULT_MODEL, "kg": "outputs/trelm/kge-transe-128", "train": "6000", "seconds": "480",
            "lr": "2e-4", "batch": "32", "max_seq_length": "128", "probe_every_steps": "20",
            "variants": ["mlm", "trelm"]}
DATA_DIR = "../shared/data"


def command(cfg: dict, variant: str, seed: str, output_dir: str) -> list[str]:
    """The run-script command line of one (variant, seed) run: on the CPU unless ``cfg["gpu"]``, reading the corpus
    (T-REx evidences + FewRel) and the probe from ``cfg["data_dir"]``."""
    data = cfg.get("data_dir", DATA_DIR)
    cmd = [
        sys.executable, os.path.join("run_scripts", "run_pretraining.py"),
        "--model_name_or_path", model_path(cfg["model"]), *sample_limit("train", cfg["train"]),
        "--corpus", f"trex:{data}/lama", f"fewrel:{data}/fewrel/val_wiki.json.gz", "--probe_data_dir", data,
        "--max_train_seconds", cfg["seconds"], "--num_train_epochs", "100", "--learning_rate", cfg["lr"],
        "--warmup_steps", "10", "--per_device_train_batch_size", cfg["batch"], "--max_seq_length",
        cfg["max_seq_length"], "--probe_every_steps", cfg["probe_every_steps"], "--seed", seed, "--do_train",
        "--output_dir", output_dir, "--save_strategy", "no", "--logging_steps", "10", "--report_to", "none",
        "--disable_tqdm", "1", *([] if cfg.get("gpu") else ["--use_cpu"]), *VARIANTS[variant],
    ]
    return cmd + (["--kg", cfg["kg"]] if variant != "mlm" else [])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=None, help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--seeds", nargs="+", default=["1", "2", "3"])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each on 2 cores)")
    parser.add_argument("--output_dir", default="outputs/trelm_experiments")
    parser.add_argument("--resume", action="store_true",
                        help="skip runs whose all_results.json exists (their wall times come from durations.json)")
    for key, value in DEFAULTS.items():
        if key != "variants":
            parser.add_argument(f"--{key}", default=value, help=f"default: {value}")
    parser.add_argument("--data_dir", default=DATA_DIR, help="folder with lama/ and fewrel/ (corpus and probe)")
    parser.add_argument("--gpu", action="store_true",
                        help="train on the GPU (default: --use_cpu, the CPU runs' equal-wall-clock setting)")
    args = parser.parse_args(argv)
    cfg = {key: getattr(args, key) for key in DEFAULTS if key != "variants"}
    cfg.update(data_dir=args.data_dir, gpu=args.gpu)
    cfg["variants"] = args.variants.split(",") if args.variants else DEFAULTS["variants"]
    unknown = [v for v in cfg["variants"] if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    if any(v != "mlm" for v in cfg["variants"]) and not Path(cfg["kg"]).exists():
        raise SystemExit(f"--kg {cfg['kg']} does not exist: train the KG embeddings first (docs/trelm.md)")
    jobs = [(f"seed{seed}/{variant}",
             command(cfg, variant, seed, os.path.join(args.output_dir, f"seed{seed}", variant)),
             os.path.join(args.output_dir, f"seed{seed}", f"{variant}.log"))
            for seed in args.seeds for variant in cfg["variants"]]
    start = time.time()
    durations = run_resumable(jobs, args.output_dir, args.jobs, args.resume)
    for seed in args.seeds:
        seed_dir = os.path.join(args.output_dir, f"seed{seed}")
        variants = completed_runs(seed_dir, VARIANTS)
        curves = {v: json.loads(Path(seed_dir, v, "probe_curve.json").read_text()) for v in variants}
        seed_summary(cfg, variants, seed, seed_dir, durations, extra={"probe_curves": curves})
    print(f"[trelm_experiments] {len(args.seeds)} seed(s) in {time.time() - start:.0f}s; table and plot: "
          f"python -m harness.trelm_report {args.output_dir}")


if __name__ == "__main__":
    main()
