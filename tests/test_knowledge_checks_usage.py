"""The knowledge checks as users meet them: ``keplm check-knowledge`` on saved models and data files, knowledge updates
saved, pushed and given to the run scripts, and the facts each processor reads (the generator, the measure and the
tiny-model checks are in tests/test_knowledge_checks.py)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertTokenizerFast

from keplm import KalaConfig, KalaForTokenClassification, KalaProcessor, KnowledgeAssets
from keplm.checks.counterfactual import knowledge_sensitivity
from keplm.checks.scoring import ner_accuracy
from keplm.checks.synthetic import make_knowledge_task
from keplm.data.collator import KeplmDataCollator

from .conftest import tiny_encoder_config
from .test_knowledge_checks import _tiny_setup


# ---------------------------------------------------------------------------------------------- user-facing paths
@pytest.fixture(scope="module")
def trained_relation_model():
    return _tiny_setup("relation", "composition", seed=2)


def check_knowledge(model, data, output_dir, *options: str) -> None:
    """``keplm check-knowledge --model model --data data --output_dir output_dir`` and ``options``."""
    from keplm.cli import main

    main(["check-knowledge", "--model", str(model), "--data", str(data), "--output_dir", str(output_dir), *options])


def test_check_knowledge_command(tmp_path, trained_relation_model):
    """``keplm check-knowledge`` on a saved checkpoint and a JSON-lines file: report, per-relation table, plot; with
    ``--kg`` the user's KG is read (the update is reported)."""
    from keplm.checks.synthetic import write_jsonl_kg

    task, splits, model, processor = trained_relation_model
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"tokens": r["tokens"]}) + "\n" for r in splits["test_added"]))
    write_jsonl_kg(str(tmp_path / "full.jsonl"), task, ("anchor", "train", "unseen", "added"))
    out = tmp_path / "check"
    edits = ("--kg", f"jsonl:{tmp_path / 'full.jsonl'}", "--edits", "relation", "tail")
    check_knowledge(tmp_path / "model", data, out, *edits)
    report = json.loads((out / "knowledge_sensitivity.json").read_text())
    assert report["examples"] == report["examples_with_facts"] == len(splits["test_added"])
    assert report["kg_change"]["entities_added"] == len(splits["test_added"])
    assert report["overall"]["relation"]["flip_rate"] >= 0.5  # the relation holds the type
    assert report["overall"]["tail"]["mean_shift"] < report["overall"]["relation"]["mean_shift"]
    assert {r["name"] for r in report["per_relation"].values()} == set(
        task.relation_names[f"R_{label}"] for label in task.labels
    )
    assert (out / "knowledge_sensitivity.png").stat().st_size > 1000
    # the data as run_ner.py reads it: a CoNLL folder's test split, the same examples, the same report
    (tmp_path / "conll").mkdir()
    (tmp_path / "conll" / "test.txt").write_text(
        "\n\n".join("\n".join(f"{w} O" for w in r["tokens"]) for r in splits["test_added"]) + "\n"
    )
    check_knowledge(tmp_path / "model", tmp_path / "conll", tmp_path / "c2", *edits)
    assert json.loads((tmp_path / "c2" / "knowledge_sensitivity.json").read_text())["overall"] == report["overall"]
    with pytest.raises(ValueError, match="no 'validation' split"):
        check_knowledge(tmp_path / "model", tmp_path / "conll", tmp_path / "c3", "--split", "validation")
    # without --kg the model's own KG has no added entity: nothing to edit, said plainly
    check_knowledge(tmp_path / "model", data, out)
    assert json.loads((out / "knowledge_sensitivity.json").read_text())["examples_with_facts"] == 0


