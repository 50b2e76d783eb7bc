"""Evaluation metrics: seqeval entity-level NER scores and the official SQuAD v1.1 EM/F1."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "ner_metrics",
    "align_ner_predictions",
    "normalize_answer",
    "squad_exact_match",
    "squad_f1",
    "squad_v1_metrics",
    "squad_references",
]


# --------------------------------------------------------------------------- NER


def ner_metrics(
    predictions: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    mode: str | None = None,
    scheme: str | None = None,
    per_type: bool = True,
) -> dict[str, float]:
    """Entity-level precision/recall/F1 (micro) and token accuracy with seqeval.

    ``mode=None`` is the conlleval-compatible default (as in HF ``run_ner``); pass ``mode="strict"``
    and ``scheme="IOB2"`` for strict matching. Per-type F1 is reported as ``"{TYPE}_f1"``.
    """
    from seqeval.metrics import accuracy_score, classification_report

    if len(predictions) != len(references):
        raise ValueError(
            f"ner_metrics: {len(predictions)} predicted sequences vs {len(references)} references"
        )
    preds = [list(p) for p in predictions]
    refs = [list(r) for r in references]
    for i, (p, r) in enumerate(zip(preds, refs)):
        if len(p) != len(r):
            raise ValueError(
                f"ner_metrics: sequence {i} has {len(p)} predicted tags vs {len(r)} reference tags"
            )
    scheme_cls = None
    if scheme is not None:
        import seqeval.scheme as seqeval_scheme

        scheme_cls = getattr(seqeval_scheme, scheme.upper(), None)
        if scheme_cls is None:
            raise ValueError(f"ner_metrics: unknown seqeval scheme {scheme!r}")
    report = classification_report(
        refs, preds, output_dict=True, mode=mode, scheme=scheme_cls, zero_division=0
    )
    overall = report.pop("micro avg", {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
    result = {
        "precision": float(overall["precision"]),
        "recall": float(overall["recall"]),
        "f1": float(overall["f1-score"]),
        "accuracy": float(accuracy_score(refs, preds)) if any(refs) else 0.0,
    }
    if per_type:
        for name, scores in report.items():
            if name in ("macro avg", "weighted avg"):
                continue
            result[f"{name}_f1"] = float(scores["f1-score"])
    return result


def _label_name(id2label, index: int) -> str:
    if isinstance(id2label, Mapping):
        if index in id2label:
            return id2label[index]
        if str(index) in id2label:
            return id2label[str(index)]
        raise ValueError(f"align_ner_predictions: label id {index} not in id2label")
    try:
        return id2label[index]
    except IndexError:
        raise ValueError(
            f"align_ner_predictions: label id {index} out of range for {len(id2label)} labels"
        ) from None


def align_ner_predictions(
    logits_or_pred_ids: np.ndarray,
    label_ids: np.ndarray,
    id2label: Mapping[int, str] | Sequence[str],
    ignore_index: int = -100,
) -> tuple[list[list[str]], list[list[str]]]:
    """Turn (batch, seq[, labels]) logits or predicted ids plus gold ids into tag-string lists,
    dropping positions whose gold label is ``ignore_index``."""
    preds = np.asarray(logits_or_pred_ids)
    labels = np.asarray(label_ids)
    if preds.ndim == labels.ndim + 1:
        preds = preds.argmax(axis=-1)
    if preds.shape != labels.shape:
        raise ValueError(
            f"align_ner_predictions: predictions shape {preds.shape} != labels shape {labels.shape}"
        )
    pred_tags, ref_tags = [], []
    for pred_row, label_row in zip(preds, labels):
        keep = label_row != ignore_index
        pred_tags.append([_label_name(id2label, int(i)) for i in pred_row[keep]])
        ref_tags.append([_label_name(id2label, int(i)) for i in label_row[keep]])
    return pred_tags, ref_tags


# --------------------------------------------------------------------------- SQuAD v1.1


def normalize_answer(text: str) -> str:
    """Official SQuAD v1.1 normalisation: lowercase, drop punctuation and articles, fix whitespace."""
    text = text.lower()
    punctuation = set(string.punctuation)
    text = "".join(ch for ch in text if ch not in punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def squad_f1(prediction: str, ground_truth: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(ground_truth).split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _ground_truths(value) -> list[str]:
    if isinstance(value, Mapping):
        value = value["text"]
    if isinstance(value, str):
        return [value]
    return list(value)


def squad_v1_metrics(
    predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """Exact match and F1 in percent, as the official v1.1 script: the max over ground truths,
    averaged over all reference questions (a missing prediction scores 0)."""
    if not references:
        raise ValueError("squad_v1_metrics: no references given")
    exact = f1 = 0.0
    for qid, value in references.items():
        truths = _ground_truths(value)
        if qid not in predictions:
            continue
        if not truths:
            raise ValueError(f"squad_v1_metrics: question {qid!r} has no reference answers")
        pred = predictions[qid]
        exact += max(squad_exact_match(pred, t) for t in truths)
        f1 += max(squad_f1(pred, t) for t in truths)
    total = len(references)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def squad_references(examples) -> dict[str, list[str]]:
    """``{id: [answer texts]}`` from SQuAD-schema examples (a Dataset or list of dicts)."""
    if hasattr(examples, "column_names"):
        return {qid: list(ans["text"]) for qid, ans in zip(examples["id"], examples["answers"])}
    return {ex["id"]: list(ex["answers"]["text"]) for ex in examples}
