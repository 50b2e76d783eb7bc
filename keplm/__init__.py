"""keplm: knowledge-enhanced language models native to Hugging Face transformers.

Importing keplm makes its configs, models and processors known to the Auto classes (each method's modeling file
makes its one ``keplm.registration.register_method`` call) and its pipelines to ``pipeline()``; both happen on the
first lookup (``keplm.auto_registration``), so ``import keplm`` itself imports no torch.
"""

from .auto_registration import install as _install_auto_registration

__version__ = "0.1.0"

_install_auto_registration()  # AutoConfig / AutoModel* / AutoProcessor / pipeline("keplm-...") know keplm's methods

#: public name -> the submodule it is imported from on first use: ``import keplm`` imports no torch, and the Trainer
#: and its card callback (accelerate, the training stack) only when asked for
_LAZY = {
    **dict.fromkeys(("KalaConfig", "KeplmConfig", "RelationExtractionConfig", "RoofTransformerConfig", "TrelmConfig"),
                    ".configuration"),
    "KeplmDataCollator": ".data.collator",
    **dict.fromkeys(("EntityLinker", "KnowledgeAnnotation", "KnowledgeAssets", "KnowledgeGraph"), ".knowledge"),
    **dict.fromkeys(("KalaForConditionalGeneration", "KalaForQuestionAnswering", "KalaForTokenClassification",
                     "KalaModel", "KeplmForRelationExtraction", "KeplmPreTrainedModel", "RelationExtractor",
                     "RoofTransformerForQuestionAnswering", "RoofTransformerForSequenceClassification",
                     "RoofTransformerModel", "TrelmForMaskedLM", "TrelmModel"), ".modeling"),
    **dict.fromkeys(("KalaProcessor", "KeplmProcessor", "RelationExtractionProcessor", "RoofTransformerProcessor",
                     "TrelmProcessor"), ".tokenization"),
    "KeplmTrainer": ".training.trainer",
    **dict.fromkeys(("KeplmModelCardData", "KeplmCardCallback"), ".training.model_card"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'keplm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


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