def test_qa_sensitivity_reads_a_context_longer_than_one_window(trained_relation_model):
    """A QA context split into windows of different lengths: every window's start / end distributions are compared
    (padded to one width), an edit that changes nothing scores 0, and the shifts are distances in [0, 1]."""
    from keplm import KalaForQuestionAnswering

    task, splits, ner_model, processor = trained_relation_model
    torch.manual_seed(0)
    model = KalaForQuestionAnswering(ner_model.config)
    model.set_knowledge_assets(processor.knowledge_assets)

    def window_lengths(context):
        return [
            len(ids)
            for ids in processor.prepare_qa_features(
                {
                    "id": ["0"],
                    "question": ["which one is it ?"],
                    "context": [context],
                    "knowledge": [processor.link(context).to_dict()],
                    "question_knowledge": [processor.link("x").to_dict()],
                },
                max_length=32,
                doc_stride=16,
                training=False,
            )["input_ids"]
        ]

    # the first context of 4+ test sentences (several windows) whose last window is shorter than the others
    context = next(
        c
        for k in range(4, 12)
        for c in [" ".join(" ".join(r["tokens"]) for r in splits["test_unseen"][:k])]
        if len(set(window_lengths(c))) > 1
    )
    report = knowledge_sensitivity(
        model, processor, [{"question": "which one is it ?", "context": context}], task="qa", max_length=32
    )
    assert report.examples_with_facts == 1 and report.results
    assert all(0.0 <= r.shift <= 1.0 for r in report.results)
    assert any(r.shift > 0 for r in report.results)  # the untrained model reads its KG too


def test_check_knowledge_refuses_a_baseline_and_bad_data(tmp_path, trained_relation_model, tokenizer):
    _, _, model, processor = trained_relation_model
    with pytest.raises(FileNotFoundError, match="no such file"):
        check_knowledge("x", tmp_path / "none", tmp_path, "--task", "ner")
    baseline = KalaForTokenClassification(
        KalaConfig(encoder_config=tiny_encoder_config(tokenizer), retrieval_mode="none", num_labels=2)
    )
    with pytest.raises(ValueError, match="reads no knowledge"):
        knowledge_sensitivity(baseline, processor, [{"text": "x"}])
    (tmp_path / "empty.txt").write_text("\n")
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match="holds no text"):
        check_knowledge(tmp_path / "model", tmp_path / "empty.txt", tmp_path / "out")


def test_knowledge_update_is_saved_and_pushed(tmp_path, hub_server, trained_relation_model):
    """``processor.update_knowledge(kg, model=model)``: the added entities are typed without retraining, a save
    writes the new KG with its new hash, and a push makes a new Hub revision that loads with it; the old revision
    still loads the old KG."""
    from transformers import AutoModelForTokenClassification, AutoProcessor

    task, splits, model, processor = trained_relation_model
    model.push_to_hub("org/kala-update")
    first = processor.push_to_hub("org/kala-update").oid
    old_hash = processor.kg.content_hash()
    change = processor.update_knowledge(task.kg_full, model=model)
    assert change["old_kg_hash"] == old_hash != change["new_kg_hash"] == task.kg_full.content_hash()
    assert model.knowledge_assets is processor.knowledge_assets
    added = ner_accuracy(model, processor, task, splits["test_added"])
    assert added >= 0.9
    model.save_pretrained(tmp_path / "updated")
    processor.save_pretrained(tmp_path / "updated")
    assets = json.loads((tmp_path / "updated" / "knowledge" / "assets_config.json").read_text())
    assert assets["kg_hash"] == change["new_kg_hash"]
    model.push_to_hub("org/kala-update")
    processor.push_to_hub("org/kala-update")
    pulled_model = AutoModelForTokenClassification.from_pretrained("org/kala-update")
    pulled = AutoProcessor.from_pretrained("org/kala-update")
    assert pulled.kg.content_hash() == change["new_kg_hash"]
    assert ner_accuracy(pulled_model, pulled, task, splits["test_added"]) == added
    assert AutoProcessor.from_pretrained("org/kala-update", revision=first).kg.content_hash() == old_hash
    with pytest.raises(ValueError, match="KnowledgeGraph or a KG spec"):
        processor.update_knowledge(42)


