"""transformers' own common model and config tests (``ModelTesterMixin``, ``ConfigTester`` of the installed version,
from its source distribution: ``tests/transformers_common.py``) run against keplm's model classes, with testers
built like ``BertModelTester`` / ``LukeModelTester``: the knowledge inputs are built beside ``input_ids`` by the
method's processor and collator (LUKE's tester builds its entity inputs beside the text the same way).

Every common test that cannot apply to a keplm model is skipped by name with its reason in ``CANNOT_APPLY``;
everything else must pass. Without the source distribution (no package index) the whole module skips, saying why.
"""

from __future__ import annotations

import re
import unittest

import pytest
import torch

from keplm import (
    KalaConfig,
    KalaForConditionalGeneration,
    KalaForQuestionAnswering,
    KalaForTokenClassification,
    KalaModel,
    KalaProcessor,
    KeplmDataCollator,
    RoofTransformerForQuestionAnswering,
    RoofTransformerForSequenceClassification,
    RoofTransformerModel,
    TrelmConfig,
    TrelmForMaskedLM,
    TrelmModel,
    TrelmProcessor,
)
from keplm.knowledge import KnowledgeAssets
from keplm.modeling.modeling_relation_extraction import KeplmForRelationExtraction

from .conformance_cases import RELATION_EXTRACTION, Ingredients
from .conformance_cases import ROOF as ROOF_CASE
from .conftest import make_assets, make_kg, make_tokenizer, tiny_encoder_config
from .seq2seq_fixtures import seq2seq_tokenizer, t5_config
from .test_trelm import with_kge
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


TOKENIZER, KG = make_tokenizer(), make_kg()
ASSETS = make_assets(KG)


def with_assets(model_class, assets):
    """``model_class`` holding ``assets`` from construction, as every keplm model built with
    ``from_base_pretrained`` or loaded does: the common tests build models from a config (``model_class(config)``),
    and a keplm model without assets refuses to save. The name keeps the head's suffix, from which transformers picks
    the loss (``ForTokenClassification``, ``ForQuestionAnswering``, ...)."""

    def __init__(self, config):
        model_class.__init__(self, config)
        self.set_knowledge_assets(assets)

    name = re.sub(r"^(Kala|Trelm|RoofTransformer)", r"\1WithAssets", model_class.__name__)
    return type(name, (model_class,), {"__init__": __init__, "__module__": __name__})


class KalaModelTester:
    """A tiny KALA (relational retrieval, KFM at the last layer) and a batch of three linked sentences."""

    def __init__(self, parent, model_class, num_labels: int = 3):
        self.parent, self.model_class = parent, model_class
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
        model = self.model_class(self.get_config())  # building a model sets its config's attention
        batch = KeplmDataCollator.from_processor(self.processor, model)([self.processor(text) for text in TEXTS])
        self.seq_length = batch["input_ids"].shape[1]
        return config, dict(batch)


class TrelmModelTester(KalaModelTester):
    """A tiny TRELM (4-d KG embeddings) and a batch of three sentences with their entity annotations."""

    def __init__(self, parent, model_class):
        super().__init__(parent, model_class)
        self.assets = TRELM_ASSETS
        self.processor = TrelmProcessor(TOKENIZER, self.assets)

    def get_config(self) -> TrelmConfig:
        return TrelmConfig(
            encoder_config=tiny_encoder_config(TOKENIZER),
            entity_vocab_size=self.assets.num_entities,
            kge_dim=4,
            memory_window=1,
            routing_fraction=0.25,
            routing_steps=4,
        )

    def prepare_config_and_inputs_for_common(self):
        config = self.get_config()
        rows = self.processor.prepare_pretraining_features({"text": list(TEXTS)})
        batch = KeplmDataCollator.from_processor(self.processor)(
            [{k: v[i] for k, v in rows.items()} for i in range(len(TEXTS))]
        )
        self.seq_length = batch["input_ids"].shape[1]
        return config, {k: v for k, v in batch.items() if k != "labels"}


class CaseModelTester:
    """A tester built from a conformance case (``tests/conformance_cases.py``): the case's tiny config and its batch
    of raw examples through the method's processor and collator."""

    case = None

    def __init__(self, parent, model_class):
        self.parent, self.model_class = parent, model_class
        model, self.processor = self.case.build(Ingredients(TOKENIZER, KG, ASSETS))
        encoder = model.config.encoder_config
        self.num_hidden_layers, self.num_attention_heads = encoder.num_hidden_layers, encoder.num_attention_heads
        self.hidden_size, self.vocab_size, self.is_training = encoder.hidden_size, encoder.vocab_size, True
        self.config = model.config

    def get_config(self):
        return type(self.config).from_dict(self.config.to_dict())

    def prepare_config_and_inputs_for_common(self):
        batch = self.case.batch(self.processor, self.model_class(self.get_config()))
        self.batch_size, self.seq_length = batch["input_ids"].shape[:2]
        return self.get_config(), dict(batch)


class RoofModelTester(CaseModelTester):
    case = ROOF_CASE


