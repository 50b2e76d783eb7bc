"""Roof-Transformer's knowledge input: selection (has_tail / no_tail, linker matching, order), verbalisation on the
paper's Figure 2 (English and Chinese), the knowledge budget (whole units, Exp2 clause prefixes, counts), precomputed
triple lists, and the processor's features (sentence pairs, QA windows, collator, save / load, bad input)."""

from __future__ import annotations

import json

import datasets
import pytest
import torch
from transformers import BertTokenizerFast

from keplm.data.collator import KeplmDataCollator
from keplm.knowledge import EntityLinker, KnowledgeAssets, KnowledgeGraph, load_kg
from keplm.tokenization import KeplmProcessor
from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor
from keplm.tokenization.roof_knowledge import (
    KNOWLEDGE_COLUMNS,
    KnowledgeTriple,
    add_triples_column,
    fit_knowledge,
    knowledge_statistics,
    name_triples,
    passage_entity_ids,
    read_triple_lists,
    resolve_triples,
    select_triples,
    verbalize,
    write_triple_lists,
)

FIGURE2 = [
    ("Bill Gates", "founder", "Microsoft"),
    ("Bill Gates", "alumni", "Harvard"),
    ("Elon Musk", "founder", "SpaceX"),
]
FIGURE2_ZH = [("比尔·盖茨", "创始人", "微软"), ("比尔·盖茨", "校友", "哈佛"), ("埃隆·马斯克", "创始人", "SpaceX")]
WORDS = (
    "bill gates is a founder of microsoft alumni harvard elon musk spacex he studied at and runs before the "
    "who went to company city paris france in sold"
).split()
ZH_CHARS = list("比尔·盖茨的创始人是微软校友哈佛埃隆马斯克他，")


@pytest.fixture(scope="module")
def tok():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", ".", "?", ";", *WORDS, *ZH_CHARS]
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(dict.fromkeys(vocab))}, do_lower_case=True)


@pytest.fixture(scope="module")
def fig_kg():
    triples = [
        ("Q5", "P112", "Q2283"),
        ("Q5", "P69", "Q13371"),
        ("Q317521", "P112", "Q193701"),
        ("Q2283", "P159", "Q90"),
    ]  # Microsoft headquarters Paris: a triple whose head is a tail above
    names = {
        "Q5": "Bill Gates",
        "Q2283": "Microsoft",
        "Q13371": "Harvard",
        "Q317521": "Elon Musk",
        "Q193701": "SpaceX",
        "Q90": "Paris",
    }
    return KnowledgeGraph.from_triples(
        triples,
        entity_names=names,
        entity_aliases={"Q5": ["Gates"]},
        relation_names={"P112": "founder", "P69": "alumni", "P159": "city"},
    )


def named(rows):
    return [KnowledgeTriple(h, r, t) for h, r, t in rows]


def texts(units):
    return [unit.text for unit in units]


# --------------------------------------------------------------------------------------- Figure 2, verbalised
def test_figure2_english_exp0_exp1_exp2():
    assert texts(verbalize(named(FIGURE2), "exp0")) == [
        "Bill Gates founder Microsoft",
        "Bill Gates alumni Harvard",
        "Elon Musk founder SpaceX",
    ]
    assert texts(verbalize(named(FIGURE2), "exp1")) == [
        "Bill Gates is a founder of Microsoft",
        "Bill Gates is a alumni of Harvard",
        "Elon Musk is a founder of SpaceX",
    ]
    exp2 = verbalize(named(FIGURE2), "exp2")
    assert texts(exp2) == [
        "Bill Gates is a founder of Microsoft, he is a alumni of Harvard",
        "Elon Musk is a founder of SpaceX",
    ]
    assert [len(unit.triples) for unit in exp2] == [2, 1]
    assert texts(verbalize(named(FIGURE2), "exp2", pronoun="she"))[0].endswith(", she is a alumni of Harvard")