def test_run_script_kg_updates_a_checkpoint(tmp_path, trained_relation_model):
    """``run_ner.py --model_name_or_path <keplm checkpoint> --kg <new KG> --do_predict``: the checkpoint predicts with
    the new graph, without retraining (the entities added to it are typed); without ``--kg`` they are not."""
    from keplm.checks.synthetic import write_jsonl_kg

    from .test_run_scripts import load_script

    task, splits, model, processor = trained_relation_model
    processor.update_knowledge(task.kg_train, model=model)  # the training KG (another test updates this fixture)
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    test = tmp_path / "added.jsonl"
    test.write_text(
        "".join(json.dumps({"tokens": r["tokens"], "ner_tags": r["ner_tags"]}) + "\n" for r in splits["test_added"])
    )
    write_jsonl_kg(str(tmp_path / "full.jsonl"), task, ("anchor", "train", "unseen", "added"))
    run_ner = load_script("run_ner")
    common = [
        "--model_name_or_path",
        str(tmp_path / "model"),
        "--test_file",
        str(test),
        "--do_predict",
        "--report_to",
        "none",
        "--per_device_eval_batch_size",
        "16",
    ]
    before = run_ner.main([*common, "--output_dir", str(tmp_path / "before")])
    after = run_ner.main([*common, "--output_dir", str(tmp_path / "after"), "--kg", f"jsonl:{tmp_path / 'full.jsonl'}"])
    # F1 in percent (the run scripts' unit); the linked share is a share, not a metric: a fraction
    assert after["predict_f1"] >= 90.0 and before["predict_f1"] < 50.0 and after["predict_linked_share"] == 1.0


def test_facts_read_by_each_processor(tokenizer, kg, assets):
    """The counterfactual measure edits what the model reads: KALA the annotation's facts; Roof-Transformer the KG
    triples it selects for the passage (head linked; has_tail: tail linked too), fed back through its triples
    column."""
    from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor
    from keplm.tokenization.roof_knowledge import TRIPLES_COLUMN

    text = "paris is a city in france"
    kala = KalaProcessor(tokenizer, assets)
    annotation = kala.link(text).to_dict()
    assert kala.facts_read(annotation) == (annotation["triplets"], None)
    for selection, expected in (
        ("no_tail", {("Q90", "P17", "Q142"), ("Q90", "P31", "Q515")}),
        ("has_tail", {("Q90", "P17", "Q142"), ("Q90", "P31", "Q515")}),
    ):
        roof = RoofTransformerProcessor(tokenizer, KnowledgeAssets(kg=kg), selection=selection)
        facts, column = roof.facts_read(roof.link(text).to_dict())
        assert column == TRIPLES_COLUMN and {(f["h"], f["r"], f["t"]) for f in facts} == expected
    roof = RoofTransformerProcessor(tokenizer, KnowledgeAssets(kg=kg), selection="has_tail")
    facts, _ = roof.facts_read(roof.link("paris is nice").to_dict())
    assert facts == []  # neither tail is in the passage


def test_glue_files_without_a_task_name_make_their_own_task(tmp_path):
    import datasets

    from keplm.data.glue import load_glue_dataset, task_of_dataset

    for split in ("train", "validation"):
        (tmp_path / f"{split}.jsonl").write_text(
            "".join(json.dumps({"sentence": f"s {i}", "label": i % 3}) + "\n" for i in range(6))
        )
    raw = load_glue_dataset(
        None, train_file=str(tmp_path / "train.jsonl"), validation_file=str(tmp_path / "validation.jsonl")
    )
    task = task_of_dataset(raw)
    assert task.text_columns == ("sentence",) and task.num_labels == 3 and task.metric == "sst2"
    with pytest.raises(ValueError, match="no text column"):
        task_of_dataset(datasets.DatasetDict({"train": datasets.Dataset.from_dict({"x": ["a"]})}))


