"""End-to-end smoke tests of run_scripts/run_ner.py on tiny in-code models and data files, and the tiny files and
helpers every run-script test uses.

A tiny BERT checkpoint (conftest's tokenizer + a 4-layer BertConfig), the conftest KG saved as a keplm KG
directory, and tiny CoNLL / SQuAD files are written to a temporary directory; the scripts run in-process
through their ``main(args)``. The tiny files, the ``tiny`` fixture and the helpers here (load_script, tiny_run_args,
ner_args, qa_args, run_ner_main, read_json, _conll_dir, CONLL, ARTICLES, ARTICLE_SPLIT, SYSTEMS, ROOT) are imported
by other test modules: run_qa.py is tested in test_run_qa.py, fine-tuning from a checkpoint in
test_run_checkpoints.py, the featurizer, entity-memory, tagging and Trainer pieces in test_run_features.py, run_ner's
training and linking options in test_run_ner_options.py, and python -m harness.experiments kala in
test_experiments_script.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForTokenClassification, BertModel, pipeline

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaForTokenClassification, KalaProcessor
from keplm.knowledge import KnowledgeAnnotation, write_kala_annotations
from keplm.training.arguments import KeplmTrainingArguments, ModelArguments, NerDataArguments
from keplm.training.recipes.kala import KnowledgeArguments
from tests.conftest import tiny_encoder_config
from tests.run_args import QUIET_RUN

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("vanilla", "more_params", "pointwise", "relational")
#: what run_ner.py parses for KALA (its run recipe's options beside the script's)
KALA_ARGUMENTS = (ModelArguments, NerDataArguments, KnowledgeArguments, KeplmTrainingArguments)

# The first two training sentences mention nothing of the KG: with one sentence per device and sequential
# sampling, the first step of a 2-process run has an entity-free batch on every rank.
CONLL = {
    "train": [
        ("john works for acme bank .", "B-PER O O B-ORG I-ORG O"),
        ("mary works for acme bank .", "B-PER O O B-ORG I-ORG O"),
        ("john lives in paris .", "B-PER O O B-LOC O"),
        ("mary visited berlin and london .", "B-PER O B-LOC O B-LOC O"),
        ("the seine flows through france .", "O B-LOC O O B-LOC O"),
        ("mary lives in new york .", "B-PER O O B-LOC I-LOC O"),
        ("the big apple is a city in usa .", "O B-LOC I-LOC O O O O B-LOC O"),
        ("germany is a country in europe .", "B-LOC O O O O B-LOC O"),
    ],
    "valid": [
        ("john visited paris and berlin .", "B-PER O B-LOC O B-LOC O"),
        ("mary works for acme bank .", "B-PER O O B-ORG I-ORG O"),
        ("the thames flows through london .", "O B-LOC O O B-LOC O"),
    ],
    "test": [
        ("unknownia is a country .", "B-LOC O O O O"),
        ("john lives in england .", "B-PER O O B-LOC O"),
        ("who works for acme bank ?", "O O O B-ORG I-ORG O"),
    ],
}

ARTICLES = [
    (
        "paris",
        "paris is the capital of france . the seine flows through paris . john lives in paris and works for "
        "acme bank .",
        [("what is the capital of france ?", "paris"), ("who lives in paris ?", "john")],
    ),
    (
        "berlin",
        "berlin is the capital of germany . mary visited berlin and london . the rhine flows through germany .",
        [("what is the capital of germany ?", "berlin"), ("what flows through germany ?", "the rhine")],
    ),
    (
        "london",
        "london is a city in england . the thames flows through london .",
        [("where is london ?", "england"), ("what flows through london ?", "the thames")],
    ),
    (
        "new york",
        "new york is a city in usa . it is the big apple . mary lives in new york .",
        [("who lives in new york ?", "mary"), ("where is new york ?", "usa")],
    ),
]
#: ARTICLES split for the QA scripts: two articles to train on, one to validate, one to test
ARTICLE_SPLIT = ("--split_by_article", "2", "1", "1")


# ---------------------------------------------------------------------------------------------- fixtures
def write_tiny_files(root: Path, tokenizer, kg) -> dict[str, str]:
    """Tiny BERT checkpoint, KG directory, CoNLL and SQuAD files under ``root``; returns their paths."""
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model_dir = root / "tiny-bert"
    BertModel(tiny_encoder_config(tokenizer, layers=4), add_pooling_layer=False).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    kg_dir = root / "kg"
    kg.save_pretrained(kg_dir)
    conll_dir = root / "conll"
    conll_dir.mkdir(exist_ok=True)
    for split, sentences in CONLL.items():
        lines = []
        for words, tags in sentences:
            lines += [f"{w} X X {t}" for w, t in zip(words.split(), tags.split())] + [""]
        (conll_dir / f"{split}.txt").write_text("\n".join(lines))
    squad = {"version": "1.1", "data": []}
    for a, (title, context, questions) in enumerate(ARTICLES):
        qas = [
            {"id": f"q{a}-{i}", "question": q, "answers": [{"text": t, "answer_start": context.index(t)}]}
            for i, (q, t) in enumerate(questions)
        ]
        squad["data"].append({"title": title, "paragraphs": [{"context": context, "qas": qas}]})
    squad_file = root / "squad-dev.json"
    squad_file.write_text(json.dumps(squad))
    return {"model": str(model_dir), "kg": str(kg_dir), "conll": str(conll_dir), "squad": str(squad_file)}


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"keplm_test_{name}", ROOT / "run_scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses with postponed annotations look their module up
    spec.loader.exec_module(module)
    return module


def linked_ner_inputs(tiny, out=None) -> list[str]:
    """The inputs of a KALA relational NER training run on the tiny files (model, CoNLL, KG linking, ``--do_train``;
    ``--output_dir out`` when given): the launch tests add their engine and step options."""
    args = ["--model_name_or_path", tiny["model"], "--dataset_name", tiny["conll"]]
    args += ["--output_dir", str(out)] if out is not None else []
    return [*args, "--system", "relational", "--knowledge", "link", "--kg", tiny["kg"], "--do_train"]


def tiny_run_args(tiny, dataset: str, out) -> list[str]:
    """A run script's inputs for the tiny model on the tiny ``dataset`` file (``tiny[dataset]``: "conll" or "squad"),
    writing to ``out``: three quiet CPU steps of batch 4. The script's and the test's options follow."""
    return [
        *("--model_name_or_path", tiny["model"], "--dataset_name", tiny[dataset], "--output_dir", str(out)),
        *("--max_steps", "3", "--per_device_train_batch_size", "4", *QUIET_RUN, "--use_cpu"),
    ]


def _kala_args(tiny, dataset: str, out, system: str, *options) -> list[str]:
    """KALA's ``system`` in a tiny run (``tiny_run_args``) with ``options``, linked against the tiny KG unless the
    options choose the knowledge: baselines too, the KG defines the seen/unseen test subsets."""
    args = [*tiny_run_args(tiny, dataset, out), "--system", system, *options]
    if "--knowledge" not in options:
        args += ["--knowledge", "link", "--kg", tiny["kg"]]
    return args


def ner_args(tiny, out, system="relational", *extra) -> list[str]:
    conll = ("--per_device_eval_batch_size", "2", "--learning_rate", "1e-3")
    return _kala_args(tiny, "conll", out, system, *conll, *extra)


def read_json(path) -> dict:
    return json.loads(Path(path).read_text())


def qa_args(tiny, out, system="relational", *extra) -> list[str]:
    squad = (*ARTICLE_SPLIT, "--max_seq_length", "32", "--doc_stride", "8", "--per_device_eval_batch_size", "3")
    return _kala_args(tiny, "squad", out, system, *squad, *extra)


def run_ner_main(tiny, out, system="relational", *extra) -> dict:
    """run_ner.py's ``main`` (the script loaded afresh) on ``ner_args(tiny, out, system, *extra)``."""
    return load_script("run_ner").main(ner_args(tiny, out, system, *extra))


