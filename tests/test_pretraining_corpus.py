"""TRELM's pre-training corpus (``keplm.data.pretraining``): T-REx evidences restored, FewRel detokenized, build-kg
annotation files, held-out facts kept out of the corpus and the KG. Tiny in-code files (gzip like the real ones)
give every count by hand; the real ``../shared/data`` counts are checked when that folder is present."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from keplm.cli import main as cli_main
from keplm.data.corpus_sources import detokenize, read_fewrel_examples, read_trex_examples, restore_evidence
from keplm.data.lama import fact_key, read_fact_files, read_fact_keys, split_held_out
from keplm.data.pretraining import CORPUS_FEATURES, kg_without_facts, load_pretraining_corpus, sample_held_out
from keplm.knowledge import KnowledgeGraph, load_kg
from keplm.knowledge.annotation import KnowledgeAnnotation
from keplm.knowledge.loaders import load_trex

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def _ev(masked: str, sub: str, obj: str) -> dict:
    return {"sub_surface": sub, "obj_surface": obj, "masked_sentence": masked}


def _fact(sub_uri, relation, obj_uri, sub_label, obj_label, evidences, uuid=None) -> dict:
    return {
        "uuid": uuid or f"{sub_uri}-{relation}",
        "sub_uri": sub_uri,
        "obj_uri": obj_uri,
        "sub_label": sub_label,
        "obj_label": obj_label,
        "predicate_id": relation,
        "evidences": evidences,
    }


P19 = [  # five facts: two share one sentence (merged), Q1 has a duplicate and three skipped evidences
    _fact(
        "Q1",
        "P19",
        "Q100",
        "Ann Smith",
        "Paris",
        [
            _ev("Ann Smith was born in [MASK] in 1950.", "Ann Smith", "Paris"),
            _ev("Ann Smith was born in [MASK] in 1950.", "Ann Smith", "Paris"),  # duplicate of the same fact
            _ev("Ann Smith was born in Paris.", "Ann Smith", "Paris"),  # no_mask
            _ev("[MASK] is where Ann Smith was born, [MASK] says.", "Ann Smith", "Paris"),  # several_masks
            _ev("Bob was born in [MASK].", "Robert", "Paris"),  # subject_not_found
            _ev("Ann Smith and Carl Lee were born in [MASK] and Lyon.", "Ann Smith", "Paris"),
        ],
    ),
    _fact(
        "Q2",
        "P19",
        "Q101",
        "Carl Lee",
        "Lyon",
        [
            _ev("Ann Smith and Carl Lee were born in Paris and [MASK].", "Carl Lee", "Lyon"),  # same text as Q1's
            _ev("Carl Lee, a native of [MASK], sings.", "Carl Lee", "Lyon"),
        ],
    ),
    _fact("Q3", "P19", "Q102", "Dee Moss", "Rome", [_ev("Dee Moss was born in [MASK].", "Dee Moss", "Rome")]),
    _fact("Q4", "P19", "Q103", "Eve Hart", "Oslo", [_ev("[MASK] is the birthplace of Eve Hart.", "Eve Hart", "Oslo")]),
    _fact(
        "Q5",
        "P19",
        "Q104",
        "Fay Dunn",
        "Kyoto",
        [
            _ev("Fay Dunn lived in [MASK] Prefecture.", "Kyoto Prefecture", "Kyoto, Kyoto"),  # subject_overlaps_object
            _ev("Fay Dunn was born in [MASK].", "Fay Dunn", "Kyoto"),
        ],
    ),
]
P176 = [
    _fact(
        "Q10",
        "P176",
        "Q200",
        "Nissan Prince Royal",
        "Nissan",
        [_ev("The [MASK] Prince Royal is a limousine.", "Nissan Prince Royal", "Nissan")],
    ),  # object inside subject
    _fact("Q11", "P176", "Q201", "Model T", "Ford", [_ev("[MASK] built the Model T.", "Model T", "Ford")]),
    _fact(
        "Q12", "P176", "Q202", "Beetle", "Volkswagen", [_ev("The Beetle is made by [MASK].", "Beetle", "Volkswagen")]
    ),
]
P999 = [
    {
        "uuid": "no-ids",
        "sub_label": "Thing",
        "obj_label": "Maker",
        "predicate_id": "P999",  # no ids: counted
        "evidences": [_ev("Thing is made by [MASK].", "Thing", "Maker")],
    }
]
FEWREL = {
    "P19": [
        {
            "tokens": ["Dee", "Moss", "(", "born", "in", "Rome", ")", "paints", "."],
            "h": ["dee moss", "Q3", [[0, 1]]],
            "t": ["rome", "Q102", [[5]]],
        },  # expresses the P19 probe fact of Q3
        {"tokens": ["Gil", "is", "from", "Bonn", "."], "h": ["gil", "", [[0]]], "t": ["bonn", "Q105", [[3]]]},  # no id
    ],
    "P177": [
        {
            "tokens": ["The", '"', "Big", "Bridge", '"', "crosses", "the", "Rhine", ",", "near", "Basel", "."],
            "h": ["big bridge", "Q300", [[2, 3]]],
            "t": ["rhine", "Q301", [[7]]],
        },
        {"tokens": ["A", "bridge", "."], "h": ["a", "Q302", [[9]]], "t": ["bridge", "Q303", [[1]]]},  # bad position
    ],
}


def _write_jsonl_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """Tiny LAMA and FewRel folders under tmp_path, which is the working directory (specs are relative)."""
    _write_jsonl_gz(tmp_path / "lama" / "TREx" / "P19.jsonl.gz", P19)
    _write_jsonl_gz(tmp_path / "lama" / "TREx" / "P176.jsonl.gz", P176)
    _write_jsonl_gz(tmp_path / "lama" / "TREx" / "P999.jsonl.gz", P999)
    (tmp_path / "fewrel").mkdir()
    with gzip.open(tmp_path / "fewrel" / "val_wiki.json.gz", "wt", encoding="utf-8") as f:
        json.dump(FEWREL, f)
    monkeypatch.chdir(tmp_path)
    return ["trex:lama", "fewrel:fewrel/val_wiki.json.gz"]


def _probe_keys() -> set:
    return {fact_key(f) for f in read_fact_files(sorted(Path("lama/TREx").iterdir())) if fact_key(f)}


def _restored_texts(facts: list[dict], keys: set) -> set:
    """The restored evidence sentences of the facts with these keys."""
    texts = set()
    for fact in facts:
        if fact.get("sub_uri") and (fact["sub_uri"], fact["predicate_id"], fact["obj_uri"]) in keys:
            restored = [restore_evidence(e, fact["sub_uri"], fact["obj_uri"]) for e in fact["evidences"]]
            texts.update(r[0] for r in restored if not isinstance(r, str))
    return texts


def _check_spans(example: dict) -> None:
    KnowledgeAnnotation.from_dict(example["knowledge"]).validate(example["text"])  # text[start:end] == mention text
    for mention in example["knowledge"]["entities"]:
        assert example["text"][mention["start"] : mention["end"]] == mention["text"]


# --------------------------------------------------------------------------- readers


def test_restore_evidence_spans_and_skip_reasons():
    text, (sub, obj) = restore_evidence(_ev("Ann was born in [MASK], France.", "Ann", "Paris"), "Q1", "Q2")
    assert text == "Ann was born in Paris, France."
    assert (sub["text"], sub["start"], sub["id"], obj["text"], obj["start"], obj["id"]) == (
        "Ann",
        0,
        "Q1",
        "Paris",
        16,
        "Q2",
    )
    # the subject's first occurrence outside the object is taken
    text, (sub, obj) = restore_evidence(_ev("[MASK] honours Ann Lee and Ann.", "Ann", "Ann Lee Street"), "Q1", "Q2")
    assert (text[sub["start"] : sub["end"]], sub["start"], obj["start"]) == ("Ann", 23, 0)
    # the object inside the subject: the subject mention alone
    text, mentions = restore_evidence(_ev("The [MASK] Prince Royal.", "Nissan Prince Royal", "Nissan"), "Q1", "Q2")
    assert [(m["text"], m["id"]) for m in mentions] == [("Nissan Prince Royal", "Q1")]
    assert restore_evidence(_ev("no mask", "a", "b"), "Q1", "Q2") == "no_mask"
    assert restore_evidence(_ev("[MASK] [MASK]", "a", "b"), "Q1", "Q2") == "several_masks"
    assert restore_evidence(_ev("a [MASK]", "a", ""), "Q1", "Q2") == "no_object_surface"
    assert restore_evidence(_ev("a [MASK]", "", "b"), "Q1", "Q2") == "no_subject_surface"
    assert restore_evidence(_ev("a [MASK]", "c", "b"), "Q1", "Q2") == "subject_not_found"
    assert (
        restore_evidence(_ev("in [MASK] Prefecture", "Kyoto Prefecture", "Kyoto, Kyoto"), "Q1", "Q2")
        == "subject_overlaps_object"
    )


def test_detokenize_gives_offsets_of_every_token():
    tokens = [
        "The",
        '"',
        "Big",
        "Bridge",
        '"',
        "(",
        "a",
        "four",
        "-",
        "lane",
        "one",
        ")",
        "is",
        "John",
        "'s",
        ",",
        "\xa0",
        "ok",
        ".",
    ]
    text, offsets = detokenize(tokens)
    assert text == 'The "Big Bridge" (a four-lane one) is John\'s, ok.'
    for token, (start, end) in zip(tokens, offsets):
        assert text[start:end] == (token if token.strip() else "")


def test_trex_reader_restores_deduplicates_merges_and_counts_skips(sources):
    examples, facts, report = read_trex_examples("lama")
    assert len(facts) == 8 and report["facts"] == 9 and report["facts_without_ids"] == 1
    assert report["read"] == 16 and report["kept"] == 10
    assert report["skipped"] == {
        "no_mask": 1,
        "several_masks": 1,
        "subject_not_found": 1,
        "subject_overlaps_object": 1,
        "no_ids": 1,
    }
    assert report["deduplicated"] == 1 and report["merged"] == 1 and report["object_inside_subject"] == 1
    assert len(examples) == 9
    for example in examples:
        _check_spans({**example, "knowledge": {"entities": example["entities"], "triplets": []}})
    shared = next(e for e in examples if e["text"] == "Ann Smith and Carl Lee were born in Paris and Lyon.")
    assert shared["facts"] == [("Q1", "P19", "Q100"), ("Q2", "P19", "Q101")]
    assert [(m["text"], m["id"]) for m in shared["entities"]] == [
        ("Ann Smith", "Q1"),
        ("Carl Lee", "Q2"),
        ("Paris", "Q100"),
        ("Lyon", "Q101"),
    ]


def test_fewrel_reader_detokenizes_with_wikidata_spans(sources):
    examples, report = read_fewrel_examples("fewrel/val_wiki.json.gz")
    assert report["read"] == 4 and report["kept"] == 2 and report["skipped"] == {"no_ids": 1, "bad_positions": 1}
    bridge = next(e for e in examples if e["id"] == "fewrel/P177/0")
    assert bridge["text"] == 'The "Big Bridge" crosses the Rhine, near Basel.'
    assert [(m["text"], m["id"]) for m in bridge["entities"]] == [("Big Bridge", "Q300"), ("Rhine", "Q301")]
    assert bridge["facts"] == [("Q300", "P177", "Q301")]
    assert read_fewrel_examples("fewrel/val_wiki.json.gz", relations=["P177"])[1]["read"] == 2


# --------------------------------------------------------------------------- held-out facts


def test_held_out_sample_is_seeded_per_relation():
    keys = {(f"Q{i}", relation, f"Q{1000 + i}") for relation in ("P19", "P20", "P31") for i in range(50)}
    keys.add(("Q9", "P99", "Q8"))  # a relation with one fact keeps it seen
    held = sample_held_out(keys, 0.2, seed=0)
    assert held == sample_held_out(sorted(keys), 0.2, seed=0) and held != sample_held_out(keys, 0.2, seed=1)
    for relation in ("P19", "P20", "P31"):
        assert len({k for k in held if k[1] == relation}) == 10
    assert not any(k[1] == "P99" for k in held)
    # a relation's draw does not depend on the other relations read
    assert sample_held_out({k for k in keys if k[1] == "P20"}, 0.2, 0) == {k for k in held if k[1] == "P20"}
    small = {("Q1", "P5", "Q2"), ("Q3", "P5", "Q4")}
    assert len(sample_held_out(small, 0.01, 0)) == 1 and len(sample_held_out(small, 0.9, 0)) == 1
    assert sample_held_out(keys, 0.0) == set()
    with pytest.raises(ValueError, match="held_out_fraction"):
        sample_held_out(keys, 1.0)


def test_corpus_keeps_held_out_sentences_out_and_saves_fact_keys(sources, tmp_path):
    corpus = load_pretraining_corpus(sources, held_out_fraction=0.4, seed=3)
    sampled = sample_held_out(_probe_keys(), 0.4, 3)
    assert sampled <= corpus.held_out_keys and len(sampled) == 3  # P19: 2 of 5, P176: 1 of 3
    data = corpus.dataset
    assert data.features == CORPUS_FEATURES and set(data["source"]) == {"trex", "fewrel"}
    for example in data:
        _check_spans(example)
        assert not {(f["h"], f["r"], f["t"]) for f in example["facts"]} & corpus.held_out_keys
    # no sentence of a held-out fact (restored) is in the corpus
    held_texts = _restored_texts(P19 + P176, sampled)
    assert held_texts and not held_texts & set(data["text"])
    # seen: every fact a kept example expresses; the probe facts split into seen and held out
    assert corpus.seen_keys == {(f["h"], f["r"], f["t"]) for facts in data["facts"] for f in facts}
    report = corpus.report
    assert report["held_out"]["probe_facts"] == 8 and report["held_out"]["sampled"] == 3
    assert report["held_out"]["held_out_facts"] == len(corpus.held_out_keys)
    assert report["held_out"]["seen_probe_facts"] + len(corpus.held_out_keys) == 8
    assert all(r["seen"] and r["held_out"] for r in report["held_out"]["per_relation"].values())
    assert report["examples"] == len(data) == sum(s["examples"] for s in report["sources"])
    corpus.save("out")
    assert read_fact_keys("out/seen_facts.tsv") == corpus.seen_keys
    assert read_fact_keys("out/held_out_facts.tsv") == corpus.held_out_keys
    probe_facts = read_fact_files(sorted(Path("lama/TREx").iterdir()))
    seen, held_out, without = split_held_out(probe_facts, read_fact_keys("out/seen_facts.tsv"), missing="keep_apart")
    assert {fact_key(f) for f in held_out} == corpus.held_out_keys and len(without) == 1
    saved = Path("out/corpus_report.json").read_text()
    assert json.loads(saved)["sources"][0]["spec"] == "trex:lama" and str(tmp_path) not in saved
    # deterministic for a seed, different for another
    again = load_pretraining_corpus(sources, held_out_fraction=0.4, seed=3)
    assert again.held_out_keys == corpus.held_out_keys and again.dataset["id"] == data["id"]
    assert load_pretraining_corpus(sources, held_out_fraction=0.4, seed=4).held_out_keys != corpus.held_out_keys


def test_corpus_caps_examples_and_fewrel_sentences_of_held_out_facts_go(sources):
    full = load_pretraining_corpus(sources, held_out_fraction=0.0)
    assert full.held_out_keys == set() and full.report["examples"] == 11
    capped = load_pretraining_corpus(sources, held_out_fraction=0.0, max_examples=5)
    assert len(capped.dataset) == 5 and capped.report["dropped_by_max_examples"] == 6
    assert set(capped.dataset["id"]) <= set(full.dataset["id"])
    # the cap holds nothing out: the probe facts (not FewRel's bridge) whose sentences it dropped are apart
    assert capped.held_out_keys == set()
    assert capped.capped_keys == full.seen_keys - capped.seen_keys - {("Q300", "P177", "Q301")} != set()
    assert capped.report["probe_facts_unseen_by_cap"] == len(capped.capped_keys)
    # a cap of 0 keeps no example: an empty dataset that still has the corpus columns
    none = load_pretraining_corpus(sources, held_out_fraction=0.0, max_examples=0)
    assert len(none.dataset) == 0 and none.dataset.features == CORPUS_FEATURES
    assert none.report["dropped_by_max_examples"] == 11
    held = load_pretraining_corpus(sources, held_out_fraction=0.4, seed=3)
    assert load_pretraining_corpus(sources, held_out_fraction=0.4, seed=3, max_examples=4).held_out_keys == (
        held.held_out_keys
    )
    # Q3's birthplace held out: its T-REx sentence and the FewRel sentence expressing it both go
    for seed in range(50):
        corpus = load_pretraining_corpus(sources, held_out_fraction=0.2, seed=seed)
        if ("Q3", "P19", "Q102") in corpus.held_out_keys:
            break
    fewrel = next(s for s in corpus.report["sources"] if s["kind"] == "fewrel")
    assert fewrel["held_out"] == 1 and "fewrel/P19/0" not in corpus.dataset["id"]


def test_kg_without_facts_removes_exactly_the_held_out_triples(sources):
    corpus = load_pretraining_corpus(sources, held_out_fraction=0.4, seed=3)
    kg = load_trex(["lama/TREx/P19.jsonl.gz", "lama/TREx/P176.jsonl.gz"])  # (load_trex needs ids on every fact)
    keys = corpus.held_out_keys | {("Q999", "P19", "Q1")}  # one key the graph does not have

    def triples(graph):
        return {(graph.entity_ids[h], graph.relation_ids[r], graph.entity_ids[t]) for h, r, t in graph.triples}

    filtered = kg_without_facts(kg, keys)
    assert triples(kg) - triples(filtered) == corpus.held_out_keys and triples(filtered) <= triples(kg)
    assert filtered.entity_ids == kg.entity_ids and filtered.entity_names == kg.entity_names
    assert filtered.build_report["facts_removed"] == {
        "keys": len(keys),
        "triples_removed": len(corpus.held_out_keys),
        "keys_not_in_kg": 1,
    }
    assert kg.num_triples == 8  # the original graph is untouched
    with_vectors = KnowledgeGraph(
        kg.entity_ids,
        kg.relation_ids,
        kg.triples,
        entity_names=kg.entity_names,
        entity_vectors=np.ones((kg.num_entities, 2), dtype=np.float32),
    )
    assert kg_without_facts(with_vectors, keys).entity_vectors.shape == (kg.num_entities, 2)
    assert kg_without_facts(with_vectors, keys, drop_vectors=True).entity_vectors is None


# --------------------------------------------------------------------------- annotation files (keplm build-kg)


def test_annotation_files_from_build_kg_and_with_their_own_text(sources, tmp_path):
    Path("ner").mkdir()
    Path("ner/train.txt").write_text("Ann B-PER\nSmith I-PER\nleft O\nParis B-LOC\n\nParis B-LOC\nagain O\n\n")
    Path("kg.jsonl").write_text(
        "\n".join(
            json.dumps(x)
            for x in (
                {"type": "entity", "id": "Q1", "name": "Ann Smith"},
                {"type": "entity", "id": "Q100", "name": "Paris"},
                {"h": "Q1", "r": "P19", "t": "Q100"},
            )
        )
        + "\n"
    )
    cli_main(
        ["build-kg", "--task", "ner", "--dataset", "ner", "--kg", "jsonl:kg.jsonl", "--output_dir", "ann", "--no_plot"]
    )
    corpus = load_pretraining_corpus(["annotations:ann|ner"], held_out_fraction=0.0)  # task from report.json
    texts = sorted(corpus.dataset["text"])
    assert texts == ["Ann Smith left Paris", "Paris again"]
    first = corpus.dataset[corpus.dataset["text"].index("Ann Smith left Paris")]
    _check_spans(first)
    assert first["facts"] == [{"h": "Q1", "r": "P19", "t": "Q100"}]
    assert corpus.seen_keys == {("Q1", "P19", "Q100")}
    assert load_pretraining_corpus(["annotations:ann/train.json|ner:ner"]).dataset["text"] == corpus.dataset["text"]
    # QA: every question of a context has the context's annotation: one example
    squad = {
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "Ann Smith was born in Paris.",
                        "qas": [
                            {"id": f"q{i}", "question": "where?", "answers": [{"text": "Paris", "answer_start": 22}]}
                            for i in range(3)
                        ],
                    }
                ],
            }
        ]
    }
    Path("squad.json").write_text(json.dumps(squad))
    cli_main(
        [
            "build-kg",
            "--task",
            "qa",
            "--dataset",
            "squad.json",
            "--kg",
            "jsonl:kg.jsonl",
            "--output_dir",
            "qa",
            "--no_plot",
        ]
    )
    qa = load_pretraining_corpus(["annotations:qa|qa:squad.json"])
    assert len(qa.dataset) == 1 and qa.report["sources"][0]["deduplicated"] == 2
    # self-contained entries (text + annotation); a held-out T-REx fact leaves its triplet and sentences out
    held = sorted(sample_held_out(_probe_keys(), 0.4, 3))[0]
    entries = {
        "a": {
            "text": "X met Y.",
            "entities": [{"text": "X", "start": 0, "end": 1, "id": held[0]}],
            "triplets": [dict(zip("hrt", held)), {"h": held[0], "r": "P1", "t": "Q7"}],
        },
        "b": {
            "text": "X and Z.",
            "entities": [
                {"text": "X", "start": 0, "end": 1, "id": held[0]},
                {"text": "Z", "start": 6, "end": 7, "id": held[2]},
            ],
            "triplets": [dict(zip("hrt", held))],
        },
        "c": {"text": "Bad span.", "entities": [{"text": "Nope", "start": 0, "end": 3, "id": "Q1"}]},
        "d": {"entities": []},
    }
    Path("own.json").write_text(json.dumps(entries))
    mixed = load_pretraining_corpus([*sources, "annotations:own.json"], held_out_fraction=0.4, seed=3)
    own = mixed.report["sources"][2]
    assert own["read"] == 4 and own["skipped"] == {"span_mismatch": 1, "no_text": 1}
    assert own["held_out"] == 1 and own["held_out_triplets_removed"] == 1  # "b" expresses it, "a" only lists it
    row = mixed.dataset[mixed.dataset["id"].index("annotations/own/a")]
    assert row["knowledge"]["triplets"] == [{"h": held[0], "r": "P1", "t": "Q7"}] and row["facts"] == []


def test_bad_specs_name_the_problem(sources):
    with pytest.raises(ValueError, match=r"unknown pre-training source 'wiki:lama'"):
        load_pretraining_corpus(["wiki:lama"])
    with pytest.raises(ValueError, match=r"unknown pre-training source 'lama'"):
        load_pretraining_corpus(["lama"])
    with pytest.raises(FileNotFoundError, match=r"'trex:nowhere'.*'nowhere' does not exist"):
        load_pretraining_corpus(["trex:lama", "trex:nowhere"])
    with pytest.raises(FileNotFoundError, match="no LAMA T-REx"):
        load_pretraining_corpus(["trex:fewrel"])
    Path("ann.json").write_text(json.dumps({"0": {"entities": []}}))
    with pytest.raises(ValueError, match="pass the dataset it was built from"):
        load_pretraining_corpus(["annotations:ann.json"])
    Path("bad.json").write_text(json.dumps({"0": {"text": "x", "entities": [{"text": "x"}]}}))
    with pytest.raises(ValueError, match=r"bad.json: example '0': entity 0 is missing \['start', 'end'\]"):
        load_pretraining_corpus(["annotations:bad.json"])
    with pytest.raises(ValueError, match="name the task"):
        load_pretraining_corpus(["annotations:ann.json|data"])
    with pytest.raises(ValueError, match="no sources"):
        load_pretraining_corpus([])


# --------------------------------------------------------------------------- the real files

REAL = ["trex:../shared/data/lama", "fewrel:../shared/data/fewrel/val_wiki.json.gz"]
needs_shared = pytest.mark.skipif(
    not (SHARED_DATA / "lama" / "TREx").is_dir() or not (SHARED_DATA / "fewrel").is_dir(),
    reason="../shared/data (LAMA T-REx and FewRel) is absent",
)


@needs_shared
def test_real_corpus_counts_on_five_relations(monkeypatch):
    """Counts measured on 2026-11-23 (five relations: two FewRel shares, nested subjects in P138/P176)."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    corpus = load_pretraining_corpus(REAL, 0.2, 0, relations=["P19", "P138", "P176", "P413", "P463"])
    trex, fewrel = corpus.report["sources"]
    assert (trex["facts"], trex["read"], trex["kept"], trex["deduplicated"], trex["merged"]) == (
        3748,
        26378,
        18852,
        7434,
        1173,
    )
    assert trex["skipped"] == {"subject_overlaps_object": 92} and trex["object_inside_subject"] == 88
    assert (trex["held_out"], trex["examples"]) == (3858, 13821)
    assert trex["examples_per_relation"] == {"P19": 1118, "P138": 6999, "P176": 2841, "P413": 1353, "P463": 1513}
    assert (fewrel["read"], fewrel["kept"], fewrel["merged"], fewrel["held_out"], fewrel["examples"]) == (
        1400,
        1400,
        10,
        6,
        1384,
    )
    held = corpus.report["held_out"]
    assert (held["probe_facts"], held["sampled"], held["without_sentence"], held["seen_probe_facts"]) == (
        3748,
        749,
        29,
        2970,
    )
    assert {r: v["sampled"] for r, v in held["per_relation"].items()} == {
        "P19": 189,
        "P138": 129,
        "P176": 196,
        "P413": 190,
        "P463": 45,
    }
    assert corpus.report["examples"] == len(corpus.dataset) == 15205 and len(corpus.seen_keys) == 4340
    for example in corpus.dataset.select(range(0, len(corpus.dataset), 97)):
        _check_spans(example)


