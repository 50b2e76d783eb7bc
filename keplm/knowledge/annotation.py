"""Per-text knowledge annotations (entity mentions + triplets) and the KALA JSON format.

KALA JSON (as released with KALA, Kang et al. 2022, ``{fold}_{threshold}.json``) is one object keyed
by example/context id::

    {"0": {"entities": [{"text": "EU", "start": 0, "end": 2, "id": 458}, ...],
           "triplets": [{"h": 458, "r": "P463", "t": 183}, ...]},
     ...}

``start``/``end`` are character offsets into the context (for NER: ``" ".join(tokens)``), end
exclusive. Entity ids are Wikidata ids; the original release stores them as ints (the numeric part of
``Q<n>``) - they are read as strings (``458`` -> ``"458"``), never re-prefixed. ``r`` is a Wikidata
property id. A value that is a plain list is read as entities without triplets (KALA's
``{fold}_entity.json``). Files may be gzip-compressed (``.gz``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace

import datasets

from keplm.io_utils import open_text, read_json

__all__ = [
    "EntityMention",
    "Triplet",
    "KnowledgeAnnotation",
    "KNOWLEDGE_FEATURE",
    "read_kala_annotations",
    "write_kala_annotations",
    "inside_word",
    "word_span",
]


#: ``datasets`` feature of an annotation column (``KnowledgeAnnotation.to_dict`` rows); declared so that a batch
#: without any mention or with only id-less mentions does not fix the column's type to nulls
KNOWLEDGE_FEATURE = {
    "entities": [
        {
            "text": datasets.Value("string"),
            "start": datasets.Value("int64"),
            "end": datasets.Value("int64"),
            "id": datasets.Value("string"),
        }
    ],
    "triplets": [{"h": datasets.Value("string"), "r": datasets.Value("string"), "t": datasets.Value("string")}],
}


#: scripts written without spaces between words (Thai, Lao, Myanmar, Khmer, kana, CJK ideographs): a mention next to
#: one of their characters needs no word boundary there
_UNSPACED_RE = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]"
)


def _joined(text: str, outside: int, inside: int) -> bool:
    """Whether ``text[outside]`` continues the word of its neighbour ``text[inside]``: alphanumeric, and neither in a
    script written without spaces."""
    return text[outside].isalnum() and not (_UNSPACED_RE.match(text[outside]) or _UNSPACED_RE.match(text[inside]))


def inside_word(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` continues a word on either side: an alphanumeric neighbour, unless the neighbour or
    the mention's own edge character belongs to a script written without spaces (CJK, Thai, ...). The linker's
    word-boundary rule."""
    return (start > 0 and _joined(text, start - 1, start)) or (end < len(text) and _joined(text, end, end - 1))


