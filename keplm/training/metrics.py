"""Evaluation metrics as pure functions: seqeval entity-level NER scores, the official SQuAD v1.1 EM/F1, the
GLUE task metrics (Roof-Transformer), the official SemEval-2010 Task 8 score (relation classification) and
LAMA-style P@k (TRELM).

Each metric is computed once, here, by the library that owns it where one does (seqeval, scikit-learn, scipy); the
SQuAD v1.1, SemEval-2010 Task 8 and LAMA P@k scores follow their official scripts. The run scripts'
``compute_metrics`` callables (:mod:`keplm.training.compute_metrics`) call these functions.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import seqeval.scheme as seqeval_scheme
from scipy import stats
from seqeval.metrics import accuracy_score, classification_report
from sklearn import metrics as sklearn_metrics

__all__ = [
    "ner_metrics",
    "align_ner_predictions",
    "normalize_answer",
    "squad_exact_match",
    "squad_f1",
    "squad_v1_metrics",
    "squad_references",
    "accuracy",
    "binary_f1",
    "matthews_correlation",
    "pearson_correlation",
    "spearman_correlation",
    "GLUE_TASKS",
    "glue_metrics",
    "semeval_task8_metrics",
    "precision_at_k",
    "fact_scores",
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
    if len(predictions) != len(references):
        raise ValueError(f"ner_metrics: {len(predictions)} predicted sequences vs {len(references)} references")
    preds = [list(p) for p in predictions]
    refs = [list(r) for r in references]
    for i, (p, r) in enumerate(zip(preds, refs)):
        if len(p) != len(r):
            raise ValueError(f"ner_metrics: sequence {i} has {len(p)} predicted tags vs {len(r)} reference tags")
    scheme_cls = None
    if scheme is not None:
        scheme_cls = getattr(seqeval_scheme, scheme.upper(), None)
        if scheme_cls is None:
            raise ValueError(f"ner_metrics: unknown seqeval scheme {scheme!r}")
    report = classification_report(refs, preds, output_dict=True, mode=mode, scheme=scheme_cls, zero_division=0)
    overall = report.pop("micro avg", {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
    result = {
        "precision": float(overall["precision"]),
        "recall": float(overall["recall"]),
        "f1": float(overall["f1-score"]),
        "accuracy": float(accuracy_score(refs, preds)) if any(refs) else 0.0,
    }
    if per_type:
        result.update({f"{name}_f1": float(s["f1-score"]) for name, s in report.items() if not name.endswith(" avg")})
    return result


def _label_name(id2label, index: int) -> str:
    """``id2label[index]`` of a label list or a mapping with int or str keys (a config read from JSON)."""
    try:
        return id2label[str(index) if isinstance(id2label, Mapping) and index not in id2label else index]
    except (KeyError, IndexError):
        raise ValueError(f"align_ner_predictions: label id {index} is none of the {len(id2label)} labels") from None


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
        raise ValueError(f"align_ner_predictions: predictions shape {preds.shape} != labels shape {labels.shape}")
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


def squad_v1_metrics(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> dict[str, float]:
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
    """``{id: [answer texts]}`` from SQuAD-schema examples (a Dataset or list of dicts); a question id that appears
    twice is a ValueError (its second answers would silently replace the first)."""
    if hasattr(examples, "column_names"):
        rows = list(zip(examples["id"], examples["answers"]))
    else:
        rows = [(ex["id"], ex["answers"]) for ex in examples]
    references: dict[str, list[str]] = {}
    for qid, answers in rows:
        if qid in references:
            raise ValueError(f"squad_references: question id {qid!r} appears twice in the examples")
        references[qid] = list(answers["text"])
    return references


# --------------------------------------------------------------------------- GLUE (Roof-Transformer)


def _as_vector(name: str, values, integral: bool) -> np.ndarray:
    """One input as a 1-d int64 (class ids) or float64 (scores) array; a clear error rather than numpy's silent
    truncation of 0.7 to class 0, or NaN correlations from non-finite scores."""
    array = np.asarray(values).reshape(-1)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected numbers, got an array of dtype {array.dtype}")
    if not np.isfinite(array.astype(np.float64)).all():
        raise ValueError(f"{name}: predictions and references must be finite numbers")
    if integral:
        if array.dtype.kind == "f" and not np.array_equal(array, np.round(array)):
            raise ValueError(f"{name}: class ids must be integers")
        return array.astype(np.int64)
    return array.astype(np.float64)


def _paired_arrays(name: str, predictions, references, integral: bool) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as 1-d arrays, with a clear error on mismatched lengths or empty input."""
    preds, refs = _as_vector(name, predictions, integral), _as_vector(name, references, integral)
    if preds.shape != refs.shape:
        raise ValueError(f"{name}: {preds.size} predictions vs {refs.size} references")
    if preds.size == 0:
        raise ValueError(f"{name}: no examples given")
    return preds, refs