class RelationExtractionModelTester(CaseModelTester):
    case = RELATION_EXTRACTION


def _skipping(names: dict[str, str]):
    """A class decorator: each named common test (or family, by prefix ending in ``*``) skipped with its reason."""

    def decorate(cls):
        for name in dir(cls):
            for pattern, reason in names.items():
                if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                    setattr(cls, name, unittest.skip(reason)(lambda self: None))
        return cls

    return decorate


class KeplmCommonTest(ModelTesterMixin):
    """The mixin's setup for one keplm model class: ``model_tester_class`` builds config and inputs; ``labels``
    makes the labels the mixin gives the model classes its mappings name (keplm's are registered, not named
    there)."""

    model_tester_class = KalaModelTester
    #: the method's own settings for ConfigTester (its nested encoder config keeps its default)
    config_kwargs = {"entity_vocab_size": 5, "retrieval_mode": "relational", "kfm_layers": [-1]}

    def setUp(self):
        torch.manual_seed(0)
        self.model_tester = self.model_tester_class(self, self.all_model_classes[0])
        self.model_tester.prepare_config_and_inputs_for_common()  # sets seq_length

    def test_config(self):
        """transformers' ConfigTester on the method's config: its common checks but ``check_config_arguments_init``,
        whose keyword table lives in a test file the sdist does not ship (``tests/transformers_common.py``)."""
        config_class = type(self.model_tester.get_config())
        tester = ConfigTester(self, config_class=config_class, has_text_modality=False, **self.config_kwargs)
        for check in (
            "create_and_test_config_common_properties",
            "create_and_test_config_to_json_string",
            "create_and_test_config_to_json_file",
            "create_and_test_config_from_and_save_pretrained",
            "create_and_test_config_from_and_save_pretrained_subfolder",
            "create_and_test_config_from_and_save_pretrained_composite",
            "create_and_test_config_with_num_labels",
            "create_and_test_config_from_pretrained_custom_kwargs",
            "check_config_can_be_init_without_params",
        ):
            getattr(tester, check)()

    def labels(self, inputs: dict) -> dict:
        shape = inputs["input_ids"].shape
        return {"labels": torch.zeros(shape, dtype=torch.long)}

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels)
        return {**inputs_dict, **self.labels(inputs_dict)} if return_labels else inputs_dict


@_skipping(CANNOT_APPLY)
class KalaForTokenClassificationCommonTest(KeplmCommonTest, unittest.TestCase):
    all_model_classes = (with_assets(KalaForTokenClassification, ASSETS),)


@_skipping(CANNOT_APPLY)
class KalaForQuestionAnsweringCommonTest(KeplmCommonTest, unittest.TestCase):
    all_model_classes = (with_assets(KalaForQuestionAnswering, ASSETS),)

    def labels(self, inputs: dict) -> dict:
        zeros = torch.zeros(inputs["input_ids"].shape[0], dtype=torch.long)
        return {"start_positions": zeros, "end_positions": zeros}


#: what cannot apply to KALA's base model (AutoModel) besides the above
BASE_MODEL = {
    "test_training*": (
        "a base model returns no loss; the mixin leaves base models out of its training tests by the names in its "
        "own mappings, where registered classes are not"
    ),
    "test_batching_equivalence": (
        "entity_representations holds one row per graph node of the whole batch (flat), which the test cannot "
        "slice by sentence"
    ),
    "test_model_outputs_equivalence": (
        "the test builds its failure message eagerly by subtracting the two outputs, which torch refuses for the "
        "boolean entity_has_knowledge mask even when both are equal"
    ),
}


@_skipping({**CANNOT_APPLY, **BASE_MODEL})
class KalaModelCommonTest(KeplmCommonTest, unittest.TestCase):
    all_model_classes = (with_assets(KalaModel, ASSETS),)

    def labels(self, inputs: dict) -> dict:
        return {}


TRELM_ASSETS = with_kge(KG)


TRELM_BUFFERS = {
    "test_init_weights_can_init_buffers": (
        "the tester's class fills the KG-embedding buffers from its knowledge assets at construction, as a "
        "loaded TRELM does; init_weights resets them to the zeros a TRELM built from its config holds "
        "(tests/test_transformers_conventions.py::test_trelm_init_weights_sets_the_kg_embedding_buffers)"
    ),
}


@_skipping({**CANNOT_APPLY, **TRELM_BUFFERS})
class TrelmForMaskedLMCommonTest(KeplmCommonTest, unittest.TestCase):
    all_model_classes = (with_assets(TrelmForMaskedLM, TRELM_ASSETS),)
    model_tester_class = TrelmModelTester
    config_kwargs = {"entity_vocab_size": 5, "kge_dim": 4, "routing_steps": 4}


ROOF_ASSETS = KnowledgeAssets(kg=KG)