def word_span(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` widened to the boundaries of the words it cuts through (by :func:`inside_word`'s rule)."""
    while start > 0 and _joined(text, start - 1, start):
        start -= 1
    while end < len(text) and _joined(text, end, end - 1):
        end += 1
    return start, end


def _id_str(value, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{what} must be a string or int id, got {value!r}")
    value = str(value)
    if not value:
        raise ValueError(f"{what} must be a non-empty id")
    return value


def _int(value, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an int, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an int, got {value!r}") from None


@dataclass
class EntityMention:
    """A character span ``text[start:end]`` linked to entity ``id`` (None = unknown entity)."""

    text: str
    start: int
    end: int
    id: str | None = None


@dataclass
class Triplet:
    """A (head id, relation id, tail id) fact."""

    h: str
    r: str
    t: str


@dataclass
class KnowledgeAnnotation:
    """Entity mentions in a text plus the triplets (local knowledge graph) attached to it."""

    entities: list[EntityMention] = field(default_factory=list)
    triplets: list[Triplet] = field(default_factory=list)

    def validate(self, text: str) -> KnowledgeAnnotation:
        """Check spans against ``text`` and ids; returns self, raises ValueError naming the problem.
        Triplet ends need not be mentioned (neighbour nodes are allowed)."""
        n = len(text)
        for i, m in enumerate(self.entities):
            if not isinstance(m.start, int) or not isinstance(m.end, int) or isinstance(m.start, bool):
                raise ValueError(f"mention {i} ({m.text!r}): start/end must be ints, got {m.start!r}, {m.end!r}")
            if not 0 <= m.start < m.end <= n:
                raise ValueError(
                    f"mention {i} ({m.text!r}): span [{m.start}, {m.end}) out of range for text of length {n}"
                )
            if text[m.start : m.end] != m.text:
                raise ValueError(
                    f"mention {i}: text[{m.start}:{m.end}] is {text[m.start : m.end]!r} but mention.text is {m.text!r}"
                )
            if m.id is not None and (not isinstance(m.id, str) or not m.id):
                raise ValueError(f"mention {i} ({m.text!r}): id must be a non-empty string or None, got {m.id!r}")
        for i, tr in enumerate(self.triplets):
            for key in "hrt":
                val = getattr(tr, key)
                if not isinstance(val, str) or not val:
                    raise ValueError(f"triplet {i}: {key} must be a non-empty string id, got {val!r}")
        return self

    def shifted(self, by: int) -> KnowledgeAnnotation:
        """A copy whose mentions start ``by`` characters later (negative: earlier), e.g. for a text with leading
        characters cut."""
        moved = [EntityMention(m.text, m.start + by, m.end + by, m.id) for m in self.entities]
        return KnowledgeAnnotation(moved, list(self.triplets))

    def widened_to_words(self, text: str) -> tuple[KnowledgeAnnotation, int]:
        """``(annotation, count)``: a copy whose mentions that cut through a word of ``text`` ("unknown" of
        "unknownia") cover the whole word (:func:`word_span`), and how many were widened; ``(self, 0)`` when none
        is. Call after :meth:`validate`."""
        mentions = []
        for mention in self.entities:
            start, end = word_span(text, mention.start, mention.end)
            mentions.append(
                mention
                if (start, end) == (mention.start, mention.end)
                else replace(mention, text=text[start:end], start=start, end=end)
            )
        widened = sum(new is not old for new, old in zip(mentions, self.entities))
        return (KnowledgeAnnotation(mentions, list(self.triplets)), widened) if widened else (self, 0)

    def to_dict(self) -> dict:
        return {
            "entities": [{"text": m.text, "start": m.start, "end": m.end, "id": m.id} for m in self.entities],
            "triplets": [{"h": t.h, "r": t.r, "t": t.t} for t in self.triplets],
        }

    @classmethod
    def from_dict(cls, d) -> KnowledgeAnnotation:
        """Inverse of :meth:`to_dict`; int ids become strings, a missing ``triplets`` means none."""
        if isinstance(d, list):
            d = {"entities": d}
        if not isinstance(d, dict):
            raise ValueError(f"annotation must be a dict with 'entities'/'triplets', got {type(d).__name__}")
        entities = []
        for i, e in enumerate(d.get("entities") or []):
            missing = [k for k in ("text", "start", "end") if k not in e]
            if missing:
                raise ValueError(f"entity {i} is missing {missing}: {e!r}")
            eid = e.get("id")
            entities.append(
                EntityMention(
                    text=str(e["text"]),
                    start=_int(e["start"], f"entity {i} start"),
                    end=_int(e["end"], f"entity {i} end"),
                    id=None if eid is None or eid == "" else _id_str(eid, f"entity {i} id"),
                )
            )
        triplets = []
        for i, t in enumerate(d.get("triplets") or []):
            missing = [k for k in "hrt" if k not in t]
            if missing:
                raise ValueError(f"triplet {i} is missing {missing}: {t!r}")
            triplets.append(Triplet(*(_id_str(t[key], f"triplet {i} {key}") for key in "hrt")))
        return cls(entities=entities, triplets=triplets)

    def entity_ids(self) -> list[str]:
        """Unique ids of mentions, then of triplet heads/tails, in first-seen order."""
        mentioned = [m.id for m in self.entities if m.id is not None]
        return list(dict.fromkeys([*mentioned, *(end for t in self.triplets for end in (t.h, t.t))]))


def read_kala_annotations(path) -> dict[str, KnowledgeAnnotation]:
    """Read a KALA JSON file (see module docstring) into ``{context_id: KnowledgeAnnotation}``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"KALA annotation file not found: {path}")
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object keyed by context id, got {type(data).__name__}")
    out = {}
    for key, value in data.items():
        try:
            out[str(key)] = KnowledgeAnnotation.from_dict(value)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: context {key!r}: {e}") from None
    return out


def write_kala_annotations(annotations: dict[str, KnowledgeAnnotation], path) -> None:
    """Write ``{context_id: KnowledgeAnnotation}`` as KALA JSON (gzip if ``path`` ends with .gz)."""
    path = os.fspath(path)
    data = {str(k): (a.to_dict() if isinstance(a, KnowledgeAnnotation) else a) for k, a in annotations.items()}
    with open_text(path, "wt") as f:
        json.dump(data, f, ensure_ascii=False)
