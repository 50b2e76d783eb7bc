"""Will a KG help this task? What linking a dataset against a KG gives, measured before any training.

:func:`coverage_report` reads one linking pass per split (the run scripts' ``knowledge`` column) and, for NER, the
gold entity spans, and reports what the learning curve (docs/learning_curve.md) found to matter: how many gold
entities are linked and how many links land on one, how many facts reach a linked mention and through which
relations, how many test entities are unseen in training and how many of those the KG covers with facts, and how
many linked mentions go through an ambiguous alias.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .annotation import KnowledgeAnnotation
from .construction import linking_report

#: relations listed per split (most frequent among the facts that reach a mention)
TOP_RELATIONS = 15


def facts_by_entity(annotation: KnowledgeAnnotation) -> Counter:
    """Facts of an example per entity id they touch (head or tail)."""
    return Counter(entity for fact in annotation.triplets for entity in {fact.h, fact.t})  # a self-loop once


def _overlapping(mentions, start: int, end: int):
    return [m for m in mentions if m.start < end and start < m.end]


def split_coverage(
    annotations: Sequence[KnowledgeAnnotation],
    texts: Sequence[str] | None = None,
    gold: Sequence[Sequence[tuple[int, int, str]]] | None = None,
    relation_names: dict[str, str] | None = None,
) -> dict:
    """One split: linking coverage (with ``gold`` spans: recall and precision against them), facts per linked
    mention, the share of linked mentions with at least one fact, and the relations of the facts that reach a
    mention (their share of those facts)."""
    report = linking_report(texts, annotations, gold) if texts is not None else {}
    facts_per_mention, relations = [], Counter()
    for annotation in annotations:
        per_entity = facts_by_entity(annotation)
        linked = {m.id for m in annotation.entities if m.id is not None}
        facts_per_mention += [per_entity[m.id] for m in annotation.entities if m.id is not None]
        relations.update(f.r for f in annotation.triplets if f.h in linked or f.t in linked)
    total = sum(relations.values())
    report.update(
        {
            "linked_mentions": len(facts_per_mention),
            "facts_per_linked_mention": sum(facts_per_mention) / len(facts_per_mention) if facts_per_mention else 0.0,
            "linked_mentions_with_facts": (
                sum(n > 0 for n in facts_per_mention) / len(facts_per_mention) if facts_per_mention else 0.0
            ),
            "relations_reaching_mentions": [
                [relation, (relation_names or {}).get(relation, relation), count, count / total]
                for relation, count in relations.most_common(TOP_RELATIONS)
            ],
            "distinct_relations_reaching_mentions": len(relations),
        }
    )
    return report


def unseen_coverage(
    train: Sequence[KnowledgeAnnotation],
    train_gold,
    test: Sequence[KnowledgeAnnotation],
    test_texts: Sequence[str],
    test_gold,
) -> dict:
    """Gold test entities whose text (lower-cased) is no gold entity of the training split: how many, and the
    share of them the KG covers (overlapped by a linked mention) and covers with facts (that mention's entity has
    at least one fact in the example)."""
    train_texts = {text.lower() for text in train_gold}
    unseen = covered = with_facts = total = 0
    for annotation, text, spans in zip(test, test_texts, test_gold):
        per_entity = facts_by_entity(annotation)
        for start, end, _ in spans:
            total += 1
            if text[start:end].lower() in train_texts:
                continue
            unseen += 1
            linked = [m for m in _overlapping(annotation.entities, start, end) if m.id is not None]
            covered += bool(linked)
            with_facts += any(per_entity[m.id] for m in linked)
    return {
        "gold_entities": total,
        "unseen_in_training": unseen,
        "unseen_share": unseen / total if total else 0.0,
        "unseen_linked_share": covered / unseen if unseen else 0.0,
        "unseen_with_facts_share": with_facts / unseen if unseen else 0.0,
    }


def gold_texts(texts: Sequence[str], gold) -> list[str]:
    """The gold entities' surface texts of a split."""
    return [text[start:end] for text, spans in zip(texts, gold) for start, end, _ in spans]


__all__ = ["split_coverage", "unseen_coverage", "facts_by_entity", "gold_texts", "TOP_RELATIONS"]
