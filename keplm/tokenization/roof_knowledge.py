"""Roof-Transformer's knowledge input (paper §3.3, §4.3; lengths from appendix 6.2): KG triples whose head occurs
in the passage, verbalised (Exp0 / Exp1 / Exp2) into units ``[CLS] unit_1 [SEP] unit_2 [SEP] ...`` for the KB
encoder; :class:`~keplm.tokenization.processing_roof_transformer.RoofTransformerProcessor` adds that sequence family
to the spine's features.

Every step is a pure, deterministic function:

1. **Passage entities** (:func:`passage_entity_ids`): the mentions of the passage's annotations (the ``knowledge``
   column of ``link_dataset``, or :class:`~keplm.knowledge.EntityLinker` on the text: aliases, word boundaries, its
   ``lowercase`` option, acronyms; non-overlapping longest matches), ids in order of first occurrence.
2. **Selection** (:func:`select_triples`): for each present entity, in that order, the KG triples with it as HEAD in
   KG order (all of them, not the linker's capped neighbourhood); ``has_tail`` keeps those whose tail is present too,
   ``no_tail`` all (paper §4.3). Repeated triples are kept once.
3. **Names** (:func:`name_triples`): the KG's entity / relation names; a KG without names (names = ids) still
   works: the id is used and the triple counted as unnamed.
4. **Verbalisation** (:func:`verbalize`): ``exp0`` "head relation tail", ``exp1`` "head is a relation of tail"
   (Chinese "head的relation是tail"), ``exp2`` = exp1 with consecutive triples of one head merged into one unit
   ("..., he is a relation of tail"; Chinese "…，他的relation是tail"). Language per triple: explicit, or ``auto`` =
   Chinese when the head or relation name holds a CJK character. "is a" stays as the paper writes it.
5. **Budget** (:func:`fit_knowledge`): units in order, each kept if it fits the remaining budget of
   ``max_knowledge_length`` tokens after ``[CLS]`` (a unit costs its tokens + its ``[SEP]``; paper: 511), else dropped
   whole (first-fit: a later, shorter unit may still fit); an Exp2 unit that does not fit keeps its longest prefix of
   whole clauses that fits. Text is never cut inside a triple; a triple longer than the budget is cut and counted.
   ``num_selected`` / ``num_kept`` / ``num_cut`` / ``num_unnamed`` are reported per example.

A precomputed triple list can replace steps 1-2 (:func:`read_triple_lists`, like KALA's ``--knowledge
annotations``): JSON ``{"<example id>": [[h, r, t], ...], ...}`` (or ``{"h", "r", "t"}`` objects), keys the examples'
ids as strings (GLUE ``idx``, SQuAD ``id``), each part a KG id (its KG name is used) or, if it is none of the KG's ids,
the text itself; ``resolve_triples(..., ids="kg"|"names")`` forces one reading. The list's order is kept.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import datasets
from transformers import PreTrainedTokenizerBase

from keplm.io_utils import open_text, read_json
from keplm.knowledge.annotation import KnowledgeAnnotation
from keplm.knowledge.graph import KnowledgeGraph

SELECTION_MODES = ("has_tail", "no_tail")
VERBALIZATIONS = ("exp0", "exp1", "exp2")
LANGUAGES = ("auto", "en", "zh")
#: token-level keys of the knowledge sequence family
KNOWLEDGE_COLUMNS = ("knowledge_input_ids", "knowledge_attention_mask", "knowledge_unit_ids")
#: scalar per-feature counts (selected before the budget, cut by it, kept triples named by an id)
COUNT_COLUMNS = ("num_selected_triples", "num_cut_triples", "num_unnamed_triples")
#: column of precomputed triple lists (see :func:`add_triples_column`)
TRIPLES_COLUMN = "knowledge_triples"
TRIPLES_FEATURE = datasets.Sequence(datasets.Sequence(datasets.Value("string")))

_CJK_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")


# ------------------------------------------------------------------------------------------ triples and units
@dataclass(frozen=True)
class KnowledgeTriple:
    """A selected triple by name. ``head_key`` identifies the head for Exp2 merging (the KG id; default the head's
    name); ``unnamed``: some part had no name and is written as its id."""

    head: str
    relation: str
    tail: str
    head_key: str | None = None
    unnamed: bool = False

    @property
    def key(self) -> str:
        return self.head if self.head_key is None else self.head_key


@dataclass(frozen=True)
class KnowledgeUnit:
    """One unit of the knowledge sequence: its clauses (one per triple; Exp2 continuations start with the comma)."""

    clauses: tuple[str, ...]
    triples: tuple[KnowledgeTriple, ...]

    @property
    def text(self) -> str:
        return "".join(self.clauses)

    def prefix(self, k: int) -> KnowledgeUnit:
        return KnowledgeUnit(self.clauses[:k], self.triples[:k])


def detect_language(*names: str) -> str:
    """``"zh"`` when any name holds a CJK character, else ``"en"``."""
    return "zh" if any(_CJK_RE.search(name) for name in names) else "en"


def _clause(triple: KnowledgeTriple, style: str, language: str, continuation: str | None) -> str:
    h, r, t = triple.head, triple.relation, triple.tail
    if language == "zh":
        if style == "exp0":
            return f"{h}{r}{t}"
        return f"，{continuation}的{r}是{t}" if continuation is not None else f"{h}的{r}是{t}"
    if style == "exp0":
        return f"{h} {r} {t}"
    return f", {continuation} is a {r} of {t}" if continuation is not None else f"{h} is a {r} of {t}"


def iter_units(
    triples: Iterable[KnowledgeTriple],
    style: str = "exp2",
    language: str = "auto",
    pronoun: str = "he",
    zh_pronoun: str = "他",
) -> Iterator[KnowledgeUnit]:
    """Units of the verbalised triples, lazily (see :func:`verbalize`)."""
    if style not in VERBALIZATIONS:
        raise ValueError(f"verbalization must be one of {VERBALIZATIONS}, got {style!r}")
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    clauses: list[str] = []
    group: list[KnowledgeTriple] = []
    for triple in triples:
        lang = detect_language(triple.head, triple.relation) if language == "auto" else language
        if style == "exp2" and group and group[-1].key == triple.key:
            clauses.append(_clause(triple, style, lang, zh_pronoun if lang == "zh" else pronoun))
            group.append(triple)
            continue
        if group:
            yield KnowledgeUnit(tuple(clauses), tuple(group))
        clauses, group = [_clause(triple, style, lang, None)], [triple]
    if group:
        yield KnowledgeUnit(tuple(clauses), tuple(group))


def verbalize(
    triples: Iterable[KnowledgeTriple],
    style: str = "exp2",
    language: str = "auto",
    pronoun: str = "he",
    zh_pronoun: str = "他",
) -> list[KnowledgeUnit]:
    """Exp0 / Exp1 / Exp2 units of ``triples`` in order (paper §3.3, Figure 2); Exp2 merges consecutive triples with
    the same head into the previous unit with ``pronoun`` (English) or ``zh_pronoun`` (Chinese)."""
    return list(iter_units(triples, style, language, pronoun, zh_pronoun))


# ------------------------------------------------------------------------------------------------- selection
def passage_entity_ids(annotations: Iterable[KnowledgeAnnotation | None]) -> list[str]:
    """Distinct entity ids mentioned in the passage, by first occurrence: annotations in the given order (a
    sentence pair: the first sentence, then the second), mentions by character offset; id-less mentions skipped."""
    ids: dict[str, None] = {}
    for annotation in annotations:
        if annotation is None:
            continue
        for mention in sorted(annotation.entities, key=lambda m: (m.start, m.end)):
            if mention.id is not None:
                ids.setdefault(str(mention.id), None)
    return list(ids)


def select_triples(kg: KnowledgeGraph, entity_ids: Sequence[str], mode: str = "has_tail") -> list[tuple[int, int, int]]:
    """KG index triples ``(h, r, t)`` whose head is among ``entity_ids`` (``has_tail``: and whose tail is too),
    grouped by head in the order of ``entity_ids``, each head's triples in KG order; duplicates kept once. Ids the KG
    does not know are skipped (paper §3.3 / §4.3)."""
    if mode not in SELECTION_MODES:
        raise ValueError(f"selection must be one of {SELECTION_MODES}, got {mode!r}")
    present = [kg.entity_index(e) for e in dict.fromkeys(entity_ids) if kg.has_entity(e)]
    present_set = set(present)
    selected: dict[tuple[int, int, int], None] = {}
    for head in present:
        for h, r, t in kg.neighbors(head).tolist():
            if h == head and (mode == "no_tail" or t in present_set):
                selected.setdefault((h, r, t), None)
    return list(selected)


def name_triples(kg: KnowledgeGraph, rows: Iterable[tuple[int, int, int]]) -> list[KnowledgeTriple]:
    """Named triples of KG index triples; a part whose name is its id (a KG without names) marks it unnamed."""
    ents, rels, names, rel_names = kg.entity_ids, kg.relation_ids, kg.entity_names, kg.relation_names
    out = []
    for h, r, t in rows:
        unnamed = names[h] == ents[h] or rel_names[r] == rels[r] or names[t] == ents[t]
        out.append(KnowledgeTriple(names[h], rel_names[r], names[t], head_key=ents[h], unnamed=unnamed))
    return out


def resolve_triples(
    kg: KnowledgeGraph | None, triples: Iterable[Sequence[str]], ids: str = "auto"
) -> list[KnowledgeTriple]:
    """Named triples of a precomputed list: ``ids="auto"`` reads a part as a KG id when the KG has it (entity ids for
    head / tail, relation ids for the relation), else as a name; ``"kg"`` requires KG ids; ``"names"`` takes text."""
    if ids not in ("auto", "kg", "names"):
        raise ValueError(f"ids must be 'auto', 'kg' or 'names', got {ids!r}")
    if ids == "kg" and kg is None:
        raise ValueError("ids='kg' needs a knowledge graph")
    out = []
    for i, triple in enumerate(triples):
        if len(triple) != 3 or not all(isinstance(x, str) and x for x in triple):
            raise ValueError(f"triple {i} must be three non-empty strings (head, relation, tail), got {triple!r}")
        parts, unnamed, head_key = [], False, None
        for position, value in enumerate(triple):
            known = (
                kg is not None
                and ids != "names"
                and (kg.has_relation(value) if position == 1 else kg.has_entity(value))
            )
            if ids == "kg" and not known:
                what = "relation" if position == 1 else "entity"
                raise ValueError(f"triple {i}: {value!r} is not a {what} id of the knowledge graph")
            if known:
                index = kg.relation_index(value) if position == 1 else kg.entity_index(value)
                name = (kg.relation_names if position == 1 else kg.entity_names)[index]
                unnamed = unnamed or name == value
                head_key = value if position == 0 else head_key
                value = name
            parts.append(value)
        out.append(KnowledgeTriple(*parts, head_key=head_key, unnamed=unnamed))
    return out


# ---------------------------------------------------------------------------------------------------- budget
@dataclass
class KnowledgeInput:
    """The knowledge sequence of one example and its counts."""

    input_ids: list[int]
    unit_ids: list[int]
    units: list[str] = field(default_factory=list)
    num_selected: int = 0
    num_kept: int = 0
    num_unnamed: int = 0

    @property
    def num_cut(self) -> int:
        return self.num_selected - self.num_kept

    def features(self) -> dict:
        """The processor's feature columns (:data:`KNOWLEDGE_COLUMNS` and :data:`COUNT_COLUMNS`)."""
        return {
            "knowledge_input_ids": list(self.input_ids),
            "knowledge_attention_mask": [1] * len(self.input_ids),
            "knowledge_unit_ids": list(self.unit_ids),
            "num_selected_triples": self.num_selected,
            "num_cut_triples": self.num_cut,
            "num_unnamed_triples": self.num_unnamed,
        }


