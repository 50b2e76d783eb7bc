from .alignment import char_spans_to_token_spans, encode_entities, word_offsets
from .processing_kala import KalaProcessor
from .processing_relation_extraction import RelationExtractionProcessor
from .processing_roof_transformer import RoofTransformerProcessor
from .processing_trelm import TrelmProcessor
from .processing_utils import KeplmProcessor, tokenizer_fingerprint

__all__ = [
    "KeplmProcessor",
    "KalaProcessor",
    "RelationExtractionProcessor",
    "RoofTransformerProcessor",
    "TrelmProcessor",
    "char_spans_to_token_spans",
    "encode_entities",
    "tokenizer_fingerprint",
    "word_offsets",
]
