"""Tests for keplm.knowledge: graph, loaders, annotations, linker (tiny in-code KGs + real data)."""

import gzip
import json
import os

import numpy as np
import pytest

from keplm.knowledge import (
    EntityLinker,
    EntityMention,
    KnowledgeAnnotation,
    KnowledgeGraph,
    Triplet,
    load_fb15k237,
    load_jsonl_kg,
    load_kg,
    load_trex,
    load_tsv_kg,
    load_wn18rr,
    merge_kgs,
    read_kala_annotations,
    write_kala_annotations,
)

DATA = os.path.join("..", "shared", "data")


def needs_data(*parts):
    path = os.path.join(DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"real data not available at {path}")
    return path


def toy_kg():
    # hub "fr" (France) has degree 4; "paris" 2; "lyon" 1; "texas_paris" 1; "de" 2; "berlin" 1.
    triples = [
        ("paris", "capital_of", "fr"),
        ("lyon", "located_in", "fr"),
        ("fr", "borders", "de"),
        ("berlin", "capital_of", "de"),
        ("macron", "president_of", "fr"),
        ("paris", "twinned", "texas_paris"),
    ]
    names = {
        "paris": "Paris",
        "fr": "France",
        "lyon": "Lyon",
        "de": "Germany",
        "berlin": "Berlin",
        "macron": "Emmanuel Macron",
        "texas_paris": "Paris",
    }
    aliases = {"fr": ["French Republic"], "macron": ["Macron"], "de": ["Deutschland"]}
    return KnowledgeGraph.from_triples(
        triples, entity_names=names, entity_aliases=aliases, relation_names={"capital_of": "capital of"}
    )


# ------------------------------------------------------------------------------------------ graph
def test_from_triples_indexing_and_lookup():
    kg = toy_kg()
    assert kg.num_entities == len(kg) == 7
    assert kg.num_relations == 5 and kg.num_triples == 6
    assert kg.triples.dtype == np.int64 and kg.triples.shape == (6, 3)
    assert kg.entity_ids[:2] == ["paris", "fr"]
    assert kg.entity_names[kg.entity_index("fr")] == "France"
    assert kg.entity_aliases[kg.entity_index("fr")] == ["French Republic"]
    assert kg.relation_names[kg.relation_index("capital_of")] == "capital of"
    assert kg.relation_names[kg.relation_index("borders")] == "borders"
    assert kg.has_entity("paris") and not kg.has_entity("rome") and kg.has_relation("twinned")
    with pytest.raises(ValueError, match="unknown entity id 'rome'"):
        kg.entity_index("rome")
    with pytest.raises(ValueError, match="unknown relation id"):
        kg.relation_index("nope")
    assert "num_entities=7" in repr(kg)


def test_constructor_rejects_bad_input():
    with pytest.raises(ValueError, match="duplicate entity id 'a'"):
        KnowledgeGraph(["a", "a"], ["r"])
    with pytest.raises(ValueError, match="out of range"):
        KnowledgeGraph(["a", "b"], ["r"], [[0, 0, 2]])
    with pytest.raises(ValueError, match="shape"):
        KnowledgeGraph(["a", "b"], ["r"], [[0, 0]])
    with pytest.raises(ValueError, match="entity_names"):
        KnowledgeGraph(["a", "b"], ["r"], entity_names=["A"])
    empty = KnowledgeGraph(["a"], ["r"])
    assert empty.num_triples == 0 and empty.triples_among([0]).shape == (0, 3)


def test_neighbors_and_degree():
    kg = toy_kg()
    fr = kg.entity_index("fr")
    nb = kg.neighbors(fr)
    assert nb.dtype == np.int64
    assert sorted(map(tuple, nb.tolist())) == sorted(
        tuple(row) for row in kg.triples.tolist() if fr in (row[0], row[2])
    )
    deg = kg.degree()
    assert deg.tolist() == [len(kg.neighbors(i)) for i in range(kg.num_entities)]
    assert deg[fr] == 4 and deg[kg.entity_index("texas_paris")] == 1
    # a self-loop counts once
    loop = KnowledgeGraph(["a", "b"], ["r"], [[0, 0, 0], [0, 0, 1]])
    assert loop.degree().tolist() == [2, 1] and len(loop.neighbors(0)) == 2
    with pytest.raises(ValueError, match="out of range"):
        kg.neighbors(99)


