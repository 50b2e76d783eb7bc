"""Relation extraction (KALA appendix A): DocRED reading, the RelationExtractionProcessor's features (and its
save/load), edge-label batching, the bilinear model (save/load, errors, learning), the top-1/top-2 rule, the
RelationExtractor and run_scripts/run_re.py."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoProcessor, BertModel, TrainingArguments
from transformers.trainer_utils import EvalPrediction

from keplm.configuration.configuration_relation_extraction import RelationExtractionConfig
from keplm.data.collator import KeplmDataCollator
from keplm.data.docred import (
    build_relation_vocab,
    docred_document_to_row,
    load_docred_dataset,
    load_relation_names,
    read_docred,
)
from keplm.knowledge import EntityMention, KnowledgeAnnotation, Triplet
from keplm.modeling.modeling_relation_extraction import (
    KeplmForRelationExtraction,
    RelationExtractor,
    select_relations,
)
from keplm.tokenization import RelationExtractionProcessor
from keplm.training.compute_metrics import FactMetrics

from .conftest import tiny_encoder_config
from .run_args import QUIET

ROOT = Path(__file__).resolve().parent.parent
RELATIONS = ["no_relation", "P108", "P551", "P17"]
LABEL2ID = {r: i for i, r in enumerate(RELATIONS)}


def doc(title, sents, entities, labels):
    """A DocRED-schema document; ``entities`` = [(type, [(sent_id, start, end), ...]), ...]."""
    vertex_set = [
        [{"name": " ".join(sents[s][a:b]), "sent_id": s, "pos": [a, b], "type": t} for s, a, b in ms]
        for t, ms in entities
    ]
    return {
        "title": title,
        "sents": sents,
        "vertexSet": vertex_set,
        "labels": [{"h": h, "t": t, "r": r, "evidence": []} for h, t, r in labels],
    }


def person_doc(i, person, org, city):
    org_words = org.split()
    sents = [[person, "works", "for", *org_words, "."], [person, "lives", "in", city, "."]]
    entities = [("PER", [(0, 0, 1), (1, 0, 1)]), ("ORG", [(0, 3, 3 + len(org_words))]), ("LOC", [(1, 3, 4)])]
    return doc(f"doc{i}", sents, entities, [(0, 1, "P108"), (0, 2, "P551")])


DOCS = [
    person_doc(0, "john", "acme bank", "paris"),
    person_doc(1, "mary", "acme", "berlin"),
    doc(
        "doc2",
        [["paris", "is", "the", "capital", "of", "france", "."]],
        [("LOC", [(0, 0, 1)]), ("LOC", [(0, 5, 6)])],
        [(0, 1, "P17"), (0, 1, "P1376")],
    ),
    person_doc(3, "mary", "acme bank", "london"),
    person_doc(4, "john", "acme", "london"),
    person_doc(5, "mary", "acme bank", "paris"),
]


def write_docs(path: Path, docs=DOCS) -> Path:
    with (gzip.open if path.suffix == ".gz" else open)(path, "wt", encoding="utf-8") as f:
        json.dump(docs, f)
    return path


def tiny_model(tokenizer, **kwargs) -> KeplmForRelationExtraction:
    torch.manual_seed(0)
    config = RelationExtractionConfig(
        encoder_config=tiny_encoder_config(tokenizer), id2label=dict(enumerate(RELATIONS)), bilinear_dim=8, **kwargs
    )
    return KeplmForRelationExtraction(config).eval()


def read_docred_rows(docs=DOCS) -> list[dict]:
    return [docred_document_to_row(d) for d in docs]


def collate(tokenizer, rows, **kwargs):
    processor = RelationExtractionProcessor(tokenizer, label2id=LABEL2ID, **kwargs)
    features = [processor.document_features(row) for row in rows]
    return features, collator_of(processor)(features)


def features_of(tokenizer, row, label2id=LABEL2ID, **kwargs) -> dict:
    """The features of one document row through a processor with these settings."""
    return RelationExtractionProcessor(tokenizer, label2id=label2id, **kwargs).document_features(row)


def collator_of(processor, **kwargs) -> KeplmDataCollator:
    return KeplmDataCollator.from_processor(processor, **kwargs)


# ---------------------------------------------------------------------------------------------- reading
@pytest.mark.parametrize("name", ["docs.json", "docs.json.gz"])
def test_read_docred_text_spans_types_and_facts(tmp_path, name):
    rows = read_docred(write_docs(tmp_path / name))
    row = rows[0]
    assert row["text"] == "john works for acme bank . john lives in paris ."
    assert [[row["text"][a:b] for a, b in spans] for spans in row["entity_spans"]] == [
        ["john", "john"],
        ["acme bank"],
        ["paris"],
    ]
    assert row["entity_types"] == ["PER", "ORG", "LOC"]
    assert row["facts"] == [{"h": 0, "t": 1, "r": "P108"}, {"h": 0, "t": 2, "r": "P551"}]
    dataset = load_docred_dataset(tmp_path / name, max_samples=3)
    assert len(dataset) == 3 and dataset[2]["facts"][1] == {"h": 0, "t": 1, "r": "P1376"}
    # most frequent first, ties by id; max_relations keeps the top ones
    assert build_relation_vocab(rows) == ["no_relation", "P108", "P551", "P1376", "P17"]
    assert build_relation_vocab(rows, max_relations=2) == ["no_relation", "P108", "P551"]


def test_relation_names_add_the_docred_dates(tmp_path):
    path = tmp_path / "pid2name.json"
    path.write_text(json.dumps({"P17": ["country", "sovereign state"]}))
    names = load_relation_names(path)
    assert names["P17"] == "country" and names["P569"] == "date of birth" and names["P1198"] == "unemployment rate"


# ---------------------------------------------------------------------------------------------- featurisation
def test_entity_token_map_covers_exactly_the_mention_tokens(tokenizer):
    row = read_docred_rows()[0]
    feature = features_of(tokenizer, row)
    offsets = tokenizer(row["text"], return_offsets_mapping=True)["offset_mapping"]
    for token, ((start, end), entity) in enumerate(zip(offsets, feature["entity_token_map"])):
        owners = [e for e, spans in enumerate(row["entity_spans"]) for a, b in spans if end > start and a <= start < b]
        token_text = tokenizer.convert_ids_to_tokens(feature["input_ids"])[token]
        assert entity == (owners[0] if owners else -1), (token, token_text)
    assert feature["entity_token_map"].count(1) == 2  # "acme bank": two tokens
    # all 6 ordered pairs are candidates; the two gold ones labelled
    pairs = dict(zip(zip(*feature["edge_index"]), feature["edge_labels"]))
    assert len(pairs) == 6 and pairs[(0, 1)] == LABEL2ID["P108"] and pairs[(0, 2)] == LABEL2ID["P551"]
    assert sum(1 for label in pairs.values() if label == 0) == 4
    assert feature["node_entity_ids"] == [0, 0, 0]  # no entity types configured


def test_pair_with_two_relations_gets_one_row_per_relation_and_unknown_relations_are_counted(tokenizer):
    feature = features_of(tokenizer, read_docred_rows()[2])
    rows = list(zip(zip(*feature["edge_index"]), feature["edge_labels"]))
    assert rows == [((0, 1), LABEL2ID["P17"]), ((1, 0), 0)]  # P1376 is outside the vocabulary
    assert feature["num_unknown_relation_facts"] == 1 and feature["num_lost_facts"] == 0
    feature = features_of(tokenizer, read_docred_rows()[2], label2id={**LABEL2ID, "P1376": 4})
    assert list(zip(zip(*feature["edge_index"]), feature["edge_labels"])) == [((0, 1), 3), ((0, 1), 4), ((1, 0), 0)]


def test_truncation_drops_counts_and_excludes(tokenizer):
    row = read_docred_rows()[0]  # john works for acme bank . | john lives in paris .
    feature = features_of(tokenizer, row, max_length=8)  # [CLS] + 6 tokens + [SEP]
    assert len(feature["input_ids"]) == 8
    assert feature["num_mentions"] == 4 and feature["num_dropped_mentions"] == 2  # 2nd "john" and "paris"
    assert feature["num_excluded_entities"] == 1 and feature["num_lost_facts"] == 1  # paris and its fact
    assert 2 not in feature["entity_token_map"]
    assert 2 not in feature["edge_index"][0] + feature["edge_index"][1]
    assert sorted(zip(*feature["edge_index"])) == [(0, 1), (1, 0)]


def test_negative_subsampling_is_seeded(tokenizer):
    rows = read_docred_rows()
    sample = [features_of(tokenizer, rows[0], negative_ratio=0.5, seed=s) for s in (1, 1, 2)]
    assert sample[0]["edge_labels"].count(0) == 1 and sample[0]["edge_labels"].count(LABEL2ID["P108"]) == 1
    assert sample[0]["edge_index"] == sample[1]["edge_index"]
    with_all = features_of(tokenizer, rows[0], negative_ratio=10)
    assert with_all["edge_labels"].count(0) == 4


def test_collator_offsets_and_pads_edge_labels(tokenizer):
    rows = read_docred_rows()
    features, batch = collate(tokenizer, [rows[2], rows[0]])
    assert batch["node_entity_ids"].shape == (5,)
    assert batch["edge_index"].tolist() == [[0, 1, 2, 2, 3, 3, 4, 4], [1, 0, 3, 4, 2, 4, 2, 3]]
    assert batch["edge_labels"].tolist() == features[0]["edge_labels"] + features[1]["edge_labels"]
    assert set(batch["entity_token_map"][1].tolist()) == {-1, 2, 3, 4}
    processor = RelationExtractionProcessor(tokenizer, label2id=LABEL2ID)
    padded = collator_of(processor, graph_pad_to_multiple_of=16)(features)
    assert padded["edge_labels"].shape == (16,) and "edge_relation_ids" not in padded  # no dummy relation ids
    assert padded["edge_labels"][8:].eq(-100).all()
    assert padded["edge_labels"][:8].tolist() == batch["edge_labels"].tolist()
    broken = [dict(features[0], edge_labels=features[0]["edge_labels"][:-1]), features[1]]
    with pytest.raises(ValueError, match="edge_labels"):
        collator_of(processor)(broken)


def test_processor_saves_loads_and_checks_the_model(tmp_path, tokenizer):
    processor = RelationExtractionProcessor(
        tokenizer, label2id=LABEL2ID, max_length=64, negative_ratio=2.0, entity_types=["PER", "ORG"]
    )
    processor.save_pretrained(tmp_path)
    assert not (tmp_path / "knowledge").exists()  # no knowledge: no empty knowledge/ files for a repo to carry
    loaded = AutoProcessor.from_pretrained(tmp_path)
    assert type(loaded) is RelationExtractionProcessor and loaded.processor_config() == processor.processor_config()
    row = read_docred_rows()[0]
    assert loaded.document_features(row) == processor.document_features(row)
    assert (
        processor(row["text"], row["entity_spans"], facts=row["facts"])["edge_labels"]
        == features_of(tokenizer, row, max_length=64)["edge_labels"]
    )
    processor.check_config(tiny_model(tokenizer, entity_types=["PER", "ORG"]).config)
    with pytest.raises(ValueError, match="relation ids"):
        RelationExtractionProcessor(tokenizer, label2id={**LABEL2ID, "P1376": 4}).check_config(
            tiny_model(tokenizer).config
        )
    processor = RelationExtractionProcessor.from_model_config(tokenizer, tiny_model(tokenizer).config)
    with pytest.raises(ValueError, match="entity types"):
        processor.check_config(tiny_model(tokenizer, entity_types=["PER"]).config)
    with pytest.raises(ValueError, match="must have id 0"):
        RelationExtractionProcessor(tokenizer, label2id={"P17": 0, "no_relation": 1})
    with pytest.raises(ValueError, match="needs 'entity_spans'"):
        processor.document_features({"text": "john"})


# ---------------------------------------------------------------------------------------------- model
def test_loss_ignores_padding_and_save_load_keeps_logits(tmp_path, tokenizer):
    model = tiny_model(tokenizer, entity_types=["PER", "ORG", "LOC"])
    with torch.no_grad():  # visible values for the zero-initialised biases
        for name, parameter in model.named_parameters():
            if not name.startswith("encoder."):
                parameter.normal_(0, 0.5)
    processor = RelationExtractionProcessor(tokenizer, label2id=LABEL2ID, entity_types=["PER", "ORG", "LOC"])
    features = [processor.document_features(r) for r in read_docred_rows()[:2]]
    batch = collator_of(processor, graph_pad_to_multiple_of=8)(features)
    assert batch["node_entity_ids"].tolist()[:3] == [1, 2, 3]
    out = model(**batch)
    labelled = batch["edge_labels"] != -100
    expected = torch.nn.functional.cross_entropy(out.logits[labelled], batch["edge_labels"][labelled])
    assert out.logits.shape == (len(batch["edge_labels"]), len(RELATIONS)) and torch.allclose(out.loss, expected)
    model.save_pretrained(tmp_path)
    reloaded = KeplmForRelationExtraction.from_pretrained(tmp_path).eval()
    assert reloaded.config.id2label == model.config.id2label and reloaded.config.entity_types == ["PER", "ORG", "LOC"]
    assert torch.equal(reloaded(**batch).logits, out.logits)
    none = model(**dict(batch, edge_labels=torch.full_like(batch["edge_labels"], -100))).loss
    assert none.item() == 0.0 and none.requires_grad


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda b: b.update(edge_index=b["edge_index"] + 100), "edge_index points outside"),
        (lambda b: b.update(entity_token_map=b["entity_token_map"] + 100), "entity_token_map points outside"),
        (lambda b: b.update(edge_labels=b["edge_labels"] + 10), r"edge_labels hold id \d+ outside \[0, 4\)"),
        (lambda b: b.update(edge_labels=b["edge_labels"][:-1]), "edge_labels must have shape"),
        (lambda b: b.update(edge_index=b["edge_index"][0]), r"edge_index must have shape \[2"),
        (lambda b: b.pop("edge_index"), "needs entity_token_map, node_entity_ids and edge_index"),
    ],
)
def test_bad_inputs_raise(tokenizer, change, message):
    _, batch = collate(tokenizer, read_docred_rows()[:2])
    change(batch)
    with pytest.raises(ValueError, match=message):
        tiny_model(tokenizer)(**batch)


@pytest.mark.parametrize("sent_id, pos", [(0, [3, 9]), (0, [2, 2]), (2, [0, 1]), (1, [-1, 1])])
def test_a_mention_outside_its_sentence_is_refused_naming_it(sent_id, pos):
    """A mention past its sentence's end (here into the next sentence), empty, or in a sentence that does not
    exist is a ValueError naming the document, the mention and the sentence, not a span in another sentence."""
    bad = doc("bad", [["a", "b", "c", "d", "e", "f"], ["g", "h", "i", "j", "k"]], [("LOC", [(0, 0, 1)])], [])
    bad["vertexSet"][0][0].update(sent_id=sent_id, pos=pos)
    with pytest.raises(
        ValueError, match=rf"'bad': entity 0 mention pos \{re.escape(str(pos))[1:]} is outside its sentence"
    ):
        docred_document_to_row(bad)
    assert (
        docred_document_to_row(doc("ok", bad["sents"], [("LOC", [(1, 4, 5)])], []))["text"] == "a b c d e f g h i j k"
    )


def test_top2_rule_on_hand_set_logits():
    probs = torch.tensor(
        [
            [0.70, 0.20, 0.05, 0.05],  # no_relation wins, runner-up 0.2 > 0.1: take the runner-up
            [0.85, 0.05, 0.08, 0.02],  # runner-up 0.08 <= 0.1: no_relation
            [0.30, 0.10, 0.60, 0.00],  # a relation wins: top-1
            [0.45, 0.50, 0.05, 0.00],  # a relation wins, no_relation second: top-1
        ]
    )
    chosen, p = select_relations(probs.clamp(min=1e-9).log(), threshold=0.1)
    assert chosen.tolist() == [1, 0, 2, 1]
    assert torch.allclose(p, torch.tensor([0.20, 0.85, 0.60, 0.50]), atol=1e-5)
    assert select_relations(probs.clamp(min=1e-9).log(), threshold=0.25)[0].tolist() == [0, 0, 2, 1]


def test_config_demands_no_relation_first(tokenizer):
    with pytest.raises(ValueError, match="label 0 must be"):
        RelationExtractionConfig(id2label={0: "P17", 1: "no_relation"})
    assert RelationExtractionConfig().id2label[0] == "no_relation"


def test_fact_metrics_deduplicate_rows_and_count_lost_facts(tokenizer):
    rows = read_docred_rows()[:3]
    features = [features_of(tokenizer, r, label2id={**LABEL2ID, "P1376": 4}) for r in rows]
    metrics = FactMetrics(
        {"edge_index": [f["edge_index"] for f in features]}, rows, {**dict(enumerate(RELATIONS)), 4: "P1376"}
    )
    labels = np.concatenate([f["edge_labels"] for f in features])
    perfect = metrics(EvalPrediction(predictions=labels, label_ids=labels))
    assert perfect["precision"] == perfect["recall"] == perfect["f1"] == 100.0  # in percent, as every run metric
    assert perfect["num_gold"] == 6 and isinstance(perfect["num_gold"], int)  # counts are not scaled
    # doc 2's (paris, france) pair has two rows: predicting P17 on both is one correct fact, P1376 is missed
    predictions = labels.copy()
    predictions[-3:] = [3, 3, 0]
    scores = metrics(EvalPrediction(predictions=np.append(predictions, 0), label_ids=np.append(labels, -100)))
    assert scores["num_predicted"] == 5 and scores["num_correct"] == 5 and scores["recall"] == pytest.approx(500 / 6)


# ---------------------------------------------------------------------------------------------- learning + extractor
def toy_docs():
    people, orgs, cities = ["john", "mary"], ["acme bank", "acme"], ["paris", "berlin", "london", "france"]
    combinations = ((p, o, c) for p in people for o in orgs for c in cities)
    return [person_doc(i, p, o, c) for i, (p, o, c) in enumerate(combinations)]


def test_tiny_model_learns_pair_relations_and_extracts_triplets(tmp_path, tokenizer):
    rows = read_docred_rows(toy_docs())
    processor = RelationExtractionProcessor(tokenizer, label2id=LABEL2ID)
    features = [processor.document_features(r) for r in rows]
    collator = collator_of(processor)
    model = tiny_model(tokenizer).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(120):
        batch = collator([features[(4 * step + i) % len(features)] for i in range(4)])
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    batch = collator(features)
    with torch.no_grad():
        predicted = model.predict_relations(model(**batch).logits)[0]
    assert torch.equal(predicted, batch["edge_labels"]), loss.item()

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    extractor = RelationExtractor.from_pretrained(tmp_path)
    text = "mary works for acme bank . mary lives in london ."
    annotation = KnowledgeAnnotation(
        entities=[
            EntityMention("mary", 0, 4, "Q1"),
            EntityMention("acme bank", 15, 24, "Q2"),
            EntityMention("mary", 27, 31, "Q1"),
            EntityMention("london", 41, 47, "Q3"),
            EntityMention("works", 5, 10, None),
        ]
    )
    assert sorted(extractor.extract(text, annotation), key=lambda t: t.r) == [
        Triplet("Q1", "P108", "Q2"),
        Triplet("Q1", "P551", "Q3"),
    ]
    assert extractor.annotate(text, annotation).triplets == extractor.extract(text, annotation)
    assert extractor.extract(text, KnowledgeAnnotation(entities=annotation.entities[:1])) == []


# ---------------------------------------------------------------------------------------------- run_re.py
def load_run_re():
    spec = importlib.util.spec_from_file_location("keplm_test_run_re", ROOT / "run_scripts" / "run_re.py")
    run_re = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run_re  # its dataclasses resolve their module
    spec.loader.exec_module(run_re)
    return run_re


def test_head_learning_rate_groups(tmp_path, tokenizer):
    model = tiny_model(tokenizer)
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-4, report_to="none", use_cpu=True)
    trainer = load_run_re().PairEvalTrainer(
        model=model, args=args, parameter_group_options={"head_learning_rate": 1e-2}
    )
    optimizer = trainer.create_optimizer()
    lr_of = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    assert len(lr_of) == sum(1 for _ in model.parameters())
    for name, parameter in model.named_parameters():
        assert lr_of[id(parameter)] == (1e-4 if name.startswith("encoder.") else 1e-2), name


def test_run_re_smoke(tmp_path, tokenizer):
    torch.manual_seed(0)
    base = tmp_path / "tiny-bert"
    BertModel(tiny_encoder_config(tokenizer), add_pooling_layer=False).save_pretrained(base)
    tokenizer.save_pretrained(base)
    data = write_docs(tmp_path / "docs.json.gz", DOCS + toy_docs()[:4])
    out = tmp_path / "out"
    results = load_run_re().main(
        [
            "--model_name_or_path",
            str(base),
            "--train_file",
            str(data),
            "--validation_docs",
            "3",
            "--test_file",
            str(data),
            "--max_predict_samples",
            "4",
            "--negative_ratio",
            "1",
            "--max_seq_length",
            "64",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--output_dir",
            str(out),
            "--max_steps",
            "3",
            "--per_device_train_batch_size",
            "2",
            "--per_device_eval_batch_size",
            "2",
            "--learning_rate",
            "1e-3",
            "--save_strategy",
            "no",
            *QUIET,
            "--use_cpu",
            "--head_learning_rate",
            "1e-2",
        ]
    )
    for key in (
        "train_loss",
        "eval_precision",
        "eval_recall",
        "eval_f1",
        "predict_precision",
        "predict_recall",
        "predict_f1",
        "predict_num_gold",
    ):
        assert key in results, key
    assert results["predict_num_gold"] == 8  # every gold fact of the 4 test docs, P1376 included
    # P/R in percent of the fact counts, and every results file says so
    assert results["predict_recall"] == pytest.approx(100 * results["predict_num_correct"] / 8)
    for name in ("train", "eval", "predict", "all"):
        assert json.loads((out / f"{name}_results.json").read_text())["metric_unit"] == "percent", name
    relations = json.loads((out / "relations.json").read_text())["relations"]
    assert [r["relation"] for r in relations][:3] == ["no_relation", "P108", "P551"]
    assert relations[1]["train_facts"] == 6
    assert json.loads((out / "featurization.json").read_text())["train"]["num_facts"] == 14
    assert AutoProcessor.from_pretrained(out).label2id == {r["relation"]: r["id"] for r in relations}
    extractor = RelationExtractor.from_pretrained(out)
    assert extractor.model.config.id2label == {i: r["relation"] for i, r in enumerate(relations)}
