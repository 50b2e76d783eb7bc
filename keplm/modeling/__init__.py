from .base import ExtraLayers, KeplmPreTrainedModel, ParameterGroup
from .modeling_kala import KalaModel, KalaModelOutput, KalaPreTrainedModel
from .modeling_kala_generation import KalaForConditionalGeneration
from .modeling_kala_heads import KalaForQuestionAnswering, KalaForTokenClassification  # registers KALA
from .modeling_relation_extraction import (
    KeplmForRelationExtraction,
    RelationExtractionOutput,
    RelationExtractor,
)
from .modeling_roof_transformer import (
    RoofTransformerForQuestionAnswering,
    RoofTransformerForSequenceClassification,
    RoofTransformerModel,
)
from .modeling_trelm import TrelmForMaskedLM, TrelmMaskedLMOutput, TrelmModel, TrelmPreTrainedModel

__all__ = [
    "KeplmPreTrainedModel",
    "ParameterGroup",
    "ExtraLayers",
    "KalaModel",
    "KalaModelOutput",
    "KalaPreTrainedModel",
    "KalaForTokenClassification",
    "KalaForQuestionAnswering",
    "KalaForConditionalGeneration",
    "KeplmForRelationExtraction",
    "RelationExtractionOutput",
    "RelationExtractor",
    "RoofTransformerModel",
    "RoofTransformerForSequenceClassification",
    "RoofTransformerForQuestionAnswering",
    "TrelmModel",
    "TrelmForMaskedLM",
    "TrelmMaskedLMOutput",
    "TrelmPreTrainedModel",
]