def test_figure2_chinese_exp0_exp1_exp2_and_language_choice():
    assert texts(verbalize(named(FIGURE2_ZH), "exp0")) == [
        "比尔·盖茨创始人微软",
        "比尔·盖茨校友哈佛",
        "埃隆·马斯克创始人SpaceX",
    ]
    assert texts(verbalize(named(FIGURE2_ZH), "exp1")) == [
        "比尔·盖茨的创始人是微软",
        "比尔·盖茨的校友是哈佛",
        "埃隆·马斯克的创始人是SpaceX",
    ]
    assert texts(verbalize(named(FIGURE2_ZH), "exp2")) == [
        "比尔·盖茨的创始人是微软，他的校友是哈佛",
        "埃隆·马斯克的创始人是SpaceX",
    ]
    assert texts(verbalize(named(FIGURE2_ZH), "exp2", language="zh")) == texts(verbalize(named(FIGURE2_ZH), "exp2"))
    assert texts(verbalize(named(FIGURE2_ZH), "exp2", zh_pronoun="她"))[0].endswith("，她的校友是哈佛")
    # a Chinese relation makes an English head's triple Chinese; language="en" forces the English template
    assert texts(verbalize(named([("SpaceX", "创始人", "Elon Musk")]), "exp1")) == ["SpaceX的创始人是Elon Musk"]
    assert texts(verbalize(named(FIGURE2_ZH[:1]), "exp1", language="en")) == ["比尔·盖茨 is a 创始人 of 微软"]
    with pytest.raises(ValueError, match="verbalization must be one of"):
        verbalize(named(FIGURE2), "exp3")
    with pytest.raises(ValueError, match="language must be one of"):
        verbalize(named(FIGURE2), "exp1", language="de")


def test_exp2_merges_only_consecutive_triples_of_the_same_head():
    rows = [("A", "r1", "B"), ("C", "r2", "D"), ("A", "r3", "E")]
    assert texts(verbalize(named(rows), "exp2")) == ["A is a r1 of B", "C is a r2 of D", "A is a r3 of E"]
    same_name = [KnowledgeTriple("Paris", "r", "x", head_key="Q90"), KnowledgeTriple("Paris", "r", "y", "Q167646")]
    assert len(verbalize(same_name, "exp2")) == 2  # two entities named Paris are two heads


# --------------------------------------------------------------------------------------------------- selection
def test_selection_by_head_in_the_passage_has_tail_and_no_tail(fig_kg):
    linker = EntityLinker(fig_kg)
    passage = "Elon Musk runs SpaceX. Bill Gates studied at Harvard."
    ids = passage_entity_ids([linker.link(passage)])
    assert ids == ["Q317521", "Q193701", "Q5", "Q13371"]  # by first occurrence
    has_tail = name_triples(fig_kg, select_triples(fig_kg, ids, "has_tail"))
    assert [(t.head, t.relation, t.tail) for t in has_tail] == [
        ("Elon Musk", "founder", "SpaceX"),
        ("Bill Gates", "alumni", "Harvard"),
    ]
    no_tail = name_triples(fig_kg, select_triples(fig_kg, ids, "no_tail"))
    assert [(t.head, t.relation, t.tail) for t in no_tail] == [  # then KG order within a head
        ("Elon Musk", "founder", "SpaceX"),
        ("Bill Gates", "founder", "Microsoft"),
        ("Bill Gates", "alumni", "Harvard"),
    ]
    assert select_triples(fig_kg, ["Q193701", "Q13371"], "no_tail") == []  # tails only: nothing is a head
    assert select_triples(fig_kg, ["Q5", "Q5", "unknown"], "no_tail") == select_triples(fig_kg, ["Q5"], "no_tail")
    with pytest.raises(ValueError, match="selection must be one of"):
        select_triples(fig_kg, ids, "any")