def _as_str(kg, arr):
    return {(kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in arr.tolist()}


def test_triples_among_hops_and_cap():
    kg = toy_kg()
    idx = [kg.entity_index("paris"), kg.entity_index("de")]
    among = kg.triples_among(idx, hops=0)
    assert among.shape == (0, 3)  # paris and de are not directly connected
    idx = [kg.entity_index("fr"), kg.entity_index("de")]
    assert _as_str(kg, kg.triples_among(idx, hops=0)) == {("fr", "borders", "de")}
    full = kg.triples_among(idx, hops=1, max_neighbors_per_entity=None)
    assert _as_str(kg, full) == {
        ("fr", "borders", "de"),
        ("paris", "capital_of", "fr"),
        ("lyon", "located_in", "fr"),
        ("macron", "president_of", "fr"),
        ("berlin", "capital_of", "de"),
    }
    # sorted, deduplicated, int64
    assert full.dtype == np.int64 and full.tolist() == sorted(full.tolist())
    # cap 1: fr keeps its highest-degree outside neighbour (paris, degree 2); de keeps berlin
    capped = kg.triples_among(idx, hops=1, max_neighbors_per_entity=1)
    assert _as_str(kg, capped) == {
        ("fr", "borders", "de"),
        ("paris", "capital_of", "fr"),
        ("berlin", "capital_of", "de"),
    }
    # ties by index: paris (idx 0) and de (idx 3) both have degree 2; lyon (idx 2) beats macron (idx 5)
    fr = [kg.entity_index("fr")]
    capped2 = kg.triples_among(fr, hops=1, max_neighbors_per_entity=2)
    assert _as_str(kg, capped2) == {("paris", "capital_of", "fr"), ("fr", "borders", "de")}
    capped3 = kg.triples_among(fr, hops=1, max_neighbors_per_entity=3)
    assert _as_str(kg, capped3) == _as_str(kg, capped2) | {("lyon", "located_in", "fr")}
    # 2 hops reach texas_paris through paris
    two = kg.triples_among([kg.entity_index("fr")], hops=2, max_neighbors_per_entity=None)
    assert ("paris", "twinned", "texas_paris") in _as_str(kg, two)
    assert kg.triples_among([], hops=1).shape == (0, 3)
    with pytest.raises(ValueError, match="out of range"):
        kg.triples_among([100])


def test_subgraph():
    kg = toy_kg()
    sub = kg.subgraph([kg.entity_index("de"), kg.entity_index("fr"), kg.entity_index("berlin")])
    assert sub.entity_ids == ["de", "fr", "berlin"]
    assert sub.relation_ids == kg.relation_ids
    assert _as_str(sub, sub.triples) == {("fr", "borders", "de"), ("berlin", "capital_of", "de")}
    assert sub.entity_aliases[0] == ["Deutschland"]


def test_save_load_roundtrip_with_hash(tmp_path):
    kg = toy_kg()
    vec = np.arange(kg.num_entities * 4, dtype=np.float32).reshape(-1, 4)
    kgv = KnowledgeGraph(
        kg.entity_ids,
        kg.relation_ids,
        kg.triples,
        kg.entity_names,
        kg.entity_aliases,
        kg.relation_names,
        entity_vectors=vec,
    )
    assert kgv.content_hash() != kg.content_hash()
    for g, d in ((kg, tmp_path / "plain"), (kgv, tmp_path / "vec")):
        g.save_pretrained(d)
        cfg = json.loads((d / "kg_config.json").read_text())
        assert cfg == {
            "format_version": 1,
            "num_entities": 7,
            "num_relations": 5,
            "num_triples": 6,
            "content_hash": g.content_hash(),
        }
        assert (d / "triples.tsv").read_text().splitlines()[0] == "paris\tcapital_of\tfr"
        assert json.loads((d / "entities.jsonl").read_text().splitlines()[1]) == {
            "id": "fr",
            "name": "France",
            "aliases": ["French Republic"],
        }
        back = KnowledgeGraph.from_pretrained(d)
        assert back.content_hash() == g.content_hash()
        assert back.entity_ids == g.entity_ids and back.entity_names == g.entity_names
        assert back.entity_aliases == g.entity_aliases and back.relation_names == g.relation_names
        np.testing.assert_array_equal(back.triples, g.triples)
    assert not (tmp_path / "plain" / "entity_vectors.safetensors").exists()
    back = KnowledgeGraph.from_pretrained(tmp_path / "vec")
    np.testing.assert_array_equal(back.entity_vectors, vec)
    assert load_kg(str(tmp_path / "vec")).content_hash() == kgv.content_hash()


def test_tampered_and_missing_files(tmp_path):
    toy_kg().save_pretrained(tmp_path)
    ents = tmp_path / "entities.jsonl"
    ents.write_text(ents.read_text().replace('"France"', '"Frankreich"'))
    with pytest.raises(ValueError, match="content hash mismatch"):
        KnowledgeGraph.from_pretrained(tmp_path)
    assert KnowledgeGraph.from_pretrained(tmp_path, verify_hash=False).entity_names[1] == "Frankreich"
    (tmp_path / "triples.tsv").write_text("paris\tcapital_of\trome\n")
    with pytest.raises(ValueError, match=r"triples.tsv:1: unknown id 'rome'"):
        KnowledgeGraph.from_pretrained(tmp_path, verify_hash=False)
    os.remove(tmp_path / "relations.jsonl")
    with pytest.raises(FileNotFoundError, match="relations.jsonl"):
        KnowledgeGraph.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="not found"):
        KnowledgeGraph.from_pretrained(tmp_path / "nope")