# ---------------------------------------------------------------------------------------------- NER
@pytest.mark.parametrize("system", SYSTEMS)
def test_run_ner_end_to_end(tiny, tmp_path, system):
    out = tmp_path / system
    results = run_ner_main(
        tiny,
        out,
        system,
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--tag_text",
        "john visited paris and unknownia",
        "--max_predict_samples",
        "2",
    )
    all_results = read_json(out / "all_results.json")
    for key in (
        "train_loss",
        "train_samples",
        "eval_f1",
        "eval_precision",
        "eval_recall",
        "eval_accuracy",
        "eval_loss",
        "predict_f1",
        "predict_samples",
    ):
        assert key in all_results, key
    assert all_results["predict_samples"] == 2
    # KALA 5.4 subsets, defined by the KG linking alone, so every system reports them
    assert all_results["predict_seen_examples"] + all_results["predict_unseen_examples"] == 2
    assert not (out / "training_args.bin").exists() and (out / "training_args.json").exists()  # no pickles
    card = (out / "README.md").read_text()  # generated model card with this run's metrics
    assert "library_name: keplm" in card and f"| predict_f1 | {all_results['predict_f1']:.4f} |" in card
    assert read_json(out / "eval_results.json")["eval_f1"] == all_results["eval_f1"]
    assert len((out / "predictions.txt").read_text().splitlines()) == 2
    tagged = read_json(out / "tagged_text.json")
    assert tagged["text"] == "john visited paris and unknownia" and tagged["entities"] == results["tagged"]

    model = AutoModelForTokenClassification.from_pretrained(out)
    assert isinstance(model, KalaForTokenClassification)
    expected = {
        "vanilla": ("none", 0),
        "more_params": ("none", 1),
        "pointwise": ("pointwise", 0),
        "relational": ("relational", 0),
    }[system]
    assert (model.config.retrieval_mode, model.config.num_extra_layers) == expected
    assert model.config.id2label[0] == "O" and len(model.config.id2label) == 6
    processor = KalaProcessor.from_pretrained(out)
    if system in ("pointwise", "relational"):
        assert model.config.kfm_layers == [-4, -2]
        assert processor.knowledge_assets.kg is not None and (out / "knowledge" / "kg").is_dir()
        assert "paris" in processor.knowledge_assets.entity_vocab or "Q90" in processor.knowledge_assets.entity_vocab
        assert model.knowledge_assets.content_hash() == processor.knowledge_assets.content_hash()
    ner = pipeline("keplm-ner", model=model, processor=processor)
    assert [{**e, "score": float(e["score"])} for e in ner(tagged["text"])] == tagged["entities"]


