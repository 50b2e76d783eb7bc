"""ToyKG's configuration and its model-card words: entity markers read through a lookup table of entity vectors."""

from __future__ import annotations

from keplm.configuration.base import KeplmConfig
from keplm.configuration.method_card import MethodCard, Paper


class ToyKgCard(MethodCard):
    name = "ToyKG"
    noun = "ToyKG model"
    paper = Paper(title="ToyKG: A Plug-in Test Method", authors=("Ada Lovelace",), bibtex="@misc{toykg,\n}")
    knowledge_section = True
    entity_rows_label = "entity lookup table"
    entity_rows_source = "linked in the training"
    knowledge_options = (("toy option", "toy_option"),)

    def intro(self, spec, cite, venue):
        return [f"ToyKG ({cite}) adds a learned vector of each linked entity to its tokens' encoder states."]

    def limits(self, spec):
        return ["Toy limits apply."]

    def knowledge_rows(self, processor, metrics):
        return [("linked tokens per example", f"{metrics['toy_linked']:.1f}")] if "toy_linked" in metrics else []

    def tags(self, spec):
        return ["toy-tag"]


class ToyKgConfig(KeplmConfig):
    """``entity_vocab_size``: rows of the lookup table, the null entity (row 0) included."""

    model_type = "keplm_test_toy_kg"
    method_card = ToyKgCard()
    card_settings = ("entity_vocab_size",)

    entity_vocab_size: int = 1

    @property
    def uses_knowledge(self) -> bool:
        return True

    @property
    def uses_knowledge_assets(self) -> bool:
        return True
