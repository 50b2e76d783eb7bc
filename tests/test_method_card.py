"""The card hooks of a method (keplm.hub.method_card): the hub names no method, a method's own config file gives its
card its words, and a method registered from outside keplm gets its own card without an edit to keplm/hub."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from transformers import AutoConfig

import keplm  # noqa: F401  (registers keplm's methods)
from keplm.configuration.base import KeplmConfig
from keplm.hub.card import KnowledgeFacts, ModelCardSpec, hyperparameters_from_args, render_model_card
from keplm.hub.method_card import MethodCard, Paper, allowed_urls, method_card, registered_method_cards

ROOT = Path(__file__).resolve().parent.parent
METHOD_TYPES = ("kala", "keplm_relation_extraction", "roof_transformer", "trelm")


def test_the_hub_has_no_branch_on_a_method():
    """No code in keplm/hub compares a model type with a method's, or names one as a string."""
    for path in sorted((ROOT / "keplm" / "hub").glob("*.py")):
        tree = ast.parse(path.read_text())
        literals = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str)]
        assert not [s for s in literals if s in METHOD_TYPES], path.name
        assert not re.search(r"model_type\s*(==|!=|\bin\b|\bnot in\b)", path.read_text()), path.name


def test_each_method_states_its_card_in_its_own_config():
    cards = registered_method_cards()
    assert set(cards) >= set(METHOD_TYPES)  # and any method registered by another test
    for model_type, card in cards.items():
        config_class = AutoConfig.for_model(model_type).__class__
        assert card is config_class.method_card and card.paper is not None and card.name
    assert method_card("bert").name is None and method_card(None).paper is None  # plain card
    assert set(allowed_urls()) >= {"https://aclanthology.org/2022.naacl-main.379", "https://github.com/Nardien/KALA"}


def test_knowledge_options_are_the_methods():
    """A run's knowledge arguments reach the hyper-parameter table only where its method lists them."""
    args = {"system": "relational", "kfm_layers": [-4, -2], "init_entity_memory": False, "link_case_sensitive": True}
    kala = hyperparameters_from_args(None, args, card=method_card("kala"))
    assert kala == {"system": "relational", "KFM layers": [-4, -2], "case-sensitive linking": True,
                    "entity memory initialised from mention states": False}
    assert hyperparameters_from_args(None, args, card=method_card("roof_transformer")) == {
        "system": "relational", "case-sensitive linking": True}


# ---------------------------------------------------------------------------------------------- a fourth method
class ToyCard(MethodCard):
    name = "ToyKG"
    noun = "ToyKG model"
    paper = Paper(title="ToyKG: A Test Method", authors=("Ada Lovelace",), bibtex="@misc{toy,\n}")
    knowledge_section = True
    entity_rows_label = "lookup table"
    entity_rows_source = "seen in the training"
    knowledge_options = (("toy option", "toy_option"),)

    def intro(self, spec, cite, venue):
        return [f"ToyKG ({cite}) adds a KG-embedding lookup at entity markers."]

    def limits(self, spec):
        return ["Toy limits apply."]

    def knowledge_rows(self, processor, metrics):
        return [("toy rows", str(metrics.get("toy", 0)))]

    def tags(self, spec):
        return ["toy-tag"]


class ToyConfig(KeplmConfig):
    model_type = "toy_kg_card_test"
    method_card = ToyCard()


@pytest.fixture(scope="module")
def toy_registered():
    AutoConfig.register(ToyConfig.model_type, ToyConfig)
    yield
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    CONFIG_MAPPING._extra_content.pop(ToyConfig.model_type, None)


def test_a_method_registered_outside_keplm_gets_its_own_card(toy_registered):
    spec = ModelCardSpec(model_type=ToyConfig.model_type, architecture="ToyForTokenClassification",
                         auto_class="AutoModelForTokenClassification", pipeline_tag="token-classification",
                         task="token-classification", uses_knowledge=True,
                         knowledge=KnowledgeFacts(entity_rows=11,
                                                  method_rows=ToyCard().knowledge_rows(None, {"toy": 3})))
    card = render_model_card(spec)
    text = str(card)
    assert "# ToyKG for Token Classification" in text and "A ToyKG model for **token classification**" in text
    assert "ToyKG (*ToyKG: A Test Method*) adds a KG-embedding lookup at entity markers." in text
    assert "- Toy limits apply." in text
    assert "## Knowledge" in text and "| lookup table | 11 rows (row 0 = null entity), one per entity seen in the " \
                                      "training data |" in text
    assert "| toy rows | 3 |" in text and "relation vocabulary" not in text
    assert "## Citation" in text and "@misc{toy," in text
    assert {"toy-tag", ToyConfig.model_type, "keplm"} <= set(card.data.tags)
    assert hyperparameters_from_args(None, {"toy_option": 7, "kfm_layers": [1]}, card=ToyCard()) == {"toy option": 7}