def test_roof_transformer_reads_the_verbalised_relation_and_follows_its_swap():
    """A tiny Roof-Transformer on relation-held types (names all [UNK], the relations' words known): unseen entities
    are classified from their verbalised fact, and a swapped relation flips the prediction."""
    from keplm import RoofTransformerConfig, RoofTransformerForSequenceClassification
    from keplm.checks.scoring import classification_accuracy
    from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor

    task = make_knowledge_task(
        "relation",
        num_types=3,
        train_per_type=20,
        unseen_per_type=10,
        added_per_type=10,
        anchors_per_type=2,
        sentences_per_entity=3,
        seed=4,
    )
    splits = task.classification_splits()
    names = {e.name.lower() for e in task.entities}
    words = {w.lower() for rows in splits.values() for r in rows for w in r["sentence"].split()}
    words |= {w for name in task.relation_names.values() for w in name.split()}
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words - names)]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    processor = RoofTransformerProcessor(
        tokenizer, KnowledgeAssets(kg=task.kg_train), selection="no_tail", max_knowledge_length=24
    )
    torch.manual_seed(1)  # reaches 100 % by epoch 20 at 1, 2 and 4 threads (seed 0: 67 % at one thread)
    model = RoofTransformerForSequenceClassification(
        RoofTransformerConfig(
            encoder_config=tiny_encoder_config(tokenizer),
            max_knowledge_length=24,
            fusion_layers=1,
            num_labels=3,
            id2label=dict(enumerate(task.labels)),
            label2id={label: i for i, label in enumerate(task.labels)},
        )
    )
    model.set_knowledge_assets(processor.knowledge_assets)
    train = splits["train"]
    features = processor.prepare_pair_features(
        {"sentence": [r["sentence"] for r in train], "label": [r["label"] for r in train]},
        text_columns=("sentence",),
        max_length=24,
    )
    rows = [{k: v[i] for k, v in features.items() if not k.startswith("num_")} for i in range(len(train))]
    collator = KeplmDataCollator.from_processor(processor, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(30):
        for index in torch.randperm(len(rows), generator=generator).split(16):
            model(**collator([rows[i] for i in index.tolist()])).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    assert classification_accuracy(model, processor, splits["test_unseen"]) >= 0.9
    report = knowledge_sensitivity(
        model,
        processor,
        [{"sentence": r["sentence"]} for r in splits["test_unseen"]],
        task="classification",
        edits=("relation", "tail"),
    )
    summary = report.summary()["overall"]
    assert summary["relation"]["flip_rate"] >= 0.5 > summary["tail"]["flip_rate"]
    # a GLUE-style pair: the two texts' facts form one passage; the entity's sentence first or second, same reading
    for first, second in ((0, 1), (1, 0)):
        pairs = [
            dict(zip((f"sentence{1 + first}", f"sentence{1 + second}"), (r["sentence"], "it is here .")))
            for r in splits["test_unseen"]
        ]
        pair = knowledge_sensitivity(model, processor, pairs, task="classification", edits=("relation",)).summary()
        assert pair["examples_with_facts"] == len(pairs)
        assert pair["overall"]["relation"]["flip_rate"] >= 0.5


def test_link_hops_argument():
    """``--link_hops``: the linker's ``hops`` when not 1 (default settings keep their cache fingerprints); < 0 is
    refused."""
    from keplm.training.recipes.kala import KnowledgeArguments

    assert "hops" not in KnowledgeArguments().linker_kwargs(max_neighbors_per_entity=8)
    assert KnowledgeArguments(link_hops=2).linker_kwargs()["hops"] == 2
    with pytest.raises(ValueError, match="--link_hops"):
        KnowledgeArguments(link_hops=-1).linker_kwargs()


def test_check_knowledge_refuses_a_text_file_for_qa_by_name(tmp_path):
    """--task qa with a .txt file (one text per line, no questions) is a ValueError naming the file and the forms QA
    data takes, not a bare KeyError: 'question' later."""
    from keplm.commands.check_knowledge import read_examples

    (tmp_path / "sentences.txt").write_text("John lives in Paris .\n")
    with pytest.raises(ValueError, match=r"sentences.txt: a .txt file holds one text per line, but --task qa"):
        read_examples(str(tmp_path / "sentences.txt"), "test", None, "qa", 10)
    assert read_examples(str(tmp_path / "sentences.txt"), "test", None, "ner", 10) == [
        {"text": "John lives in Paris ."}
    ]


def test_check_knowledge_reads_a_split_smaller_than_the_limit_whole(tmp_path, monkeypatch):
    """--limit above the rows of the data reads them all, also under a datasets release whose ``Dataset.take``
    raises for more rows than there are (before datasets 5; keplm supports datasets >= 3)."""
    import datasets

    from keplm.commands.check_knowledge import read_examples

    monkeypatch.setattr(datasets.Dataset, "take", lambda self, n: self.select(range(n)), raising=False)
    (tmp_path / "rows.jsonl").write_text('{"text": "John lives in Paris ."}\n{"text": "Mary works in London ."}\n')
    assert read_examples(str(tmp_path / "rows.jsonl"), "train", None, "classification", 10) == [
        {"sentence": "John lives in Paris ."},
        {"sentence": "Mary works in London ."},
    ]
