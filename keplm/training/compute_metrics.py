"""The run scripts' Trainer ``compute_metrics`` callables over the metric functions of :mod:`keplm.training.metrics`
(seqeval, GLUE, SemEval-2010 Task 8), and ``FactMetrics`` for relation extraction (on :func:`fact_scores`).

They report every score in percent (:mod:`keplm.metric_units`), whatever unit the metric underneath computes, so
that the Trainer's logs, ``metric_for_best_model`` and the results files of all tasks share one unit."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from keplm.metric_units import to_percent
from keplm.tokenization.processing_relation_extraction import document_facts

from .metrics import align_ner_predictions, fact_scores, glue_metrics, ner_metrics, semeval_task8_metrics

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


def _to_numpy(array) -> np.ndarray:
    """A Trainer output (numpy array or, under ``batch_eval_metrics``, a possibly bf16 CUDA tensor) as numpy."""
    if hasattr(array, "detach"):
        array = array.detach().cpu()
        if array.is_floating_point():
            array = array.float()
        array = array.numpy()
    return np.asarray(array)


class _MetricCallable:
    """``compute_metrics`` over one metric function, for both Trainer modes: the whole evaluation set at once, or
    ``batch_eval_metrics=True``, where each call adds one batch and the last one (``compute_result=True``)
    computes. The batches are kept in memory: the Trainer already gathered them across processes."""

    def _inputs(self, eval_prediction) -> tuple[list, list]:
        """``(predictions, references)`` of one Trainer output, as the metric function takes them."""
        raise NotImplementedError

    def _metric(self, predictions: list, references: list) -> dict[str, float]:
        raise NotImplementedError

    def __call__(self, eval_prediction, compute_result: bool | None = None) -> dict[str, float]:
        predictions, references = self._inputs(eval_prediction)
        if compute_result is not None:
            kept = self.__dict__.setdefault("_kept", ([], []))
            kept[0].extend(predictions)
            kept[1].extend(references)
            if not compute_result:
                return {}
            (predictions, references), self._kept = kept, ([], [])
        # the metric functions compute fractions; the run scripts report percent
        return to_percent(self._metric(predictions, references))


class NerComputeMetrics(_MetricCallable):
    """``compute_metrics`` for token classification through seqeval (``ner_metrics``; also with ``batch_eval_metrics``).
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
        self.options = {"mode": mode, "scheme": scheme, "per_type": per_type}

    def _metric(self, predictions, references) -> dict[str, float]:
        return ner_metrics(predictions, references, **self.options)

    def _inputs(self, eval_prediction) -> tuple[list, list]:
        return align_ner_predictions(
            _to_numpy(_logits(eval_prediction.predictions)),
            _to_numpy(eval_prediction.label_ids),
            self.label_list,
            ignore_index=self.ignore_index,
        )


def word_level_scores(predictions, references) -> dict[str, float]:
    """Entity-level precision/recall/F1 and token accuracy of word-level tag sequences in percent, as
    ``NerComputeMetrics`` reports them (``ner_metrics`` without per-type F1): ``run_ner.py``'s word-level test
    scores and its seen / unseen subsets."""
    return to_percent(ner_metrics(predictions, references, per_type=False))


class GlueComputeMetrics(_MetricCallable):
    """``compute_metrics`` for a GLUE task through ``glue_metrics``: argmax of the logits (or the single regression
    output for ``stsb``) against the labels. With ``combined_score=True`` a task with several metrics also gets
    their mean as ``combined_score``, as in transformers' ``run_glue.py``."""

    def __init__(self, task: str, combined_score: bool = True):
        self.task = task
        glue_metrics(task, [0, 1], [0, 1])  # an unknown task is an error now, not at the first evaluation
        self.combined_score = combined_score

    def _metric(self, predictions, references) -> dict[str, float]:
        result = glue_metrics(self.task, predictions, references)
        if self.combined_score and len(result) > 1:
            result["combined_score"] = float(np.mean(list(result.values())))
        return result

    def _inputs(self, eval_prediction) -> tuple[list, list]:
        predictions = _to_numpy(_logits(eval_prediction.predictions))
        references = _to_numpy(eval_prediction.label_ids)
        if self.task == "stsb":
            if predictions.ndim > 1:
                predictions = predictions[..., 0]  # the (batch, 1) output of a regression head
        elif predictions.ndim > 1:
            predictions = predictions.argmax(axis=-1)
        return predictions.reshape(-1).tolist(), references.reshape(-1).tolist()


class RelationClassificationComputeMetrics(_MetricCallable):
    """``compute_metrics`` for SemEval-2010 Task 8 through ``semeval_task8_metrics``: the argmax of the logits and the
    label ids as names (``id2label``), scored over ``relations`` (default: those found)."""

    def __init__(self, id2label: Mapping[int, str], relations=None):
        self.id2label = {int(i): name for i, name in id2label.items()}
        self.relations = list(relations) if relations is not None else None

    def _metric(self, predictions, references) -> dict[str, float]:
        return semeval_task8_metrics(predictions, references, relations=self.relations)

    def _inputs(self, eval_prediction) -> tuple[list, list]:
        predictions = _to_numpy(_logits(eval_prediction.predictions))
        if predictions.ndim > 1:
            predictions = predictions.argmax(axis=-1)
        references = _to_numpy(eval_prediction.label_ids)
        label = self.id2label
        return [label[int(i)] for i in predictions.reshape(-1)], [label[int(i)] for i in references.reshape(-1)]


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