def special_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, int]:
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls is None or sep is None:
        raise ValueError(
            f"{type(tokenizer).__name__} has no CLS/SEP tokens: Roof-Transformer's knowledge sequence is "
            "[CLS] unit [SEP] unit [SEP] ..."
        )
    return cls, sep


def fit_knowledge(
    units: Iterable[KnowledgeUnit],
    tokenizer: PreTrainedTokenizerBase,
    max_knowledge_length: int = 511,
    num_selected: int | None = None,
    chunk_size: int = 64,
) -> KnowledgeInput:
    """``[CLS] unit [SEP] ...`` of the units that fit ``max_knowledge_length`` tokens after ``[CLS]`` (first fit in
    order, whole units or, for Exp2, whole-clause prefixes; see the module docstring). ``num_selected`` defaults to
    the number of triples in ``units`` (pass it when ``units`` is a lazy iterator that may be left unfinished)."""
    if max_knowledge_length < 0:
        raise ValueError(f"max_knowledge_length must be >= 0, got {max_knowledge_length}")
    cls, sep = special_ids(tokenizer)
    result = KnowledgeInput(input_ids=[cls], unit_ids=[-1])
    remaining, seen = max_knowledge_length, 0

    def encode(texts: list[str]) -> list[list[int]]:
        return tokenizer(texts, add_special_tokens=False)["input_ids"]

    iterator = iter(units)
    while remaining >= 2:  # the shortest unit is one token and its [SEP]
        chunk = [unit for _, unit in zip(range(chunk_size), iterator)]
        if not chunk:
            break
        seen += sum(len(unit.triples) for unit in chunk)
        for unit, ids in zip(chunk, encode([unit.text for unit in chunk])):
            if len(ids) + 1 > remaining and len(unit.clauses) > 1:
                low, high, best = 1, len(unit.clauses) - 1, None  # longest whole-clause prefix that fits
                while low <= high:
                    middle = (low + high) // 2
                    prefix_ids = encode([unit.prefix(middle).text])[0]
                    if len(prefix_ids) + 1 <= remaining:
                        best, low = (middle, prefix_ids), middle + 1
                    else:
                        high = middle - 1
                if best is not None:
                    unit, ids = unit.prefix(best[0]), best[1]
            if not ids or len(ids) + 1 > remaining:
                continue
            index = len(result.units)
            result.input_ids.extend([*ids, sep])
            result.unit_ids.extend([index] * len(ids) + [-1])
            result.units.append(unit.text)
            result.num_kept += len(unit.triples)
            result.num_unnamed += sum(triple.unnamed for triple in unit.triples)
            remaining -= len(ids) + 1
    if num_selected is None:
        seen += sum(len(unit.triples) for unit in iterator)
    result.num_selected = seen if num_selected is None else num_selected
    return result


