"""Seen / unseen evaluation subsets (KALA §5.4): a context is "Unseen" when it mentions at least
``threshold`` (paper: 3) entities not seen in training; otherwise it is "Seen"."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from keplm.knowledge import KnowledgeAnnotation

UNSEEN_THRESHOLD = 3


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


class UnseenEntityCounter:
    """Per-example count of distinct mentioned entities never mentioned in the training split.

    It depends only on the knowledge source (KG linking or annotation files) and the training split, not
    on the system trained, so vanilla, +1 layer, pointwise and relational runs are split identically.
    """

    def __init__(self, annotate: Callable[[str, object], list[KnowledgeAnnotation]], train_dataset):
        self.annotate = annotate
        self.train_ids = {m.id for a in annotate("train", train_dataset) for m in a.entities if m.id is not None}

    @classmethod
    def from_arguments(cls, knowledge_args, raw, task: str, annotations: dict, kg=None) -> UnseenEntityCounter | None:
        """From the run scripts' ``KnowledgeArguments``; None when no knowledge source is configured. ``kg``: the
        already loaded ``--kg`` (e.g. the processor's), so it is not read twice."""
        if "train" not in raw:
            return None
        if knowledge_args.knowledge == "annotations":
            def annotate(split, dataset):
                by_id = annotations.get(split, {})
                return [by_id.get(str(i), KnowledgeAnnotation()) for i in dataset["id"]]
        elif knowledge_args.knowledge == "link" and knowledge_args.kg:
            from keplm.knowledge import EntityLinker, load_kg

            linker = EntityLinker(kg if kg is not None else load_kg(knowledge_args.kg), lowercase=not knowledge_args.link_case_sensitive,
                                  max_neighbors_per_entity=0)
            def annotate(split, dataset):
                if task == "ner":
                    return [linker.link_tokens(tokens) for tokens in dataset["tokens"]]
                return [linker.link(context) for context in dataset["context"]]
        else:
            return None
        return cls(annotate, raw["train"])

    def counts(self, split: str, dataset) -> list[int]:
        return [len({m.id for m in a.entities if m.id is not None} - self.train_ids)
                + sum(m.id is None for m in a.entities) for a in self.annotate(split, dataset)]
