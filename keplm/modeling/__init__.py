from .base import KeplmPreTrainedModel
from .modeling_kala import (
    KalaForQuestionAnswering,
    KalaForTokenClassification,
    KalaModel,
    KalaModelOutput,
    KalaPreTrainedModel,
)
from .modeling_relation_extraction import KeplmForRelationExtraction, RelationExtractionOutput

__all__ = [
    "KeplmPreTrainedModel",
    "KalaModel",
    "KalaModelOutput",
    "KalaPreTrainedModel",
    "KalaForTokenClassification",
    "KalaForQuestionAnswering",
    "KeplmForRelationExtraction",
    "RelationExtractionOutput",
]
