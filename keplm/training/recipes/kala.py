"""KALA's run recipe: its systems (vanilla, +1 layer, pointwise, relational), the linked or annotated knowledge, the
entity vocabulary from the training split, the graph collator, the knowledge modules' parameter groups and KALA
5.4's unseen-entity subsets."""

from __future__ import annotations

import logging
from typing import ClassVar

from ..arguments import KnowledgeArguments
from ..knowledge_setup import add_knowledge, build_entity_vocabulary, build_model, prepare_processor
from ..run_recipe import RunRecipe
from ..runtime import build_collator, flatten, knowledge_coverage, linked_share, maybe_initialize_entity_memory
from ..subsets import UnseenEntityCounter

logger = logging.getLogger(__name__)


class KalaRunRecipe(RunRecipe):
    arguments: ClassVar[type] = KnowledgeArguments
    tasks: ClassVar[tuple[str, ...]] = ("ner", "qa")

    def prepare(self, raw, text_columns, num_proc=None):
        self.annotation_report = {}
        processor = prepare_processor(self.model_args, self.args)
        raw = add_knowledge(raw, processor, self.args, self.task, num_proc, report=self.annotation_report)
        return build_entity_vocabulary(processor, raw, self.model_args, self.args, self.task), raw

    def build_model(self, processor, **config_kwargs):
        return build_model(self.model_class, self.model_args, self.args, processor, self.task, **config_kwargs)

    def finish(self, processor, model):
        uses_knowledge = model.config.uses_knowledge
        logger.info("System %s (retrieval_mode=%s), knowledge from %s", self.args.system, model.config.retrieval_mode,
                    self.args.knowledge if uses_knowledge else "none")
        return processor if uses_knowledge else processor.without_knowledge()  # a baseline's checkpoint has no KG

    def feature_options(self, processor, data_args) -> dict:
        return {"question_annotation_column": None} if self.task == "qa" else {}

    def collator(self, processor, model, data_args):
        return build_collator(processor, model, data_args, self.args)

    def before_training(self, model, features, collator, training_args) -> None:
        maybe_initialize_entity_memory(model, features, collator, self.args, training_args)

    def parameter_group_options(self, training_args) -> dict:
        return self.args.parameter_group_options(training_args.lr_scheduler_type, training_args.lr_scheduler_kwargs)

    def card_options(self, raw, model, group_options) -> dict:
        linked = model.config.uses_knowledge and "train" in raw
        return {"knowledge_args": {**vars(self.args), **group_options},
                "train_linked_share": linked_share(raw["train"]) if linked else None}

    def data_results(self, processor, raw, features, model) -> dict:
        results = knowledge_coverage(processor, raw, model.config.uses_knowledge)
        results.update(flatten(self.annotation_report, "annotations"))
        return results

    def split_results(self, raw, split, prefix) -> dict:
        return {f"{prefix}_linked_share": linked_share(raw[split])} if split in raw else {}

    def unseen_entity_counts(self, raw, split):
        counter = UnseenEntityCounter.from_splits(raw) if self.args.knowledge != "none" else None
        return None if counter is None else counter.counts(raw[split]["knowledge"])
