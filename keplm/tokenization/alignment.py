"""Character spans → token spans through a fast tokenizer's offset mapping (shared by every keplm model)."""

from __future__ import annotations

from collections.abc import Sequence

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


def encode_entities(tokenizer, text: str, entity_spans: Sequence[Sequence[Sequence[int]]], max_length: int) -> dict:
    """Tokenise ``text`` (truncated to ``max_length``) and mark the tokens of every entity's mentions.

    Returns ``input_ids``/``attention_mask``(/``token_type_ids``), ``entity_token_map`` (entity index per token,
    -1 elsewhere), ``entity_kept`` (whether the entity owns a token) and the counts ``num_mentions``,
    ``num_dropped_mentions`` (beyond the window) and ``num_shadowed_entities`` (mentions inside the window,
    but every token of them owned by another entity). Overlapping mentions of different entities: shorter
    mentions claim their tokens first, so a nested entity ("Paris" in "University of Paris") keeps its own.
    """
    encoding = tokenizer(text, truncation=True, max_length=max_length, return_offsets_mapping=True)
    offsets = np.asarray(encoding.pop("offset_mapping"), dtype=np.int64).reshape(-1, 2)
    flat = np.asarray([list(span) for spans in entity_spans for span in spans], dtype=np.int64).reshape(-1, 2)
    owner = np.repeat(np.arange(len(entity_spans)), [len(spans) for spans in entity_spans])
    token_spans = char_spans_to_token_spans(offsets, flat)
    inside = token_spans[:, 0] >= 0
    token_map = np.full(len(offsets), -1, dtype=np.int64)
    for m in sorted(np.nonzero(inside)[0], key=lambda m: (token_spans[m, 1] - token_spans[m, 0], m)):
        segment = token_map[token_spans[m, 0] : token_spans[m, 1] + 1]
        segment[segment < 0] = owner[m]
    kept = np.zeros(len(entity_spans), dtype=bool)
    kept[token_map[token_map >= 0]] = True
    in_window = np.zeros(len(entity_spans), dtype=bool)
    in_window[owner[inside]] = True
    result = {key: list(value) for key, value in encoding.items()}
    result.update(
        entity_token_map=token_map.tolist(),
        entity_kept=kept,
        num_mentions=len(flat),
        num_dropped_mentions=int((~inside).sum()),
        num_shadowed_entities=int((in_window & ~kept).sum()),
    )
    return result
