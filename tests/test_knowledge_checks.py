"""Knowledge-dependence checks: the synthetic tasks, the counterfactual measure, and tiny KALA models that must
(or, with the paper's eq. 3 on relation-held types, cannot) read the KG."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertTokenizerFast

from keplm import KalaConfig, KalaForTokenClassification, KalaProcessor, KnowledgeAssets
from keplm.checks.counterfactual import edit_fact, knowledge_sensitivity, total_variation
from keplm.checks.scoring import follow_rate, ner_accuracy, retarget_fact
from keplm.checks.synthetic import ANCHOR_LABEL, load_knowledge_task, make_knowledge_task
from keplm.data.collator import KeplmDataCollator

from .conftest import tiny_encoder_config


# ---------------------------------------------------------------------------------------------- the generator
@pytest.mark.parametrize("kind", ["neighbour", "relation"])
def test_types_live_in_the_kg_only(kind):
    task = make_knowledge_task(
        kind,
        num_types=4,
        train_per_type=8,
        unseen_per_type=5,
        added_per_type=5,
        anchors_per_type=3,
        noise_facts=2,
        seed=3,
    )
    anchors = {e.id: e for e in task.entities if e.group == "anchor"}
    typed = [e for e in task.entities if e.type >= 0]
    assert {e.group for e in typed} == {"train", "unseen", "added"}
    names = [e.name for e in task.entities]
    assert len(set(names)) == len(names)
    for entity in typed:
        h, r, t = task.informative[entity.id]
        assert h == entity.id and t in anchors
        facts = [f for f in task.facts if f[0] == entity.id]
        assert len(facts) == 3 and sum(f[1] == "R_noise" for f in facts) == 2
        if kind == "relation":  # the relation names the type; the anchor says nothing
            assert r == f"R_{task.labels[entity.type]}"
        else:  # one relation; the anchor's block of the anchor list names the type
            assert r == "R_link" and int(t[1:]) // 3 == entity.type
    # the same sentences for every type: no template is used by one type only
    rows = task.ner_splits()["train"]
    by_template = {}
    for row in rows:
        words = list(row["tokens"])
        words[row["entity_word"]] = "{e}"
        by_template.setdefault(" ".join(words), set()).add(row["ner_tags"][row["entity_word"]])
    typed_templates = [tags for tags in by_template.values() if f"B-{ANCHOR_LABEL}" not in tags]
    assert sum(len(tags) > 1 for tags in typed_templates) == len(typed_templates)


def test_two_hop_types_are_two_hops_away():
    """``two_hop``: each entity's only fact goes to a bridge of its own that no sentence mentions; the bridge's fact
    names an anchor of the entity's type; bridges belong to their entity's KG (train / unseen now, added later)."""
    from keplm.checks.synthetic import BRIDGE_SUFFIX

    task = make_knowledge_task(
        "two_hop", num_types=3, train_per_type=6, unseen_per_type=4, added_per_type=3, anchors_per_type=2, seed=4
    )
    by_id = {e.id: e for e in task.entities}
    typed = [e for e in task.entities if e.type >= 0]
    mentioned = {r["entity"] for rows in task.ner_splits().values() for r in rows}
    for entity in typed:
        (via,) = [f for f in task.facts if f[0] == entity.id]
        bridge = by_id[via[2]]
        assert via[1] == "R_via" and bridge.group == entity.group + BRIDGE_SUFFIX and bridge.id not in mentioned
        h, r, t = task.informative[entity.id]
        assert (h, r) == (bridge.id, "R_link") and int(t[1:]) // 2 == entity.type
    added_bridges = {e.id for e in task.entities if e.group == "added" + BRIDGE_SUFFIX}
    assert len(added_bridges) == 9
    assert not any(task.kg_train.has_entity(b) for b in added_bridges)
    assert all(task.kg_full.has_entity(b) for b in added_bridges)
    assert task.kg_full.num_triples == task.kg_train.num_triples + 2 * 9


def test_splits_and_knowledge_graphs():
    task = make_knowledge_task("relation", train_per_type=6, unseen_per_type=4, added_per_type=3, seed=1)
    splits = task.ner_splits()
    group_of = {e.id: e.group for e in task.entities}
    assert {group_of[r["entity"]] for r in splits["train"]} == {"train", "anchor"}
    assert {group_of[r["entity"]] for r in splits["test_seen"] + splits["validation"]} == {"train"}
    assert {group_of[r["entity"]] for r in splits["test_unseen"]} == {"unseen"}
    assert len(splits["test_added"]) == 9
    train_kg, full_kg = task.kg_train, task.kg_full
    added = [e.id for e in task.entities if e.group == "added"]
    assert not any(train_kg.has_entity(e) for e in added) and all(full_kg.has_entity(e) for e in added)
    assert full_kg.num_triples == train_kg.num_triples + len(added)
    for row in task.qa_splits()["test_unseen"]:
        start = row["answers"]["answer_start"][0]
        assert row["context"][start : start + len(row["answers"]["text"][0])] == row["answers"]["text"][0]
        assert row["question"].split()[-2] == task.labels[[e for e in task.entities if e.id == row["entity"]][0].type]
    assert make_knowledge_task("relation", seed=2).entities != make_knowledge_task("relation", seed=1).entities


def test_write_and_load(tmp_path):
    task = make_knowledge_task("neighbour", train_per_type=4, unseen_per_type=2, added_per_type=2, seed=5)
    paths = task.write(tmp_path)
    assert load_knowledge_task(tmp_path) == task
    lines = [json.loads(line) for line in open(paths["kg_full"], encoding="utf-8")]
    assert sum("h" in line for line in lines) == task.kg_full.num_triples
    with pytest.raises(FileNotFoundError, match="task.json"):
        load_knowledge_task(tmp_path / "missing")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "type"}, "kind"),
        ({"num_types": 1}, "num_types"),
        ({"train_per_type": 0}, "train_per_type"),
        ({"num_templates": 1}, "num_templates"),
    ],
)
def test_bad_task_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_knowledge_task(**kwargs)


# ---------------------------------------------------------------------------------------------- the measure
def test_edit_fact_and_total_variation():
    import random

    annotation = {
        "entities": [{"text": "X", "start": 0, "end": 1, "id": "E1"}],
        "triplets": [{"h": "E1", "r": "R_a", "t": "A1"}, {"h": "A2", "r": "R_a", "t": "E1"}],
    }
    rng = random.Random(0)
    relation, new = edit_fact(annotation, 0, "relation", ["R_a", "R_b"], ["A1", "A2", "A3"], rng)
    assert relation["triplets"][0]["r"] == new == "R_b" and annotation["triplets"][0]["r"] == "R_a"
    tail, _ = edit_fact(annotation, 0, "tail", ["R_a"], ["A1", "A2", "A3"], rng)
    assert tail["triplets"][0]["h"] == "E1" and tail["triplets"][0]["t"] in ("A2", "A3")
    head, _ = edit_fact(annotation, 1, "tail", ["R_a"], ["A1", "A2", "A3"], rng)  # the mention is the tail here
    assert head["triplets"][1]["t"] == "E1" and head["triplets"][1]["h"] in ("A1", "A3")
    assert edit_fact(annotation, 0, "relation", ["R_a"], ["A1"], rng) is None
    assert len(edit_fact(annotation, 0, "remove", [], [], rng)[0]["triplets"]) == 1
    p = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    q = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.25, 0.25]])
    assert total_variation(p, q) == pytest.approx((1.0 + 0.25) / 2)


# ---------------------------------------------------------------------------------------------- tiny models
def _tiny_setup(
    kind: str, relation_message: str, seed: int = 0, epochs: int = 20, lr: float = 3e-3, link_hops: int = 1
):
    task = make_knowledge_task(
        kind,
        num_types=3,
        train_per_type=12,
        unseen_per_type=10,
        added_per_type=10,
        anchors_per_type=2,
        sentences_per_entity=2,
        seed=seed,
    )
    splits = task.ner_splits()
    # entity names are left out of the vocabulary: every name reads [UNK], so only the knowledge tells them apart
    names = {e.name.lower() for e in task.entities}
    words = sorted({w.lower() for rows in splits.values() for r in rows for w in r["tokens"]} - names)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    processor = KalaProcessor(tokenizer, KnowledgeAssets(kg=task.kg_train), linker_kwargs={"hops": link_hops})
    links = [processor.link(" ".join(r["tokens"])).to_dict() for r in splits["train"]]
    mentions = [m["id"] for link in links for m in link["entities"]]
    processor.knowledge_assets = KnowledgeAssets.build(mentions, kg=task.kg_train)
    labels = ["O", *(f"B-{label}" for label in (*task.labels, ANCHOR_LABEL))]
    torch.manual_seed(seed)
    assets = processor.knowledge_assets
    model = KalaForTokenClassification(
        KalaConfig(
            encoder_config=tiny_encoder_config(tokenizer),
            retrieval_mode="relational",
            kfm_layers=[-1],
            entity_vocab_size=assets.num_entities,
            num_relations=assets.num_relations,
            relation_message=relation_message,
            knowledge_dropout=0.0,
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
        )
    )
    model.set_knowledge_assets(assets)
    label2id = model.config.label2id
    features = processor.prepare_ner_features(
        {
            "tokens": [r["tokens"] for r in splits["train"]],
            "knowledge": links,
            "ner_tags": [[label2id[t] for t in r["ner_tags"]] for r in splits["train"]],
        }
    )
    rows = [{k: v[i] for k, v in features.items()} for i in range(len(splits["train"]))]
    collator = KeplmDataCollator.from_processor(processor, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for batch_index in torch.randperm(len(rows), generator=generator).split(16):
            loss = model(**collator([rows[i] for i in batch_index.tolist()])).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    return task, splits, model, processor


def test_composed_messages_read_the_relation_and_follow_its_swap():
    """Types held by the relation: with relation-aware messages an unseen entity is typed from its fact, the
    prediction follows a swapped relation, and entities added to the KG after training are typed as well."""
    task, splits, model, processor = _tiny_setup("relation", "composition")
    assert ner_accuracy(model, processor, task, splits["test_seen"]) >= 0.9
    assert ner_accuracy(model, processor, task, splits["test_unseen"]) >= 0.9
    assert follow_rate(model, processor, task, splits["test_unseen"]) >= 0.9
    report = knowledge_sensitivity(
        model, processor, [{"tokens": r["tokens"]} for r in splits["test_unseen"]], edits=("relation", "remove")
    )
    summary = report.summary()
    assert summary["examples_with_facts"] == len(splits["test_unseen"])
    assert summary["overall"]["relation"]["flip_rate"] >= 0.5
    assert summary["overall"]["relation"]["mean_shift"] > 0.3
    assert set(summary["per_relation"]) == {f"R_{label}" for label in task.labels}
    change = processor.update_knowledge(task.kg_full, model=model)
    assert change["entities_added"] == change["added_without_memory_row"] == len(splits["test_added"])
    assert ner_accuracy(model, processor, task, splits["test_added"]) >= 0.9


def test_paper_messages_cannot_read_a_relation_held_type():
    """KALA eq. 3 sends the neighbour's vector whatever the relation: with every type linked to the same kind of
    anchor, an unseen entity's type stays at chance and a relation swap changes nothing."""
    task, splits, model, processor = _tiny_setup("relation", "entity")
    assert ner_accuracy(model, processor, task, splits["test_unseen"]) < 0.7
    report = knowledge_sensitivity(
        model, processor, [{"tokens": r["tokens"]} for r in splits["test_unseen"]], edits=("relation",)
    )
    assert report.summary()["overall"]["relation"]["flip_rate"] == 0.0


