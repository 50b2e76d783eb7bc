"""TRELM against plain MLM at equal wall-clock (paper §4.2-4.3), then the pre-trained encoders fine-tuned on
SemEval-2010 Task 8 (the downstream check, §4.2), several seeds, sized for a 2-core CPU.

Pre-training variants: ``mlm`` (plain masked-LM pre-training of the same encoder on the same corpus), ``trelm``
(every mechanism: injection of the TransE vectors, CKA loss, memory bank, knowledge routing) and one-change ablations
``trelm_no_injection`` / ``trelm_no_routing`` (paper Table 6). Every run trains for the same number of seconds
(``--max_train_seconds``; the probe's time is not counted) on the same corpus sample (T-REx evidences + FewRel
from ``--data_dir``, the seeded held-out facts removed, ``--train`` sentences or ``all``; ``--gpu`` trains on the
GPU instead of the CPU) and probes LAMA T-REx P@1 on seen and held-out facts every ``--probe_every_steps`` steps
(``probe_curve.json``). The KG embeddings (``--kg``) must have been trained without the held-out facts (``keplm
train-kge --exclude_facts``, see docs/trelm.md); the run script refuses them otherwise.

Downstream: ``base`` (the encoder the pre-training runs started from) and each pre-training variant found in
``--pretraining_dir/seed<N>/<variant>``, fine-tuned with the seed it was pre-trained with on the same seeded sample
of ``--train`` training sentences through ``run_scripts/run_relation_classification.py``; validation on 800 training
sentences held out by a fixed seed, all 2,717 test sentences scored (official macro-F1).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from harness.runs import (
    DEFAULT_MODEL,
    QUIET,
    check_names,
    model_path,
    run_script,
    run_seeds,
    sample_limit,
    trainer_options,
)

VARIANTS = {
    "mlm": ["--system", "mlm"],
    "trelm": ["--system", "trelm"],
    "trelm_no_injection": ["--system", "trelm", "--no_injection"],
    "trelm_no_routing": ["--system", "trelm", "--no_routing"],
}
DEFAULTS = {
    "kg": "outputs/trelm/kge-transe-128",
    "train": "6000",
    "seconds": "480",
    "lr": "2e-4",
    "batch": "32",
    "max_seq_length": "128",
    "probe_every_steps": "20",
    "variants": "mlm,trelm",
}
#: every encoder a downstream seed's summary lists when it was fine-tuned, whichever invocation ran it
ENCODERS = ("base", *VARIANTS)
SEMEVAL_DEFAULTS = {
    "pretraining_dir": "outputs/trelm_experiments",
    "dataset": "../shared/data/semeval2010_task8",
    "train": "2400",
    "epochs": "2",
    "lr": "3e-4",
    "batch": "16",
    "variants": "base,mlm,trelm",
}


def command(cfg: dict, variant: str, seed: str, output_dir: str) -> list[str]:
    """The pre-training command line of one (variant, seed) run: on the CPU unless ``cfg["gpu"]``, reading the corpus
    (T-REx evidences + FewRel) and the probe from ``cfg["data_dir"]``."""
    data = cfg["data_dir"]
    cmd = [
        *run_script("run_pretraining.py"),
        "--model_name_or_path",
        model_path(cfg["model"]),
        *sample_limit("train", cfg["train"]),
        "--corpus",
        f"trex:{data}/lama",
        f"fewrel:{data}/fewrel/val_wiki.json.gz",
        "--probe_data_dir",
        data,
        "--max_train_seconds",
        cfg["seconds"],
        "--num_train_epochs",
        "100",
        "--learning_rate",
        cfg["lr"],
        "--warmup_steps",
        "10",
        "--per_device_train_batch_size",
        cfg["batch"],
        "--max_seq_length",
        cfg["max_seq_length"],
        "--probe_every_steps",
        cfg["probe_every_steps"],
        "--seed",
        seed,
        "--do_train",
        "--output_dir",
        output_dir,
        "--save_strategy",
        "no",
        "--logging_steps",
        "10",
        *QUIET,
        *([] if cfg.get("gpu") else ["--use_cpu"]),
        *VARIANTS[variant],
    ]
    return cmd + (["--kg", cfg["kg"]] if variant != "mlm" else [])


def encoder(cfg: dict, variant: str, seed: str) -> str:
    """The checkpoint a downstream run fine-tunes: the base encoder, or the variant's pre-training output of
    ``seed``."""
    if variant == "base":
        return model_path(cfg["model"])
    path = os.path.join(cfg["pretraining_dir"], f"seed{seed}", variant)
    if not Path(path, "config.json").is_file():
        raise SystemExit(
            f"no pre-trained {variant} checkpoint for seed {seed} in {path}: run "
            "`python -m harness.experiments trelm` first"
        )
    return path


def semeval_command(cfg: dict, variant: str, seed: str, output_dir: str) -> list[str]:
    """The command line of one (encoder, seed) SemEval fine-tuning run."""
    return [
        *run_script("run_relation_classification.py"),
        "--model_name_or_path",
        encoder(cfg, variant, seed),
        "--dataset_name",
        cfg["dataset"],
        "--max_train_samples",
        cfg["train"],
        "--train_sample_seed",
        "0",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--output_dir",
        output_dir,
        *trainer_options(cfg, seed),
        "--use_cpu",
    ]


def _add_defaults(parser: argparse.ArgumentParser, defaults: dict) -> None:
    """One ``--key`` option per default, its help naming the default."""
    for key, value in defaults.items():
        parser.add_argument(f"--{key}", default=value, help=f"default: {value}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Pre-training options beside the shared ones."""
    _add_defaults(parser, DEFAULTS)
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="train on the GPU (default: --use_cpu, the CPU runs' equal-wall-clock setting)",
    )


