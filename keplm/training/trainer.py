"""A Trainer for extractive QA: evaluation/prediction end with n-best post-processing and SQuAD v1.1 EM/F1.

The stock ``Trainer`` computes metrics from per-feature logits; QA needs the stride windows of each
question pooled back into one answer string first (as Hugging Face's ``QuestionAnsweringTrainer``).
"""

from __future__ import annotations

import json
import math
import os
import time

from torch.utils.data import SequentialSampler
from transformers import Trainer
from transformers.trainer_utils import PredictionOutput, has_length, speed_metrics

from .metrics import squad_references, squad_v1_metrics
from .optim import clip_grad_norm_sparse_, sparse_parameters, split_memory_tables
from .qa_postprocessing import postprocess_qa_predictions

#: columns of evaluation features used by post-processing only (not model inputs)
POSTPROCESSING_COLUMNS = ("example_id", "offset_mapping")


def _model_features(features):
    """The features without the post-processing columns: what the Trainer's dataloader gets."""
    drop = [c for c in POSTPROCESSING_COLUMNS if c in features.column_names]
    return features.remove_columns(drop) if drop else features


class OrderedEvalTrainer(Trainer):
    """``Trainer`` whose evaluation/prediction batches always follow the dataset order.

    The stock ``Trainer`` also groups evaluation samples by length under
    ``train_sampling_strategy="group_by_length"``, which permutes ``predict()`` outputs; per-example outputs
    (NER predictions files, QA post-processing of stride windows) need them in dataset order.
    """

    def _get_eval_sampler(self, eval_dataset):
        if eval_dataset is None or not has_length(eval_dataset):
            return None
        return SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    def __init__(self, *args, module_learning_rate: float | None = None, module_filter=None,
                 memory_optimizer: str = "adam", memory_learning_rate: float | None = None, **kwargs):
        """``module_learning_rate``: the learning rate of the parameters whose name passes ``module_filter``
        (default: the model's ``is_knowledge_parameter``, i.e. KALA's knowledge modules), as the KALA paper gives
        its knowledge module an optimizer of its own for T5 (appendix, fine-tuning setup). Weight decay groups
        and the LR schedule apply to them as to the rest. ``memory_optimizer`` / ``memory_learning_rate``: the
        optimizer of the entity-memory tables (``keplm.training.optim.split_memory_tables``)."""
        super().__init__(*args, **kwargs)
        self.memory_optimizer, self.memory_learning_rate = memory_optimizer, memory_learning_rate
        self._sparse_tables = False  # set by create_optimizer: whether sparse entity-memory tables are trained
        if module_learning_rate is not None and module_filter is None:
            module_filter = getattr(self.model, "is_knowledge_parameter", None)
            if module_filter is None:
                raise ValueError(f"{type(self.model).__name__} has no knowledge modules for module_learning_rate")
        self.module_learning_rate, self.module_filter = module_learning_rate, module_filter

    def create_optimizer(self, model=None):
        """The stock optimizer (with ``module_learning_rate`` groups), plus SparseAdam for sparse entity-memory
        tables (``sparse_entity_memory``) or row-wise AdaGrad for the entity memory (``memory_optimizer``)."""
        if self.optimizer is None:
            args = self.args
            model = self.model if model is None else model
            optimizer = super().create_optimizer(model)
            if self.module_learning_rate is not None:
                chosen = {id(p) for name, p in model.named_parameters() if self.module_filter(name)}
                if not chosen:
                    raise ValueError("module_learning_rate is set but no parameter matches its filter")
                for group in list(optimizer.param_groups):
                    moved = [p for p in group["params"] if id(p) in chosen]
                    if moved:
                        group["params"] = [p for p in group["params"] if id(p) not in chosen]
                        settings = {k: v for k, v in group.items() if k != "params"}
                        optimizer.add_param_group({**settings, "params": moved, "lr": self.module_learning_rate})
            memory_lr = args.learning_rate if self.module_learning_rate is None else self.module_learning_rate
            self.optimizer = split_memory_tables(
                optimizer, model, memory_lr, (args.adam_beta1, args.adam_beta2), args.adam_epsilon,
                memory_optimizer=self.memory_optimizer, memory_learning_rate=self.memory_learning_rate,
            )
            self._sparse_tables = bool(sparse_parameters(model))
        return self.optimizer

    def _clip_grad_norm(self, model):
        """The stock clipping, except when an entity memory has sparse gradients (``sparse_entity_memory``), which
        ``torch.nn.utils.clip_grad_norm_`` cannot take: then the same L2 clipping over dense and sparse gradients."""
        if not self._sparse_tables:  # decided once by create_optimizer, not by scanning the gradients every step
            return super()._clip_grad_norm(model)
        self.accelerator.unscale_gradients()
        return clip_grad_norm_sparse_(model.parameters(), self.args.max_grad_norm)

    def _save(self, output_dir: str | None = None, state_dict=None):
        """Save as the stock Trainer does, but the training arguments as JSON instead of a pickled
        ``training_args.bin`` (checkpoints hold no pickles)."""
        super()._save(output_dir, state_dict=state_dict)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            pickled = os.path.join(output_dir, "training_args.bin")
            if os.path.exists(pickled):
                os.remove(pickled)
            with open(os.path.join(output_dir, "training_args.json"), "w", encoding="utf-8") as f:
                f.write(self.args.to_json_string())