@pytest.mark.parametrize("relation_message", ["entity", "composition"])
def test_neighbour_held_types_pass_either_way(relation_message):
    """The paper's mechanism: an unseen entity gets its type from its neighbour, and follows a swapped anchor."""
    task, splits, model, processor = _tiny_setup("neighbour", relation_message, seed=1)
    assert ner_accuracy(model, processor, task, splits["test_unseen"]) >= 0.9
    assert follow_rate(model, processor, task, splits["test_unseen"]) >= 0.9
    rng = __import__("random").Random(0)
    fact, target = retarget_fact(task, splits["test_unseen"][0]["entity"], rng)
    assert fact[1] == "R_link" and target != task.labels[[e for e in task.entities if e.id == fact[0]][0].type]


def test_two_hop_types_need_two_hop_context_graphs():
    """Knowledge two hops away (entity -> its own bridge -> a typed anchor) reaches the prediction when each
    context's KG holds the bridge's facts (linker hops=2) and the two retrieval layers carry it; with the default
    one-hop context graphs the unseen entities stay near chance."""
    task, splits, model, processor = _tiny_setup("two_hop", "composition", seed=1, link_hops=2, epochs=40)
    assert ner_accuracy(model, processor, task, splits["test_unseen"]) >= 0.9
    assert follow_rate(model, processor, task, splits["test_unseen"]) >= 0.9
    task, splits, model, processor = _tiny_setup("two_hop", "composition", seed=1, link_hops=1)
    assert ner_accuracy(model, processor, task, splits["test_unseen"]) <= 0.6


