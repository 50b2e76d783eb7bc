"""The cases of the conformance suite (tests/test_conformance.py): one per registered keplm method, the plug-in ToyKG
included, each with the head its own tests use most.

A case says how to build a tiny model and its processor (random weights, or ``from_base_pretrained`` on a saved tiny
encoder folder for LoRA), how to turn raw text into features and a model batch, and what the method is expected to
offer: the Auto class it loads through, whether it reads knowledge, its keplm pipeline task and an input for it, and
how the counterfactual knowledge check treats it (runs on a task, or is refused with a ValueError). A newly
registered method fails ``test_every_registered_method_has_a_case`` until it gets a case here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

import keplm  # noqa: F401  (registers keplm's methods, Auto classes and pipelines)
from keplm import (
    KalaForTokenClassification,
    KalaProcessor,
    KeplmDataCollator,
    RoofTransformerConfig,
    RoofTransformerForSequenceClassification,
    RoofTransformerProcessor,
    TrelmForMaskedLM,
    TrelmProcessor,
)
from keplm.knowledge import KnowledgeAssets, KnowledgeGraph
from keplm.modeling.modeling_relation_extraction import KeplmForRelationExtraction
from keplm.tokenization import RelationExtractionProcessor

from . import plugin_method  # noqa: F401  (registers ToyKG, the plug-in method)
from .conftest import tiny_encoder_config
from .plugin_method import ToyKgConfig, ToyKgForTokenClassification, ToyKgProcessor


class Ingredients(NamedTuple):
    """The shared session fixtures of tests/conftest.py a case builds from."""

    tokenizer: Any
    kg: KnowledgeGraph
    assets: KnowledgeAssets


@dataclass(frozen=True)
class Case:
    """One registered method in the conformance suite.

    ``build(ingredients) -> (model, processor)``: a tiny model in eval mode with visible (non-zero) new weights.
    ``from_base(base_dir, ingredients) -> (model, processor)``: the same head built with ``from_base_pretrained`` on a
    saved tiny encoder folder (what LoRA records as its base). ``features(processor)``: one raw text's features (a
    list, to compare two processors). ``items(processor)``: the features of several raw examples, which
    :meth:`batch` collates.
    ``check_task``: the ``knowledge_sensitivity`` task the method's head predicts, ``check_examples`` raw examples
    for it and ``check_examples_with_facts`` how many of them carry a fact the model reads. Where the check does not
    apply (``check_task`` None): ``check_refusal``, the ValueError message (regex) expected, or ``check_skip``, why
    the check is skipped.
    """

    model_type: str
    model_class: type
    auto_class: str
    build: Callable[[Ingredients], tuple]
    from_base: Callable[[Path, Ingredients], tuple]
    features: Callable[[Any], list[dict]]
    items: Callable[[Any], list[dict]]
    reads_knowledge: bool
    pipeline_task: str | None = None
    pipeline_input: Any = None
    pipeline_skip: str | None = None
    check_task: str | None = None
    check_examples: tuple[dict, ...] = ()
    check_examples_with_facts: int = 0
    check_refusal: str | None = None
    check_skip: str | None = None

    def batch(self, processor, model) -> dict:
        """A model batch built from raw text: the items through the method's collator."""
        return KeplmDataCollator.from_processor(processor, model)(self.items(processor))

    @property
    def id(self) -> str:
        return self.model_type


