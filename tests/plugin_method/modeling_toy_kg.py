"""ToyKG's model: an encoder whose mention tokens get their entity's vector added, and a token classifier; and its run
recipe (its options and steps in the task scripts). The method registers itself here, in one call
(``keplm.registration.register_method``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import AutoModelForTokenClassification, AutoTokenizer
from transformers.modeling_outputs import TokenClassifierOutput

from keplm.knowledge import KnowledgeAssets, load_kg
from keplm.modeling.base import KeplmPreTrainedModel, build_encoder, check_input_ids
from keplm.registration import register_method
from keplm.training.run_recipe import RunRecipe

from .configuration_toy_kg import ToyKgConfig
from .processing_toy_kg import ToyKgProcessor


class ToyKgForTokenClassification(KeplmPreTrainedModel):
    config_class = ToyKgConfig
    base_model_prefix = "toy"

    def __init__(self, config: ToyKgConfig):
        super().__init__(config)
        self.encoder = build_encoder(config.encoder_config)
        self.entity_embeddings = nn.Embedding(config.entity_vocab_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _init_weights(self, module):
        if module is self.entity_embeddings:
            nn.init.normal_(module.weight, std=0.02)
            with torch.no_grad():
                module.weight[0].zero_()  # the null entity adds nothing
        elif module is self.classifier:
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
        else:
            super()._init_weights(module)

    def check_knowledge_assets(self, assets) -> None:
        if assets.num_entities != self.config.entity_vocab_size:
            raise ValueError(f"{assets.num_entities} entities for a lookup table of {self.config.entity_vocab_size}")

    @classmethod
    def config_kwargs_from_assets(cls, assets) -> dict:
        return {"entity_vocab_size": assets.num_entities} if assets is not None else {}

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, entity_ids=None, labels=None, **kwargs
    ) -> TokenClassifierOutput:
        check_input_ids(input_ids, self.config)
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        if entity_ids is not None:
            hidden = hidden + self.entity_embeddings(entity_ids)
        logits = self.classifier(hidden)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits)


@dataclass
class ToyKgArguments:
    """ToyKG's options in the task scripts."""

    toy_kg: str | None = field(
        default=None,
        metadata={
            "help": "The knowledge graph whose entities get a learned vector (a load_kg spec); needed unless "
            "--model_name_or_path is a ToyKG checkpoint (then its own KG and rows)."
        },
    )
    toy_min_count: int = field(default=1, metadata={"help": "Training mentions an entity needs for its own row."})


class ToyKgRunRecipe(RunRecipe):
    """Links every split against ``--toy_kg`` and gives each entity linked in training a row of the lookup table."""

    arguments = ToyKgArguments
    tasks = ("ner",)

    def prepare(self, raw, text_columns, num_proc=None):
        if self.is_checkpoint():  # continue training a ToyKG model: its own processor, KG and entity rows
            processor = ToyKgProcessor.from_pretrained(self.model_args.model_name_or_path)
            for split in list(raw):
                raw[split] = processor.link_dataset(raw[split], text_columns[0], split_into_words=True)
            return processor, raw
        if self.args.toy_kg is None:
            raise ValueError("--toy_kg is required to build a new ToyKG model around a base encoder")
        kg = load_kg(self.args.toy_kg)
        tokenizer = AutoTokenizer.from_pretrained(self.model_args.model_name_or_path)
        processor = ToyKgProcessor(tokenizer, KnowledgeAssets(kg=kg))
        for split in list(raw):
            raw[split] = processor.link_dataset(raw[split], text_columns[0], split_into_words=True)
        mentions = [m["id"] for row in raw["train"]["knowledge"] for m in row["entities"] if m["id"] is not None]
        processor.knowledge_assets = KnowledgeAssets.build(mentions, [], kg=kg, min_count=self.args.toy_min_count)
        return processor, raw

    def build_model(self, processor, **config_kwargs):
        if self.is_checkpoint():
            return self.model_class.from_pretrained(self.model_args.model_name_or_path)
        return self.model_class.from_base_pretrained(
            self.model_args.model_name_or_path, knowledge_assets=processor.knowledge_assets, **config_kwargs
        )

    def data_results(self, processor, raw, features, model) -> dict:
        return {"toy_entity_rows": processor.knowledge_assets.num_entities}


register_method(
    ToyKgConfig,
    {AutoModelForTokenClassification: ToyKgForTokenClassification},
    processor=ToyKgProcessor,
    run_recipe=ToyKgRunRecipe,
)
