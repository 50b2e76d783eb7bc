"""Knowledge-dependence checks: the synthetic tasks, the counterfactual measure, and tiny KALA models that must
(or, with the paper's eq. 3 on relation-held types, cannot) read the KG."""

from __future__ import annotations

import json
import statistics

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


#: each threshold a tiny model must reach is met by the median over these seeds, not by one trajectory. Measured
#: over seeds 0-4 (2026-11-29): the relation task and the neighbour task with eq. 3 messages reached 1.0 unseen
#: accuracy and follow rate at every seed; the neighbour task with composed messages at lr 3e-3 missed at seeds 0
#: and 4 (0.83, 0.40), and reached 1.0 at seeds 0 and 4-6 at lr 1e-2, which its test uses; the two-hop task missed
#: at seed 4 (0.67)
SEEDS = (0, 1, 2)


def _median(values) -> float:
    return statistics.median(values)


def test_composed_messages_read_the_relation_and_follow_its_swap():
    """Types held by the relation: with relation-aware messages an unseen entity is typed from its fact, the
    prediction follows a swapped relation, and entities added to the KG after training are typed as well (each
    measure's median over three seeds)."""
    measures = []
    for seed in SEEDS:
        task, splits, model, processor = _tiny_setup("relation", "composition", seed=seed)
        report = knowledge_sensitivity(
            model, processor, [{"tokens": r["tokens"]} for r in splits["test_unseen"]], edits=("relation", "remove")
        )
        summary = report.summary()
        assert summary["examples_with_facts"] == len(splits["test_unseen"])
        assert set(summary["per_relation"]) == {f"R_{label}" for label in task.labels}
        measured = {
            "seen": ner_accuracy(model, processor, task, splits["test_seen"]),
            "unseen": ner_accuracy(model, processor, task, splits["test_unseen"]),
            "follow": follow_rate(model, processor, task, splits["test_unseen"]),
            "flip_rate": summary["overall"]["relation"]["flip_rate"],
            "mean_shift": summary["overall"]["relation"]["mean_shift"],
        }
        change = processor.update_knowledge(task.kg_full, model=model)
        assert change["entities_added"] == change["added_without_memory_row"] == len(splits["test_added"])
        measures.append({**measured, "added": ner_accuracy(model, processor, task, splits["test_added"])})
    median = {key: _median(m[key] for m in measures) for key in measures[0]}
    assert median["seen"] >= 0.9 and median["unseen"] >= 0.9 and median["follow"] >= 0.9, measures
    assert median["flip_rate"] >= 0.5 and median["mean_shift"] > 0.3, measures
    assert median["added"] >= 0.9, measures


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
    """The paper's mechanism: an unseen entity gets its type from its neighbour, and follows a swapped anchor (the
    median over three seeds)."""
    measures = []
    for seed in SEEDS:
        lr = 1e-2 if relation_message == "composition" else 3e-3  # composed messages learn slower here (SEEDS)
        task, splits, model, processor = _tiny_setup("neighbour", relation_message, seed=seed, lr=lr)
        measures.append(
            (
                ner_accuracy(model, processor, task, splits["test_unseen"]),
                follow_rate(model, processor, task, splits["test_unseen"]),
            )
        )
    assert _median(m[0] for m in measures) >= 0.9 and _median(m[1] for m in measures) >= 0.9, measures
    rng = __import__("random").Random(0)
    fact, target = retarget_fact(task, splits["test_unseen"][0]["entity"], rng)
    assert fact[1] == "R_link" and target != task.labels[[e for e in task.entities if e.id == fact[0]][0].type]


def test_two_hop_types_need_two_hop_context_graphs():
    """Knowledge two hops away (entity -> its own bridge -> a typed anchor) reaches the prediction when each
    context's KG holds the bridge's facts (linker hops=2) and the two retrieval layers carry it; with the default
    one-hop context graphs the unseen entities stay near chance."""
    measures = []
    for seed in SEEDS:
        task, splits, model, processor = _tiny_setup("two_hop", "composition", seed=seed, link_hops=2, epochs=40)
        measures.append(
            (
                ner_accuracy(model, processor, task, splits["test_unseen"]),
                follow_rate(model, processor, task, splits["test_unseen"]),
            )
        )
    assert _median(m[0] for m in measures) >= 0.9 and _median(m[1] for m in measures) >= 0.9, measures
    task, splits, model, processor = _tiny_setup("two_hop", "composition", seed=1, link_hops=1)
    assert ner_accuracy(model, processor, task, splits["test_unseen"]) <= 0.6