# ---------------------------------------------------------------------------------------- loaders
def test_load_tsv_kg_plain_gz_and_errors(tmp_path):
    (tmp_path / "t.tsv").write_text("a\tr1\tb\n\nb\tr2\tc\n")
    with gzip.open(tmp_path / "t2.tsv.gz", "wt") as f:
        f.write("c\tr1\ta\r\n")
    (tmp_path / "names.tsv").write_text("a\tAlpha\nb\tBeta\nzzz\tUnused\n")
    (tmp_path / "rels.tsv").write_text("r1\trelation one\n")
    (tmp_path / "aliases.tsv").write_text("a\tAl|A. lpha\n")
    kg = load_tsv_kg(
        [tmp_path / "t.tsv", tmp_path / "t2.tsv.gz"],
        tmp_path / "names.tsv",
        tmp_path / "rels.tsv",
        tmp_path / "aliases.tsv",
    )
    assert kg.entity_ids == ["a", "b", "c"] and kg.num_triples == 3
    assert kg.entity_names == ["Alpha", "Beta", "c"]
    assert kg.entity_aliases[0] == ["Al", "A. lpha"]
    assert kg.relation_names == ["relation one", "r2"]
    (tmp_path / "bad.tsv").write_text("a\tr\tb\nb\tr\n")
    with pytest.raises(ValueError, match=r"bad.tsv:2: expected 3 tab-separated fields, got 2"):
        load_tsv_kg(str(tmp_path / "bad.tsv"))
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        load_tsv_kg(str(tmp_path / "missing.tsv"))
    assert load_kg(f"tsv:{tmp_path / 't.tsv'}").num_triples == 2


def test_load_jsonl_kg_and_load_kg_dispatch(tmp_path):
    lines = [
        {"type": "entity", "id": "Q90", "name": "Paris", "aliases": ["City of Light"]},
        {"type": "relation", "id": "P1376", "name": "capital of"},
        {"h": "Q90", "r": "P1376", "t": "Q142"},
    ]
    p = tmp_path / "kg.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    kg = load_jsonl_kg(p)
    assert kg.entity_ids == ["Q90", "Q142"] and kg.entity_aliases[0] == ["City of Light"]
    assert kg.relation_names == ["capital of"]
    assert load_kg(str(p)).content_hash() == kg.content_hash()
    p.write_text(json.dumps(lines[0]) + "\n" + '{"h": "Q90", "r": "P1"}\n')
    with pytest.raises(ValueError, match=r"kg.jsonl:2: triple line needs"):
        load_jsonl_kg(p)
    with pytest.raises(ValueError, match="accepted"):
        load_kg("nonsense-spec")


