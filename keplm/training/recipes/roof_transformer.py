"""Roof-Transformer's run recipe: its systems (one encoder, one encoder with the knowledge appended, the roof), the
triples selected from each text (linked, or read from ``--triple_files``), the roof's learning-rate multiplier and
the selection statistics."""

from __future__ import annotations

import logging
from typing import ClassVar

from keplm.tokenization.processing_roof_transformer import knowledge_statistics

from ..arguments import RoofArguments
from ..knowledge_setup import build_roof_model, prepare_roof_knowledge
from ..run_recipe import RunRecipe

logger = logging.getLogger(__name__)


class RoofTransformerRunRecipe(RunRecipe):
    arguments: ClassVar[type] = RoofArguments
    tasks: ClassVar[tuple[str, ...]] = ("qa", "sequence_classification")

    def __init__(self, model_type, model_args, method_args, task):
        super().__init__(model_type, model_args, method_args, task)
        if task == "qa" and method_args.system == "bert_with_knowledge":
            raise ValueError("--system bert_with_knowledge appends knowledge to sentence pairs (run_glue.py); for QA "
                             "use --system bert or roof")

    def prepare(self, raw, text_columns, num_proc=None):
        return prepare_roof_knowledge(self.model_args, self.args, raw, list(text_columns), num_proc)

    def build_model(self, processor, **config_kwargs):
        return build_roof_model(self.model_class, self.model_args, self.args, processor, **config_kwargs)

    def reads_knowledge(self, model) -> bool:
        return self.args.uses_knowledge  # bert_with_knowledge: the baseline model reads the knowledge appended

    def feature_options(self, processor, data_args) -> dict:
        """bert_with_knowledge: the text keeps its ``max_seq_length`` and the knowledge its ``max_knowledge_length``
        after it, as Roof's two encoders read them, within the encoder's positions (``model_max_length``)."""
        if self.args.system != "bert_with_knowledge":
            return {}
        total = data_args.max_seq_length + self.args.max_knowledge_length
        limit = processor.tokenizer.model_max_length
        if total > limit:
            logger.warning("text + knowledge = %d tokens exceed the encoder's %d: the knowledge is cut at %d", total,
                           limit, limit)
        return {"append_knowledge": True, "max_total_length": min(total, limit)}

    def parameter_group_options(self, training_args) -> dict:
        return {"fusion_lr_multiplier": self.args.fusion_lr_multiplier} if self.args.system == "roof" else {}

    def data_results(self, processor, raw, features, model) -> dict:
        """How much knowledge the features carry per split: selected / kept / cut triples (per example where the
        features name it, else per window), or the appended tokens of bert_with_knowledge."""
        results = {}
        for split, data in features.items():
            if self.args.system == "roof":
                grouped = "example_id" in data.column_names
                stats = knowledge_statistics(data, data["example_id"] if grouped else None)
                prefix = f"knowledge_{split}" if grouped or self.task != "qa" else f"knowledge_{split}_windows"
            elif self.args.system == "bert_with_knowledge":
                appended, cut = list(data["num_appended_knowledge_tokens"]), list(data["num_cut_knowledge_tokens"])
                count = max(len(appended), 1)
                stats = {"examples": len(appended), "appended_tokens_per_example": sum(appended) / count,
                         "share_with_knowledge": sum(a > 0 for a in appended) / count, "cut_tokens": sum(cut)}
                prefix = f"knowledge_{split}"
            else:
                continue
            results.update({f"{prefix}_{key}": value for key, value in stats.items()})
        return results