def accuracy(predictions, references) -> float:
    """Fraction of exact label matches (SST-2, QNLI, RTE, MNLI, ...), scikit-learn's ``accuracy_score``."""
    preds, refs = _paired_arrays("accuracy", predictions, references, integral=True)
    return float(sklearn_metrics.accuracy_score(refs, preds))


def binary_f1(predictions, references, positive_label: int = 1) -> float:
    """F1 of the positive class (MRPC, QQP), scikit-learn's ``f1_score(average="binary", zero_division=0)``. Labels
    must be 0/1: a third class would make "binary" F1 silently ignore it."""
    preds, refs = _paired_arrays("binary_f1", predictions, references, integral=True)
    bad = np.setdiff1d(np.union1d(preds, refs), [0, 1])
    if bad.size:
        raise ValueError(f"binary_f1: labels must be 0 or 1, got {bad.tolist()}")
    return float(sklearn_metrics.f1_score(refs, preds, pos_label=positive_label, average="binary", zero_division=0))


def matthews_correlation(predictions, references) -> float:
    """Matthews correlation coefficient (CoLA), scikit-learn's ``matthews_corrcoef`` (0.0 when undefined)."""
    preds, refs = _paired_arrays("matthews_correlation", predictions, references, integral=True)
    return float(sklearn_metrics.matthews_corrcoef(refs, preds))


def _correlation(function, name: str, predictions, references) -> float:
    """scipy's ``function`` (pearsonr / spearmanr) of two score vectors; NaN when undefined (fewer than two examples
    or a constant input), without scipy's warning."""
    preds, refs = _paired_arrays(name, predictions, references, integral=False)
    if preds.size < 2 or np.ptp(preds) == 0 or np.ptp(refs) == 0:
        return float("nan")
    return float(function(preds, refs)[0])


def pearson_correlation(predictions, references) -> float:
    """Pearson's r (STS-B), scipy's ``pearsonr``."""
    return _correlation(stats.pearsonr, "pearson_correlation", predictions, references)


def spearman_correlation(predictions, references) -> float:
    """Spearman's rho (STS-B), scipy's ``spearmanr`` (tied scores get their mean rank)."""
    return _correlation(stats.spearmanr, "spearman_correlation", predictions, references)


#: GLUE task -> the metrics reported for it (the Hub ``glue`` metric's config names and result keys)
GLUE_TASKS: dict[str, tuple[str, ...]] = {
    "cola": ("matthews_correlation",),
    "sst2": ("accuracy",),
    "mrpc": ("accuracy", "f1"),
    "qqp": ("accuracy", "f1"),
    "stsb": ("pearson", "spearmanr"),
    "mnli": ("accuracy",),
    "mnli_matched": ("accuracy",),
    "mnli_mismatched": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
    "hans": ("accuracy",),
}

_GLUE_FORMULAS = {
    "accuracy": accuracy,
    "f1": binary_f1,
    "matthews_correlation": matthews_correlation,
    "pearson": pearson_correlation,
    "spearmanr": spearman_correlation,
}


def glue_metrics(task: str, predictions, references) -> dict[str, float]:
    """The official metrics of one GLUE task as fractions in [0, 1] (or [-1, 1] for correlations), keyed as the
    Hub ``glue`` metric: ``accuracy``, ``f1`` (positive class 1), ``matthews_correlation``, ``pearson``,
    ``spearmanr``. Predictions are class ids, or similarity scores for ``stsb``."""
    if task not in GLUE_TASKS:
        raise ValueError(f"glue_metrics: unknown GLUE task {task!r}; expected one of {sorted(GLUE_TASKS)}")
    return {name: _GLUE_FORMULAS[name](predictions, references) for name in GLUE_TASKS[task]}


# --------------------------------------------------------------------------- SemEval-2010 Task 8


def _relation(label: str) -> str:
    """The relation of a SemEval label, without its direction: ``Cause-Effect`` of ``Cause-Effect(e1,e2)``."""
    return label.partition("(")[0]