def test_merge_kgs_aligns_unambiguous_names_and_keeps_ambiguous_ones_apart(tmp_path):
    wikidata = KnowledgeGraph.from_triples(
        [("Q90", "P17", "Q142"), ("Q90", "P17", "Q142"), ("Q830149", "P17", "Q16"), ("Q42", "P27", "Q145")],
        entity_names={
            "Q90": "Paris",
            "Q142": "France",
            "Q830149": "Paris",
            "Q16": "Canada",
            "Q42": "Douglas Adams",
            "Q145": "United Kingdom",
        },
        entity_aliases={"Q142": ["FR"]},
    )
    merged = merge_kgs([toy_kg(), wikidata])
    base = toy_kg()
    # "France" and "Germany" are unique on both sides: one entity, the first id names it, aliases are unioned
    fr = merged.entity_index("fr")
    assert merged.entity_names[fr] == "France" and merged.entity_aliases[fr] == ["French Republic", "FR"]
    assert not merged.has_entity("Q142")
    # "Paris" is ambiguous in both graphs: no alignment, all four Paris entities stay
    assert merged.entity_names.count("Paris") == 4
    assert merged.has_entity("Q90") and merged.has_entity("Q830149")
    assert merged.num_entities == base.num_entities + 5  # Q90, Q830149, Q16, Q42, Q145 (Q142 merged into fr)
    assert merged.num_relations == base.num_relations + 2
    # triples move to the merged entity and duplicates are dropped
    q90, p17 = merged.entity_index("Q90"), merged.relation_index("P17")
    assert [tuple(t) for t in merged.triples.tolist()].count((q90, p17, fr)) == 1
    assert merged.num_triples == base.num_triples + 3
    # the '+' spec merges through load_kg, in order

    def write_jsonl(name, lines):
        (tmp_path / name).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        return f"jsonl:{tmp_path / name}"

    first = write_jsonl(
        "a.jsonl",
        [
            {"type": "entity", "id": "/m/0f8l9c", "name": "France"},
            {"h": "/m/05qtj", "r": "/location/country", "t": "/m/0f8l9c"},
        ],
    )
    second = write_jsonl(
        "b.jsonl", [{"type": "entity", "id": "Q142", "name": "France"}, {"h": "Q142", "r": "P36", "t": "Q90"}]
    )
    loaded = load_kg(f"{first}+{second}")
    assert loaded.entity_ids == ["/m/0f8l9c", "/m/05qtj", "Q90"] and loaded.num_triples == 2
    assert loaded.triples.tolist() == [[1, 0, 0], [0, 1, 2]]  # both facts hang on the one "France"
    with pytest.raises(ValueError, match="at least one"):
        merge_kgs([])


# ------------------------------------------------------------------------------------ annotations
def test_annotation_validate_and_dict_roundtrip():
    text = "Paris is in France"
    ann = KnowledgeAnnotation(
        [EntityMention("Paris", 0, 5, "Q90"), EntityMention("France", 12, 18, "Q142"), EntityMention("is", 6, 8, None)],
        [Triplet("Q90", "P17", "Q142"), Triplet("Q142", "P36", "Q999")],
    )
    assert ann.validate(text) is ann  # Q999 is a neighbour node: allowed
    assert ann.entity_ids() == ["Q90", "Q142", "Q999"]
    d = ann.to_dict()
    assert d["entities"][2] == {"text": "is", "start": 6, "end": 8, "id": None}
    assert KnowledgeAnnotation.from_dict(d) == ann
    with pytest.raises(ValueError, match=r"mention 0: text\[0:5\] is 'Paris' but mention.text is 'Rome'"):
        KnowledgeAnnotation([EntityMention("Rome", 0, 5, "Q220")]).validate(text)
    with pytest.raises(ValueError, match="out of range"):
        KnowledgeAnnotation([EntityMention("France", 12, 19, "Q142")]).validate(text)
    with pytest.raises(ValueError, match="out of range"):
        KnowledgeAnnotation([EntityMention("", 3, 3, "Q1")]).validate(text)
    with pytest.raises(ValueError, match="triplet 0: r"):
        KnowledgeAnnotation([], [Triplet("Q1", "", "Q2")]).validate(text)
    with pytest.raises(ValueError, match="missing"):
        KnowledgeAnnotation.from_dict({"entities": [{"text": "x", "start": 0}]})


