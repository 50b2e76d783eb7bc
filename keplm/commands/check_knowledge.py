"""``keplm check-knowledge``: does a trained model read its KG? Counterfactual fact edits on your own text.

    keplm check-knowledge --model outputs/ner --data sentences.txt --output_dir outputs/ner/knowledge_check
    keplm check-knowledge --model org/kala-bert-conll --kg tsv:my_kg.tsv --data my_data.jsonl --max_examples 200

links each example against the model's KG (or ``--kg``: the user's own, through ``processor.update_knowledge``), edits
each fact that touches a mention one at a time (``--edits``: swap its relation, swap its other end, remove it) and
measures how often the prediction flips and how far its probabilities move (total variation, 0 to 1). Writes
``knowledge_sensitivity.json`` and, with matplotlib, ``knowledge_sensitivity.png`` (per relation) into
``--output_dir``; prints a table. A model that ignores its KG scores 0 everywhere. See
:mod:`keplm.checks.counterfactual`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import datasets
import transformers

from keplm.checks.counterfactual import _TASK_OF_ARCHITECTURE, EDITS, TASKS, knowledge_sensitivity, task_of
from keplm.commands import KG_SPEC_HELP
from keplm.data.glue import load_glue_dataset
from keplm.data.ner import load_ner_dataset
from keplm.data.squad import load_qa_dataset
from keplm.hub.figures import _pyplot, _save, matplotlib_available, relation_label
from keplm.io_utils import check_output_folder, progress, replaced_folder
from keplm.tokenization.processing_utils import KeplmProcessor

logger = logging.getLogger(__name__)

REPORT_NAME = "knowledge_sensitivity.json"
PLOT_NAME = "knowledge_sensitivity.png"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a keplm checkpoint folder or Hub id (KALA, Roof-Transformer)")
    parser.add_argument(
        "--data",
        required=True,
        help=(
            "the text to check: a .txt file (one text per line), a .json/.jsonl file (columns: tokens or text for NER, "
            "sentence, text or sentence1 and sentence2 for classification, question and context for QA), "
            "the data a run "
            "script reads (a CoNLL folder or file, a SQuAD file, a GLUE task folder), or a datasets Hub id"
        ),
    )
    parser.add_argument("--split", default="test", help="split of a datasets id or folder")
    parser.add_argument(
        "--split_by_article",
        type=int,
        nargs=3,
        metavar=("TRAIN", "VAL", "TEST"),
        help="QA: split one SQuAD file by article as run_qa.py does (e.g. 38 5 5)",
    )
    parser.add_argument("--text_column", help="the column holding the text, if not the defaults")
    parser.add_argument(
        "--kg",
        help=f"check against this KG instead of the model's (unset: the model's own): {KG_SPEC_HELP}",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        help="the task the model predicts (unset: read from its architecture)",
    )
    parser.add_argument(
        "--edits",
        nargs="+",
        default=list(EDITS),
        choices=list(EDITS),
        help="the edits made to each fact, one at a time: relation (another relation), tail (the end away from the "
        "mention replaced by another entity), remove (the fact dropped)",
    )
    parser.add_argument(
        "--max_examples", type=int, default=200, help="check at most this many examples of --data (the first ones)"
    )
    parser.add_argument(
        "--max_facts_per_example",
        type=int,
        default=4,
        help="facts edited per example at most (a seeded sample of the facts touching a mention)",
    )
    parser.add_argument(
        "--max_length",
        type=int,
        default=128,
        help="tokens per model input (longer texts are truncated; a QA context is split into windows)",
    )
    parser.add_argument("--seed", type=int, default=0, help="picks the edited facts and their replacements")
    parser.add_argument(
        "--output_dir", required=True, help="where knowledge_sensitivity.json and knowledge_sensitivity.png go"
    )
    parser.add_argument("--revision", help="Hub revision of --model (a branch, tag or commit)")
    parser.add_argument(
        "--token", help="Hub token for a private --model (unset: huggingface_hub's saved login, if any)"
    )


def check_data_path(path: str) -> None:
    """A --data that names no file or folder here and cannot be a Hub id (``org/name``) is a FileNotFoundError."""
    if os.path.exists(path):
        return
    looks_like_hub_id = (
        not os.path.isabs(path)
        and not path.startswith(".")
        and path.count("/") == 1
        and not path.endswith((".txt", ".json", ".jsonl", ".gz"))
    )
    if not looks_like_hub_id:
        raise FileNotFoundError(f"--data {path}: no such file or folder")


def load_task_split(path: str, split: str, task: str, split_by_article: list[int] | None = None):
    """``split`` of a local dataset in the form the run scripts read for ``task`` (a CoNLL folder or file for NER, a
    SQuAD JSON file or folder for QA, split by article as ``run_qa.py --split_by_article``, a GLUE task folder for
    classification), or None when ``path`` is a Hub id or a flat .json/.jsonl file, read by ``datasets``."""
    plain = path.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz")) and task != "qa"
    if not os.path.exists(path) or plain or (task == "qa" and path.endswith((".jsonl", ".jsonl.gz"))):
        return None
    if task == "ner":
        data = load_ner_dataset(path)
    elif task == "qa":
        data = load_qa_dataset(path, split_by_article=split_by_article)
    else:
        data = load_glue_dataset(path)
    if split not in data:
        raise ValueError(f"--data {path} has no {split!r} split (it has {sorted(data)}): pass --split")
    return data[split]


def read_examples(
    path: str, split: str, text_column: str | None, task: str, limit: int, split_by_article: list[int] | None = None
) -> list[dict]:
    """The first ``limit`` examples of ``path`` as dicts the counterfactual measure reads."""
    text_key = "sentence" if task == "classification" else "text"  # the key of one text
    if os.path.isfile(path) and path.endswith(".txt"):
        if task == "qa":
            raise ValueError(
                f"--data {path}: a .txt file holds one text per line, but --task qa checks questions with their "
                "contexts: give a SQuAD file (with --split_by_article) or a .json/.jsonl file with question and "
                "context columns"
            )
        with open(path, encoding="utf-8") as f:
            texts = [line.strip() for line in f if line.strip()]
        if not texts:
            raise ValueError(f"{path} holds no text")
        return [{text_key: t} for t in texts[:limit]]
    data = load_task_split(path, split, task, split_by_article)
    if data is None and os.path.isfile(path):
        data = datasets.load_dataset("json", data_files=path, split="train")
    elif data is None:
        data = datasets.load_dataset(path, split=split)
    data = data.select(range(min(limit, len(data))))  # Dataset.take raises past the last row before datasets 5
    columns = data.column_names
    if text_column is not None:
        if text_column not in columns:
            raise ValueError(f"--text_column {text_column!r} is not a column of {path} ({columns})")
        key = "tokens" if task == "ner" and isinstance(data[0][text_column], list) else text_key
        return [{key: row[text_column]} for row in data]
    if task == "qa":
        missing = {"question", "context"} - set(columns)
        if missing:
            raise ValueError(f"{path}: QA examples need the columns question and context; missing {sorted(missing)}")
        return data.select_columns(["question", "context"]).to_list()
    if task == "classification" and {"sentence1", "sentence2"} <= set(columns):
        return data.select_columns(["sentence1", "sentence2"]).to_list()
    wanted = ("tokens" if task == "ner" else "sentence", "text")
    for column in wanted:
        if column in columns:
            return [{text_key if column == "text" else column: row[column]} for row in data]
    raise ValueError(f"{path} has none of the columns {list(wanted)} ({columns}): pass --text_column")


def plot(summary: dict, path: str) -> str | None:
    """Bars of the flip rate and the mean shift of each edit, per relation (the 15 most edited)."""
    if not matplotlib_available():
        logger.info("matplotlib is not installed (pip install keplm[reports]): no plot")
        return None
    relations = sorted(
        summary["per_relation"].items(),
        key=lambda kv: -sum(v["edits"] for v in kv[1].values() if isinstance(v, dict)),
    )[:15]
    edits = sorted({e for _, stats in relations for e, v in stats.items() if isinstance(v, dict)})
    fig, axes = _pyplot().subplots(1, 2, figsize=(11, 0.45 * max(4, len(relations)) + 1.8), sharey=True)
    width = 0.8 / max(1, len(edits))
    for ax, metric, title in zip(axes, ("flip_rate", "mean_shift"), ("prediction flips", "mean shift (TV)")):
        for k, edit in enumerate(edits):
            values = [stats.get(edit, {}).get(metric, 0.0) for _, stats in relations]
            ax.barh([i + k * width for i in range(len(relations))], values, height=width, label=edit)
        ax.set_xlim(0, 1)
        ax.set_title(title)
    ticks = [i + width * (len(edits) - 1) / 2 for i in range(len(relations))]
    axes[0].set_yticks(ticks, [relation_label(relation, stats["name"]) for relation, stats in relations])
    axes[0].invert_yaxis()
    fig.legend(*axes[0].get_legend_handles_labels(), title="edit", loc="lower center", ncol=len(edits))
    fig.suptitle(
        f"Knowledge sensitivity: {summary['examples_with_facts']} of {summary['examples']} examples with facts"
    )
    _save(fig, path, dpi=100, rect=(0, 0.1, 1, 1))  # room for the legend below
    return path


def markdown(summary: dict) -> str:
    lines = [
        f"{summary['examples_with_facts']} of {summary['examples']} examples have a fact on a mention.",
        "",
        "| relation | edit | edits | flip rate | mean shift |",
        "|---|---|---:|---:|---:|",
    ]
    groups = [
        ("(all)", summary["overall"]),
        *((by_edit["name"], by_edit) for by_edit in summary["per_relation"].values()),
    ]
    for name, by_edit in groups:
        for edit, stats in by_edit.items():
            if isinstance(stats, dict):  # not the relation's name
                lines.append(
                    f"| {name} | {edit} | {stats['edits']} | {stats['flip_rate']:.3f} | {stats['mean_shift']:.3f} |"
                )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    start = time.time()
    check_output_folder(args.output_dir, REPORT_NAME, "check-knowledge")
    check_data_path(args.data)
    hub = {k: v for k, v in (("revision", args.revision), ("token", args.token)) if v is not None}
    config = transformers.AutoConfig.from_pretrained(args.model, **hub)
    task = args.task or task_of(config)
    head = next(suffix for suffix, predicted in _TASK_OF_ARCHITECTURE.items() if predicted == task)
    model = getattr(transformers, f"AutoModelFor{head}").from_pretrained(args.model, **hub)
    processor = KeplmProcessor.from_pretrained(
        args.model, knowledge_assets=getattr(model, "knowledge_assets", None), **hub
    )
    kg_change = processor.update_knowledge(args.kg, model=model) if args.kg else None
    examples = read_examples(args.data, args.split, args.text_column, task, args.max_examples, args.split_by_article)
    report = knowledge_sensitivity(
        model,
        processor,
        examples,
        task=task,
        edits=tuple(args.edits),
        max_facts_per_example=args.max_facts_per_example,
        max_length=args.max_length,
        seed=args.seed,
        progress=lambda it: progress(it, "knowledge edits", len(examples)),
    )
    summary = {
        **report.summary(),
        "model": args.model,
        "data": args.data,
        "kg": args.kg,
        "kg_change": kg_change,
        "seed": args.seed,
        "elapsed_s": round(time.time() - start, 1),
    }
    out = Path(args.output_dir)
    with replaced_folder(out, REPORT_NAME, "check-knowledge") as staging:  # whole or not at all
        (staging / REPORT_NAME).write_text(json.dumps(summary, indent=1))
        drawn = plot(summary, str(staging / PLOT_NAME)) if summary["per_relation"] else None
    print(markdown(summary))
    print(f"\nReport: {out / REPORT_NAME}" + (f"; plot: {out / PLOT_NAME}" if drawn else ""))
    return summary
