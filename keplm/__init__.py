"""keplm: knowledge-enhanced language models native to Hugging Face transformers.

Importing keplm registers its configs, models and processors with the Auto classes (each method's modeling file
makes its one ``keplm.registration.register_method`` call) and its pipelines.
"""

from .configuration import KalaConfig, KeplmConfig, RelationExtractionConfig, RoofTransformerConfig, TrelmConfig
from .data.collator import KeplmDataCollator
from .knowledge import EntityLinker, KnowledgeAnnotation, KnowledgeAssets, KnowledgeGraph
from .modeling import (
    KalaForConditionalGeneration,
    KalaForQuestionAnswering,
    KalaForTokenClassification,
    KalaModel,
    KeplmForRelationExtraction,
    KeplmPreTrainedModel,
    RelationExtractor,
    RoofTransformerForQuestionAnswering,
    RoofTransformerForSequenceClassification,
    RoofTransformerModel,
    TrelmForMaskedLM,
    TrelmModel,
)
from .pipelines import register_pipelines
from .tokenization import (
    KalaProcessor,
    KeplmProcessor,
    RelationExtractionProcessor,
    RoofTransformerProcessor,
    TrelmProcessor,
)

__version__ = "0.1.0"

register_pipelines()  # pipeline("keplm-ner", ...), pipeline("keplm-qa", ...)


#: imported on use: the Trainer and its card callback pull in accelerate and the training stack
_LAZY = {"KeplmTrainer": ".training.trainer", "KeplmModelCardData": ".training.model_card",
         "KeplmCardCallback": ".training.model_card"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'keplm' has no attribute {name!r}")


__all__ = [
    "KeplmConfig",
    "KeplmPreTrainedModel",
    "KeplmProcessor",
    "KeplmDataCollator",
    "KeplmTrainer",
    "KeplmModelCardData",
    "KeplmCardCallback",
    "KalaConfig",
    "KalaModel",
    "KalaForTokenClassification",
    "KalaForQuestionAnswering",
    "KalaForConditionalGeneration",
    "KalaProcessor",
    "KnowledgeAssets",
    "KnowledgeGraph",
    "KnowledgeAnnotation",
    "EntityLinker",
    "RelationExtractionConfig",
    "KeplmForRelationExtraction",
    "RelationExtractor",
    "RelationExtractionProcessor",
    "RoofTransformerConfig",
    "RoofTransformerModel",
    "RoofTransformerForSequenceClassification",
    "RoofTransformerForQuestionAnswering",
    "RoofTransformerProcessor",
    "TrelmConfig",
    "TrelmModel",
    "TrelmForMaskedLM",
    "TrelmProcessor",
]
