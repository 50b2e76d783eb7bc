"""The run scripts' Trainer ``compute_metrics`` callables, built on keplm's ``evaluate.Metric`` subclasses
(:mod:`keplm.training.evaluate_metrics`), and ``FactMetrics`` for relation extraction (on :func:`fact_scores`).

They report every score in percent (:mod:`keplm.metric_units`), whatever unit the metric underneath computes, so
that the Trainer's logs, ``metric_for_best_model`` and the results files of all tasks share one unit."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from keplm.metric_units import to_percent
from keplm.tokenization.processing_relation_extraction import document_facts

from .evaluate_metrics import Glue, SemEvalTask8, Seqeval, _KeplmMetric, _to_numpy
from .metrics import align_ner_predictions, fact_scores, ner_metrics

__all__ = [
    "NerComputeMetrics",
    "word_level_scores",
    "GlueComputeMetrics",
    "RelationClassificationComputeMetrics",
    "FactMetrics",
]


def _logits(predictions):
    """The logits of a model output that may be a tuple ``(logits, hidden states, ...)``."""
    return predictions[0] if isinstance(predictions, tuple) else predictions


class _MetricCallable:
    """``compute_metrics`` over one keplm metric, for both Trainer modes: the whole evaluation set at once, or
    ``batch_eval_metrics=True``, where each call adds one batch and the last one (``compute_result=True``)
    computes. The metric keeps its examples in memory: the Trainer already gathered them across processes."""

    metric: _KeplmMetric
    compute_kwargs: dict

    def _inputs(self, eval_prediction) -> dict:
        raise NotImplementedError

    def _postprocess(self, result: dict[str, float]) -> dict[str, float]:
        return result

    def _result(self, **inputs) -> dict[str, float]:
        # the metrics underneath compute fractions (as their Hub namesakes); the run scripts report percent
        return to_percent(self._postprocess(self.metric.compute(**inputs, **self.compute_kwargs)))

    def __call__(self, eval_prediction, compute_result: bool | None = None) -> dict[str, float]:
        inputs = self._inputs(eval_prediction)
        if compute_result is None:
            return self._result(**inputs)
        self.metric.add_batch(**inputs)
        return self._result() if compute_result else {}


class NerComputeMetrics(_MetricCallable):
    """``compute_metrics`` for token classification through ``Seqeval`` (also with ``batch_eval_metrics``).
    Predictions may be logits or predicted ids (``preprocess_logits_for_metrics=argmax_logits``); positions whose
    gold label is ``ignore_index`` are dropped."""

    def __init__(
        self,
        label_list,
        per_type: bool = False,
        mode: str | None = None,
        scheme: str | None = None,
        ignore_index: int = -100,
    ):
        self.label_list = list(label_list)
        self.ignore_index = ignore_index
        self.metric = Seqeval(keep_in_memory=True)
        self.compute_kwargs = {"mode": mode, "scheme": scheme, "per_type": per_type}

    def _inputs(self, eval_prediction) -> dict:
        predictions, references = align_ner_predictions(
            _to_numpy(_logits(eval_prediction.predictions)),
            _to_numpy(eval_prediction.label_ids),
            self.label_list,
            ignore_index=self.ignore_index,
        )
        return {"predictions": predictions, "references": references}


def word_level_scores(predictions, references) -> dict[str, float]:
    """Entity-level precision/recall/F1 and token accuracy of word-level tag sequences in percent, as
    ``NerComputeMetrics`` reports them (``ner_metrics`` without per-type F1): ``run_ner.py``'s word-level test
    scores and its seen / unseen subsets."""
    return to_percent(ner_metrics(predictions, references, per_type=False))


class GlueComputeMetrics(_MetricCallable):
    """``compute_metrics`` for a GLUE task through ``Glue``: argmax of the logits (or the single regression
    output for ``stsb``) against the labels. With ``combined_score=True`` a task with several metrics also gets
    their mean as ``combined_score``, as in transformers' ``run_glue.py``."""

    def __init__(self, task: str, combined_score: bool = True):
        self.task = task
        self.metric = Glue(task, keep_in_memory=True)
        self.compute_kwargs = {}
        self.combined_score = combined_score

    def _inputs(self, eval_prediction) -> dict:
        predictions = _to_numpy(_logits(eval_prediction.predictions))
        references = _to_numpy(eval_prediction.label_ids)
        if self.task == "stsb":
            if predictions.ndim > 1:
                predictions = predictions[..., 0]  # the (batch, 1) output of a regression head
        elif predictions.ndim > 1:
            predictions = predictions.argmax(axis=-1)
        return {"predictions": predictions.reshape(-1).tolist(), "references": references.reshape(-1).tolist()}

    def _postprocess(self, result: dict[str, float]) -> dict[str, float]:
        if self.combined_score and len(result) > 1:
            result = {**result, "combined_score": float(np.mean(list(result.values())))}
        return result


class RelationClassificationComputeMetrics(_MetricCallable):
    """``compute_metrics`` for SemEval-2010 Task 8 through ``SemEvalTask8``: the argmax of the logits and the
    label ids as names (``id2label``), scored over ``relations`` (default: those found)."""

    def __init__(self, id2label: Mapping[int, str], relations=None):
        self.id2label = {int(i): name for i, name in id2label.items()}
        self.metric = SemEvalTask8(keep_in_memory=True)
        self.compute_kwargs = {"relations": list(relations) if relations is not None else None}

    def _inputs(self, eval_prediction) -> dict:
        predictions = _to_numpy(_logits(eval_prediction.predictions))
        if predictions.ndim > 1:
            predictions = predictions.argmax(axis=-1)
        references = _to_numpy(eval_prediction.label_ids)
        return {
            "predictions": [self.id2label[int(i)] for i in predictions.reshape(-1)],
            "references": [self.id2label[int(i)] for i in references.reshape(-1)],
        }


class FactMetrics:
    """``compute_metrics`` of document-level relation extraction: P/R/F1 of the predicted facts ``(doc, h, t, r)``
    against all gold facts of the documents (:func:`fact_scores`). ``features`` are the documents' features in
    order (the Trainer must keep it), ``rows`` the documents; predictions are one relation id per candidate row
    (``PredictRelations`` in ``run_re.py``), rows labelled -100 are padding. Duplicate rows of a pair count once;
    gold facts lost to truncation count as missed. Precision, recall and F1 are in percent."""

    def __init__(self, features, rows, id2label: Mapping[int, str], no_relation_id: int = 0):
        self.pair_keys = [
            (doc, int(h), int(t)) for doc, edges in enumerate(features["edge_index"]) for h, t in zip(*edges)
        ]
        self.gold = {
            (doc, int(f["h"]), int(f["t"]), f["r"]) for doc, row in enumerate(rows) for f in document_facts(row)
        }
        self.id2label = {int(i): label for i, label in id2label.items()}
        self.no_relation_id = no_relation_id

    def __call__(self, eval_prediction) -> dict[str, float]:
        predictions = np.asarray(eval_prediction.predictions).reshape(-1)
        predictions = predictions[np.asarray(eval_prediction.label_ids).reshape(-1) != -100]
        if len(predictions) != len(self.pair_keys):
            raise ValueError(
                f"{len(predictions)} predicted pairs for {len(self.pair_keys)} candidate rows: "
                "evaluation must cover the features in order"
            )
        predicted = {
            (*key, self.id2label[int(r)])
            for key, r in zip(self.pair_keys, predictions)
            if int(r) != self.no_relation_id
        }
        return to_percent(fact_scores(predicted, self.gold))  # P/R/F1 in percent, the counts as they are
