"""keplm: knowledge-enhanced language models native to Hugging Face transformers.

Importing keplm registers its configs and models with the Auto classes.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForQuestionAnswering,
    AutoModelForTokenClassification,
)

from .configuration import KalaConfig, RelationExtractionConfig
from .data.collator import KnowledgeGraphCollator
from .hub.assets import KnowledgeAssets
from .knowledge import EntityLinker, KnowledgeAnnotation, KnowledgeGraph
from .knowledge.relation_extraction import RelationExtractor
from .modeling import (
    KalaForQuestionAnswering,
    KalaForTokenClassification,
    KalaModel,
    KeplmForRelationExtraction,
)
from .tokenization import KalaProcessor

__version__ = "0.1.0"

AutoConfig.register("kala", KalaConfig, exist_ok=True)
AutoModel.register(KalaConfig, KalaModel, exist_ok=True)
AutoModelForTokenClassification.register(KalaConfig, KalaForTokenClassification, exist_ok=True)
AutoModelForQuestionAnswering.register(KalaConfig, KalaForQuestionAnswering, exist_ok=True)
# pair-level relation extraction (KALA appendix A) has no task-specific Auto class
AutoConfig.register("keplm_relation_extraction", RelationExtractionConfig, exist_ok=True)
AutoModel.register(RelationExtractionConfig, KeplmForRelationExtraction, exist_ok=True)

__all__ = [
    "KalaConfig",
    "KalaModel",
    "KalaForTokenClassification",
    "KalaForQuestionAnswering",
    "KalaProcessor",
    "KnowledgeAssets",
    "KnowledgeGraph",
    "KnowledgeAnnotation",
    "EntityLinker",
    "KnowledgeGraphCollator",
    "RelationExtractionConfig",
    "KeplmForRelationExtraction",
    "RelationExtractor",
]