# ----------------------------------------------------------------------------------------- precomputed lists
def read_triple_lists(path: str | os.PathLike) -> dict[str, list[tuple[str, str, str]]]:
    """``{example id: [(h, r, t), ...]}`` from a JSON file (plain or .gz; format in the module docstring)."""
    payload = read_json(os.fspath(path))
    if not isinstance(payload, dict):
        raise ValueError(f"{path}: expected an object {{example id: [[head, relation, tail], ...]}}")
    out = {}
    for key, triples in payload.items():
        if not isinstance(triples, list):
            raise ValueError(f"{path}: example {key!r}: expected a list of triples, got {type(triples).__name__}")
        rows = []
        for i, triple in enumerate(triples):
            if isinstance(triple, dict):
                triple = [triple.get(k) for k in ("h", "r", "t")]
            if (
                not isinstance(triple, list)
                or len(triple) != 3
                or not all(isinstance(x, (str, int)) and not isinstance(x, bool) and str(x) for x in triple)
            ):
                raise ValueError(
                    f"{path}: example {key!r} triple {i}: expected [head, relation, tail] strings, got {triple!r}"
                )
            rows.append(tuple(str(x) for x in triple))
        out[str(key)] = rows
    return out


def write_triple_lists(path: str | os.PathLike, triple_lists: dict) -> None:
    """Write ``{example id: [(h, r, t), ...]}`` in the format :func:`read_triple_lists` reads."""
    payload = {str(key): [list(triple) for triple in triples] for key, triples in triple_lists.items()}
    with open_text(os.fspath(path), "wt") as handle:
        json.dump(payload, handle, ensure_ascii=False, indent=1)


