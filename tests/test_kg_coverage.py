"""``keplm kg-coverage``: the coverage of NER data by a KG, checked against a hand count on a tiny dataset and KG,
at two training sizes; bad --kg / --data are clear errors."""

from __future__ import annotations

import json

import pytest

from keplm.cli import console, main
from keplm.hub.figures import relation_label
from keplm.knowledge.annotation import KnowledgeAnnotation
from keplm.knowledge.coverage import split_coverage, unseen_coverage

TRAIN = [
    [("Paris", "B-LOC"), ("is", "O"), ("in", "O"), ("France", "B-LOC"), (".", "O")],
    [("Berlin", "B-LOC"), ("visit", "O"), (".", "O")],
]
TEST = [
    [("London", "B-LOC"), ("and", "O"), ("Unknownia", "B-LOC"), (".", "O")],
    [("Nowhere", "B-LOC"), ("town", "O"), (".", "O")],
    [("the", "O"), ("city", "O"), (".", "O")],
    [("Berlin", "B-LOC"), ("again", "O"), (".", "O")],
]


def _write(folder, split, sentences):
    lines = [line for sentence in sentences for line in [*(f"{w} {t}" for w, t in sentence), ""]]
    (folder / f"{split}.txt").write_text("\n".join(lines), encoding="utf-8")


@pytest.fixture()
def data_and_kg(tmp_path, kg):
    data = tmp_path / "ner"
    data.mkdir()
    _write(data, "train", TRAIN)
    _write(data, "test", TEST)
    kg.save_pretrained(tmp_path / "kg")
    return str(data), str(tmp_path / "kg")


def test_coverage_against_a_hand_count(data_and_kg, tmp_path, capsys):
    data, kg_dir = data_and_kg
    assert main(["kg-coverage", "--data", data, "--kg", kg_dir, "--output_dir", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "kg_coverage.json").read_text())
    assert report["splits"]["train"]["examples"] == 2
    test = report["splits"]["test"]
    # gold: London, Unknownia, Nowhere, Berlin; links: London, Unknownia, city (not an entity here), Berlin
    assert test["gold_linking"]["recall"] == 3 / 4 and test["gold_linking"]["precision"] == 3 / 4
    # facts touching each linked entity: London 1 (country), Unknownia 1, city 2 (Paris, Berlin instance of), Berlin 2
    assert test["facts_per_linked_mention"] == 6 / 4 and test["linked_mentions_with_facts"] == 1.0
    relations = {relation: count for relation, _, count, _ in test["relations_reaching_mentions"]}
    assert relations == {"P17": 3, "P31": 3}
    # seen in training: Paris, France, Berlin; unseen test entities: London, Unknownia (linked, facts), Nowhere
    assert report["unseen"]["test"] == {
        "gold_entities": 4,
        "unseen_in_training": 3,
        "unseen_share": 3 / 4,
        "unseen_linked_share": 2 / 3,
        "unseen_with_facts_share": 2 / 3,
    }
    assert (tmp_path / "out" / "kg_coverage.png").is_file()
    out = capsys.readouterr().out
    assert "| test | 4 | 75.0% | 75.0% | 1.50 | 100.0% |" in out
    assert "Relations reaching test mentions (2 in all): country 50%, instance of 50%" in out


@pytest.mark.parametrize(
    "relation_id, name, width, label",
    [
        ("/people/person/nationality", "people person nationality", 40, "person nationality"),
        ("/film/actor/film./film/performance/character", None, 40, "actor film character"),
        (
            "/people/marriage_union_type/unions_of_this_type./people/marriage/location_of_ceremony",
            None,
            40,
            "marriage union type unions of this type…",
        ),
        ("/film/actor/film./film/performance/character", None, 12, "actor film …"),
        ("/location", None, 40, "location"),
        ("P31", "instance of", 40, "instance of"),
        ("P31", "instance of", 8, "instanc…"),
        ("P31", None, 40, "P31"),
        ("/", None, 40, "/"),
    ],
)
def test_relation_labels_read_as_words(relation_id, name, width, label):
    """Plots and summaries show a Freebase path id (FB15k-237's relations) by its type and property in words (a
    compound one: its first type and property, its last property), any other relation by its name; a long label is
    cut to ``width`` characters with an ellipsis."""
    assert relation_label(relation_id, name, width) == label