# ---------------------------------------------------------------------------------------------- user-facing paths
@pytest.fixture(scope="module")
def trained_relation_model():
    return _tiny_setup("relation", "composition", seed=2)


def test_check_knowledge_command(tmp_path, trained_relation_model):
    """``keplm check-knowledge`` on a saved checkpoint and a JSON-lines file: report, per-relation table, plot; with
    ``--kg`` the user's KG is read (the update is reported)."""
    from keplm.checks.synthetic import write_jsonl_kg
    from keplm.cli import main

    task, splits, model, processor = trained_relation_model
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"tokens": r["tokens"]}) + "\n" for r in splits["test_added"]))
    write_jsonl_kg(str(tmp_path / "full.jsonl"), task, ("anchor", "train", "unseen", "added"))
    out = tmp_path / "check"
    main(
        [
            "check-knowledge",
            "--model",
            str(tmp_path / "model"),
            "--data",
            str(data),
            "--kg",
            f"jsonl:{tmp_path / 'full.jsonl'}",
            "--edits",
            "relation",
            "tail",
            "--output_dir",
            str(out),
        ]
    )
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
    main(
        [
            "check-knowledge",
            "--model",
            str(tmp_path / "model"),
            "--data",
            str(tmp_path / "conll"),
            "--kg",
            f"jsonl:{tmp_path / 'full.jsonl'}",
            "--edits",
            "relation",
            "tail",
            "--output_dir",
            str(tmp_path / "c2"),
        ]
    )
    assert json.loads((tmp_path / "c2" / "knowledge_sensitivity.json").read_text())["overall"] == report["overall"]
    with pytest.raises(ValueError, match="no 'validation' split"):
        main(
            [
                "check-knowledge",
                "--model",
                str(tmp_path / "model"),
                "--data",
                str(tmp_path / "conll"),
                "--split",
                "validation",
                "--output_dir",
                str(tmp_path / "c3"),
            ]
        )
    # without --kg the model's own KG has no added entity: nothing to edit, said plainly
    main(["check-knowledge", "--model", str(tmp_path / "model"), "--data", str(data), "--output_dir", str(out)])
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
    from keplm.cli import main

    _, _, model, processor = trained_relation_model
    with pytest.raises(FileNotFoundError, match="no such file"):
        main(
            [
                "check-knowledge",
                "--model",
                "x",
                "--data",
                str(tmp_path / "none"),
                "--task",
                "ner",
                "--output_dir",
                str(tmp_path),
            ]
        )
    baseline = KalaForTokenClassification(
        KalaConfig(encoder_config=tiny_encoder_config(tokenizer), retrieval_mode="none", num_labels=2)
    )
    with pytest.raises(ValueError, match="reads no knowledge"):
        knowledge_sensitivity(baseline, processor, [{"text": "x"}])
    (tmp_path / "empty.txt").write_text("\n")
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match="holds no text"):
        main(
            [
                "check-knowledge",
                "--model",
                str(tmp_path / "model"),
                "--data",
                str(tmp_path / "empty.txt"),
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )


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
    from keplm.tokenization.processing_roof_transformer import TRIPLES_COLUMN, RoofTransformerProcessor

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
