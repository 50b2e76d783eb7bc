"""What a method tells the model card: the hooks :mod:`keplm.hub.card` calls, so the hub names no method.

A method's configuration class carries a :class:`MethodCard` as its ``method_card`` attribute (its own file defines
it: the paper, the words for its models, its knowledge rows and paragraphs); :func:`method_card` finds it by
``model_type`` through transformers' config registry (``AutoConfig.register``), and a model type without one gets
the plain :class:`MethodCard`, whose card has no method paragraph, no knowledge section and no citation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from keplm.registration import REGISTERED_METHODS


@dataclass(frozen=True)
class Paper:
    title: str
    authors: tuple[str, ...]
    venue: str | None = None
    url: str | None = None  # checked by hand: the card may link it (:func:`allowed_urls`)
    bibtex: str | None = None
    code_url: str | None = None  # the paper authors' own code (not keplm)


def misc_bibtex(key: str, title: str, authors: tuple[str, ...]) -> str:
    """A BibTeX entry with what the paper's own text states (title, authors), no venue or URL we cannot check."""
    names = " and ".join(f"{name.rsplit(' ', 1)[1]}, {name.rsplit(' ', 1)[0]}" for name in authors)
    return f'@misc{{{key},\n    title = "{title}",\n    author = "{names}",\n}}'


#: run-script knowledge options every method's card lists when a run set them: (display name, argument name)
LINKING_OPTIONS = (("system", "system"), ("knowledge source", "knowledge"))
LINKING_DETAIL_OPTIONS = (
    ("case-sensitive linking", "link_case_sensitive"),
    ("facts per linked entity (max)", "max_neighbors_per_entity"),
)


class MethodCard:
    """The card hooks of one method; every default is what a method without its own words gets."""

    #: the method's name ("KALA") and how the card's first sentence names its models ("KALA model")
    name: str | None = None
    noun: str | None = None
    paper: Paper | None = None
    #: the task of models that no Hub pipeline serves (their Auto class gives none)
    task: str | None = None
    #: whether the card has a "Knowledge" section (what the model carries from its KG)
    knowledge_section: bool = False
    #: the knowledge section's row on the entity vocabulary: its label and where the rows come from (None: no row)
    entity_rows_label: str | None = None
    entity_rows_source: str = "mentioned in the training"
    #: whether the knowledge section lists the relation vocabulary
    relation_rows: bool = False
    #: the method's run-script systems (``--system``) by the names its paper gives them
    system_names: Mapping[str, str] = MappingProxyType({})
    #: run-script options (display name, argument name) listed among the hyper-parameters when a run set them
    knowledge_options: tuple[tuple[str, str], ...] = LINKING_OPTIONS + LINKING_DETAIL_OPTIONS
    #: options listed even when False (a default worth stating)
    stated_when_false: tuple[str, ...] = ()

    def system(self, config) -> str | None:
        """The run-script system a config was built as (None: the method has no systems)."""
        return None

    def title(self, spec) -> str | None:
        """The words that open the card's title instead of the method's name (None: the name)."""
        return None

    def what(self, spec, task_phrase: str) -> str | None:
        """The card's first words ("A KALA relational model for ..."; None: "A <noun> for <task>")."""
        return None

    def intro(self, spec, cite: str | None, venue: str) -> list[str]:
        """The paragraph on the method under the first sentence; ``cite`` links the paper."""
        return [f"Method: {cite}{venue}."] if cite else []

    def usage_notes(self, spec) -> list[str]:
        """Lines after the generic usage snippet (models without a keplm pipeline)."""
        return []

    def limits(self, spec) -> list[str]:
        """Bullets of the "Intended use and limits" section."""
        return []

    def knowledge_rows(self, processor, metrics: dict) -> list[tuple[str, str]]:
        """Rows of the knowledge section on how the training data met the knowledge (from the processor's settings
        and the run's metrics)."""
        return []

    def tags(self, spec) -> list[str]:
        """Hub tags beyond ``keplm``, the model type and ``knowledge-enhanced``."""
        return []


def method_card(model_type: str | None) -> MethodCard:
    """The :class:`MethodCard` of a registered model type (its config class's ``method_card``), else the plain one."""
    return registered_method_cards().get(model_type) or MethodCard()


def registered_method_cards() -> dict[str, MethodCard]:
    """The method cards of every method registered through :func:`keplm.registration.register_method` that has one."""
    cards: dict[str, Any] = {}
    for model_type, (config_class, _, _) in REGISTERED_METHODS.items():
        card = getattr(config_class, "method_card", None)
        if isinstance(card, MethodCard):
            cards[model_type] = card
    return cards


def allowed_urls() -> tuple[str, ...]:
    """Every URL a generated card may contain: the papers' and their authors' code, as each method states them."""
    urls = []
    for card in registered_method_cards().values():
        if card.paper is not None:
            urls += [url for url in (card.paper.url, card.paper.code_url) if url]
    return tuple(dict.fromkeys(urls))


__all__ = [
    "LINKING_DETAIL_OPTIONS",
    "LINKING_OPTIONS",
    "MethodCard",
    "Paper",
    "allowed_urls",
    "method_card",
    "misc_bibtex",
    "registered_method_cards",
]
