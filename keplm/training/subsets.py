"""Seen / unseen evaluation subsets (KALA §5.4): a context is "Unseen" when it mentions at least
``threshold`` (paper: 3) entities that the model's entity memory does not hold, i.e. entities not seen in
training (or pruned from the memory by frequency); otherwise it is "Seen"."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from keplm.hub.assets import KnowledgeAssets
from keplm.knowledge import KnowledgeAnnotation

UNSEEN_THRESHOLD = 3


def count_unseen_entities(annotation: KnowledgeAnnotation, assets: KnowledgeAssets) -> int:
    """Distinct mentioned entities outside the entity vocabulary; a mention without an id counts as one."""
    ids = {m.id for m in annotation.entities if m.id is not None}
    anonymous = sum(m.id is None for m in annotation.entities)
    return sum(assets.entity_row(i) == 0 for i in ids) + anonymous


def unseen_counts(texts: Sequence, annotations: Sequence[KnowledgeAnnotation | None], processor) -> list[int]:
    """Unseen-entity count per example; examples without an annotation are linked with the processor's KG
    (``texts`` are strings, or word lists for NER)."""
    counts = []
    for text, annotation in zip(texts, annotations):
        if annotation is None:
            if processor.knowledge_assets.kg is None:
                annotation = KnowledgeAnnotation()
            else:
                linker = processor.linker
                annotation = linker.link(text) if isinstance(text, str) else linker.link_tokens(list(text))
        counts.append(count_unseen_entities(annotation, processor.knowledge_assets))
    return counts


def subset_metrics(
    metric_fn: Callable[[list, list], dict],
    predictions: Sequence,
    references: Sequence,
    counts: Sequence[int],
    prefix: str,
    threshold: int = UNSEEN_THRESHOLD,
) -> dict:
    """``metric_fn`` on the Seen and Unseen subsets, as ``{prefix}_seen_<metric>`` / ``{prefix}_unseen_<metric>``
    plus the subset sizes. An empty subset reports only its size (0)."""
    if not len(predictions) == len(references) == len(counts):
        raise ValueError(f"{len(predictions)} predictions, {len(references)} references, {len(counts)} counts")
    out = {}
    for name, keep in (("seen", lambda c: c < threshold), ("unseen", lambda c: c >= threshold)):
        index = [i for i, c in enumerate(counts) if keep(c)]
        out[f"{prefix}_{name}_examples"] = len(index)
        if index:
            metrics = metric_fn([predictions[i] for i in index], [references[i] for i in index])
            out.update({f"{prefix}_{name}_{k}": v for k, v in metrics.items() if not isinstance(v, dict)})
    return out
