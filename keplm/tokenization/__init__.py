from .alignment import char_spans_to_token_spans, word_offsets
from .processing_kala import KalaProcessor

__all__ = ["KalaProcessor", "char_spans_to_token_spans", "word_offsets"]