def test_selection_reuses_the_linker_aliases_case_and_word_boundaries(tok, fig_kg):
    def heads(processor, passage):
        return [(t.head, t.tail) for t in processor.select([processor.link(passage)])]

    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg), selection="no_tail")
    assert heads(processor, "Gates met the press.") == [("Bill Gates", "Microsoft"), ("Bill Gates", "Harvard")]
    assert heads(processor, "bill gates met the press.") == heads(processor, "Gates met the press.")
    assert heads(processor, "Billgates and Microsofts") == []  # word boundaries
    cased = RoofTransformerProcessor(
        tok, KnowledgeAssets(kg=fig_kg), selection="no_tail", linker_kwargs={"lowercase": False}
    )
    assert heads(cased, "bill gates met the press.") == []
    assert heads(cased, "Bill Gates met the press.") == [("Bill Gates", "Microsoft"), ("Bill Gates", "Harvard")]


def test_selection_takes_every_head_triple_not_the_linkers_capped_facts(tok):
    triples = [("Q1", "P1", f"Q{100 + i}") for i in range(12)]
    names = {"Q1": "Acme", **{f"Q{100 + i}": f"city {i}" for i in range(12)}}
    kg = KnowledgeGraph.from_triples(triples, entity_names=names, relation_names={"P1": "sold in"})
    processor = RoofTransformerProcessor(
        tok, KnowledgeAssets(kg=kg), selection="no_tail", linker_kwargs={"max_neighbors_per_entity": 3}
    )
    annotation = processor.link("Acme sold in Paris.")
    assert len(annotation.triplets) == 3
    selected = processor.select([annotation])
    assert [t.tail for t in selected] == [f"city {i}" for i in range(12)]


# ------------------------------------------------------------------------------------------------------ budget
def test_knowledge_sequence_is_cls_units_sep_with_unit_ids(tok):
    units = verbalize(named(FIGURE2), "exp1")
    knowledge = fit_knowledge(units, tok, 511)
    expected = [tok.cls_token_id]
    for unit in units:
        expected += tok(unit.text, add_special_tokens=False)["input_ids"] + [tok.sep_token_id]
    assert knowledge.input_ids == expected
    assert tok.decode(knowledge.input_ids) == (
        "[CLS] bill gates is a founder of microsoft [SEP] bill gates is a alumni"
        " of harvard [SEP] elon musk is a founder of spacex [SEP]"
    )
    assert (knowledge.num_selected, knowledge.num_kept, knowledge.num_cut) == (3, 3, 0)
    ids, unit_ids = torch.tensor(knowledge.input_ids), torch.tensor(knowledge.unit_ids)
    assert unit_ids[0] == -1 and (unit_ids[ids == tok.sep_token_id] == -1).all()
    for i, unit in enumerate(knowledge.units):  # cached mode encodes [CLS] unit_i [SEP] alone
        alone = [tok.cls_token_id, *ids[unit_ids == i].tolist(), tok.sep_token_id]
        assert alone == tok(unit)["input_ids"]
    features = knowledge.features()
    assert features["knowledge_attention_mask"] == [1] * len(expected)
    assert (features["num_selected_triples"], features["num_cut_triples"], features["num_unnamed_triples"]) == (3, 0, 0)


def test_budget_drops_whole_units_first_fit_and_counts(tok):
    rows = [FIGURE2[0], ("Bill Gates", "alumni", "the Harvard company"), FIGURE2[2]]
    units = verbalize(named(rows), "exp1")  # 7, 9, 7 tokens + [SEP] each
    knowledge = fit_knowledge(units, tok, 8 + 8)
    assert knowledge.units == ["Bill Gates is a founder of Microsoft", "Elon Musk is a founder of SpaceX"]
    assert (knowledge.num_selected, knowledge.num_kept, knowledge.num_cut) == (3, 2, 1)
    assert len(knowledge.input_ids) == 1 + 16 and knowledge.unit_ids.count(1) == 7
    tight = fit_knowledge(units, tok, 7)  # one token short of any unit: nothing fits, [CLS] alone
    assert (tight.input_ids, tight.unit_ids, tight.num_cut) == ([tok.cls_token_id], [-1], 3)
    assert fit_knowledge(units, tok, 0).input_ids == [tok.cls_token_id]
    with pytest.raises(ValueError, match="max_knowledge_length must be >= 0"):
        fit_knowledge(units, tok, -1)