def test_run_ner_pushes_to_the_hub_without_pickles(tiny, tmp_path, hub_server):
    """--push_to_hub uploads the model, processor, knowledge/ and keplm's card (with the evaluation results) in
    every push, and nothing else at the repo's root (no optimizer / scheduler / RNG state, no result files); no pickle
    reaches the Hub, neither in the final push nor in the checkpoint pushes."""
    from huggingface_hub import HfApi, ModelCard

    run_ner_main(
        tiny,
        tmp_path / "out",
        "relational",
        "--do_train",
        "--do_eval",
        "--push_to_hub",
        "--hub_model_id",
        "org/ner-run",
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--hub_strategy",
        "checkpoint",
    )
    files = set(HfApi().list_repo_files("org/ner-run"))
    assert {
        "model.safetensors",
        "README.md",
        "processor_config.json",
        "knowledge/kg/triples.tsv",
        "last-checkpoint/model.safetensors",
        "last-checkpoint/optimizer.safetensors",
    } <= files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))], files
    # the repo root holds what loading needs and the card; the training state only in the checkpoint asked for
    root = {f for f in files if not f.startswith(("last-checkpoint/", "knowledge/", "figures/", "."))}
    assert root <= {
        "model.safetensors",
        "config.json",
        "README.md",
        "processor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.txt",
    }, root
    card = ModelCard.load("org/ner-run")
    assert card.data.library_name == "keplm" and "eval_f1" in str(card)


def test_run_ner_with_lora_trains_adapters_and_reloads_them(tiny, tmp_path):
    """--lora_r trains LoRA adapters on the encoder with the knowledge modules in full; the output folder holds the
    adapter, the keplm config and knowledge/, and --tag_text reloads it onto its base."""
    out = tmp_path / "lora"
    results = run_ner_main(
        tiny, out, "relational", "--do_train", "--do_eval", "--lora_r", "4", "--tag_text", "john lives in paris ."
    )
    assert (out / "adapter_model.safetensors").is_file() and (out / "adapter_config.json").is_file()
    assert (out / "config.json").is_file() and (out / "knowledge" / "kg" / "triples.tsv").is_file()
    assert not (out / "model.safetensors").exists()
    assert "eval_f1" in results and isinstance(results["tagged"], list)
    for entity in results["tagged"]:  # the reloaded adapter's entities: spans of the text, types of the data
        assert "john lives in paris ."[entity["start"] : entity["end"]].strip()
        assert entity["entity_group"] in ("PER", "ORG", "LOC")
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")  # the card says it is an adapter and how to load it
    assert {"peft", "lora"} <= set(card.data.tags) and "LoRA adapter" in card.text and "load_lora" in card.text


def _conll_dir(root: Path, splits: dict) -> str:
    root.mkdir(parents=True, exist_ok=True)
    for split, sentences in splits.items():
        lines = [
            line
            for words, tags in sentences
            for line in [*(f"{w} X X {t}" for w, t in zip(words.split(), tags.split())), ""]
        ]
        (root / f"{split}.txt").write_text("\n".join(lines))
    return str(root)


def test_run_ner_with_kala_annotations(tiny, tmp_path):
    """--knowledge annotations reads KALA JSON keyed by example id; no KG needed, relations from the facts."""
    annotations = {}
    for i, (words, _) in enumerate(CONLL["train"]):
        if "paris" in words.split():
            start = words.index("paris")
            annotations[str(i)] = KnowledgeAnnotation.from_dict(
                {
                    "entities": [{"text": "paris", "start": start, "end": start + 5, "id": 90}],
                    "triplets": [{"h": 90, "r": "P17", "t": 142}],
                }
            )
    path = tmp_path / "train_annotations.json"
    write_kala_annotations(annotations, path)
    out = tmp_path / "out"
    run_ner_main(
        tiny,
        out,
        "relational",
        "--knowledge",
        "annotations",
        "--annotation_files",
        f"train={path}",
        "--do_train",
        "--do_eval",
    )
    processor = KalaProcessor.from_pretrained(out)
    assert processor.knowledge_assets.entity_vocab == ["[NULL]", "90"]
    assert "P17" in processor.knowledge_assets.relation_vocab
    assert processor.knowledge_assets.kg is None
    results = read_json(out / "all_results.json")
    assert "eval_f1" in results
    # every example without an annotation is counted (and treated as entity-free)
    assert results["annotations_train_examples"] == len(CONLL["train"])
    assert results["annotations_train_missing"] == len(CONLL["train"]) - len(annotations) > 0
