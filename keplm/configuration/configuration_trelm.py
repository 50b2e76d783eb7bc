"""Configuration of TRELM (Yan et al., "TRELM: Towards Robust and Efficient Pre-training for Knowledge-Enhanced
Language Models")."""

from __future__ import annotations

from keplm.configuration.method_card import MethodCard, Paper, misc_bibtex

from .base import KeplmConfig

CKA_SAMPLERS = ("uniform", "frequency")
INJECTION_MODES = ("replace", "add")

_TITLE = "TRELM: Towards Robust and Efficient Pre-training for Knowledge-Enhanced Language Models"
_AUTHORS = (
    "Junbing Yan",
    "Chengyu Wang",
    "Taolin Zhang",
    "Xiaofeng He",
    "Jun Huang",
    "Longtao Huang",
    "Hui Xue",
    "Wei Zhang",
)
#: the paper as its own text states it (no venue or URL that we could check)
TRELM_PAPER = Paper(
    title=_TITLE, authors=_AUTHORS, bibtex=misc_bibtex("yan-trelm", "{TRELM}: " + _TITLE.split(": ", 1)[1], _AUTHORS)
)


class TrelmCard(MethodCard):
    """TRELM's words in its model cards: the entity vocabulary of the pre-training mentions, injected and decoded
    tokens."""

    name = "TRELM"
    noun = "TRELM model"
    paper = TRELM_PAPER
    knowledge_section = True
    entity_rows_label = "entity vocabulary"
    entity_rows_source = "mentioned in the pre-training"

    def knowledge_rows(self, processor, metrics: dict) -> list[tuple[str, str]]:
        """Entity, injected (3.1) and CKA target (eq. 2) tokens per pre-training example."""
        rows = []
        examples = metrics.get("data_features_examples")
        for label, key in (
            ("entity tokens", "data_features_entity_tokens"),
            ("injected tokens (important entities)", "data_features_injected_tokens"),
            ("CKA target tokens (tail entities decoded)", "data_features_cka_target_tokens"),
        ):
            if metrics.get(key) is not None and examples:
                rows.append((f"{label} per pre-training example", f"{metrics[key] / examples:.2f}"))
        return rows


class TrelmConfig(KeplmConfig):
    r"""Configuration for [`TrelmModel`] and [`TrelmForMaskedLM`]: a BERT-like encoder with an MLM head and TRELM's
    four mechanisms, each of which can be switched off for the paper's ablation (Table 6).

    Args:
        encoder_config: config of the encoder (a stock HF BERT-like model).
        use_injection: noise-aware knowledge injection (paper 3.1): at the tokens of important entities the input
            embedding is a projection of the entity's KG embedding (`kge_dim`, from the KG asset's
            `entity_vectors`).
        injection_mode: `"replace"` (the paper: the entity's input embeddings are replaced) or `"add"` (added to the
            token embeddings).
        kge_dim: dimension of the KG embeddings (set from the knowledge assets by `from_base_pretrained`).
        use_cka: contrastive knowledge assessing (eq. 2): the masked tokens of each fact's tail entity are scored
            against `cka_num_negatives` sampled negatives; total loss θ·MLM + (1−θ)·CKA (eq. 3, θ = `cka_weight`).
        cka_sampler: negative sampler `Q`: `"uniform"` over entities or `"frequency"` (entities drawn by corpus
            frequency); a negative token is the same-position token of the negative entity's name.
        use_memory_bank: knowledge-augmented memory bank (3.2, eq. 4–8): local memory = moving average
            (`memory_momentum` γ) of the windowed mean (half-window `memory_window` k) of output states around
            each entity mention; global memory = mean [CLS] output over the contexts of the entity; mixed into the
            input of important entities with weight λ = `memory_lambda` / `memory_decay`^epoch (eq. 7–8).
            Training state only: never saved with the model.
        use_routing: dynamic knowledge routing (3.3, eq. 9–12): integrated-gradient attribution of the FFN
            intermediate neurons for the CKA targets, `routing_steps` (m) Riemann steps in one batched pass (or
            `routing_batch_steps` at a time: the same sum in less memory), every `routing_interval` steps; only the
            top `routing_fraction` neurons per layer (their input row and bias in the FFN's first linear layer,
            their column in its second) and the modules named in `routing_always_train` are trained.
        routing_always_train: parameter-name prefixes that train besides the knowledge paths (default: the MLM
            head transform and the knowledge projection).
    """

    model_type = "trelm"
    method_card = TrelmCard()
    encoder_names = ("encoder",)
    card_settings = (
        "use_injection",
        "injection_mode",
        "use_cka",
        "cka_weight",
        "cka_num_negatives",
        "cka_sampler",
        "use_memory_bank",
        "memory_window",
        "memory_momentum",
        "memory_lambda",
        "memory_decay",
        "use_routing",
        "routing_fraction",
        "routing_steps",
        "routing_interval",
    )

    use_injection: bool = True
    injection_mode: str = "replace"
    kge_dim: int | None = None
    use_cka: bool = True
    cka_weight: float = 0.5
    cka_num_negatives: int = 16
    cka_sampler: str = "uniform"
    use_memory_bank: bool = True
    memory_window: int = 16
    memory_momentum: float = 0.1
    memory_lambda: float = 0.5
    memory_decay: float = 2.0
    use_routing: bool = True
    routing_fraction: float = 0.1
    routing_steps: int = 20
    routing_batch_steps: int | None = None
    routing_interval: int = 100
    routing_always_train: list[str] | None = None
    entity_vocab_size: int = 1
    tie_word_embeddings: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.injection_mode not in INJECTION_MODES:
            raise ValueError(f"injection_mode must be one of {INJECTION_MODES}, got {self.injection_mode!r}")
        if self.cka_sampler not in CKA_SAMPLERS:
            raise ValueError(f"cka_sampler must be one of {CKA_SAMPLERS}, got {self.cka_sampler!r}")
        for name, low, high in (
            ("cka_weight", 0.0, 1.0),
            ("memory_momentum", 0.0, 1.0),
            ("memory_lambda", 0.0, 1.0),
            ("routing_fraction", 0.0, 1.0),
        ):
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{name} must lie in [{low}, {high}], got {value}")
        for name in ("cka_num_negatives", "routing_steps", "routing_interval", "routing_batch_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.memory_window < 0 or self.memory_decay < 1:
            raise ValueError(
                f"memory_window must be >= 0 and memory_decay >= 1 (eq. 8), got {self.memory_window}, "
                f"{self.memory_decay}"
            )
        if self.routing_always_train is None:
            self.routing_always_train = ["lm_head.transform", "trelm.injection"]

    @property
    def uses_knowledge(self) -> bool:
        """Whether the model reads entity inputs (injection or the memory bank)."""
        return self.use_injection or self.use_memory_bank

    @property
    def uses_knowledge_assets(self) -> bool:
        return self.use_injection or self.use_memory_bank or self.use_cka


__all__ = ["TrelmConfig", "CKA_SAMPLERS", "INJECTION_MODES"]
