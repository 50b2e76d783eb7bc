"""DocRED-schema documents (DocRED, Re-DocRED) for document-level relation extraction.

A document is read into one row: ``text`` is the space-joined tokens of all its sentences, each entity keeps
the character spans of its mentions, its type (that of its first mention) and the gold facts ``(h, t, r)``
(entity indices, relation P-id). :class:`DocREDFeaturizer` turns rows into model features for
``datasets.map(batched=True)``: every entity is a graph node, every ordered pair of entities with a mention
inside the token window is a candidate edge, and ``edge_labels`` holds its gold relation.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence

import datasets
import numpy as np

from keplm.configuration.configuration_relation_extraction import NO_RELATION
from keplm.io_utils import read_json
from keplm.tokenization.alignment import encode_entities, word_offsets
from keplm.tokenization.schema import GraphSchema

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

DOCRED_FEATURES = datasets.Features({  # [x] = list of x (datasets 3 to 5)
    "title": datasets.Value("string"),
    "text": datasets.Value("string"),
    "entity_spans": [[[datasets.Value("int64")]]],
    "entity_names": [datasets.Value("string")],
    "entity_types": [datasets.Value("string")],
    "facts": [{"h": datasets.Value("int64"), "t": datasets.Value("int64"), "r": datasets.Value("string")}],
})

#: feature columns that count what truncation and the relation vocabulary cost (see :func:`featurization_report`)
COUNT_COLUMNS = ("num_mentions", "num_dropped_mentions", "num_entities", "num_excluded_entities",
                 "num_shadowed_entities", "num_facts", "num_lost_facts", "num_unknown_relation_facts")


def docred_document_to_row(doc: dict) -> dict:
    """One DocRED-schema document as a row (``text``, char spans per entity mention, types, facts)."""
    sentence_starts = np.cumsum([0] + [len(s) for s in doc["sents"]])
    words = [w for sentence in doc["sents"] for w in sentence]
    offsets = word_offsets(words)
    text = " ".join(words)
    spans, names, types = [], [], []
    for e, entity in enumerate(doc["vertexSet"]):
        if not entity:
            raise ValueError(f"{doc.get('title')!r}: entity {e} has no mentions")
        mention_spans = []
        for mention in entity:
            first = sentence_starts[mention["sent_id"]] + mention["pos"][0]
            last = sentence_starts[mention["sent_id"]] + mention["pos"][1] - 1
            if not 0 <= first <= last < len(words):
                raise ValueError(f"{doc.get('title')!r}: entity {e} mention {mention['pos']} is outside its sentence")
            mention_spans.append([int(offsets[first, 0]), int(offsets[last, 1])])
        spans.append(mention_spans)
        names.append(entity[0].get("name", text[mention_spans[0][0]:mention_spans[0][1]]))
        types.append(entity[0].get("type", ""))
    facts = []
    for label in doc.get("labels", []):
        h, t = int(label["h"]), int(label["t"])
        if not (0 <= h < len(spans) and 0 <= t < len(spans)):
            raise ValueError(f"{doc.get('title')!r}: fact {label} names an entity outside 0..{len(spans) - 1}")
        facts.append({"h": h, "t": t, "r": str(label["r"])})
    return {"title": doc.get("title", ""), "text": text, "entity_spans": spans, "entity_names": names,
            "entity_types": types, "facts": facts}


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
    counts = Counter(fact["r"] for row in rows for fact in _facts(row))
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    return [NO_RELATION, *ranked[:max_relations]]


def load_relation_names(pid2name_path=None) -> dict[str, str]:
    """Relation id → name: FewRel's ``pid2name.json`` (plain or ``.gz``) plus :data:`EXTRA_RELATION_NAMES`."""
    names = dict(EXTRA_RELATION_NAMES)
    if pid2name_path is not None:
        for pid, value in read_json(pid2name_path).items():
            names[pid] = value[0] if isinstance(value, list) else str(value)
    return names


