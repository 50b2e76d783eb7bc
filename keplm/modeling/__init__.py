from .base import KeplmPreTrainedModel
from .modeling_kala import (
    KalaForQuestionAnswering,
    KalaForTokenClassification,
    KalaModel,
    KalaModelOutput,
    KalaPreTrainedModel,
)

__all__ = [
    "KeplmPreTrainedModel",
    "KalaModel",
    "KalaModelOutput",
    "KalaPreTrainedModel",
    "KalaForTokenClassification",
    "KalaForQuestionAnswering",
]
