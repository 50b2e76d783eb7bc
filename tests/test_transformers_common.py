"""transformers' own common model and config tests (``ModelTesterMixin``, ``ConfigTester`` of the installed version,
from its source distribution: ``tests/transformers_common.py``) run against keplm's model classes, with testers
built like ``BertModelTester`` / ``LukeModelTester``: the knowledge inputs are built beside ``input_ids`` by the
method's processor and collator (LUKE's tester builds its entity inputs beside the text the same way).

Every common test that cannot apply to a keplm model is skipped by name with its reason in ``CANNOT_APPLY``;
everything else must pass. Without the source distribution (no package index) the whole module skips, saying why.
"""

from __future__ import annotations

import unittest

import pytest
import torch

from keplm import KalaConfig, KalaForTokenClassification, KalaProcessor, KeplmDataCollator

from .conftest import make_assets, make_kg, make_tokenizer, tiny_encoder_config
from .transformers_common import common_tests

try:
    ModelTesterMixin, ConfigTester = common_tests()
except Exception as error:  # noqa: BLE001 - no index, no sdist: skip and say why
    pytest.skip(f"transformers' common tests are not available: {error}", allow_module_level=True)

TEXTS = ("john visited paris and unknownia .", "berlin is a city in germany", "mary works for acme bank in london .")

#: common tests that cannot apply to keplm's models, by name, with the reason
CANNOT_APPLY: dict[str, str] = {
    "test_training_gradient_checkpointing_use_reentrant_true": (
        "refused by design with a ValueError naming use_reentrant=False: KFM layers read knowledge vectors computed "
        "outside the checkpointed layers, which reentrant recomputation would backpropagate through twice "
        "(tests/test_transformers_conventions.py)"
    ),
    "test_eager_matches_sdpa_inference_*": (
        "slices every input by row to build left/right padded batches; the knowledge inputs are one flat batched "
        "graph (nodes and edges of all sentences), which cannot be sliced by row"
    ),
}


class KalaWithAssetsForTokenClassification(KalaForTokenClassification):
    """KALA token classification that holds its knowledge assets from construction (named so that transformers picks
    the token-classification loss from the class name), as every keplm model built with
    ``from_base_pretrained`` or loaded does: the common tests build models from a config (``model_class(config)``),
    and a keplm model without assets refuses to save (``tests/test_transformers_conventions.py``)."""

    def __init__(self, config):
        super().__init__(config)
        self.set_knowledge_assets(ASSETS)


TOKENIZER, KG = make_tokenizer(), make_kg()
ASSETS = make_assets(KG)


class KalaModelTester:
    """A tiny KALA (relational retrieval, KFM at the last layer) and a batch of three linked sentences."""

    def __init__(self, parent, num_labels: int = 3):
        self.parent = parent
        self.processor = KalaProcessor(TOKENIZER, ASSETS)
        encoder = tiny_encoder_config(TOKENIZER)
        self.batch_size, self.num_hidden_layers = len(TEXTS), encoder.num_hidden_layers
        self.num_attention_heads, self.hidden_size = encoder.num_attention_heads, encoder.hidden_size
        self.vocab_size, self.num_labels, self.is_training = encoder.vocab_size, num_labels, True

    def get_config(self) -> KalaConfig:
        return KalaConfig(
            encoder_config=tiny_encoder_config(TOKENIZER),
            retrieval_mode="relational",
            kfm_layers=[-1],
            entity_vocab_size=ASSETS.num_entities,
            num_relations=ASSETS.num_relations,
            num_labels=self.num_labels,
        )

    def prepare_config_and_inputs_for_common(self):
        config = self.get_config()
        model = KalaWithAssetsForTokenClassification(self.get_config())  # building a model sets its config's attention
        batch = KeplmDataCollator.from_processor(self.processor, model)([self.processor(text) for text in TEXTS])
        self.seq_length = batch["input_ids"].shape[1]
        return config, dict(batch)


def _skipping(names: dict[str, str]):
    """A class decorator: each named common test (or family, by prefix ending in ``*``) skipped with its reason."""

    def decorate(cls):
        for name in dir(cls):
            for pattern, reason in names.items():
                if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                    setattr(cls, name, unittest.skip(reason)(lambda self: None))
        return cls

    return decorate


@_skipping(CANNOT_APPLY)
class KalaForTokenClassificationCommonTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (KalaWithAssetsForTokenClassification,)

    def setUp(self):
        torch.manual_seed(0)
        self.model_tester = KalaModelTester(self)
        self.model_tester.prepare_config_and_inputs_for_common()  # sets seq_length

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        """The mixin adds labels for the model classes its mappings name; keplm's are registered, not named there:
        token labels for the token classifier, as the mixin gives BERT's."""
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels)
        if return_labels:
            shape = inputs_dict["input_ids"].shape
            inputs_dict["labels"] = torch.zeros(shape, dtype=torch.long, device=inputs_dict["input_ids"].device)
        return inputs_dict
