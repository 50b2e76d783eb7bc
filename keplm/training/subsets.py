"""Seen / unseen evaluation subsets (KALA §5.4): a context is "Unseen" when it mentions at least
``threshold`` (paper: 3) entities not seen in training; otherwise it is "Seen"."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

UNSEEN_THRESHOLD = 3


def subset_metrics(
    metric_fn: Callable[[list, list], dict],
    predictions: Sequence,
    references: Sequence,
    counts: Sequence[int],
    prefix: str,
    threshold: int = UNSEEN_THRESHOLD,
    names: tuple[str, str] = ("seen", "unseen"),
) -> dict:
    """``metric_fn`` on the Seen and Unseen subsets (fewer than ``threshold`` unseen entities, or at least that
    many), as ``{prefix}_seen_<metric>`` / ``{prefix}_unseen_<metric>`` (``names``) plus the subset sizes. An empty
    subset reports only its size (0)."""
    if not len(predictions) == len(references) == len(counts):
        raise ValueError(f"{len(predictions)} predictions, {len(references)} references, {len(counts)} counts")
    out = {}
    for name, unseen in zip(names, (False, True)):
        index = [i for i, c in enumerate(counts) if (c >= threshold) == unseen]
        out[f"{prefix}_{name}_examples"] = len(index)
        if index:
            metrics = metric_fn([predictions[i] for i in index], [references[i] for i in index])
            out.update({f"{prefix}_{name}_{k}": v for k, v in metrics.items() if not isinstance(v, dict)})
    return out


class UnseenEntityCounter:
    """Per-example count of distinct mentioned entities never mentioned in the training split.

    It reads the ``knowledge`` columns of the run's linking pass (or of its annotation files), which depend only
    on the knowledge source and the data, not on the system trained: vanilla, +1 layer, pointwise and relational
    runs are split identically. Mentions without an entity id count as unseen.
    """

    def __init__(self, train_annotations: Iterable[dict]):
        self.train_ids = {m["id"] for row in train_annotations for m in row["entities"] if m["id"] is not None}

    @classmethod
    def from_splits(cls, raw) -> UnseenEntityCounter | None:
        """From a DatasetDict whose splits carry ``knowledge`` columns; None without a linked training split."""
        if "train" not in raw or "knowledge" not in raw["train"].column_names:
            return None
        return cls(raw["train"]["knowledge"])

    def counts(self, annotations: Iterable[dict]) -> list[int]:
        return [
            len({m["id"] for m in row["entities"] if m["id"] is not None} - self.train_ids)
            + sum(m["id"] is None for m in row["entities"])
            for row in annotations
        ]
