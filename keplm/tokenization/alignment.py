"""Character spans → token spans through a fast tokenizer's offset mapping (shared by every keplm model)."""

from __future__ import annotations

import numpy as np


def char_spans_to_token_spans(
    offsets: np.ndarray | list, spans: np.ndarray | list, token_mask: np.ndarray | list | None = None
) -> np.ndarray:
    """Map character spans ``[start, end)`` to inclusive token spans ``[first, last]``.

    ``offsets`` is the ``[L, 2]`` character offset of every token (special tokens ``(0, 0)``), ``token_mask``
    selects the tokens of the text the spans refer to (e.g. the context of a QA pair). A span is mapped to
    the tokens it overlaps; a span with no overlapping token in the window (truncated away, or in another
    stride window) gets ``(-1, -1)``. Offsets inside the masked region must be non-decreasing, as a fast
    tokenizer produces them.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    result = np.full((len(spans), 2), -1, dtype=np.int64)
    if not len(spans):
        return result
    keep = offsets[:, 1] > offsets[:, 0]
    if token_mask is not None:
        keep &= np.asarray(token_mask, dtype=bool)
    positions = np.nonzero(keep)[0]
    if not len(positions):
        return result
    starts, ends = offsets[positions, 0], offsets[positions, 1]
    # first token ending after the span start; last token starting before the span end
    first = np.searchsorted(ends, spans[:, 0], side="right")
    last = np.searchsorted(starts, spans[:, 1], side="left") - 1
    valid = (first <= last) & (first < len(positions)) & (last >= 0)
    result[valid, 0] = positions[first[valid]]
    result[valid, 1] = positions[last[valid]]
    return result


def word_offsets(words: list[str], separator: str = " ") -> np.ndarray:
    """Character ``[start, end)`` of each word in ``separator.join(words)``."""
    lengths = np.fromiter((len(w) for w in words), dtype=np.int64, count=len(words))
    starts = np.concatenate([[0], np.cumsum(lengths + len(separator))[:-1]]) if len(words) else lengths
    return np.stack([starts, starts + lengths], axis=1) if len(words) else np.zeros((0, 2), dtype=np.int64)
