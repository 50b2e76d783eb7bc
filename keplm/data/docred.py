"""DocRED-schema documents (DocRED, Re-DocRED) for document-level relation extraction.

A document is read into one row: ``text`` is the space-joined tokens of all its sentences, each entity keeps
the character spans of its mentions, its type (that of its first mention) and the gold facts ``(h, t, r)``
(entity indices, relation P-id). :class:`~keplm.tokenization.RelationExtractionProcessor` turns rows into model
features; :func:`featurization_report` sums what truncation and the relation vocabulary cost.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

import datasets
import numpy as np

from keplm.configuration.configuration_relation_extraction import NO_RELATION
from keplm.io_utils import read_json
from keplm.tokenization.alignment import word_offsets
from keplm.tokenization.processing_relation_extraction import COUNT_COLUMNS, document_facts

logger = logging.getLogger(__name__)

DOCRED_ENTITY_TYPES = ("PER", "ORG", "LOC", "TIME", "NUM", "MISC")

#: DocRED relations without a name in FewRel's pid2name.json (names from Wikidata, see docred/SOURCE.md).
EXTRA_RELATION_NAMES = {
    "P569": "date of birth",
    "P570": "date of death",
    "P571": "inception",
    "P576": "dissolved, abolished or demolished",
    "P577": "publication date",
    "P580": "start time",
    "P582": "end time",
    "P585": "point in time",
    "P1198": "unemployment rate",
}

DOCRED_FEATURES = datasets.Features(
    {  # [x] = list of x (datasets 3 to 5)
        "title": datasets.Value("string"),
        "text": datasets.Value("string"),
        "entity_spans": [[[datasets.Value("int64")]]],
        "entity_names": [datasets.Value("string")],
        "entity_types": [datasets.Value("string")],
        "facts": [{"h": datasets.Value("int64"), "t": datasets.Value("int64"), "r": datasets.Value("string")}],
    }
)


def docred_document_to_row(doc: dict) -> dict:
    """One DocRED-schema document as a row (``text``, char spans per entity mention, types, facts)."""
    sents, title = doc["sents"], doc.get("title")
    sentence_starts = np.cumsum([0] + [len(s) for s in sents])
    words = [w for sentence in sents for w in sentence]
    offsets = word_offsets(words)
    text = " ".join(words)
    spans, names, types = [], [], []
    for e, entity in enumerate(doc["vertexSet"]):
        if not entity:
            raise ValueError(f"{title!r}: entity {e} has no mentions")
        mention_spans = []
        for mention in entity:
            sent_id, (start, end) = mention["sent_id"], mention["pos"]
            length = len(sents[sent_id]) if 0 <= sent_id < len(sents) else None
            if length is None or not 0 <= start < end <= length:
                raise ValueError(
                    f"{title!r}: entity {e} mention pos {mention['pos']} is outside its sentence "
                    f"(sent_id {sent_id} of {len(sents)} sentences, {length} words)"
                )
            first, last = sentence_starts[sent_id] + start, sentence_starts[sent_id] + end - 1
            mention_spans.append([int(offsets[first, 0]), int(offsets[last, 1])])
        spans.append(mention_spans)
        names.append(entity[0].get("name", text[mention_spans[0][0] : mention_spans[0][1]]))
        types.append(entity[0].get("type", ""))
    facts = []
    for label in doc.get("labels", []):
        h, t = int(label["h"]), int(label["t"])
        if not (0 <= h < len(spans) and 0 <= t < len(spans)):
            raise ValueError(f"{title!r}: fact {label} names an entity outside 0..{len(spans) - 1}")
        facts.append({"h": h, "t": t, "r": str(label["r"])})
    return {
        "title": doc.get("title", ""),
        "text": text,
        "entity_spans": spans,
        "entity_names": names,
        "entity_types": types,
        "facts": facts,
    }


def read_docred(path) -> list[dict]:
    """Read a DocRED-schema JSON file (plain or ``.gz``) into rows (see :func:`docred_document_to_row`)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of documents, got {type(data).__name__}")
    return [docred_document_to_row(doc) for doc in data]


def load_docred_dataset(path, max_samples: int | None = None) -> datasets.Dataset:
    """A DocRED-schema file as a ``datasets.Dataset`` of rows (the first ``max_samples`` documents)."""
    rows = read_docred(path)
    return datasets.Dataset.from_list(rows[:max_samples] if max_samples is not None else rows, features=DOCRED_FEATURES)


def build_relation_vocab(rows: Iterable[dict], max_relations: int = 100) -> list[str]:
    """``[no_relation, r_1, ..., r_k]``: the ``max_relations`` most frequent relations (ties: by id)."""
    counts = Counter(fact["r"] for row in rows for fact in document_facts(row))
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    return [NO_RELATION, *ranked[:max_relations]]


def load_relation_names(pid2name_path=None) -> dict[str, str]:
    """Relation id → name: FewRel's ``pid2name.json`` (plain or ``.gz``) plus :data:`EXTRA_RELATION_NAMES`."""
    names = dict(EXTRA_RELATION_NAMES)
    if pid2name_path is not None:
        for pid, value in read_json(pid2name_path).items():
            names[pid] = value[0] if isinstance(value, list) else str(value)
    return names


def featurization_report(features: datasets.Dataset, split: str = "") -> dict[str, int]:
    """Sum the count columns (truncated mentions, excluded entities, lost facts) and log them."""
    report = {key: int(sum(features[key])) for key in COUNT_COLUMNS if key in features.column_names}
    report["num_candidate_rows"] = int(sum(len(labels) for labels in features["edge_labels"]))
    logger.info(
        "%s: %d docs; %d of %d mentions beyond the token window (dropped); %d of %d entities excluded from candidate "
        "pairs (%d of them only shadowed by another entity's overlapping mention, the rest truncated away); %d of %d "
        "gold facts lost with them, %d with a relation outside the vocabulary; %d candidate rows",
        split or "features",
        len(features),
        report.get("num_dropped_mentions", 0),
        report.get("num_mentions", 0),
        report.get("num_excluded_entities", 0),
        report.get("num_entities", 0),
        report.get("num_shadowed_entities", 0),
        report.get("num_lost_facts", 0),
        report.get("num_facts", 0),
        report.get("num_unknown_relation_facts", 0),
        report["num_candidate_rows"],
    )
    return report


__all__ = [
    "DOCRED_ENTITY_TYPES",
    "DOCRED_FEATURES",
    "EXTRA_RELATION_NAMES",
    "docred_document_to_row",
    "read_docred",
    "load_docred_dataset",
    "build_relation_vocab",
    "load_relation_names",
    "featurization_report",
]