def test_kala_json_roundtrip(tmp_path):
    raw = {
        "0": {
            "entities": [
                {"text": "EU", "start": 0, "end": 2, "id": 458},
                {"text": "German", "start": 11, "end": 17, "id": 183},
            ],
            "triplets": [{"h": 458, "r": "P150", "t": 183}],
        },
        "7": {"entities": [], "triplets": []},
        "9": [{"text": "Peter", "start": 0, "end": 5, "id": "Q1"}],  # {fold}_entity.json style
    }
    src = tmp_path / "train_0.05.json"
    src.write_text(json.dumps(raw))
    anns = read_kala_annotations(src)
    assert anns["0"].entities[0] == EntityMention("EU", 0, 2, "458")
    assert anns["0"].triplets == [Triplet("458", "P150", "183")]
    assert anns["0"].validate("EU rejects German call")
    assert anns["9"].triplets == [] and anns["9"].entity_ids() == ["Q1"]
    for name in ("out.json", "out.json.gz"):
        write_kala_annotations(anns, tmp_path / name)
        assert read_kala_annotations(tmp_path / name) == anns
    with pytest.raises(FileNotFoundError):
        read_kala_annotations(tmp_path / "none.json")
    src.write_text(json.dumps({"3": {"entities": [{"text": "x", "start": "a", "end": 1}]}}))
    with pytest.raises(ValueError, match="context '3'"):
        read_kala_annotations(src)


# ----------------------------------------------------------------------------------------- linker
def test_linker_longest_match_boundaries_and_ties():
    kg = toy_kg()
    linker = EntityLinker(kg)
    ann = linker("Emmanuel Macron visited Paris, not the Parisian suburbs of France.")
    got = [(m.text, m.start, m.end, m.id) for m in ann.entities]
    # longest match beats "Macron"; "Paris" inside "Parisian" is not a match; "Paris" -> most connected
    assert got == [("Emmanuel Macron", 0, 15, "macron"), ("Paris", 24, 29, "paris"), ("France", 59, 65, "fr")]
    ann.validate("Emmanuel Macron visited Paris, not the Parisian suburbs of France.")
    trip = {(t.h, t.r, t.t) for t in ann.triplets}
    assert ("macron", "president_of", "fr") in trip and ("paris", "capital_of", "fr") in trip
    assert all(t.h in kg.entity_ids and t.t in kg.entity_ids for t in ann.triplets)
    assert linker.link("FRANCE").entities[0].id == "fr"  # lowercase matching
    assert EntityLinker(kg, lowercase=False).link("FRANCE").entities == []
    assert linker.link("ParisFrance").entities == [] and linker.link("").entities == []
    assert [m.id for m in linker.link("the French Republic").entities] == ["fr"]


def test_linker_tie_break_by_degree_then_index():
    kg = KnowledgeGraph.from_triples(
        [("low", "r", "x"), ("high", "r", "x"), ("high", "r", "y"), ("a", "r", "z"), ("b", "r", "z")],
        entity_names={"low": "Springfield", "high": "Springfield", "a": "Twin", "b": "Twin"},
    )
    linker = EntityLinker(kg, hops=0)
    assert linker.link("Springfield").entities[0].id == "high"
    assert linker.link("Twin").entities[0].id == "a"  # equal degree -> lowest index


def test_linker_filters_and_link_tokens():
    kg = KnowledgeGraph.from_triples(
        [("q1", "r", "q2"), ("q3", "r", "q4"), ("q5", "r", "q2")],
        entity_names={"q1": "The Who", "q2": "1984", "q3": "A", "q4": "New York", "q5": "Up"},
        entity_aliases={"q4": ["NY"]},
    )
    linker = EntityLinker(kg)
    # stopword-only ("The Who", "Up"), number-only ("1984") and too-short ("A") aliases are skipped
    assert linker.link("The Who played in 1984 in A town , Up there").entities == []
    tokens = ["Fans", "in", "New", "York", "and", "NY", "."]
    ann = linker.link_tokens(tokens)
    text = " ".join(tokens)
    assert [(m.text, m.start, m.end) for m in ann.entities] == [("New York", 8, 16), ("NY", 21, 23)]
    ann.validate(text)
    assert [(t.h, t.r, t.t) for t in ann.triplets] == [("q3", "r", "q4")]
    custom = EntityLinker(kg, stopwords=set())
    assert [m.id for m in custom.link("The Who and Up").entities] == ["q1", "q5"]
    with pytest.raises(ValueError):
        linker.link_tokens("New York")


# -------------------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def fb15k():
    return load_fb15k237(needs_data("kg", "fb15k-237"))


