"""Property tests (hypothesis) for the KG readers and the linker: a KG file written with a byte-order mark, CRLF line
ends, blank or whitespace-only lines, repeated lines or gzip reads as the clean file does, or is refused with a
ValueError that names the file; a name links in its composed (NFC) and decomposed (NFD) Unicode forms alike.

Bounded: few examples each (CI runs them in seconds); a failure prints the smallest KG that breaks the property."""

from __future__ import annotations

import gzip
import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keplm.knowledge import EntityLinker, load_kg
from keplm.knowledge.loaders import load_jsonl_kg, load_tsv_kg

BOUNDED = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
#: letters a KG name may hold: ASCII, Latin with diacritics (which NFC and NFD write differently), CJK, a space
NAME_CHARS = st.sampled_from(list("abcdefghijklmnopqrstuvwxyz") + list("éüñçøåÉÜ") + list("東京大阪") + [" "])


@st.composite
def kgs(draw):
    """A small KG: ids ``Q0..``, ``P0..``, distinct facts, a name per entity (distinct, at least two letters)."""
    n_entities = draw(st.integers(2, 6))
    names = draw(
        st.lists(
            st.text(NAME_CHARS, min_size=2, max_size=10)
            .map(lambda s: " ".join(s.split()))
            .filter(lambda s: len(s) > 1),
            min_size=n_entities,
            max_size=n_entities,
            unique_by=lambda s: s.lower(),
        )
    )
    entities = [f"Q{i}" for i in range(n_entities)]
    relations = [f"P{i}" for i in range(draw(st.integers(1, 3)))]
    facts = draw(
        st.lists(
            st.tuples(st.sampled_from(entities), st.sampled_from(relations), st.sampled_from(entities)),
            min_size=1,
            max_size=8,
            unique=True,
        )
    )
    used = sorted({e for h, _, t in facts for e in (h, t)})
    return facts, {e: unicodedata.normalize("NFC", names[int(e[1:])]) for e in used}


#: how a file may be written: byte-order mark, line ends, blank lines, repeated lines, gzip
layouts = st.fixed_dictionaries(
    {
        "bom": st.booleans(),
        "crlf": st.booleans(),
        "blank": st.sampled_from(["", "\n", "   \n", "\t\n"]),
        "repeat": st.booleans(),
        "gzip": st.booleans(),
    }
)


#: the clean file: UTF-8 without a mark, LF, no blank or repeated line, not compressed
CLEAN = {"bom": False, "crlf": False, "blank": "", "repeat": False, "gzip": False}


def _write(path: Path, lines: list[str], layout: dict) -> Path:
    if layout["repeat"]:
        lines = lines + lines[:1]  # a repeated fact or name: merged and counted, not a second one
    end = "\r\n" if layout["crlf"] else "\n"
    text = "".join(line + end + layout["blank"] for line in lines)
    data = ("\ufeff" if layout["bom"] else "") + text
    if layout["gzip"]:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data.encode("utf-8")))
    else:
        path.write_bytes(data.encode("utf-8"))
    return path


def _graph(kg) -> tuple:
    """What a KG says: its facts by id, names, relations."""
    return sorted(kg.fact_ids()), dict(zip(kg.entity_ids, kg.entity_names)), sorted(kg.relation_ids)


@BOUNDED
@given(kg=kgs(), layout=layouts)
def test_a_tsv_kg_reads_as_its_clean_file_whatever_the_layout(tmp_path_factory, kg, layout):
    facts, names = kg
    folder = tmp_path_factory.mktemp("tsv")
    clean = load_tsv_kg(
        _write(folder / "clean.tsv", ["\t".join(f) for f in facts], CLEAN),
        _write(
            folder / "clean_names.tsv",
            [f"{e}\t{n}" for e, n in names.items()],
            CLEAN,
        ),
    )
    triples = _write(folder / "triples.tsv", ["\t".join(f) for f in facts], layout)
    names_file = _write(folder / "names.tsv", [f"{e}\t{n}" for e, n in names.items()], layout)
    loaded = load_tsv_kg(triples, names_file)
    assert _graph(loaded) == _graph(clean) and loaded.content_hash() == clean.content_hash()
    assert _graph(load_kg(f"tsv:{triples}")) == (sorted(facts), {e: e for e in names}, sorted({r for _, r, _ in facts}))


@BOUNDED
@given(kg=kgs(), layout=layouts)
def test_a_jsonl_kg_reads_as_its_clean_file_whatever_the_layout(tmp_path_factory, kg, layout):
    facts, names = kg
    folder = tmp_path_factory.mktemp("jsonl")
    lines = [json.dumps({"type": "entity", "id": e, "name": n}, ensure_ascii=False) for e, n in names.items()]
    lines += [json.dumps(dict(zip("hrt", f))) for f in facts]
    clean = load_jsonl_kg(_write(folder / "clean.jsonl", lines, CLEAN))
    loaded = load_jsonl_kg(_write(folder / "kg.jsonl", lines, layout))
    assert _graph(loaded) == _graph(clean) and loaded.content_hash() == clean.content_hash()
    assert _graph(loaded) == (sorted(facts), names, sorted({r for _, r, _ in facts}))


@BOUNDED
@given(kg=kgs(), position=st.integers(0, 2), bad=st.sampled_from(["a\tb", "a\tb\tc\td", "a\t\tc", "\x00\t"]))
def test_a_malformed_tsv_line_is_a_value_error_naming_file_and_line(tmp_path_factory, kg, position, bad):
    facts, _ = kg
    lines = ["\t".join(f) for f in facts]
    lines.insert(min(position, len(lines)), bad)
    path = _write(
        tmp_path_factory.mktemp("bad") / "triples.tsv",
        lines,
        CLEAN,
    )
    line = min(position, len(facts)) + 1
    if bad == "\x00\t":
        with pytest.raises(ValueError, match=rf"{path.name}:{line}: (expected 3|empty field)"):
            load_tsv_kg(path)
        return
    with pytest.raises(ValueError, match=rf"{path.name}:{line}: (expected 3 tab-separated fields|empty field)"):
        load_tsv_kg(path)


@BOUNDED
@given(kg=kgs(), form=st.sampled_from(["NFC", "NFD"]), text_form=st.sampled_from(["NFC", "NFD"]))
def test_a_name_links_in_either_unicode_form(kg, form, text_form):
    """The KG's name written composed or decomposed, the text too: the mention links to the same entity, at the
    offsets of the text as given."""
    from keplm.knowledge import KnowledgeGraph

    facts, names = kg
    graph = KnowledgeGraph.from_triples(
        facts, entity_names={e: unicodedata.normalize(form, n) for e, n in names.items()}
    )
    linker = EntityLinker(graph, min_alias_length=2, stopwords=set())  # every generated name is a name here
    entity, name = max(names.items(), key=lambda item: len(item[1]))  # the longest name: no other name inside it
    if any(other != name and name.lower() in other.lower() for other in names.values()):
        return
    text = f"we saw {unicodedata.normalize(text_form, name)} today"
    found = [
        m
        for m in linker.link(text).entities
        if text[m.start : m.end].lower() == unicodedata.normalize(text_form, name).lower()
    ]
    assert found and found[0].id == entity
