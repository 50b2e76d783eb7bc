"""Configuration of Roof-Transformer (Liao et al., "Roof-Transformer: Divided and Joined Understanding with
Knowledge Enhancement")."""

from __future__ import annotations

from .base import KeplmConfig, encoder_subconfigs

FUSIONS = ("transformer", "transformer_random", "lstm", "linear", "none")
SEGMENTATIONS = ("type1", "type2")
KNOWLEDGE_ENCODINGS = ("joint", "cached", "none")


class RoofTransformerConfig(KeplmConfig):
    r"""Configuration for [`RoofTransformerModel`] and its heads.

    Args:
        encoder_config: config of the TASK encoder (text); `knowledge_encoder_config` of the KB encoder (knowledge),
            by default a copy of it (paper: two BERTs of the same checkpoint, separate weights).
        fusion: the "roof" over the concatenated encoder outputs (paper 3.1, 4.5): `"transformer"` (transformer
            layers initialised from the last `fusion_layers` layers of the text encoder's checkpoint; paper best:
            4 for QA, 3 for GLUE), `"transformer_random"` (the same, randomly initialised), `"lstm"`
            (bidirectional), `"linear"`, or `"none"` (no roof and no knowledge encoder: the one-encoder baseline).
        fusion_layers: depth of a transformer roof.
        segmentation: `"type2"` (every KB token segment A, every TASK token segment B; paper best) or `"type1"` (KB
            tokens A and padding B; TASK question A, passage B, padding A) — the token types each encoder reads
            (paper 4.5).
        knowledge_encoding: `"joint"` (the KB encoder reads the concatenated knowledge and trains), `"cached"`
            (paper 4.4: a frozen KB encoder encodes each triple alone, `[CLS] triple [SEP]`, once; its encodings
            are cached on disk and reused across epochs and runs) or `"none"`.
        max_knowledge_length: knowledge tokens after [CLS] (paper: 511).
        num_text_encoders: text encoders with separate weights, each reading the next window of
            `max_position_embeddings` tokens of a text longer than one encoder's window (paper 3.1).
        classifier_dropout: dropout before the task head; `None` = the encoder's hidden dropout.
    """

    model_type = "roof_transformer"
    encoder_names = ("encoder", "knowledge_encoder")
    card_settings = ("fusion", "fusion_layers", "segmentation", "knowledge_encoding", "max_knowledge_length",
                     "num_text_encoders")

    locals().update(encoder_subconfigs("encoder", "knowledge_encoder"))

    knowledge_encoder_config: dict | None = None
    fusion: str = "transformer"
    fusion_layers: int = 3
    segmentation: str = "type2"
    knowledge_encoding: str = "joint"
    max_knowledge_length: int = 511
    num_text_encoders: int = 1
    classifier_dropout: float | None = None

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        for name, value, allowed in (("fusion", self.fusion, FUSIONS), ("segmentation", self.segmentation,
                                     SEGMENTATIONS), ("knowledge_encoding", self.knowledge_encoding,
                                                      KNOWLEDGE_ENCODINGS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if (self.fusion == "none") != (self.knowledge_encoding == "none"):
            raise ValueError("fusion='none' (the one-encoder baseline) goes with knowledge_encoding='none' and "
                             f"vice versa; got fusion={self.fusion!r}, knowledge_encoding={self.knowledge_encoding!r}")
        if self.fusion.startswith("transformer"):
            depth = self.encoder_config.num_hidden_layers
            if not 1 <= self.fusion_layers <= (depth if self.fusion == "transformer" else 64):
                raise ValueError(f"fusion_layers must be in 1..{depth} for a roof copied from the encoder's last "
                                 f"layers, got {self.fusion_layers}")
        if self.num_text_encoders < 1:
            raise ValueError(f"num_text_encoders must be >= 1, got {self.num_text_encoders}")
        if self.uses_knowledge:
            positions = self.knowledge_encoder_config.max_position_embeddings
            if not 1 <= self.max_knowledge_length < positions:
                raise ValueError(f"max_knowledge_length must be in 1..{positions - 1} (the knowledge encoder's "
                                 f"window after [CLS]), got {self.max_knowledge_length}")

    @property
    def uses_knowledge(self) -> bool:
        return self.knowledge_encoding != "none"

    @property
    def uses_knowledge_assets(self) -> bool:
        return self.uses_knowledge

    @property
    def text_window(self) -> int:
        """Tokens one text encoder reads."""
        return self.encoder_config.max_position_embeddings


__all__ = ["RoofTransformerConfig", "FUSIONS", "SEGMENTATIONS", "KNOWLEDGE_ENCODINGS"]