def test_exp2_unit_keeps_its_longest_whole_clause_prefix(tok):
    rows = [
        ("Bill Gates", "founder", "Microsoft"),
        ("Bill Gates", "alumni", "Harvard"),
        ("Bill Gates", "founder", "SpaceX"),
    ]
    units = verbalize(named(rows), "exp2")
    assert len(units) == 1 and len(tok(units[0].text, add_special_tokens=False)["input_ids"]) == 7 + 7 + 7
    knowledge = fit_knowledge(units, tok, 7 + 7 + 1)
    assert knowledge.units == ["Bill Gates is a founder of Microsoft, he is a alumni of Harvard"]
    assert (knowledge.num_kept, knowledge.num_cut) == (2, 1)


def test_a_triple_longer_than_the_budget_is_cut_and_counted(tok):
    long_tail = " ".join(["paris"] * 40)
    rows = [("Bill Gates", "founder", long_tail), ("Elon Musk", "founder", "SpaceX")]
    knowledge = fit_knowledge(verbalize(named(rows), "exp1"), tok, 20)
    assert knowledge.units == ["Elon Musk is a founder of SpaceX"]
    assert (knowledge.num_selected, knowledge.num_kept, knowledge.num_cut) == (2, 1, 1)
    alone = fit_knowledge(verbalize(named(rows[:1]), "exp1"), tok, 20)
    assert (alone.input_ids, alone.num_cut) == ([tok.cls_token_id], 1)


def test_tokenizer_without_cls_and_sep_is_an_error(tok, fig_kg):
    class NoCls:
        cls_token_id = None
        sep_token_id = 3
        is_fast = True

    with pytest.raises(ValueError, match="has no CLS/SEP tokens"):
        fit_knowledge([], NoCls())
    with pytest.raises(ValueError, match="has no CLS/SEP tokens"):
        RoofTransformerProcessor(NoCls(), KnowledgeAssets(kg=fig_kg))


# ------------------------------------------------------------------------------------------------- bad input
def test_passage_without_a_matching_triple_gives_cls_alone(tok, fig_kg):
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg))
    features = processor("Nobody went to the city.")
    assert features["knowledge_input_ids"] == [tok.cls_token_id]
    assert features["knowledge_attention_mask"] == [1] and features["knowledge_unit_ids"] == [-1]
    assert (features["num_selected_triples"], features["num_cut_triples"]) == (0, 0)
    only_head = processor("Bill Gates went to the city.")  # has_tail: the tails are absent
    assert only_head["knowledge_input_ids"] == [tok.cls_token_id]


def test_kg_without_names_uses_ids_and_counts_them(tok, tmp_path):
    (tmp_path / "triples.tsv").write_text("Paris\tlocated_in\tFrance\nParis\tcapital_of\tFrance\n")
    kg = load_kg(f"tsv:{tmp_path / 'triples.tsv'}")
    assert kg.entity_names == kg.entity_ids
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=kg), verbalization="exp1")
    knowledge = processor.knowledge_for_texts(["Paris is in France."])
    assert knowledge.units == ["Paris is a located_in of France", "Paris is a capital_of of France"]
    assert knowledge.num_unnamed == 2
    jsonl = tmp_path / "kg.jsonl"
    jsonl.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {"h": "Q90", "r": "P1376", "t": "Q142"},
                {"type": "entity", "id": "Q90", "name": "Paris"},
                {"type": "entity", "id": "Q142", "name": "France"},
                {"type": "relation", "id": "P1376", "name": "capital"},
            ]
        )
    )
    named_kg = RoofTransformerProcessor(tok, KnowledgeAssets(kg=load_kg(f"jsonl:{jsonl}")), verbalization="exp1")
    knowledge = named_kg.knowledge_for_texts(["Paris is in France."])
    assert (knowledge.units, knowledge.num_unnamed) == (["Paris is a capital of France"], 0)


