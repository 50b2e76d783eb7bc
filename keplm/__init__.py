"""keplm: knowledge-enhanced language models native to Hugging Face transformers.

Importing keplm registers its configs, models and processors with the Auto classes.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoProcessor,
)

from .configuration import KalaConfig, KeplmConfig, RelationExtractionConfig, RoofTransformerConfig, TrelmConfig
from .data.collator import KeplmDataCollator
from .knowledge import EntityLinker, KnowledgeAnnotation, KnowledgeAssets, KnowledgeGraph
from .modeling import (
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
from .tokenization import KalaProcessor, KeplmProcessor, RoofTransformerProcessor, TrelmProcessor

__version__ = "0.1.0"

AutoConfig.register("kala", KalaConfig, exist_ok=True)
AutoModel.register(KalaConfig, KalaModel, exist_ok=True)
AutoModelForTokenClassification.register(KalaConfig, KalaForTokenClassification, exist_ok=True)
AutoModelForQuestionAnswering.register(KalaConfig, KalaForQuestionAnswering, exist_ok=True)
AutoProcessor.register(KalaConfig, KalaProcessor, exist_ok=True)
# pair-level relation extraction (KALA appendix A) has no task-specific Auto class
AutoConfig.register("keplm_relation_extraction", RelationExtractionConfig, exist_ok=True)
AutoModel.register(RelationExtractionConfig, KeplmForRelationExtraction, exist_ok=True)
AutoConfig.register("roof_transformer", RoofTransformerConfig, exist_ok=True)
AutoModel.register(RoofTransformerConfig, RoofTransformerModel, exist_ok=True)
AutoModelForSequenceClassification.register(RoofTransformerConfig, RoofTransformerForSequenceClassification,
                                            exist_ok=True)
AutoModelForQuestionAnswering.register(RoofTransformerConfig, RoofTransformerForQuestionAnswering, exist_ok=True)
AutoProcessor.register(RoofTransformerConfig, RoofTransformerProcessor, exist_ok=True)
AutoConfig.register("trelm", TrelmConfig, exist_ok=True)
AutoModel.register(TrelmConfig, TrelmModel, exist_ok=True)
AutoModelForMaskedLM.register(TrelmConfig, TrelmForMaskedLM, exist_ok=True)
AutoProcessor.register(TrelmConfig, TrelmProcessor, exist_ok=True)
register_pipelines()  # pipeline("keplm-ner", ...), pipeline("keplm-qa", ...)



def __getattr__(name: str):
    if name == "KeplmTrainer":  # imported on use: the Trainer pulls in accelerate and the training stack
        from .training.trainer import KeplmTrainer

        return KeplmTrainer
    raise AttributeError(f"module 'keplm' has no attribute {name!r}")


__all__ = [
    "KeplmConfig",
    "KeplmPreTrainedModel",
    "KeplmProcessor",
    "KeplmDataCollator",
    "KeplmTrainer",
    "KalaConfig",
    "KalaModel",
    "KalaForTokenClassification",
    "KalaForQuestionAnswering",
    "KalaProcessor",
    "KnowledgeAssets",
    "KnowledgeGraph",
    "KnowledgeAnnotation",
    "EntityLinker",
    "RelationExtractionConfig",
    "KeplmForRelationExtraction",
    "RelationExtractor",
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