def add_semeval_arguments(parser: argparse.ArgumentParser) -> None:
    """Downstream options beside the shared ones."""
    _add_defaults(parser, SEMEVAL_DEFAULTS)


def _settings(args: argparse.Namespace, defaults: dict) -> dict:
    """The run's settings: every option of ``defaults``, the data folder, the encoder."""
    cfg = {key: getattr(args, key) for key in defaults}
    cfg.update(data_dir=args.data_dir, model=args.model or DEFAULT_MODEL)
    return cfg


def run(args: argparse.Namespace, output_dir: str) -> list[dict]:
    """Every pre-training (variant, seed) run; the seeds' summaries with their probe curves."""
    cfg = {**_settings(args, DEFAULTS), "gpu": args.gpu}
    variants = cfg["variants"] = check_names(cfg["variants"].split(","), VARIANTS)
    if any(v != "mlm" for v in variants) and not Path(cfg["kg"]).exists():
        raise SystemExit(f"--kg {cfg['kg']} does not exist: train the KG embeddings first (docs/trelm.md)")

    def curves(seed_dir: str, runs: list[str]) -> dict:
        return {"probe_curves": {v: json.loads(Path(seed_dir, v, "probe_curve.json").read_text()) for v in runs}}

    return run_seeds(
        cfg,
        variants,
        args.seeds,
        output_dir,
        args.jobs,
        lambda variant, seed, run_dir: command(cfg, variant, seed, run_dir),
        resume=args.resume,
        known=VARIANTS,
        extra=curves,
    )


def run_semeval(args: argparse.Namespace, output_dir: str) -> list[dict]:
    """Every downstream (encoder, seed) run; the seeds' summaries."""
    cfg = {**_settings(args, SEMEVAL_DEFAULTS), "task": "semeval2010_task8"}
    variants = check_names(cfg["variants"].split(","), ENCODERS)
    return run_seeds(
        cfg,
        variants,
        args.seeds,
        output_dir,
        args.jobs,
        lambda variant, seed, run_dir: semeval_command(cfg, variant, seed, run_dir),
        resume=args.resume,
        known=ENCODERS,
    )