def test_processor_without_a_kg_and_bad_settings_are_errors(tok, fig_kg):
    with pytest.raises(ValueError, match="selects triples from a knowledge graph and the processor holds none"):
        RoofTransformerProcessor(tok).knowledge_for_texts(["Bill Gates"], [{"entities": []}])
    for kwargs, message in (
        ({"selection": "tail"}, "selection must be one of"),
        ({"verbalization": "exp9"}, "verbalization must be one of"),
        ({"language": "fr"}, "language must be one of"),
        ({"max_knowledge_length": -1}, "max_knowledge_length must be an int >= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg), **kwargs)


# ----------------------------------------------------------------------------------------- precomputed lists
def test_precomputed_triple_lists_round_trip_and_resolution(tok, fig_kg, tmp_path):
    path = tmp_path / "triples.json.gz"
    write_triple_lists(path, {0: [("Q5", "P112", "Q2283"), ("Bill Gates", "alumni", "Harvard")], "1": []})
    lists = read_triple_lists(path)
    assert lists == {"0": [("Q5", "P112", "Q2283"), ("Bill Gates", "alumni", "Harvard")], "1": []}
    resolved = resolve_triples(fig_kg, lists["0"])
    assert [(t.head, t.relation, t.tail, t.head_key) for t in resolved] == [
        ("Bill Gates", "founder", "Microsoft", "Q5"),
        ("Bill Gates", "alumni", "Harvard", None),
    ]
    assert resolve_triples(fig_kg, [("Q5", "P112", "Q2283")], ids="names")[0].head == "Q5"
    with pytest.raises(ValueError, match="'Bill Gates' is not a entity id"):
        resolve_triples(fig_kg, lists["0"], ids="kg")
    with pytest.raises(ValueError, match="triple 0 must be three non-empty strings"):
        resolve_triples(fig_kg, [("a", "")])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"7": [["a", "b"]]}))
    with pytest.raises(ValueError, match=r"example '7' triple 0: expected \[head, relation, tail\]"):
        read_triple_lists(bad)
    bad.write_text(json.dumps([["a", "b", "c"]]))
    with pytest.raises(ValueError, match="expected an object"):
        read_triple_lists(bad)
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps({"3": [{"h": 5, "r": "P1", "t": "x"}]}))
    assert read_triple_lists(objects) == {"3": [("5", "P1", "x")]}


def test_pair_features_from_a_triples_column(tok, fig_kg):
    data = datasets.Dataset.from_dict(
        {"sentence1": ["Nothing here.", "Elon Musk"], "sentence2": ["x", "y"], "label": [0, 1], "idx": [10, 11]}
    )
    with pytest.raises(ValueError, match="example 11 has no entry"):
        add_triples_column(data, {"10": [("Q5", "P112", "Q2283")]})
    data = add_triples_column(data, {"10": [("Q5", "P112", "Q2283"), ("Q5", "P69", "Q13371")]}, missing="empty")
    assert data["knowledge_triples"] == [[["Q5", "P112", "Q2283"], ["Q5", "P69", "Q13371"]], []]
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg))
    features = data.map(processor.prepare_pair_features, batched=True, remove_columns=data.column_names)
    first = tok.decode(features[0]["knowledge_input_ids"])
    assert first == "[CLS] bill gates is a founder of microsoft, he is a alumni of harvard [SEP]"
    assert features[1]["knowledge_input_ids"] == [tok.cls_token_id]  # the list, not the passage, decides
    assert features["num_selected_triples"] == [2, 0]