#: Roof-Transformer's text encoders, knowledge encoder and roof are separate stacks: it refuses per-layer outputs
#: with a ValueError saying so (tests/test_transformers_conventions.py), and these tests ask for them
ROOF_PER_LAYER = "Roof-Transformer returns no per-layer hidden states or attentions (a ValueError says why)"
ROOF = {
    name: ROOF_PER_LAYER
    for name in (
        "test_attention_outputs",
        "test_batching_equivalence",
        "test_hidden_states_output",
        "test_model_outputs_equivalence",
        "test_retain_grad_hidden_states_attentions",
        "test_can_capture_specific_layers_hidden_states",
        "test_capture_outputs_decorator",
    )
}


@_skipping({**CANNOT_APPLY, **ROOF})
class RoofTransformerForSequenceClassificationCommonTest(KeplmCommonTest, unittest.TestCase):
    all_model_classes = (with_assets(RoofTransformerForSequenceClassification, ROOF_ASSETS),)
    model_tester_class = RoofModelTester
    config_kwargs = {"fusion_layers": 1, "max_knowledge_length": 40}

    def labels(self, inputs: dict) -> dict:
        return {"labels": torch.zeros(inputs["input_ids"].shape[0], dtype=torch.long)}


@_skipping(
    {
        **CANNOT_APPLY,
        "test_batching_equivalence": (
            "slices every input by row; edge_index holds the entity pairs of the whole batch ([2, pairs]), which a "
            "row cannot cut (keplm's by-example check: tests/test_conformance.py)"
        ),
    }
)
class KeplmForRelationExtractionCommonTest(KeplmCommonTest, unittest.TestCase):
    all_model_classes = (KeplmForRelationExtraction,)
    model_tester_class = RelationExtractionModelTester
    config_kwargs = {"bilinear_dim": 8}

    def labels(self, inputs: dict) -> dict:
        return {}


@_skipping({**CANNOT_APPLY, **ROOF})
class RoofTransformerForQuestionAnsweringCommonTest(RoofTransformerForSequenceClassificationCommonTest):
    all_model_classes = (with_assets(RoofTransformerForQuestionAnswering, ROOF_ASSETS),)

    def labels(self, inputs: dict) -> dict:
        zeros = torch.zeros(inputs["input_ids"].shape[0], dtype=torch.long)
        return {"start_positions": zeros, "end_positions": zeros}


@_skipping({**CANNOT_APPLY, **ROOF, **BASE_MODEL})
class RoofTransformerModelCommonTest(RoofTransformerForSequenceClassificationCommonTest):
    all_model_classes = (with_assets(RoofTransformerModel, ROOF_ASSETS),)

    def labels(self, inputs: dict) -> dict:
        return {}


@_skipping({**CANNOT_APPLY, **BASE_MODEL, **TRELM_BUFFERS})
class TrelmModelCommonTest(TrelmForMaskedLMCommonTest):
    all_model_classes = (with_assets(TrelmModel, TRELM_ASSETS),)

    def labels(self, inputs: dict) -> dict:
        return {}


S2S_TOKENIZER = seq2seq_tokenizer()


class KalaT5ModelTester(KalaModelTester):
    """A tiny KALA on T5 (KFM in both encoder layers) and a batch of three linked sentences with decoder inputs."""

    def __init__(self, parent, model_class):
        super().__init__(parent, model_class)
        self.processor = KalaProcessor(S2S_TOKENIZER, ASSETS)
        encoder = t5_config(len(S2S_TOKENIZER))
        self.num_hidden_layers, self.num_attention_heads = encoder.num_layers, encoder.num_heads
        self.hidden_size, self.vocab_size = encoder.d_model, encoder.vocab_size

    def get_config(self) -> KalaConfig:
        return KalaConfig(
            encoder_config=t5_config(len(S2S_TOKENIZER)),
            retrieval_mode="relational",
            kfm_layers=[0, 1],
            entity_vocab_size=ASSETS.num_entities,
            num_relations=ASSETS.num_relations,
        )

    def prepare_config_and_inputs_for_common(self):
        config, batch = super().prepare_config_and_inputs_for_common()
        self.encoder_seq_length = self.seq_length
        decoder = S2S_TOKENIZER(["paris", "berlin is", "acme bank"], padding=True, return_tensors="pt")
        batch["decoder_input_ids"], batch["decoder_attention_mask"] = decoder.input_ids, decoder.attention_mask
        self.decoder_seq_length = decoder.input_ids.shape[1]
        return config, batch


@_skipping(
    {
        **CANNOT_APPLY,
        "test_generation_tester_mixin_inheritance": (
            "transformers' GenerationTesterMixin is not in its sdist (tests/generation/ is not shipped), so a "
            "generating model's tester cannot inherit it; keplm's generation tests: tests/test_kala_generation.py"
        ),
    }
)
class KalaForConditionalGenerationCommonTest(KeplmCommonTest, unittest.TestCase):
    all_model_classes = (with_assets(KalaForConditionalGeneration, ASSETS),)
    model_tester_class = KalaT5ModelTester
    is_encoder_decoder = True

    def labels(self, inputs: dict) -> dict:
        return {"labels": inputs["decoder_input_ids"].clone()}