def test_a_smaller_training_set_leaves_more_entities_unseen(data_and_kg, tmp_path):
    data, kg_dir = data_and_kg
    out = str(tmp_path / "out")
    main(["kg-coverage", "--data", data, "--kg", kg_dir, "--train_size", "1", "--output_dir", out, "--no_plot"])
    unseen = json.loads((tmp_path / "out" / "kg_coverage.json").read_text())["unseen"]["test"]
    # training: the first sentence (Paris, France): Berlin is unseen now, linked and with facts
    assert unseen["unseen_in_training"] == 4
    assert unseen["unseen_linked_share"] == unseen["unseen_with_facts_share"] == 3 / 4
    assert not (tmp_path / "out" / "kg_coverage.png").exists()


def test_split_and_unseen_coverage_by_hand():
    text = "Alpha met Beta"
    annotation = KnowledgeAnnotation.from_dict(
        {
            "entities": [
                {"text": "Alpha", "start": 0, "end": 5, "id": "A"},
                {"text": "Beta", "start": 10, "end": 14, "id": "B"},
            ],
            "triplets": [{"h": "A", "r": "knows", "t": "C"}, {"h": "A", "r": "likes", "t": "B"}],
        }
    )
    report = split_coverage([annotation], [text], [[(0, 5, "PER")]], {"knows": "knows of"})
    assert report["linked_mentions"] == 2 and report["facts_per_linked_mention"] == 3 / 2  # A: 2, B: 1
    assert report["gold_linking"]["precision"] == 1 / 2 and report["gold_linking"]["recall"] == 1.0
    assert report["relations_reaching_mentions"] == [["knows", "knows of", 1, 0.5], ["likes", "likes", 1, 0.5]]
    # Alpha seen in training (any case); Beta unseen: linked without a fact, then not linked
    alone = KnowledgeAnnotation.from_dict({"entities": [{"text": "Beta", "start": 0, "end": 4, "id": "B"}]})
    unseen = unseen_coverage(
        [],
        ["ALPHA"],
        [annotation, alone, KnowledgeAnnotation()],
        [text, "Beta", "Beta"],
        [[(0, 5, "PER")], [(0, 4, "PER")], [(0, 4, "PER")]],
    )
    assert unseen == {
        "gold_entities": 3,
        "unseen_in_training": 2,
        "unseen_share": 2 / 3,
        "unseen_linked_share": 0.5,
        "unseen_with_facts_share": 0.0,
    }


@pytest.mark.parametrize(
    "argument, value, error, message",
    [
        ("--kg", "nope:x", ValueError, "cannot load knowledge graph from 'nope:x'"),
        ("--kg", "fb15k273:x", ValueError, r"unknown kind 'fb15k273' \(did you mean 'fb15k237'\?\)"),
        ("--kg", "missing.tsv", ValueError, "'missing.tsv': no such file or folder"),
        ("--kg", "tsv:missing.tsv", FileNotFoundError, "missing.tsv"),
        ("--data", "missing_folder/", FileNotFoundError, "missing_folder"),
        ("--train_size", "0", ValueError, "--train_size must be at least 1"),
        ("--splits", "dev", ValueError, r"--splits \['dev'\]"),
    ],
)
def test_bad_arguments_are_clear_errors(data_and_kg, argument, value, error, message):
    data, kg_dir = data_and_kg
    arguments = {"--data": data, "--kg": kg_dir, argument: value}
    with pytest.raises(error, match=message):
        main(["kg-coverage", *(item for pair in arguments.items() for item in pair)])


def test_the_keplm_program_tells_bad_input_in_one_line(data_and_kg, capsys):
    """The ``keplm`` program (``keplm.cli:console``) prints bad input as ``keplm <command>: error: ...`` with exit
    status 2 and no traceback; ``--traceback`` raises the error itself."""
    data, _ = data_and_kg
    arguments = ["kg-coverage", "--data", data, "--kg", "nope:x"]
    assert console(arguments) == 2
    err = capsys.readouterr().err
    assert "keplm kg-coverage: error: cannot load knowledge graph from 'nope:x'" in err
    assert "Traceback" not in err
    with pytest.raises(ValueError, match="cannot load knowledge graph"):
        console(["--traceback", *arguments])