@needs_shared
@pytest.mark.slow
def test_real_corpus_counts_all_relations(monkeypatch):
    """The whole corpus (about 15 s): the counts of docs/trelm.md, and the KG without the held-out facts."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    corpus = load_pretraining_corpus(REAL, 0.2, 0)
    trex, fewrel = corpus.report["sources"]
    assert (trex["read"], trex["kept"], trex["deduplicated"], trex["merged"], trex["held_out"], trex["examples"]) == (
        138678,
        98723,
        39857,
        9519,
        18897,
        70307,
    )
    assert trex["skipped"] == {"subject_overlaps_object": 97, "subject_not_found": 1}
    assert (fewrel["read"], fewrel["kept"], fewrel["merged"], fewrel["held_out"], fewrel["examples"]) == (
        11200,
        11200,
        204,
        14,
        10982,
    )
    held = corpus.report["held_out"]
    assert (held["probe_facts"], held["sampled"], held["without_sentence"], held["seen_probe_facts"]) == (
        22881,
        4574,
        360,
        17947,
    )
    assert len(corpus.dataset) == 81289 and len(corpus.seen_keys) == 29092
    kg = kg_without_facts(load_kg("trex:../shared/data/lama"), corpus.held_out_keys)
    assert (kg.num_triples, kg.build_report["facts_removed"]["triples_removed"]) == (56839, 4934)


def test_an_empty_corpus_is_an_error_with_each_sources_counts(tmp_path):
    """A corpus whose sources give no example (here an annotation file of no example) is refused when it is read,
    with what each source read and kept, instead of a trainer on zero examples."""
    empty = tmp_path / "empty.json"
    empty.write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match=r"the pre-training corpus is empty: .*empty.json: read 0, kept 0"):
        load_pretraining_corpus([f"annotations:{empty}"], held_out_fraction=0)
