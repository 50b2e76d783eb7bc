"""The extractive-QA Trainer (as transformers' example ``trainer_qa.py``): evaluation and prediction take the raw
examples beside the features and report SQuAD EM / F1 of the post-processed answers."""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformers.trainer_utils import PredictionOutput

from .metrics import squad_references, squad_v1_metrics
from .qa_postprocessing import postprocess_qa_predictions
from .trainer import KeplmTrainer

#: columns of evaluation features used by post-processing only (not model inputs)
POSTPROCESSING_COLUMNS = ("example_id", "offset_mapping")


def save_predictions(args, prefix: str, predictions: dict) -> None:
    """``{prefix}_predictions.json`` (``{id: answer}``) in ``output_dir``, by the process that saves."""
    if args.should_save:
        os.makedirs(args.output_dir, exist_ok=True)
        text = json.dumps(predictions, indent=2, ensure_ascii=False)
        Path(args.output_dir, f"{prefix}_predictions.json").write_text(text, encoding="utf-8")


def _model_features(features):
    """The features without the post-processing columns: what the Trainer's dataloader gets."""
    drop = [c for c in POSTPROCESSING_COLUMNS if c in features.column_names]
    return features.remove_columns(drop) if drop else features


class QuestionAnsweringTrainer(KeplmTrainer):
    """``Trainer`` whose ``evaluate``/``predict`` take the raw examples beside the features and report EM/F1.

    ``eval_dataset`` (and the ``test_dataset`` of ``predict``) are evaluation features with ``example_id`` and
    ``offset_mapping``; these two columns are dropped for the forward pass and used afterwards by
    :func:`postprocess_qa_predictions`. Predictions are written to ``{prefix}_predictions.json`` in
    ``output_dir``.
    """

    def __init__(self, *args, eval_examples=None, n_best_size: int = 20, max_answer_length: int = 30, **kwargs):
        super().__init__(*args, **kwargs)
        self.eval_examples = eval_examples
        self.n_best_size = n_best_size
        self.max_answer_length = max_answer_length
        self.scoring = None  # (examples, features) of the evaluate/predict call under way
        self.last_predictions: dict[str, str] = {}

    def _answers(self, examples, features, output, prefix: str) -> tuple[dict, dict]:
        start_logits, end_logits = output.predictions[:2]
        predictions = postprocess_qa_predictions(
            examples,
            features,
            start_logits,
            end_logits,
            n_best_size=self.n_best_size,
            max_answer_length=self.max_answer_length,
            disable_tqdm=self.args.disable_tqdm,
        )
        scores = squad_v1_metrics(predictions, squad_references(examples))
        save_predictions(self.args, prefix, predictions)
        return predictions, {f"{prefix}_{k}": v for k, v in scores.items()}

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix: str = "eval"
    ):
        """The stock loop for the start/end logits (``compute_metrics`` is not called: EM/F1 need the
        post-processed answers), then the answers of the examples being scored and their EM/F1 in the metrics."""
        compute_metrics, self.compute_metrics = self.compute_metrics, None
        try:
            output = super().evaluation_loop(
                dataloader,
                description,
                prediction_loss_only=False,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
            )
        finally:
            self.compute_metrics = compute_metrics
        if self.scoring is None:  # called by another path than evaluate/predict: no examples to score
            return output
        examples, features = self.scoring
        self.last_predictions, answer_metrics = self._answers(examples, features, output, metric_key_prefix)
        output.metrics.update(answer_metrics)
        return output

    def evaluate(self, eval_dataset=None, eval_examples=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        features = self.eval_dataset if eval_dataset is None else eval_dataset
        examples = self.eval_examples if eval_examples is None else eval_examples
        if features is None or examples is None:
            raise ValueError("QuestionAnsweringTrainer.evaluate needs evaluation features and their examples")
        self.scoring = (examples, features)
        try:
            return super().evaluate(
                _model_features(features), ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
            )
        finally:
            self.scoring = None

    def predict(self, predict_dataset, predict_examples, ignore_keys=None, metric_key_prefix: str = "test"):
        """The answers ``{id: text}`` as ``predictions`` and their EM/F1 as ``metrics``."""
        self.scoring = (predict_examples, predict_dataset)
        try:
            output = super().predict(
                _model_features(predict_dataset), ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix
            )
        finally:
            self.scoring = None
        return PredictionOutput(predictions=self.last_predictions, label_ids=None, metrics=output.metrics)


__all__ = ["QuestionAnsweringTrainer", "POSTPROCESSING_COLUMNS", "save_predictions"]