# ------------------------------------------------------------------------------------------------ processor
def test_pair_features_select_from_both_sentences(tok, fig_kg):
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg), verbalization="exp1")
    data = datasets.Dataset.from_dict(
        {
            "sentence1": ["He studied at Harvard.", "Microsoft"],
            "sentence2": ["Bill Gates is a founder.", "Paris"],
            "label": [1, 0],
            "idx": [0, 1],
        }
    )
    features = processor.prepare_pair_features(data[:], max_length=16)
    assert features["labels"] == [1, 0]
    assert tok.decode(features["input_ids"][0]) == "[CLS] he studied at harvard. [SEP] bill gates is a founder. [SEP]"
    pair = [data[0]["sentence1"], data[0]["sentence2"]]
    assert processor.knowledge_for_texts(pair).units == ["Bill Gates is a alumni of Harvard"]
    with pytest.raises(ValueError, match="2 texts but 1 annotations"):
        processor.knowledge_for_texts(pair, [None])
    assert tok.decode(features["knowledge_input_ids"][0]) == "[CLS] bill gates is a alumni of harvard [SEP]"
    assert tok.decode(features["knowledge_input_ids"][1]) == "[CLS] microsoft is a city of paris [SEP]"
    linked = processor.link_text_columns(data)
    assert {"knowledge", "knowledge_2"} <= set(linked.column_names)
    from_columns = linked.map(processor.prepare_pair_features, batched=True, remove_columns=linked.column_names)
    assert from_columns["knowledge_input_ids"] == features["knowledge_input_ids"]
    single = processor.prepare_pair_features(
        {"sentence": ["Bill Gates and Harvard"], "label": [1]}, text_columns=("sentence",)
    )
    assert single["num_selected_triples"] == [1] and "labels" in single
    bare = processor.prepare_pair_features(data[:], label_column=None, with_knowledge=False)
    assert set(bare) == {"input_ids", "token_type_ids", "attention_mask"}


def test_appended_knowledge_follows_the_truncated_text_within_the_total_budget(tok, fig_kg):
    """bert_with_knowledge: the text is cut at max_length as for Roof, the units follow it (type B) up to
    max_total_length, and what does not fit is counted."""
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg), verbalization="exp1")
    pair = {
        "sentence1": ["He studied at Harvard and more words here ."],
        "sentence2": ["Bill Gates is a founder."],
        "label": [1],
    }
    text = processor.prepare_pair_features(pair, max_length=12, with_knowledge=False)["input_ids"][0]
    units = processor.knowledge_for_texts([pair["sentence1"][0], pair["sentence2"][0]]).input_ids[1:]
    appended = processor.prepare_pair_features(pair, max_length=12, append_knowledge=True, max_total_length=12 + 5)
    assert appended["input_ids"][0] == text + units[:5]
    assert appended["token_type_ids"][0][len(text) :] == [1] * 5
    assert appended["num_appended_knowledge_tokens"] == [5]
    assert appended["num_cut_knowledge_tokens"] == [len(units) - 5]
    whole = processor.prepare_pair_features(pair, max_length=12, append_knowledge=True, max_total_length=64)
    assert whole["input_ids"][0] == text + units and whole["num_cut_knowledge_tokens"] == [0]
    assert "knowledge_input_ids" not in whole


def test_qa_windows_share_their_example_knowledge_from_the_context(tok, fig_kg, monkeypatch):
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg))
    context = "Bill Gates is a founder of Microsoft and he studied at Harvard " + "the company " * 20
    examples = {
        "id": ["q1"],
        "question": ["Who went to SpaceX ? Elon Musk"],
        "context": [context],
        "answers": [{"text": ["Bill Gates"], "answer_start": [0]}],
    }
    calls = []
    original = processor.link
    monkeypatch.setattr(processor, "link", lambda text: calls.append(text) or original(text))
    features = processor.prepare_qa_features(examples, max_length=24, doc_stride=8, training=False)
    assert calls == [context]  # linked once per example, the question is not searched
    assert len(features["input_ids"]) > 2
    assert all(ids == features["knowledge_input_ids"][0] for ids in features["knowledge_input_ids"])
    assert tok.decode(features["knowledge_input_ids"][0]) == (
        "[CLS] bill gates is a founder of microsoft, he is a alumni of harvard [SEP]"
    )
    assert features["example_id"] == ["q1"] * len(features["input_ids"])
    stats = knowledge_statistics(features, group_ids=features["example_id"])
    assert stats == {
        "examples": 1,
        "selected": 2,
        "kept": 2,
        "cut": 0,
        "unnamed": 0,
        "kept_per_example": 2.0,
        "share_with_knowledge": 1.0,
    }
    training = processor.prepare_qa_features(examples, max_length=24, doc_stride=8, training=True)
    assert training["start_positions"][0] > 0 and set(KNOWLEDGE_COLUMNS) <= set(training)
    plain = processor.prepare_qa_features(examples, max_length=24, doc_stride=8, with_knowledge=False)
    assert not set(KNOWLEDGE_COLUMNS) & set(plain)