def _precision_recall_f1(correct: int, predicted: int, gold: int) -> tuple[float, float, float]:
    """Precision, recall and F1 from counts (0.0 where a denominator is 0)."""
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    return precision, recall, 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def semeval_task8_metrics(
    predictions: Sequence[str], references: Sequence[str], other: str = "Other", relations: Sequence[str] | None = None
) -> dict[str, float]:
    """The official SemEval-2010 Task 8 score (scorer v1.2, evaluation (iii)) as fractions: per relation, ignoring
    ``other``, P = correct / predicted and R = correct / gold, where a relation predicted with the wrong direction
    counts as predicted and not correct; ``macro_f1`` is the mean of the relations' F1 (the task's official score,
    relations without gold or predictions included as 0), ``micro_f1`` pools the counts; ``accuracy`` is exact
    match over all labels, directions and ``other`` included. ``relations`` fixes the relations averaged over
    (default: those in the inputs); a label of another relation is then a ValueError."""
    if len(predictions) != len(references):
        raise ValueError(f"semeval_task8_metrics: {len(predictions)} predictions vs {len(references)} references")
    if not references:
        raise ValueError("semeval_task8_metrics: no examples given")
    found = {_relation(label) for label in (*predictions, *references)} - {other}
    if relations is not None and found - set(relations):
        raise ValueError(f"semeval_task8_metrics: labels of unknown relations {sorted(found - set(relations))}")
    relations = list(relations) if relations is not None else sorted(found)
    counts = {relation: Counter() for relation in relations}
    for predicted, gold in zip(predictions, references):
        predicted_relation, gold_relation = _relation(predicted), _relation(gold)
        if predicted_relation != other:
            counts[predicted_relation]["predicted"] += 1
        if gold_relation != other:
            counts[gold_relation]["gold"] += 1
            counts[gold_relation]["correct"] += predicted == gold
    keys = ("correct", "predicted", "gold")
    per_relation = {relation: _precision_recall_f1(*(c[key] for key in keys))[2] for relation, c in counts.items()}
    return {
        "macro_f1": float(np.mean(list(per_relation.values()))) if per_relation else 0.0,
        "micro_f1": _precision_recall_f1(*(sum(c[key] for c in counts.values()) for key in keys))[2],
        "accuracy": sum(p == g for p, g in zip(predictions, references)) / len(references),
        **{f"f1_{relation}": value for relation, value in per_relation.items()},
    }


# --------------------------------------------------------------------------- P@k (TRELM, LAMA probing)


def precision_at_k(
    predictions: Sequence[Sequence[str] | str],
    references: Sequence[str],
    k: int = 1,
    relations: Sequence[str] | None = None,
    ignore_case: bool = False,
    per_relation: bool = True,
) -> dict[str, float]:
    """LAMA-style precision at k: the fraction of facts whose gold object is among the top ``k`` predictions.

    ``predictions`` holds one ranked candidate list (best first) or one top-1 string per fact. Without
    ``relations``, ``precision_at_{k}`` is the mean over facts. With ``relations`` (one relation id per fact) it is
    the macro average over relations, as LAMA and TRELM report "mean P@1", ``precision_at_{k}_micro`` is the mean
    over facts and ``{relation}_precision_at_{k}`` the per-relation value (with ``per_relation=True``).
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"precision_at_k: k must be a positive integer, got {k!r}")
    if len(predictions) != len(references):
        raise ValueError(f"precision_at_k: {len(predictions)} predictions vs {len(references)} references")
    if not references:
        raise ValueError("precision_at_k: no examples given")
    if relations is not None and len(relations) != len(references):
        raise ValueError(f"precision_at_k: {len(relations)} relations vs {len(references)} references")

    def fold(token: str) -> str:
        return token.casefold() if ignore_case else token

    hits = []
    for ranked, gold in zip(predictions, references):
        candidates = [ranked] if isinstance(ranked, str) else list(ranked)
        hits.append(fold(gold) in {fold(c) for c in candidates[:k]})
    key = f"precision_at_{int(k)}"
    micro = float(np.mean(hits))
    if relations is None:
        return {key: micro}
    by_relation: dict[str, list[bool]] = {}
    for relation, hit in zip(relations, hits):
        by_relation.setdefault(relation, []).append(hit)
    per = {relation: float(np.mean(values)) for relation, values in by_relation.items()}
    result = {key: float(np.mean(list(per.values()))), f"{key}_micro": micro}
    if per_relation:
        result.update({f"{relation}_{key}": value for relation, value in sorted(per.items())})
    return result


# --------------------------------------------------------------------------- facts (document-level relation extraction)


def fact_scores(predicted: set, gold: set) -> dict[str, float]:
    """Precision, recall and F1 of a set of predicted facts against the gold set."""
    correct = len(predicted & gold)
    precision, recall, f1 = _precision_recall_f1(correct, len(predicted), len(gold))
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "num_predicted": len(predicted),
        "num_gold": len(gold),
        "num_correct": correct,
    }