def _facts(row: dict) -> list[dict]:
    facts = row["facts"]
    if isinstance(facts, dict):  # a datasets Sequence of dicts comes back as a dict of lists
        return [{"h": h, "t": t, "r": r} for h, t, r in zip(facts["h"], facts["t"], facts["r"])]
    return list(facts)


class DocREDFeaturizer:
    """Rows → relation-extraction features, for ``datasets.map(batched=True)``.

    Every ordered pair of distinct entities that keep a mention in the window is a candidate; a pair with
    several gold relations gets one candidate row per relation (so the loss is cross-entropy against each
    gold relation), a pair without any gets one row labelled no_relation (0). Entities left without a token
    (mentions truncated away, or shadowed: see :func:`encode_entities`) are excluded and their gold facts
    counted in ``num_lost_facts``; facts whose relation
    is outside ``label2id`` are counted in ``num_unknown_relation_facts`` and their pair is not a candidate
    (unless it has another, known relation). ``negative_ratio`` keeps, per document, at most that many
    no_relation pairs per positive pair (at least one), drawn with a seed fixed per document (training only).
    """

    #: what the features hold, for :meth:`KeplmDataCollator.from_processor`
    sequence_families = {"input_ids": ("input_ids", "attention_mask", "token_type_ids", "entity_token_map")}
    position_keys: dict[str, str] = {}
    graph_schema = GraphSchema(edge_values=("edge_labels",))

    def __init__(self, tokenizer, label2id: dict[str, int], max_length: int = 512,
                 negative_ratio: float | None = None, seed: int = 0, entity_types: Sequence[str] | None = None):
        if label2id.get(NO_RELATION, 0) != 0:
            raise ValueError(f"{NO_RELATION!r} must have id 0")
        if negative_ratio is not None and negative_ratio < 0:
            raise ValueError(f"negative_ratio must be >= 0, got {negative_ratio}")
        self.tokenizer = tokenizer
        self.label2id = dict(label2id)
        self.max_length = max_length
        self.negative_ratio = negative_ratio
        self.seed = seed
        self.type_ids = {name: i + 1 for i, name in enumerate(entity_types or ())}

    def __call__(self, batch: dict) -> dict:
        out: dict[str, list] = {}
        for i in range(len(batch["text"])):
            row = {key: batch[key][i] for key in batch}
            for key, value in self.featurize(row).items():
                out.setdefault(key, []).append(value)
        return out

    def featurize(self, row: dict) -> dict:
        """Features of one document row."""
        spans = row["entity_spans"]
        encoded = encode_entities(self.tokenizer, row["text"], spans, self.max_length)
        kept = encoded.pop("entity_kept")
        gold: dict[tuple[int, int], list[int]] = {}
        lost = unknown = 0
        for fact in _facts(row):
            h, t = int(fact["h"]), int(fact["t"])
            if not (kept[h] and kept[t]):
                lost += 1
            elif fact["r"] not in self.label2id:
                unknown += 1
                gold.setdefault((h, t), [])
            else:
                relation = self.label2id[fact["r"]]
                if relation not in gold.setdefault((h, t), []):
                    gold[(h, t)].append(relation)
        entities = np.nonzero(kept)[0]
        negatives = [(h, t) for h in entities for t in entities if h != t and (h, t) not in gold]
        negatives = self._sample_negatives(negatives, sum(1 for r in gold.values() if r), row.get("title", ""))
        pairs = sorted([(h, t, r) for (h, t), rels in gold.items() for r in rels] + [(h, t, 0) for h, t in negatives])
        types = row.get("entity_types") or [""] * len(spans)
        encoded.update(
            node_entity_ids=[self.type_ids.get(name, 0) for name in types],
            edge_index=[[int(h) for h, _, _ in pairs], [int(t) for _, t, _ in pairs]],
            edge_labels=[r for _, _, r in pairs],
            num_entities=len(spans),
            num_excluded_entities=int((~kept).sum()),
            num_facts=len(_facts(row)),
            num_lost_facts=lost,
            num_unknown_relation_facts=unknown,
        )
        return encoded

    def _sample_negatives(self, negatives: list, num_positive: int, title: str) -> list:
        if self.negative_ratio is None:
            return negatives
        limit = max(int(np.ceil(self.negative_ratio * num_positive)), 1)
        if len(negatives) <= limit:
            return negatives
        rng = np.random.default_rng([self.seed, zlib.crc32(title.encode("utf-8"))])
        chosen = rng.choice(len(negatives), size=limit, replace=False)
        return [negatives[i] for i in sorted(chosen)]


