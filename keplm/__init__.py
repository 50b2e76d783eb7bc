"""keplm: knowledge-enhanced language models native to Hugging Face transformers.

Importing keplm makes its configs, models and processors known to the Auto classes (each method's modeling file
makes its one ``keplm.registration.register_method`` call, through ``AutoConfig.register`` and friends) and its
pipelines to ``pipeline()`` (``PIPELINE_REGISTRY.register_pipeline``).
"""

from .configuration import (
    KalaConfig,
    KeplmConfig,
    RelationExtractionConfig,
    RoofTransformerConfig,
    TrelmConfig,
)
from .data.collator import KeplmDataCollator
from .knowledge import EntityLinker, KnowledgeAnnotation, KnowledgeAssets, KnowledgeGraph
from .modeling import (  # each method's modeling file registers it with the Auto classes (keplm.registration)
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
from .registration import load_plugins
from .tokenization import (
    KalaProcessor,
    KeplmProcessor,
    RelationExtractionProcessor,
    RoofTransformerProcessor,
    TrelmProcessor,
)
from .training.model_card import KeplmCardCallback, KeplmModelCardData
from .training.trainer import KeplmTrainer

__version__ = "0.1.0"

register_pipelines()  # pipeline("keplm-ner"), "keplm-qa", "keplm-text-classification", "keplm-text2text"
load_plugins()  # installed methods of other packages (entry-point group "keplm.methods")

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