def add_triples_column(
    dataset, triple_lists: dict, id_column: str = "idx", column: str = TRIPLES_COLUMN, missing: str = "error"
):
    """``dataset`` with a column of each example's precomputed triples, looked up by ``str(example[id_column])``;
    an example without an entry is a ValueError (``missing="error"``) or gets no triples (``"empty"``)."""
    if missing not in ("error", "empty"):
        raise ValueError(f"missing must be 'error' or 'empty', got {missing!r}")
    if id_column not in dataset.column_names:
        raise ValueError(f"no id column {id_column!r} in {dataset.column_names}")

    def lookup(batch):
        out = []
        for key in batch[id_column]:
            if str(key) not in triple_lists and missing == "error":
                raise ValueError(f"example {key!r} has no entry in the triple lists ({len(triple_lists)} examples)")
            out.append([list(t) for t in triple_lists.get(str(key), [])])
        return {column: out}

    features = dataset.features.copy()
    features[column] = TRIPLES_FEATURE
    return dataset.map(lookup, batched=True, features=features, desc="Adding triple lists")


def knowledge_statistics(columns, group_ids: Sequence | None = None) -> dict:
    """Totals of the count columns of processed features (a Dataset or a column dict): examples, selected / kept /
    cut / unnamed triples, mean kept per example, share of examples with any knowledge. QA windows repeat their
    example's counts: pass ``group_ids`` (one example id per feature) to count each example once."""
    selected, cut, unnamed = (list(columns[name]) for name in COUNT_COLUMNS)
    rows = range(len(selected))
    if group_ids is not None:
        first = {}
        for row, group in enumerate(group_ids):
            first.setdefault(group, row)
        rows = sorted(first.values())
    kept = [selected[i] - cut[i] for i in rows]
    examples = len(kept)
    return {
        "examples": examples,
        "selected": sum(selected[i] for i in rows),
        "kept": sum(kept),
        "cut": sum(cut[i] for i in rows),
        "unnamed": sum(unnamed[i] for i in rows),
        "kept_per_example": sum(kept) / examples if examples else 0.0,
        "share_with_knowledge": sum(k > 0 for k in kept) / examples if examples else 0.0,
    }


__all__ = [
    "KnowledgeTriple",
    "KnowledgeUnit",
    "KnowledgeInput",
    "KNOWLEDGE_COLUMNS",
    "COUNT_COLUMNS",
    "TRIPLES_COLUMN",
    "SELECTION_MODES",
    "VERBALIZATIONS",
    "LANGUAGES",
    "detect_language",
    "verbalize",
    "iter_units",
    "passage_entity_ids",
    "select_triples",
    "name_triples",
    "resolve_triples",
    "fit_knowledge",
    "read_triple_lists",
    "write_triple_lists",
    "add_triples_column",
    "knowledge_statistics",
]
