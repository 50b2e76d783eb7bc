"""The ``--relink`` step of ``harness/cards.py``: it recomputes each KALA run's KG, entity vocabulary, linking coverage
and seen/unseen test contexts with the run scripts' own code (data loading, ``prepare_processor``, ``add_knowledge``,
``build_entity_vocabulary``) on ``../shared/data``, without training, and writes them to ``results/cards/<card>.json``,
which the KALA cards read for their knowledge sections and entity-frequency figures."""

from __future__ import annotations

import json
import subprocess
import tempfile

from harness.card_facts import command_line
from harness.card_presets_kala import PRESETS
from harness.cards import RELINKED, ROOT, read_summaries, run_command
from keplm.hub.card import kg_spec_name


# ============================================================================================ relinking
def _git_head() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_run_data(task: str, data_args):
    """The splits a run script loads (``run_ner.load_data`` / ``run_qa.load_data``: the same calls)."""
    from keplm.data import limit_samples, load_ner_dataset, load_qa_dataset

    limits = data_args.sample_limits()
    files = {
        "train_file": data_args.train_file,
        "validation_file": data_args.validation_file,
        "test_file": data_args.test_file,
    }
    if task == "ner":
        return load_ner_dataset(
            data_args.dataset_name,
            **files,
            max_train_samples=limits["train"],
            max_eval_samples=limits["validation"],
            max_test_samples=limits["test"],
        )
    from keplm.data.squad import SQUAD_V11_DEV_ARTICLE_SPLIT

    # the committed QA runs predate --split_by_article and used the SQuAD v1.1 dev split implicitly
    raw = load_qa_dataset(
        data_args.dataset_name, **files, split_by_article=data_args.article_split() or SQUAD_V11_DEV_ARTICLE_SPLIT
    )
    return limit_samples(raw, limits)


def relink_run(settings: dict, name: str, num_proc: int | None = None) -> dict:
    """A run's entity vocabulary, linking coverage and seen/unseen contexts, recomputed with the run scripts' own
    code (data loading, ``prepare_processor``, ``add_knowledge``, ``build_entity_vocabulary``), without training.
    Annotation-file runs (NCBI-disease) are relinked with the KG and settings that wrote their files."""
    from datetime import datetime, timezone

    from harness import runs
    from keplm.training.arguments import (
        KeplmTrainingArguments,
        ModelArguments,
        NerDataArguments,
        QaDataArguments,
        parse_args,
    )
    from keplm.training.recipes.kala import (
        KnowledgeArguments,
        add_knowledge,
        build_entity_vocabulary,
        prepare_processor,
    )
    from keplm.training.runtime import linked_share
    from keplm.training.subsets import UNSEEN_THRESHOLD, UnseenEntityCounter

    settings = dict(settings)
    settings.pop("annotations", None)  # link with the spec build-kg used for the files (hpo:, lower case)
    task = settings["task"]
    with tempfile.TemporaryDirectory() as out:
        argv = run_command(settings, "relational", "1", out)[2:]
        argv[argv.index("--model_name_or_path") + 1] = runs.default_model()
        data_class = NerDataArguments if task == "ner" else QaDataArguments
        model_args, data_args, knowledge_args, _ = parse_args(
            (ModelArguments, data_class, KnowledgeArguments, KeplmTrainingArguments), argv
        )
        raw = load_run_data(task, data_args)
        processor = prepare_processor(model_args, knowledge_args)
        raw = add_knowledge(raw, processor, knowledge_args, task, num_proc)
        processor = build_entity_vocabulary(processor, raw, model_args, knowledge_args, task)
    assets = processor.knowledge_assets
    unseen = UnseenEntityCounter.from_splits(raw).counts(raw["test"]["knowledge"])
    mentions = [len(row["entities"]) for row in raw["train"]["knowledge"]]
    kg = processor.kg
    return {
        "card": name,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "commit": _git_head(),
        "command": command_line(["python", "-m", "harness.cards", "--relink"]),
        "kg_spec": kg_spec_of(settings),
        "case_sensitive": bool(settings.get("case_sensitive")),
        "kg": {
            "entities": kg.num_entities,
            "relations": kg.num_relations,
            "triples": kg.num_triples,
            "content_hash": kg.content_hash(),
        },
        "entity_rows": assets.num_entities,
        "relation_rows": assets.num_relations,
        "train_examples": len(raw["train"]),
        "train_linked_share": round(linked_share(raw["train"]), 6),
        "mentions_per_example": round(sum(mentions) / len(mentions), 4),
        "test_seen": sum(c < UNSEEN_THRESHOLD for c in unseen),
        "test_unseen": sum(c >= UNSEEN_THRESHOLD for c in unseen),
        "labels": raw["train"].features["ner_tags"].feature.names if task == "ner" else None,
        "entity_counts": list(assets.entity_counts[1:]),
    }


def kg_spec_of(settings: dict) -> str:
    return kg_spec_name(settings["kg"]) or ""


def relink_json(result: dict) -> str:
    """The JSON of a relinked run, with the (long) entity counts on one line."""
    head = json.dumps({k: v for k, v in result.items() if k != "entity_counts"}, indent=1)
    return head[:-2] + ',\n "entity_counts": ' + json.dumps(result["entity_counts"]) + "\n}\n"


def relink_all(num_proc: int | None) -> None:
    """Recompute ``results/cards/<card>.json`` of every card whose knowledge section reads it, from its card's run."""
    (ROOT / RELINKED).mkdir(parents=True, exist_ok=True)
    for preset in PRESETS:
        if preset.knowledge != "linking":
            continue
        print(f"[cards] relinking {preset.name} ...", flush=True)
        result = relink_run(read_summaries(preset)[0]["settings"], preset.name, num_proc)
        (ROOT / RELINKED / f"{preset.name}.json").write_text(relink_json(result))
        print(
            f"[cards] {preset.name}: {result['entity_rows']} entity rows, {result['relation_rows']} relations, "
            f"test seen/unseen {result['test_seen']}/{result['test_unseen']}",
            flush=True,
        )