def visible_weights(model, skip=("encoder", "embeddings")) -> None:
    """Give every new (non-encoder) weight a visible value: zero-initialised biases and heads would hide a weight
    that is not saved, pushed or loaded."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() >= 1 and not any(part in name.split(".")[:2] for part in skip):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


def _one_text(processor, text: str) -> list[dict]:
    return [processor(text)]


def _texts(texts: tuple[str, ...]):
    def items(processor):
        return [processor(text) for text in texts]

    return items


# ------------------------------------------------------------------------------------------------ KALA
NER_LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC"}
TEXTS = ("john visited paris and unknownia in france .", "berlin is a city", "mary works for acme bank in london .")


def _kala(ingredients: Ingredients):
    from .test_kala_model import make_model

    model = make_model(
        KalaForTokenClassification,
        ingredients.tokenizer,
        ingredients.assets,
        "relational",
        num_labels=3,
        id2label=NER_LABELS,
        label2id={v: k for k, v in NER_LABELS.items()},
    )
    return model, KalaProcessor(ingredients.tokenizer, ingredients.assets)


def _kala_from_base(base_dir: Path, ingredients: Ingredients):
    torch.manual_seed(1)
    model = KalaForTokenClassification.from_base_pretrained(
        base_dir, knowledge_assets=ingredients.assets, num_labels=3, retrieval_mode="relational", kfm_layers=[-1]
    )
    return model, KalaProcessor(ingredients.tokenizer, ingredients.assets)


KALA = Case(
    model_type="kala",
    model_class=KalaForTokenClassification,
    auto_class="AutoModelForTokenClassification",
    build=_kala,
    from_base=_kala_from_base,
    features=lambda processor: _one_text(processor, TEXTS[0]),
    items=_texts(TEXTS),
    reads_knowledge=True,
    pipeline_task="keplm-ner",
    pipeline_input="john visited paris and new york .",
    check_task="ner",
    check_examples=({"text": TEXTS[0]}, {"text": "the seine flows through france ."}, {"text": "mary works ."}),
    check_examples_with_facts=2,  # the last mentions no entity
)

# ------------------------------------------------------------------------------------------------ Roof-Transformer
PAIRS = (("paris is a city in france .", "the seine flows through paris ."), ("john visited berlin .", "who ?"))
CLASS_LABELS = {0: "entailment", 1: "not_entailment"}
ROOF_OPTIONS = {"fusion_layers": 1, "max_knowledge_length": 40}


def _roof_processor(ingredients: Ingredients) -> RoofTransformerProcessor:
    return RoofTransformerProcessor(
        ingredients.tokenizer, KnowledgeAssets(kg=ingredients.kg), selection="no_tail", max_knowledge_length=40
    )


def _roof(ingredients: Ingredients):
    torch.manual_seed(0)
    processor = _roof_processor(ingredients)
    config = RoofTransformerConfig(
        encoder_config=tiny_encoder_config(ingredients.tokenizer),
        num_labels=2,
        id2label=CLASS_LABELS,
        label2id={v: k for k, v in CLASS_LABELS.items()},
        **ROOF_OPTIONS,
    )
    model = RoofTransformerForSequenceClassification(config).eval()
    visible_weights(model, skip=("encoder", "knowledge_encoder", "embeddings"))
    model.set_knowledge_assets(processor.knowledge_assets)
    return model, processor


def _roof_from_base(base_dir: Path, ingredients: Ingredients):
    torch.manual_seed(1)
    processor = _roof_processor(ingredients)
    model = RoofTransformerForSequenceClassification.from_base_pretrained(
        base_dir, knowledge_assets=processor.knowledge_assets, num_labels=2, **ROOF_OPTIONS
    )
    return model, processor


def _roof_features(processor) -> list[dict]:
    features = processor.prepare_pair_features(
        {"sentence1": [a for a, _ in PAIRS], "sentence2": [b for _, b in PAIRS]}, label_column=None, max_length=40
    )
    return [{k: v[i] for k, v in features.items() if not k.startswith("num_")} for i in range(len(PAIRS))]


ROOF = Case(
    model_type="roof_transformer",
    model_class=RoofTransformerForSequenceClassification,
    auto_class="AutoModelForSequenceClassification",
    build=_roof,
    from_base=_roof_from_base,
    features=_roof_features,
    items=_roof_features,
    reads_knowledge=True,
    pipeline_task="keplm-text-classification",
    pipeline_input={"text": PAIRS[0][0], "text_pair": PAIRS[0][1]},
    check_task="classification",
    check_examples=(
        {"sentence": "paris is a city in france ."},
        {"sentence1": PAIRS[0][0], "sentence2": PAIRS[0][1]},
        {"sentence": "mary works ."},
    ),
    check_examples_with_facts=2,  # the last mentions no entity
)

# ------------------------------------------------------------------------------------------------ TRELM
TRELM_TEXT = "john visited paris in france ."


def _trelm(ingredients: Ingredients):
    from .test_trelm import make_model, with_kge

    assets = with_kge(ingredients.kg)
    model = make_model(ingredients.tokenizer, assets).eval()
    visible_weights(model)
    return model, TrelmProcessor(ingredients.tokenizer, assets)


def _trelm_from_base(base_dir: Path, ingredients: Ingredients):
    from .test_trelm import with_kge

    torch.manual_seed(1)
    assets = with_kge(ingredients.kg)
    model = TrelmForMaskedLM.from_base_pretrained(
        base_dir, knowledge_assets=assets, memory_window=1, routing_fraction=0.25, routing_steps=4
    )
    return model, TrelmProcessor(ingredients.tokenizer, assets)


TRELM = Case(
    model_type="trelm",
    model_class=TrelmForMaskedLM,
    auto_class="AutoModelForMaskedLM",
    build=_trelm,
    from_base=_trelm_from_base,
    features=lambda processor: _one_text(processor, TRELM_TEXT),
    items=_texts((TRELM_TEXT, "berlin is in germany .")),
    reads_knowledge=True,
    pipeline_skip="TRELM is a masked-LM pre-training method: keplm registers no pipeline for it",
    check_skip="TRELM's head is a masked LM, none of the counterfactual tasks (ner, qa, classification): its "
    "knowledge check is the cloze of keplm.checks.cloze (tests/test_trelm_knowledge_check.py)",
)

# ------------------------------------------------------------------------------------------------ relation extraction
RELATIONS = ["no_relation", "P108", "P551", "P17"]
ENTITY_TYPES = ["PER", "ORG", "LOC"]
RE_TEXT = "john works for acme bank . john lives in paris ."
RE_SPANS = [[[0, 4], [27, 31]], [[15, 24]], [[41, 46]]]
RE_SECOND = ("mary visited paris .", [[[0, 4]], [[13, 18]]])  # a shorter document: the batch pads


def _re_processor(ingredients: Ingredients) -> RelationExtractionProcessor:
    return RelationExtractionProcessor(
        ingredients.tokenizer, label2id={r: i for i, r in enumerate(RELATIONS)}, entity_types=ENTITY_TYPES
    )


def _relation_extraction(ingredients: Ingredients):
    from .test_relation_extraction import tiny_model

    model = tiny_model(ingredients.tokenizer, entity_types=ENTITY_TYPES)
    visible_weights(model)
    return model, _re_processor(ingredients)


def _relation_extraction_from_base(base_dir: Path, ingredients: Ingredients):
    torch.manual_seed(1)
    model = KeplmForRelationExtraction.from_base_pretrained(
        base_dir, id2label=dict(enumerate(RELATIONS)), bilinear_dim=8, entity_types=ENTITY_TYPES
    )
    return model, _re_processor(ingredients)


def _re_features(processor) -> list[dict]:
    return [processor(RE_TEXT, RE_SPANS, entity_types=["PER", "ORG", "LOC"])]


RELATION_EXTRACTION = Case(
    model_type="keplm_relation_extraction",
    model_class=KeplmForRelationExtraction,
    auto_class="AutoModel",
    build=_relation_extraction,
    from_base=_relation_extraction_from_base,
    features=_re_features,
    items=lambda processor: [*_re_features(processor), processor(*RE_SECOND, entity_types=["PER", "LOC"])],
    reads_knowledge=False,
    pipeline_skip="relation extraction has no keplm pipeline: its head is no task Auto class's (AutoModel only), and "
    "RelationExtractor.extract reads a text with its entity mentions, not raw text",
    check_refusal="needs a processor with a knowledge graph",
)

# ------------------------------------------------------------------------------------------------ ToyKG (plug-in)
TOY_LABELS = {0: "O", 1: "B-LOC"}


def _toy(ingredients: Ingredients):
    torch.manual_seed(0)
    model = ToyKgForTokenClassification(
        ToyKgConfig(
            encoder_config=tiny_encoder_config(ingredients.tokenizer),
            entity_vocab_size=ingredients.assets.num_entities,
            num_labels=2,
            id2label=TOY_LABELS,
            label2id={v: k for k, v in TOY_LABELS.items()},
        )
    ).eval()
    visible_weights(model)
    model.set_knowledge_assets(ingredients.assets)
    return model, ToyKgProcessor(ingredients.tokenizer, ingredients.assets)


def _toy_from_base(base_dir: Path, ingredients: Ingredients):
    torch.manual_seed(1)
    model = ToyKgForTokenClassification.from_base_pretrained(
        base_dir, knowledge_assets=ingredients.assets, num_labels=2
    )
    return model, ToyKgProcessor(ingredients.tokenizer, ingredients.assets)


TOY_KG = Case(
    model_type=ToyKgConfig.model_type,
    model_class=ToyKgForTokenClassification,
    auto_class="AutoModelForTokenClassification",
    build=_toy,
    from_base=_toy_from_base,
    features=lambda processor: _one_text(processor, TEXTS[0]),
    items=_texts(TEXTS),
    reads_knowledge=True,
    pipeline_task="keplm-ner",
    pipeline_input="mary visited paris and france .",
    check_task="ner",
    check_examples=({"text": TEXTS[0]}, {"text": "mary visited paris and france ."}),
    check_examples_with_facts=0,  # ToyKG reads which entity a mention is, no facts (its facts_read): nothing to edit
)

CASES: tuple[Case, ...] = (KALA, ROOF, TRELM, RELATION_EXTRACTION, TOY_KG)
