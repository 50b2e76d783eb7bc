from .base import ExtraLayers, KeplmPreTrainedModel, ParameterGroup
from .modeling_kala import (
    KalaForQuestionAnswering,
    KalaForTokenClassification,
    KalaModel,
    KalaModelOutput,
    KalaPreTrainedModel,
)
from .modeling_relation_extraction import (
    KeplmForRelationExtraction,
    RelationExtractionOutput,
    RelationExtractor,
)

__all__ = [
    "KeplmPreTrainedModel",
    "ParameterGroup",
    "ExtraLayers",
    "KalaModel",
    "KalaModelOutput",
    "KalaPreTrainedModel",
    "KalaForTokenClassification",
    "KalaForQuestionAnswering",
    "KeplmForRelationExtraction",
    "RelationExtractionOutput",
    "RelationExtractor",
]
