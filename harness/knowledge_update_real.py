#!/usr/bin/env python
"""Knowledge updates on real data: CoNLL-2003 test entities left out of the training KG, then added.

    python -m harness.knowledge_update_real --seeds 42 --output_dir outputs/knowledge_update_real

With the main job's settings (``harness/main_job.py``: the CoNLL-2003 subset, the FB15k-237 + T-REx KG, MiniLM,
``run_ner.py`` defaults), the test sentences are linked against the KG and every linked entity that no training
sentence mentions is a *test-only* entity. The KG without them (and their facts) is saved to
``<output_dir>/kg_without_test_entities``, and per seed three systems are trained: ``vanilla``,
``relational_full`` (KALA with the whole KG, the main job's system) and ``relational_reduced`` (KALA with the
reduced KG). Each is scored on the test subset (``all``) and on the test sentences that mention a test-only entity
(``new``): ``relational_reduced`` as trained (the test-only entities are not in its KG, so they are not linked) and
after the update (``run_ner.py --model_name_or_path <checkpoint> --kg <full KG> --do_predict``, which calls
``processor.update_knowledge``). Results: ``<output_dir>/results.json`` and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from harness.kala import command, make_settings
from harness.runs import QUIET, model_path, portable, run_resumable
from keplm.metric_units import percent_factor

ROOT = Path(__file__).resolve().parent.parent
#: (row name, system trained, KG it reads at prediction time: "train" = its own, "full" = the update)
ROWS = (
    ("vanilla", "vanilla", "train"),
    ("relational, full KG", "relational_full", "train"),
    ("relational, test entities left out", "relational_reduced", "train"),
    ("relational, left out then added (update)", "relational_reduced", "full"),
)


def test_only_entities(cfg: dict) -> tuple:
    """``(test-only entity ids, test rows, test rows mentioning one, counts, the KG)``: the test subset (the run
    scripts' first ``predict`` sentences) and the training subset linked as ``run_ner.py`` links them."""
    from transformers import AutoTokenizer

    from keplm import KalaProcessor, KnowledgeAssets
    from keplm.data.ner import load_ner_dataset
    from keplm.knowledge import load_kg
    from keplm.training.recipes.kala import KnowledgeArguments

    limit = {key: None if cfg[key] == "all" else int(cfg[key]) for key in ("train", "predict")}
    raw = load_ner_dataset(cfg["dataset"], max_train_samples=limit["train"], max_test_samples=limit["predict"])
    kg = load_kg(cfg["kg"])
    linking = KnowledgeArguments(kg=cfg["kg"], link_case_sensitive=cfg["case_sensitive"])
    processor = KalaProcessor(
        AutoTokenizer.from_pretrained(model_path(cfg["model"])),
        KnowledgeAssets(kg=kg),
        linker_kwargs=linking.linker_kwargs(max_neighbors_per_entity=linking.max_neighbors_per_entity),
    )

    def linked(split: str) -> list[set[str]]:  # the run script's linking pass (processor.link_dataset)
        column = processor.link_dataset(raw[split], "tokens", split_into_words=True)["knowledge"]
        return [{str(m["id"]) for m in row["entities"] if m.get("id") is not None} for row in column]

    train_ids = set().union(*linked("train"))
    test_links = linked("test")
    test_only = sorted(set().union(*test_links) - train_ids)
    names = raw["test"].features["ner_tags"].feature.names
    rows = [{"tokens": r["tokens"], "ner_tags": [names[t] for t in r["ner_tags"]]} for r in raw["test"]]
    new_rows = [row for row, ids in zip(rows, test_links) if ids - train_ids]
    counts = {
        "train_sentences": len(raw["train"]),
        "test_sentences": len(rows),
        "entities_linked_in_train": len(train_ids),
        "entities_linked_in_test": len(set().union(*test_links)),
        "test_only_entities": len(test_only),
        "test_sentences_with_a_test_only_entity": len(new_rows),
        "kg_entities": kg.num_entities,
        "kg_facts": kg.num_triples,
    }
    return test_only, rows, new_rows, counts, kg


def write_inputs(cfg: dict, output_dir: str) -> dict:
    """The reduced KG and the two test files; returns their paths and the counts."""
    test_only, rows, new_rows, counts, kg = test_only_entities(cfg)
    drop = set(test_only)
    keep = [i for i, entity in enumerate(kg.entity_ids) if entity not in drop]
    reduced = kg.subgraph(keep)
    paths = {
        "kg_reduced": os.path.join(output_dir, "kg_without_test_entities"),
        "test_all": os.path.join(output_dir, "test_all.jsonl"),
        "test_new": os.path.join(output_dir, "test_with_test_only_entities.jsonl"),
    }
    reduced.save_pretrained(paths["kg_reduced"])
    for key, data in (("test_all", rows), ("test_new", new_rows)):
        Path(paths[key]).write_text("".join(json.dumps(row) + "\n" for row in data), encoding="utf-8")
    counts.update(kg_reduced_entities=reduced.num_entities, kg_reduced_facts=reduced.num_triples)
    return {"paths": paths, "counts": counts}


def predict_command(checkpoint: str, test_file: str, output_dir: str, kg: str | None) -> list[str]:
    cmd = [
        sys.executable,
        os.path.join("run_scripts", "run_ner.py"),
        "--model_name_or_path",
        checkpoint,
        "--test_file",
        test_file,
        "--do_predict",
        "--per_device_eval_batch_size",
        "64",
        *QUIET,
        "--output_dir",
        output_dir,
    ]
    return cmd + (["--kg", kg] if kg else [])


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", default=["42"])
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--output_dir", default="outputs/knowledge_update_real")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    start = time.time()
    cfg = make_settings("conll", args.data_dir, case_sensitive=True)
    os.makedirs(args.output_dir, exist_ok=True)
    inputs = write_inputs(cfg, args.output_dir)
    paths = inputs["paths"]
    print(json.dumps(inputs["counts"], indent=1))
    kgs = {"relational_full": cfg["kg"], "relational_reduced": paths["kg_reduced"]}
    train_jobs, predict_jobs, where = [], [], {}
    for seed in args.seeds:
        for system in ("vanilla", "relational_full", "relational_reduced"):
            run_dir = os.path.join(args.output_dir, f"seed{seed}", system)
            run_cfg = {**cfg, "kg": kgs.get(system, cfg["kg"])}
            train_jobs.append(
                (f"seed{seed}/{system}", command(run_cfg, system.split("_")[0], seed, run_dir), f"{run_dir}.log")
            )
        for row, system, kg in ROWS:
            for subset in ("all", "new"):
                out = os.path.join(args.output_dir, f"seed{seed}", "predict", f"{system}-{kg}-{subset}")
                predict_jobs.append(
                    (
                        out,
                        predict_command(
                            os.path.join(args.output_dir, f"seed{seed}", system),
                            paths[f"test_{subset}"],
                            out,
                            cfg["kg"] if kg == "full" else None,
                        ),
                        f"{out}.log",
                    )
                )
                where[(row, seed, subset)] = out
    durations = run_resumable(train_jobs, args.output_dir, args.jobs, args.resume)
    durations.update(run_resumable(predict_jobs, args.output_dir, args.jobs, args.resume))
    results = {}
    for (row, seed, subset), out in where.items():
        metrics = json.loads(Path(out, "all_results.json").read_text())
        results.setdefault(row, {}).setdefault(subset, {})[seed] = {
            # in percent: the record's metric_unit, or seqeval's fractions for a run resumed from before it
            "f1": percent_factor(metrics, "fraction") * metrics["predict_f1"],
            "linked_share": metrics.get("predict_linked_share"),
        }
    lines = [
        "| system | test F1 (all) | test F1 (sentences with a test-only entity) | linked share (those) |",
        "|---|---:|---:|---:|",
    ]
    for row, _, _ in ROWS:
        cells = [_cell([v["f1"] for v in results[row][subset].values()]) for subset in ("all", "new")]
        shares = [v["linked_share"] for v in results[row]["new"].values() if v["linked_share"] is not None]
        lines.append(f"| {row} | {cells[0]} | {cells[1]} | {_cell(shares) if shares else '–'} |")
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "device": f"CPU, {os.cpu_count()} cores, {args.jobs} run(s) at a time",
        "command": ["python", "harness/knowledge_update_real.py", *(argv if argv is not None else sys.argv[1:])],
        "settings": portable(
            {k: cfg[k] for k in ("dataset", "kg", "model", "train", "predict", "epochs", "lr", "batch")}
        ),
        "counts": inputs["counts"],
        "seeds": args.seeds,
        "results": results,
        "table": lines,
        "wall_s": round(time.time() - start),
    }
    Path(args.output_dir, "results.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines))
    print(f"[knowledge_update_real] {time.time() - start:.0f}s; {args.output_dir}/results.json")
    return summary


if __name__ == "__main__":
    main()