def test_load_fb15k237_counts(fb15k):
    assert (fb15k.num_entities, fb15k.num_relations, fb15k.num_triples) == (14541, 237, 310116)
    paris = fb15k.entity_index("/m/05qtj")
    assert fb15k.entity_names[paris] == "Paris"
    rydstrom = fb15k.entity_index("/m/0c94fn")
    assert fb15k.entity_names[rydstrom] == "Gary Rydstrom" and fb15k.entity_aliases[rydstrom] == []
    assert fb15k.relation_names[fb15k.relation_index("/music/artist/origin")] == "music artist origin"
    train = load_fb15k237(needs_data("kg", "fb15k-237"), splits=("train",))
    assert train.num_triples == 272115 and train.num_relations == 237
    with pytest.raises(ValueError, match="unknown FB15k-237 split"):
        load_fb15k237(needs_data("kg", "fb15k-237"), splits=("dev",))


def test_link_conll_sentences_against_fb15k(fb15k):
    linker = EntityLinker(fb15k)
    # FB15k-237 has no "EU"/"European Union"/bare "German"/"British"/"lamb" entity: nothing to link
    assert linker.link_tokens("EU rejects German call to boycott British lamb .".split()).entities == []
    ann = linker.link_tokens(["BRUSSELS", "1996-08-22"])
    assert [(m.text, m.id) for m in ann.entities] == [("BRUSSELS", "/m/0177z")]  # Brussels
    assert 0 < len(ann.triplets) <= 8
    assert all("/m/0177z" in (t.h, t.t) for t in ann.triplets)
    text = "Germany 's representative to the European Union 's veterinary committee said"
    ann = linker.link(text).validate(text)
    assert ann.entities[0] == EntityMention("Germany", 0, 7, "/m/0345h")


def test_load_trex_lama():
    root = needs_data("lama")
    kg = load_trex(root)
    assert kg.num_relations == 41 and kg.num_triples == 22881 + 31115 + 7777
    assert kg.relation_names[kg.relation_index("P19")] == "place of birth"
    assert kg.entity_names[kg.entity_index("Q183")] == "Germany"
    test_only = load_trex(root, include_autoprompt=False)
    assert test_only.num_relations == 28 and test_only.num_triples == 22881
    one = load_trex([os.path.join(root, "TREx", "P19.jsonl.gz")])
    assert one.relation_ids == ["P19"] and one.num_triples == 944
    assert one.relation_names == ["place of birth"]
    assert load_kg(f"trex:{root}").num_triples == kg.num_triples


def test_load_wn18rr_counts():
    kg = load_wn18rr(needs_data("kg", "wn18rr"))
    assert (kg.num_entities, kg.num_relations, kg.num_triples) == (40943, 11, 86835 + 3034 + 3134)
    assert kg.entity_names[kg.entity_index("14854262")] == "stool"
    assert kg.relation_names[kg.relation_index("_has_part")] == "has part"


def test_replace_keeps_the_entities_and_names_and_checks_the_new_fields(kg):
    vectors = np.arange(kg.num_entities * 2, dtype=np.float32).reshape(kg.num_entities, 2)
    with_vectors = kg.replace(entity_vectors=vectors)
    assert with_vectors.entity_ids == kg.entity_ids and with_vectors.entity_names == kg.entity_names
    assert with_vectors.entity_aliases == kg.entity_aliases and with_vectors.relation_names == kg.relation_names
    assert np.array_equal(with_vectors.triples, kg.triples) and np.array_equal(with_vectors.entity_vectors, vectors)
    fewer = with_vectors.replace(triples=kg.triples[:2])
    assert fewer.num_triples == 2 and np.array_equal(fewer.entity_vectors, vectors)  # the vectors are kept
    assert fewer.replace(entity_vectors=None).entity_vectors is None
    assert kg.entity_vectors is None and kg.num_triples > 2  # the graph replaced from is unchanged
    with pytest.raises(ValueError):
        kg.replace(entity_vectors=vectors[:-1])  # a row per entity
    with pytest.raises(ValueError, match="NaN"):
        kg.replace(entity_vectors=np.full_like(vectors, np.nan))
    with pytest.raises(ValueError):
        kg.replace(triples=np.array([[0, 0, kg.num_entities]]))  # an entity index out of range
