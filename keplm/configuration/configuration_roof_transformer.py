"""Configuration of Roof-Transformer (Liao et al., "Roof-Transformer: Divided and Joined Understanding with
Knowledge Enhancement")."""

from __future__ import annotations

from keplm.configuration.method_card import MethodCard, Paper, misc_bibtex

from .base import KeplmConfig, encoder_subconfigs

FUSIONS = ("transformer", "transformer_random", "lstm", "linear", "none")
#: token types each encoder reads (paper 4.5); "none": every token type 0, for encoders with one token type
SEGMENTATIONS = ("type1", "type2", "none")
KNOWLEDGE_ENCODINGS = ("joint", "cached", "none")

_TITLE = "Roof-Transformer: Divided and Joined Understanding with Knowledge Enhancement"
_AUTHORS = ("Wei-Lin Liao", "Cheng-En Su", "Wei-Yun Ma")
#: the paper as its own text states it (no venue or URL that we could check)
ROOF_TRANSFORMER_PAPER = Paper(
    title=_TITLE,
    authors=_AUTHORS,
    bibtex=misc_bibtex("liao-roof-transformer", "{Roof-Transformer}: " + _TITLE.split(": ", 1)[1], _AUTHORS),
)


class RoofTransformerCard(MethodCard):
    """Roof-Transformer's words in its model cards: it reads selected triples (no entity rows)."""

    name = "Roof-Transformer"
    noun = "Roof-Transformer model"
    paper = ROOF_TRANSFORMER_PAPER
    knowledge_section = True

    def knowledge_rows(self, processor, metrics: dict) -> list[tuple[str, str]]:
        """Triple selection (paper 3.2) and how often the training examples got triples."""
        rows = []
        settings = [
            f"{name} `{getattr(processor, name)}`"
            for name in ("selection", "verbalization")
            if getattr(processor, name, None)
        ]
        if getattr(processor, "max_knowledge_length", None):
            settings.append(f"at most {processor.max_knowledge_length} knowledge tokens")
        if settings:
            rows.append(("triple selection", ", ".join(settings)))
        examples = metrics.get("knowledge_train_examples")
        if metrics.get("knowledge_train_share_with_knowledge") is not None:
            rows.append(
                ("training examples with any triple", f"{100 * metrics['knowledge_train_share_with_knowledge']:.1f} %")
            )
        if metrics.get("knowledge_train_kept_per_example") is not None and examples:
            rows.append(
                (
                    "triples per training example",
                    f"{metrics['knowledge_train_kept_per_example']:.2f} kept, "
                    f"{metrics.get('knowledge_train_cut', 0) / examples:.2f} cut "
                    "by the knowledge budget",
                )
            )
        return rows


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
            (paper 4.5) — or `"none"` (every token type 0: encoders with one token type, such as RoBERTa and XLM-R
            checkpoints, which cannot read type B).
        knowledge_encoding: `"joint"` (the KB encoder reads the concatenated knowledge and trains), `"cached"`
            (paper 4.4: a frozen KB encoder encodes each triple alone, `[CLS] triple [SEP]`, once; its encodings
            are cached on disk and reused across epochs and runs) or `"none"`.
        max_knowledge_length: knowledge tokens after [CLS] (paper: 511).
        num_text_encoders: text encoders with separate weights, each reading the next window of
            `max_position_embeddings` tokens of a text longer than one encoder's window (paper 3.1).
        classifier_dropout: dropout before the task head; `None` = the encoder's hidden dropout.
    """

    model_type = "roof_transformer"
    method_card = RoofTransformerCard()
    encoder_names = ("encoder", "knowledge_encoder")
    card_settings = (
        "fusion",
        "fusion_layers",
        "segmentation",
        "knowledge_encoding",
        "max_knowledge_length",
        "num_text_encoders",
    )

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
        for name, value, allowed in (
            ("fusion", self.fusion, FUSIONS),
            ("segmentation", self.segmentation, SEGMENTATIONS),
            ("knowledge_encoding", self.knowledge_encoding, KNOWLEDGE_ENCODINGS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if self.segmentation != "none":
            for name, encoder_config in self.encoder_configs().items():
                types = getattr(encoder_config, "type_vocab_size", None)
                if types == 1:  # 0: no token-type embedding at all (DeBERTa), the types are not read
                    raise ValueError(
                        f"segmentation={self.segmentation!r} gives tokens type 1 (segment B, paper 4.5), but the "
                        f"{name} ({encoder_config.model_type}) has type_vocab_size {types}: use segmentation='none' "
                        "(every token type 0), as RoBERTa and XLM-R checkpoints need"
                    )
        if (self.fusion == "none") != (self.knowledge_encoding == "none"):
            raise ValueError(
                "fusion='none' (the one-encoder baseline) goes with knowledge_encoding='none' and "
                f"vice versa; got fusion={self.fusion!r}, knowledge_encoding={self.knowledge_encoding!r}"
            )
        if self.fusion.startswith("transformer"):
            depth = self.encoder_config.num_hidden_layers
            if not 1 <= self.fusion_layers <= (depth if self.fusion == "transformer" else 64):
                raise ValueError(
                    f"fusion_layers must be in 1..{depth} for a roof copied from the encoder's last "
                    f"layers, got {self.fusion_layers}"
                )
        if self.num_text_encoders < 1:
            raise ValueError(f"num_text_encoders must be >= 1, got {self.num_text_encoders}")
        if self.uses_knowledge:
            positions = self.knowledge_encoder_config.max_position_embeddings
            if not 1 <= self.max_knowledge_length < positions:
                raise ValueError(
                    f"max_knowledge_length must be in 1..{positions - 1} (the knowledge encoder's "
                    f"window after [CLS]), got {self.max_knowledge_length}"
                )

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

    @property
    def max_text_length(self) -> int:
        """Tokens of a text: one window per text encoder (paper 3.1)."""
        return self.text_window * self.num_text_encoders


__all__ = ["RoofTransformerConfig", "FUSIONS", "SEGMENTATIONS", "KNOWLEDGE_ENCODINGS"]