def featurization_report(features: datasets.Dataset, split: str = "") -> dict[str, int]:
    """Sum the count columns (truncated mentions, excluded entities, lost facts) and log them."""
    report = {key: int(sum(features[key])) for key in COUNT_COLUMNS if key in features.column_names}
    report["num_candidate_rows"] = int(sum(len(labels) for labels in features["edge_labels"]))
    logger.info(
        "%s: %d docs; %d of %d mentions beyond the token window (dropped); %d of %d entities excluded from candidate "
        "pairs (%d of them only shadowed by another entity's overlapping mention, the rest truncated away); %d of %d "
        "gold facts lost with them, %d with a relation outside the vocabulary; %d candidate rows",
        split or "features", len(features), report.get("num_dropped_mentions", 0), report.get("num_mentions", 0),
        report.get("num_excluded_entities", 0), report.get("num_entities", 0), report.get("num_shadowed_entities", 0),
        report.get("num_lost_facts", 0), report.get("num_facts", 0), report.get("num_unknown_relation_facts", 0),
        report["num_candidate_rows"],
    )
    return report


class FactMetrics:
    """``compute_metrics``: precision/recall/F1 of predicted facts against all gold facts of the documents.

    ``features`` are the documents' features in order (the Trainer must keep that order, e.g.
    ``OrderedEvalTrainer``), ``rows`` the documents; predictions are one relation id per candidate row
    (``PredictRelations`` in ``run_re.py``), rows labelled -100 are padding. Facts are ``(doc, h, t, r)``;
    duplicate rows of a pair count once, and gold facts lost to truncation count as missed.
    """

    def __init__(self, features, rows, id2label: dict[int, str], no_relation_id: int = 0):
        self.pair_keys = [(doc, int(h), int(t)) for doc, edges in enumerate(features["edge_index"])
                          for h, t in zip(*edges)]
        self.gold = {(doc, int(f["h"]), int(f["t"]), f["r"]) for doc, row in enumerate(rows) for f in _facts(row)}
        self.id2label = {int(i): label for i, label in id2label.items()}
        self.no_relation_id = no_relation_id

    def __call__(self, eval_prediction) -> dict[str, float]:
        predictions = np.asarray(eval_prediction.predictions).reshape(-1)
        labels = np.asarray(eval_prediction.label_ids).reshape(-1)
        predictions = predictions[labels != -100]
        if len(predictions) != len(self.pair_keys):
            raise ValueError(f"{len(predictions)} predicted pairs for {len(self.pair_keys)} candidate rows: "
                             "evaluation must cover the features in order")
        predicted = {(*key, self.id2label[int(r)]) for key, r in zip(self.pair_keys, predictions)
                     if int(r) != self.no_relation_id}
        return fact_scores(predicted, self.gold)


def fact_scores(predicted: set, gold: set) -> dict[str, float]:
    """Precision, recall and F1 of a set of predicted facts against the gold set."""
    correct = len(predicted & gold)
    precision = correct / len(predicted) if predicted else 0.0
    recall = correct / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "num_predicted": len(predicted),
            "num_gold": len(gold), "num_correct": correct}


__all__ = [
    "FactMetrics",
    "fact_scores",
    "DOCRED_ENTITY_TYPES",
    "DOCRED_FEATURES",
    "EXTRA_RELATION_NAMES",
    "COUNT_COLUMNS",
    "docred_document_to_row",
    "read_docred",
    "load_docred_dataset",
    "build_relation_vocab",
    "load_relation_names",
    "DocREDFeaturizer",
    "featurization_report",
]
