"""Bad inputs at the KG loaders and the knowledge assets (issue 11, items 7 and 11, ``--kg`` specs, long loads): each
test feeds exactly one bad input and pins the clear error or the counted, logged merge (docs/reliability.md)."""

from __future__ import annotations

import json
import logging

import pytest

from keplm.knowledge import KnowledgeAssets, KnowledgeGraph, load_jsonl_kg, load_kg, load_tsv_kg

# --------------------------------------------------------------------------- duplicates in KG files (item 7)


def _lines(path, rows):
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_entity_declared_twice_keeps_both_names_and_says_so(tmp_path, caplog):
    """The second declaration used to replace the first name, which was lost."""
    path = _lines(
        tmp_path / "kg.jsonl",
        [
            {"type": "entity", "id": "Q90", "name": "Paris", "aliases": ["City of Light"]},
            {"type": "entity", "id": "Q90", "name": "Paname"},
            {"h": "Q90", "r": "P17", "t": "Q142"},
        ],
    )
    with caplog.at_level(logging.WARNING, logger="keplm.knowledge.builder"):
        kg = load_jsonl_kg(path)
    i = kg.entity_index("Q90")
    assert kg.entity_names[i] == "Paris" and kg.entity_aliases[i] == ["City of Light", "Paname"]
    report = kg.build_report
    assert report["entity_redeclared"] == 1 and report["names_kept_as_aliases"] == 1
    assert report["examples"]["entity_redeclared"] == [f"{path}:2: Q90"]
    assert "merged duplicates 1 entities declared again" in caplog.text and f"{path}:2" in caplog.text


def test_tsv_names_file_with_an_id_twice_follows_the_same_policy(tmp_path):
    triples = _lines(tmp_path / "triples.tsv", ["Q90\tP17\tQ142"])
    names = _lines(tmp_path / "names.tsv", ["Q90\tParis", "Q90\tParname", "Q142\tFrance"])
    kg = load_tsv_kg(triples, entity_names_path=names)
    i = kg.entity_index("Q90")
    assert kg.entity_names[i] == "Paris" and kg.entity_aliases[i] == ["Parname"]
    assert kg.build_report["names_kept_as_aliases"] == 1