def test_collator_pads_the_knowledge_family(tok, fig_kg):
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg))
    features = processor.prepare_pair_features(
        {"sentence1": ["Bill Gates at Harvard and Microsoft", "Paris"], "sentence2": ["x", "y"], "label": [1, 0]}
    )
    rows = [{key: features[key][i] for key in features} for i in range(2)]
    batch = KeplmDataCollator.from_processor(processor)(rows)
    length = len(rows[0]["knowledge_input_ids"])
    assert batch["knowledge_input_ids"].shape == batch["knowledge_unit_ids"].shape == (2, length)
    assert batch["knowledge_attention_mask"][1].tolist() == [1] + [0] * (length - 1)
    assert batch["knowledge_input_ids"][1, 1:].eq(tok.pad_token_id).all()
    assert batch["knowledge_unit_ids"][0].tolist() == rows[0]["knowledge_unit_ids"]
    # the collator pads unit ids by name (0 today); with the mask they read -1 on padding either way
    units = torch.where(batch["knowledge_attention_mask"].bool(), batch["knowledge_unit_ids"], -1)
    assert units[1].tolist() == [-1] * length
    assert batch["labels"].tolist() == [1, 0] and batch["num_selected_triples"].tolist() == [2, 0]


def test_settings_round_trip_through_save_and_load(tok, fig_kg, tmp_path):
    processor = RoofTransformerProcessor(
        tok,
        KnowledgeAssets(kg=fig_kg),
        selection="no_tail",
        verbalization="exp0",
        language="en",
        pronoun="she",
        zh_pronoun="她",
        max_knowledge_length=64,
        linker_kwargs={"lowercase": False},
    )
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "processor_config.json").read_text())
    assert saved["processor_class"] == "RoofTransformerProcessor"
    assert {
        k: saved[k]
        for k in (
            "selection",
            "verbalization",
            "language",
            "pronoun",
            "zh_pronoun",
            "max_knowledge_length",
            "linker_kwargs",
        )
    } == processor.processor_config()
    loaded = KeplmProcessor.from_pretrained(tmp_path)
    assert type(loaded) is RoofTransformerProcessor and loaded.processor_config() == processor.processor_config()
    assert loaded.kg.content_hash() == fig_kg.content_hash()
    text = "Bill Gates founded Microsoft."
    assert loaded(text) == processor(text)
    assert processor.without_knowledge().kg is None
    assert processor.without_knowledge().processor_config() == processor.processor_config()


def test_check_config_against_the_knowledge_encoder(tok, fig_kg):
    from types import SimpleNamespace

    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg))
    processor.check_config(SimpleNamespace(knowledge_encoder_config=SimpleNamespace(max_position_embeddings=512)))
    with pytest.raises(ValueError, match=r"max_knowledge_length=511 \+ \[CLS\] exceeds the knowledge encoder's 128"):
        processor.check_config(SimpleNamespace(knowledge_encoder_config=SimpleNamespace(max_position_embeddings=128)))
    with pytest.raises(ValueError, match="configured with max_knowledge_length=255"):
        processor.check_config(SimpleNamespace(max_knowledge_length=255))


def test_features_are_deterministic(tok, fig_kg):
    processor = RoofTransformerProcessor(tok, KnowledgeAssets(kg=fig_kg), selection="no_tail")
    passage = ["Harvard and Elon Musk and Gates and Microsoft"]
    first = processor.knowledge_for_texts(passage)
    assert first == processor.knowledge_for_texts(passage)
    assert first.units == [
        "Elon Musk is a founder of SpaceX",
        "Bill Gates is a founder of Microsoft, he is a alumni of Harvard",
        "Microsoft is a city of Paris",
    ]