class QuestionAnsweringTrainer(OrderedEvalTrainer):
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

    def _answers(self, examples, features, output, prefix: str) -> tuple[dict, dict]:
        start_logits, end_logits = output.predictions[:2]
        predictions = postprocess_qa_predictions(
            examples, features, start_logits, end_logits, n_best_size=self.n_best_size,
            max_answer_length=self.max_answer_length, disable_tqdm=self.args.disable_tqdm,
        )
        metrics = {f"{prefix}_{k}": v for k, v in squad_v1_metrics(predictions, squad_references(examples)).items()}
        if self.args.should_save:
            os.makedirs(self.args.output_dir, exist_ok=True)
            with open(os.path.join(self.args.output_dir, f"{prefix}_predictions.json"), "w", encoding="utf-8") as f:
                json.dump(predictions, f, indent=2, ensure_ascii=False)
        return predictions, metrics

    def _run(self, features, description: str, prefix: str, ignore_keys):
        dataloader = (self.get_eval_dataloader if prefix == "eval" else self.get_test_dataloader)(
            _model_features(features)
        )
        start_time = time.time()
        compute_metrics, self.compute_metrics = self.compute_metrics, None  # metrics need post-processing
        try:
            output = self.evaluation_loop(
                dataloader, description=description, prediction_loss_only=False, ignore_keys=ignore_keys,
                metric_key_prefix=prefix,
            )
        finally:
            self.compute_metrics = compute_metrics
        total_batch_size = self.args.eval_batch_size * self.args.world_size
        if f"{prefix}_model_preparation_time" in output.metrics:
            start_time += output.metrics[f"{prefix}_model_preparation_time"]
        output.metrics.update(
            speed_metrics(prefix, start_time, num_samples=output.num_samples,
                          num_steps=math.ceil(output.num_samples / total_batch_size))
        )
        return output

    def evaluate(self, eval_dataset=None, eval_examples=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        features = self.eval_dataset if eval_dataset is None else eval_dataset
        examples = self.eval_examples if eval_examples is None else eval_examples
        if features is None or examples is None:
            raise ValueError("QuestionAnsweringTrainer.evaluate needs evaluation features and their examples")
        self._memory_tracker.start()
        output = self._run(features, "Evaluation", metric_key_prefix, ignore_keys)
        metrics = dict(output.metrics)
        _, answer_metrics = self._answers(examples, features, output, metric_key_prefix)
        metrics.update(answer_metrics)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def predict(self, predict_dataset, predict_examples, ignore_keys=None, metric_key_prefix: str = "test"):
        self._memory_tracker.start()
        output = self._run(predict_dataset, "Prediction", metric_key_prefix, ignore_keys)
        metrics = dict(output.metrics)
        predictions, answer_metrics = self._answers(predict_examples, predict_dataset, output, metric_key_prefix)
        metrics.update(answer_metrics)
        self.control = self.callback_handler.on_predict(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return PredictionOutput(predictions=predictions, label_ids=None, metrics=metrics)


__all__ = ["OrderedEvalTrainer", "QuestionAnsweringTrainer", "POSTPROCESSING_COLUMNS"]