def test_a_string_alias_is_one_alias(tmp_path):
    """``"aliases": "Paname"`` used to become six one-letter aliases."""
    path = _lines(
        tmp_path / "kg.jsonl",
        [{"type": "entity", "id": "Q90", "name": "Paris", "aliases": "Paname"}, {"h": "Q90", "r": "P17", "t": "Q142"}],
    )
    assert load_jsonl_kg(path).entity_aliases[0] == ["Paname"]
    kg = KnowledgeGraph.from_triples([("Q90", "P17", "Q142")], entity_aliases={"Q90": "Paname"})
    assert kg.entity_aliases[kg.entity_index("Q90")] == ["Paname"]
    assert KnowledgeGraph(["Q90"], ["P17"], entity_aliases=["Paname"]).entity_aliases == [["Paname"]]
    bad = _lines(tmp_path / "bad.jsonl", [{"type": "entity", "id": "Q90", "aliases": {"fr": "Paname"}}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: aliases must be a string or a list of strings"):
        load_jsonl_kg(bad)


@pytest.mark.parametrize("loader", ["tsv", "jsonl", "from_triples"])
def test_duplicate_triples_are_kept_once_and_counted_in_every_loader(tmp_path, loader):
    """Repeated facts used to stay in the KG and inflate degrees (the linker's prior)."""
    facts = [("Q90", "P17", "Q142"), ("Q64", "P17", "Q183"), ("Q90", "P17", "Q142")]
    if loader == "tsv":
        kg = load_tsv_kg(_lines(tmp_path / "kg.tsv", ["\t".join(f) for f in facts]))
    elif loader == "jsonl":
        kg = load_jsonl_kg(_lines(tmp_path / "kg.jsonl", [dict(zip("hrt", f)) for f in facts]))
    else:
        kg = KnowledgeGraph.from_triples(facts)
    assert kg.num_triples == 2 and int(kg.degree()[kg.entity_index("Q90")]) == 1
    assert kg.build_report["duplicate_triples"] == 1


# --------------------------------------------------------------------------- knowledge assets (item 11)


@pytest.fixture()
def saved(tmp_path, kg):
    assets = KnowledgeAssets.build(["Q90", "Q90", "Q142"], kg=kg)
    assets.save_pretrained(tmp_path)
    return tmp_path, tmp_path / "knowledge"


def _edit_json(path, **changes):
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_null_kg_hash_beside_kg_files_is_an_error_naming_them(saved):
    """``kg_hash: null`` used to load with the KG silently dropped."""
    folder, knowledge = saved
    _edit_json(knowledge / "assets_config.json", kg_hash=None)
    with pytest.raises(ValueError, match=r"records no knowledge graph .* but .*knowledge/kg holds KG files"):
        KnowledgeAssets.from_pretrained(folder)
    for file in (knowledge / "kg").iterdir():
        file.unlink()
    (knowledge / "kg").rmdir()
    assert KnowledgeAssets.from_pretrained(folder).kg is None  # no KG files: a checkpoint without a KG


def test_entity_counts_are_hashed_and_older_folders_still_load(saved):
    """``counts`` were not covered by any hash: edited counts loaded without a word."""
    folder, knowledge = saved
    config = json.loads((knowledge / "assets_config.json").read_text())
    assert "counts_hash" in config
    _edit_json(knowledge / "entity_vocab.json", counts=[0, 99, 1])
    with pytest.raises(ValueError, match=r"entity counts in .*entity_vocab\.json do not match the hash"):
        KnowledgeAssets.from_pretrained(folder)
    del config["counts_hash"]  # a folder saved before counts were hashed
    (knowledge / "assets_config.json").write_text(json.dumps(config))
    assert KnowledgeAssets.from_pretrained(folder).entity_counts == [0, 99, 1]


@pytest.mark.parametrize(
    "name",
    [
        "assets_config.json",
        "entity_vocab.json",
        "relation_vocab.json",
        "kg/kg_config.json",
        "kg/entities.jsonl",
        "kg/relations.jsonl",
    ],
)
def test_truncated_json_asset_names_its_file(saved, name):
    folder, knowledge = saved
    path = knowledge / name
    text = path.read_text()
    path.write_text(text[: len(text) // 2].rstrip("\n") + "\n" if name.endswith("l") else text[: len(text) // 2])
    with pytest.raises(ValueError, match=name.replace(".", r"\.") + r".*(invalid JSON|line)"):
        KnowledgeAssets.from_pretrained(folder)


def test_json_errors_of_a_library_can_name_the_folder(tmp_path):
    """The helper for readers keplm does not own (a truncated tokenizer.json gives transformers' bare
    JSONDecodeError)."""
    from keplm.io_utils import named_json_errors

    with pytest.raises(ValueError, match=r"checkpoint-7: invalid JSON in one of its files at line 1, column 2"):
        with named_json_errors("checkpoint-7"):
            json.loads("{")


def test_truncated_tokenizer_json_names_the_processor_folder(tmp_path, tokenizer, kg):
    """A saved processor whose tokenizer.json was cut in half: a ValueError naming the folder, not a bare
    JSONDecodeError from inside transformers."""
    from keplm import KalaProcessor

    folder = tmp_path / "proc"
    KalaProcessor(tokenizer, KnowledgeAssets(kg=kg)).save_pretrained(folder)
    path = folder / "tokenizer.json"
    path.write_text(path.read_text()[:200])
    with pytest.raises(ValueError, match=f"the tokenizer of {folder}: invalid JSON"):
        KalaProcessor.from_pretrained(folder)


# --------------------------------------------------------------------------- --kg specs and long loads


def test_a_plus_inside_an_existing_path_is_part_of_the_path(tmp_path, caplog):
    """``--kg tsv:<dir>/a+b/kg.tsv`` used to be split into two specs at the '+'."""
    folder = tmp_path / "fb+trex"
    folder.mkdir()
    one = _lines(folder / "kg.tsv", ["Q90\tP17\tQ142"])
    two = _lines(tmp_path / "more.tsv", ["Q64\tP17\tQ183"])
    from keplm.knowledge.loaders import split_kg_spec

    assert split_kg_spec(f"tsv:{one}") == [f"tsv:{one}"]
    with caplog.at_level(logging.INFO, logger="keplm.knowledge.loaders"):
        assert load_kg(f"tsv:{one}").num_triples == 1
    assert f"Loading the knowledge graph tsv:{one}" in caplog.text and "Loaded KnowledgeGraph(" in caplog.text
    assert split_kg_spec(f"tsv:{one}+tsv:{two}") == [f"tsv:{one}", f"tsv:{two}"]
    assert load_kg(f"tsv:{one}+tsv:{two}").num_triples == 2
    assert split_kg_spec(f"tsv:{two}+hpo:terms") == [f"tsv:{two}", "hpo:terms"]
    with pytest.raises(FileNotFoundError, match=r"'tsv:.*missing\.tsv' names no existing file"):
        load_kg(f"tsv:{two}+tsv:{tmp_path}/missing.tsv")
