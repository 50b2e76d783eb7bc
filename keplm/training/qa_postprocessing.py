"""Turn start/end logits over (possibly overlapping, strided) features into SQuAD v1 answer texts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np
from tqdm.auto import tqdm

__all__ = ["postprocess_qa_predictions"]


def _column(rows, name: str) -> list:
    """A column of a ``datasets.Dataset`` (fast path) or of a list of dicts."""
    if hasattr(rows, "column_names"):
        if name not in rows.column_names:
            raise ValueError(f"postprocess_qa_predictions: missing column {name!r} (have {rows.column_names})")
        return list(rows[name])
    try:
        return [row[name] for row in rows]
    except KeyError:
        raise ValueError(f"postprocess_qa_predictions: every row needs a {name!r} key") from None


def _context_offsets(offsets, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(valid mask, char starts, char ends) for the first ``length`` tokens of one feature."""
    valid = np.zeros(length, dtype=bool)
    starts = np.zeros(length, dtype=np.int64)
    ends = np.zeros(length, dtype=np.int64)
    for i, span in enumerate(offsets[:length]):
        if span is None or len(span) < 2 or span[0] is None:
            continue
        valid[i] = True
        starts[i], ends[i] = span[0], span[1]
    return valid, starts, ends


def _max_context_mask(max_context, length: int) -> np.ndarray:
    """``token_is_max_context`` given as a dict {token index: bool} or a list of bools."""
    if isinstance(max_context, Mapping):
        return np.array([bool(max_context.get(i, max_context.get(str(i), False))) for i in range(length)])
    flags = np.zeros(length, dtype=bool)
    values = [bool(v) for v in list(max_context)[:length]]
    flags[: len(values)] = values
    return flags


def _as_rows(logits) -> list[np.ndarray] | np.ndarray:
    try:
        array = np.asarray(logits, dtype=np.float64)
    except ValueError:  # ragged rows
        return [np.asarray(row, dtype=np.float64).reshape(-1) for row in logits]
    if array.ndim != 2:
        raise ValueError(f"postprocess_qa_predictions: logits must be (features, seq_len), got {array.shape}")
    return array


def _feature_candidates(start, end, offsets, max_context, n_best_size, max_answer_length):
    """Best ``n_best_size`` start and end positions inside the context, crossed and filtered."""
    length = min(len(start), len(offsets))
    valid, char_starts, char_ends = _context_offsets(offsets, length)
    start_ok = (valid & _max_context_mask(max_context, length)) if max_context is not None else valid
    if not start_ok.any():
        return []
    k = min(n_best_size, int(valid.sum()))
    start_scores = np.where(start_ok, start[:length], -np.inf)
    end_scores = np.where(valid, end[:length], -np.inf)
    top_starts = np.argsort(-start_scores, kind="stable")[: min(k, int(start_ok.sum()))]
    top_ends = np.argsort(-end_scores, kind="stable")[:k]
    span_len = top_ends[None, :] - top_starts[:, None] + 1
    ok = (span_len >= 1) & (span_len <= max_answer_length)
    rows, cols = np.nonzero(ok)
    return [
        {
            "score": float(start[s] + end[e]),
            "start_logit": float(start[s]),
            "end_logit": float(end[e]),
            "start": int(char_starts[s]),
            "end": int(char_ends[e]),
        }
        for s, e in zip(top_starts[rows], top_ends[cols])
    ]


def postprocess_qa_predictions(
    examples,
    features,
    start_logits,
    end_logits,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    return_nbest: bool = False,
    disable_tqdm: bool = False,
):
    """Map per-feature logits back to one answer string per example (SQuAD v1, no null answer).

    ``features`` rows carry ``example_id`` and ``offset_mapping`` (``None`` for non-context tokens,
    optionally ``token_is_max_context``); ``examples`` rows carry ``id`` and ``context``. Candidate
    spans from all features of an example are pooled; the highest ``start + end`` logit span of at
    most ``max_answer_length`` tokens wins. With ``return_nbest=True`` also returns
    ``{example_id: [{"text", "score", "probability", "start", "end", ...}, ...]}``.
    """
    start_logits, end_logits = _as_rows(start_logits), _as_rows(end_logits)
    if len(start_logits) != len(end_logits):
        raise ValueError(
            f"postprocess_qa_predictions: {len(start_logits)} rows of start logits vs {len(end_logits)} of end"
        )
    example_ids = [str(i) for i in _column(examples, "id")]
    contexts = _column(examples, "context")
    feature_example_ids = [str(i) for i in _column(features, "example_id")]
    offset_mappings = _column(features, "offset_mapping")
    if len(feature_example_ids) != len(start_logits):
        raise ValueError(
            f"postprocess_qa_predictions: {len(feature_example_ids)} features but {len(start_logits)} rows of logits"
        )
    if hasattr(features, "column_names"):
        has_max_context = "token_is_max_context" in features.column_names
    else:
        has_max_context = len(features) > 0 and "token_is_max_context" in features[0]
    max_contexts = _column(features, "token_is_max_context") if has_max_context else None

    index_of = {qid: i for i, qid in enumerate(example_ids)}
    features_per_example: dict[int, list[int]] = defaultdict(list)
    for f_idx, qid in enumerate(feature_example_ids):
        if qid not in index_of:
            raise ValueError(f"postprocess_qa_predictions: feature {f_idx} refers to unknown example {qid!r}")
        features_per_example[index_of[qid]].append(f_idx)

    predictions: dict[str, str] = {}
    nbest: dict[str, list[dict]] = {}
    for ex_idx, qid in enumerate(tqdm(example_ids, desc="QA post-processing", disable=disable_tqdm)):
        context = contexts[ex_idx]
        candidates: dict[tuple[int, int], dict] = {}
        for f_idx in features_per_example.get(ex_idx, []):
            max_context = max_contexts[f_idx] if max_contexts is not None else None
            for cand in _feature_candidates(
                start_logits[f_idx],
                end_logits[f_idx],
                offset_mappings[f_idx],
                max_context,
                n_best_size,
                max_answer_length,
            ):
                key = (cand["start"], cand["end"])
                if key not in candidates or cand["score"] > candidates[key]["score"]:
                    candidates[key] = cand
        best = sorted(candidates.values(), key=lambda c: (-c["score"], c["start"], c["end"]))[:n_best_size]
        if not best:
            best = [{"score": 0.0, "start_logit": 0.0, "end_logit": 0.0, "start": 0, "end": 0}]
        scores = np.array([c["score"] for c in best])
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        for cand, prob in zip(best, probs):
            cand["text"] = context[cand["start"] : cand["end"]]
            cand["probability"] = float(prob)
        predictions[qid] = best[0]["text"]
        if return_nbest:
            nbest[qid] = best
    return (predictions, nbest) if return_nbest else predictions
