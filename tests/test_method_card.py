"""The card hooks of a method (keplm.configuration.method_card): the hub names no method, a method's own config file
gives its card its words, and a method registered from outside keplm gets its own card without an edit to
keplm/hub."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from transformers import AutoConfig

import keplm  # noqa: F401  (registers keplm's methods)
from keplm.configuration.method_card import allowed_urls, method_card, registered_method_cards
from keplm.hub.card import KnowledgeFacts, ModelCardSpec, knowledge_hyperparameters, render_model_card

ROOT = Path(__file__).resolve().parent.parent
METHOD_TYPES = ("kala", "keplm_relation_extraction", "roof_transformer", "trelm")


def test_the_hub_has_no_branch_on_a_method():
    """No code in keplm/hub compares a model type with a method's, or names one as a string."""
    for path in sorted((ROOT / "keplm" / "hub").glob("*.py")):
        tree = ast.parse(path.read_text())
        literals = [
            node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
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
    kala = knowledge_hyperparameters(args, method_card("kala"))
    assert kala == {
        "system": "relational",
        "KFM layers": [-4, -2],
        "case-sensitive linking": True,
        "entity memory initialised from mention states": False,
    }
    assert knowledge_hyperparameters(args, method_card("roof_transformer")) == {
        "system": "relational",
        "case-sensitive linking": True,
    }


# ---------------------------------------------------------------------------------------------- a fourth method
def test_a_method_registered_outside_keplm_gets_its_own_card():
    """ToyKG (tests/plugin_method, registered on import) gets its words through the hooks of its MethodCard."""
    from .plugin_method import ToyKgConfig

    card_hooks = ToyKgConfig.method_card
    assert method_card(ToyKgConfig.model_type) is card_hooks
    spec = ModelCardSpec(
        model_type=ToyKgConfig.model_type,
        architecture="ToyKgForTokenClassification",
        auto_class="AutoModelForTokenClassification",
        pipeline_tag="token-classification",
        task="token-classification",
        uses_knowledge=True,
        knowledge=KnowledgeFacts(entity_rows=11, method_rows=card_hooks.knowledge_rows(None, {"toy_linked": 3})),
    )
    card = render_model_card(spec)
    text = str(card)
    assert "# ToyKG for Token Classification" in text and "A ToyKG model for **token classification**" in text
    assert "ToyKG (*ToyKG: A Plug-in Test Method*) adds a learned vector" in text
    assert "- Toy limits apply." in text
    assert (
        "## Knowledge" in text
        and "| entity lookup table | 11 rows (row 0 = null entity), one per entity linked in the training data |"
        in text
    )
    assert "| linked tokens per example | 3.0 |" in text and "relation vocabulary" not in text
    assert "## Citation" in text and "@misc{toykg," in text
    assert {"toy-tag", ToyKgConfig.model_type, "keplm"} <= set(card.data.tags)
    assert knowledge_hyperparameters({"toy_option": 7, "kfm_layers": [1]}, card_hooks) == {"toy option": 7}
