"""Configuration of KALA (Kang et al., 2022, "KALA: Knowledge-Augmented Language Model Adaptation")."""

from __future__ import annotations

from keplm.configuration.method_card import LINKING_DETAIL_OPTIONS, LINKING_OPTIONS, MethodCard, Paper

from .base import KeplmConfig

RETRIEVAL_MODES = ("relational", "pointwise", "none")
#: messages of the relational retrieval: "entity" (KALA eq. 3, e_j) or "composition" (φ(e_j, r_ij), beyond the paper)
RELATION_MESSAGES = ("entity", "composition")
#: what a saved config without these keys used: every checkpoint before the options had the paper's settings
LEGACY_SETTINGS = {"relation_message": "entity", "entity_dropout": 0.0}

#: The run scripts' KFM layers, relative to depth: layers 9 and 11 of 12 for both tasks (appendix B.1: "one to three
#: KFM layers at the end"). The paper's QA choice, the last layer only (appendix C.4), leaves no attention after the
#: knowledge enters, and extractive QA must match a candidate's knowledge to the question: with it KALA failed the QA
#: knowledge check, with [-4, -2] or [-3, -2, -1] it passed (docs/knowledge_checks.md).
DEFAULT_KFM_LAYERS = {"qa": [-4, -2], "ner": [-4, -2], "generative_qa": [-4, -2]}


KALA_BIBTEX = "\n".join(
    (
        "@inproceedings{kang-etal-2022-kala,",
        '    title = "{KALA}: Knowledge-Augmented Language Model Adaptation",',
        '    author = "Kang, Minki and Baek, Jinheon and Hwang, Sung Ju",',
        '    booktitle = "Proceedings of the 2022 Conference of the North American Chapter of the Association for '
        'Computational Linguistics: Human Language Technologies",',
        "    month = jul,",
        '    year = "2022",',
        '    address = "Seattle, United States",',
        '    publisher = "Association for Computational Linguistics",',
        '    url = "https://aclanthology.org/2022.naacl-main.379",',
        '    doi = "10.18653/v1/2022.naacl-main.379",',
        '    pages = "5144--5167",',
        "}",
    )
)
#: the paper; its URL (the ACL Anthology's NAACL 2022 page) and the authors' code (printed in the paper's abstract)
#: were checked by hand
KALA_PAPER = Paper(
    title="KALA: Knowledge-Augmented Language Model Adaptation",
    authors=("Minki Kang", "Jinheon Baek", "Sung Ju Hwang"),
    venue="NAACL 2022",
    url="https://aclanthology.org/2022.naacl-main.379",
    bibtex=KALA_BIBTEX,
    code_url="https://github.com/Nardien/KALA",
)
#: KALA's systems (``run_scripts --system``) as the paper names them
SYSTEM_NAMES = {
    "vanilla": "vanilla fine-tuning",
    "more_params": "+1 layer",
    "pointwise": "KALA pointwise",
    "relational": "KALA relational",
}


def ordinal_layers(layers, depth: int | None) -> str:
    """``[8, 10]``, 12 -> "layers 9 and 11 of 12"."""
    names = [str(i + 1) for i in layers]
    text = " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else (names[0] if names else "none")
    return f"{'layers' if len(names) > 1 else 'layer'} {text}" + (f" of {depth}" if depth else "")


class KalaCard(MethodCard):
    """KALA's words in its model cards: its systems, KFM and the retrieval, the limits of linking."""

    name = "KALA"
    noun = "KALA model"
    paper = KALA_PAPER
    knowledge_section = True
    entity_rows_label = "entity memory"
    entity_rows_source = "linked in the training"
    relation_rows = True
    system_names = SYSTEM_NAMES
    knowledge_options = (
        *LINKING_OPTIONS,
        ("KFM layers", "kfm_layers"),
        *LINKING_DETAIL_OPTIONS,
        ("entity min count", "entity_min_count"),
        ("max entities", "max_entities"),
        ("entity memory initialised from mention states", "init_entity_memory"),
        ("knowledge learning rate", "knowledge_learning_rate"),
        ("knowledge optimizer", "knowledge_optimizer"),
        ("knowledge weight decay", "knowledge_weight_decay"),
        ("knowledge warm-up (steps, or share of the steps)", "knowledge_warmup_steps"),
        ("entity-memory optimizer", "entity_memory_optimizer"),
        ("entity-memory learning rate", "entity_memory_learning_rate"),
        ("sparse entity memory", "sparse_entity_memory"),
    )
    stated_when_false = ("init_entity_memory",)

    def system(self, config) -> str | None:
        mode = getattr(config, "retrieval_mode", None)
        if mode == "none":
            return "more_params" if getattr(config, "num_extra_layers", 0) else "vanilla"
        return mode

    def title(self, spec) -> str | None:
        return SYSTEM_NAMES.get(spec.system) if spec.system else None

    def what(self, spec, task_phrase: str) -> str | None:
        if not spec.system:
            return None
        return f"A **{SYSTEM_NAMES.get(spec.system, spec.system)}** model for **{task_phrase}**"

    def intro(self, spec, cite, venue) -> list[str]:
        depth = spec.encoder.get("layers")
        if spec.uses_knowledge:
            retrieval = (
                "its row of the entity memory"
                if spec.system == "pointwise"
                else "an attention-weighted aggregate of its neighbours in the context's knowledge graph "
                f"({spec.settings.get('gnn_layers', 2)} relational GNN layers over the entity memory)"
            )
            return [
                f"KALA{venue} ({cite}) adapts a pre-trained encoder with domain knowledge during fine-tuning: the "
                "hidden states of the tokens of each linked entity mention are scaled and shifted after both "
                "LayerNorms of the chosen encoder layers (knowledge-conditioned feature modulation, KFM: "
                "γ = 1 + h(v), β = h(v)), where v is the mention's entity vector: " + retrieval + ". Tokens outside "
                f"mentions are left unchanged. Here KFM sits on encoder {ordinal_layers(spec.kfm_layers, depth)}."
            ]
        extra = spec.settings.get("num_extra_layers") or 0
        return [
            f"This is a **baseline** of KALA{venue} ({cite}): the same architecture and training, but it reads no "
            "knowledge"
            + (
                f" and adds {extra} randomly initialised transformer layer(s) on top of the encoder "
                '(the paper\'s "+ more parameters" baseline).'
                if extra
                else " (plain fine-tuning of the encoder with a task head)."
            )
        ]

    def limits(self, spec) -> list[str]:
        if not spec.uses_knowledge:
            return []
        case = {True: " (case-sensitive)", False: " (ignoring case)", None: ""}[spec.knowledge.case_sensitive]
        lines = [
            f"Knowledge comes from dictionary matching of KG names and aliases in the text{case}, with no "
            "disambiguation beyond a degree prior: ambiguous names can be linked to the wrong entity and "
            "entities missing from the KG are not linked. Entities not seen in training map to the null "
            "row of the entity memory"
            + (
                "; relational retrieval still represents them through their KG neighbours that were seen."
                if spec.system == "relational"
                else " and get no modulation."
            )
        ]
        if spec.knowledge.mode != "annotations":
            lines.append(
                "The KG is part of the checkpoint (`knowledge/`); swapping it for another one changes what "
                "is linked but not the entity memory the model was trained with."
            )
        return lines

    def tags(self, spec) -> list[str]:
        return [f"kala-{spec.system.replace('_', '-')}"] if spec.system else []


class KalaConfig(KeplmConfig):
    r"""Configuration for [`KalaModel`] and its heads.

    Args:
        encoder_config: config of the wrapped encoder (BERT, RoBERTa, ... any post-LayerNorm encoder).
        kfm_layers: encoder layers whose two LayerNorms get KFM (negative = from the end). Paper: `[-1]`
            for QA, `[-4, -2]` (layers 9 and 11 of 12) for NER; the run scripts use `[-4, -2]` for both
            (`DEFAULT_KFM_LAYERS`).
        retrieval_mode: `"relational"` (eq. 3, GNN over the context KG), `"pointwise"` (entity memory only)
            or `"none"` (no knowledge: the vanilla fine-tuning baseline).
        entity_vocab_size: rows of the entity memory, the null entity (row 0) included.
        entity_dim: entity embedding size (paper: the encoder's hidden size); `None` = hidden size.
        num_relations: size of the relation vocabulary, reserved ids (self loop, unknown) included.
        relation_dim: relation embedding size (paper: 128).
        use_inverse_relations: every fact (h, r, t) also sends a message head → tail with its own (inverse) relation
            embedding r + num_relations, besides the tail → head message with r (eq. 3: a head e_i hears its tail
            e_j through r_ij). Must agree with the processor's (checked when they meet).
        gnn_layers: number of relational-retrieval layers (paper: 2).
        relation_message: what a neighbour sends in relational retrieval. `"entity"`: the paper's eq. 3, the
            neighbour's entity vector e_j (the relation r_ij only weighs it in the attention). `"composition"`
            (keplm's default, beyond the paper): φ(e_j, r_ij) = e_j + W_m r_ij, so a fact's relation reaches the
            prediction even when the neighbour is the same (docs/knowledge_checks.md). Configs saved before the
            option existed load as `"entity"`.
        kfm_hidden_size: hidden size of the four γ/β MLPs; `None` = hidden size (paper: 768).
        knowledge_dropout: dropout in the GNN (paper: 0.1).
        entity_dropout: in training, the share of mentioned entities that read the null row as if unseen, so the
            model learns to represent a mention from its neighbours and relations, not only from its own memory row
            (beyond the paper, which has 0; docs/knowledge_checks.md). Configs saved before the option load as 0.
        num_extra_layers: extra transformer layers on top of the encoder (the "+ more params" baseline).
        classifier_dropout: dropout before the task head; `None` = the encoder's hidden dropout.
        sparse_entity_memory: the entity memory emits sparse (row-wise) gradients, updated by SparseAdam or
            row-wise AdaGrad (`keplm.training.optim`): much cheaper steps for large memories, no weight decay
            there; under torch.compile the sparse lookup falls back to eager (row-wise AdaGrad with dense
            gradients compiles).
    """

    model_type = "kala"
    method_card = KalaCard()
    card_settings = (
        "retrieval_mode",
        "kfm_layers",
        "entity_vocab_size",
        "entity_dim",
        "num_relations",
        "relation_dim",
        "use_inverse_relations",
        "gnn_layers",
        "relation_message",
        "entity_dropout",
        "num_extra_layers",
    )

    kfm_layers: list[int] | None = None
    retrieval_mode: str = "relational"
    entity_vocab_size: int = 1
    entity_dim: int | None = None
    num_relations: int = 2
    relation_dim: int = 128
    use_inverse_relations: bool = True
    gnn_layers: int = 2
    relation_message: str = "composition"
    kfm_hidden_size: int | None = None
    knowledge_dropout: float = 0.1
    entity_dropout: float = 0.3
    num_extra_layers: int = 0
    classifier_dropout: float | None = None
    sparse_entity_memory: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.retrieval_mode not in RETRIEVAL_MODES:
            raise ValueError(f"retrieval_mode must be one of {RETRIEVAL_MODES}, got {self.retrieval_mode!r}")
        if self.kfm_layers is None:
            self.kfm_layers = [-1]
        self.kfm_layers = [int(layer) for layer in self.kfm_layers]
        self.resolve_layer_indices(self.kfm_layers)  # validates against the encoder depth
        if not 0.0 <= self.entity_dropout < 1.0:
            raise ValueError(f"entity_dropout must lie in [0, 1), got {self.entity_dropout}")
        if self.relation_message not in RELATION_MESSAGES:
            raise ValueError(f"relation_message must be one of {RELATION_MESSAGES}, got {self.relation_message!r}")
        if self.entity_vocab_size < 1:
            raise ValueError("entity_vocab_size must be >= 1 (row 0 is the null entity)")
        if self.gnn_layers < 1 and self.retrieval_mode == "relational":
            raise ValueError("relational retrieval needs gnn_layers >= 1")
        if self.entity_dim is None:
            self.entity_dim = self.encoder_config.hidden_size
        if self.kfm_hidden_size is None:
            self.kfm_hidden_size = self.encoder_config.hidden_size
        # an encoder-decoder (T5, BART) wrapped whole by KalaForConditionalGeneration: generate() reads this flag
        self.is_encoder_decoder = bool(getattr(self.encoder_config, "is_encoder_decoder", False))

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """A saved config without ``relation_message`` / ``entity_dropout`` was written before the options: it used
        the paper's settings (:data:`LEGACY_SETTINGS`)."""
        for key, legacy in LEGACY_SETTINGS.items():
            if key not in config_dict and key not in kwargs:
                config_dict = {**config_dict, key: legacy}
        return super().from_dict(config_dict, **kwargs)

    @property
    def uses_knowledge(self) -> bool:
        return self.retrieval_mode != "none"

    @property
    def uses_knowledge_assets(self) -> bool:
        return self.uses_knowledge

    @property
    def reads_graph(self) -> bool:
        return self.uses_knowledge

    @property
    def kfm_layer_indices(self) -> list[int]:
        return self.resolve_layer_indices(self.kfm_layers) if self.uses_knowledge else []

    @property
    def relation_embedding_size(self) -> int:
        return 2 * self.num_relations if self.use_inverse_relations else self.num_relations


__all__ = [
    "KalaConfig",
    "DEFAULT_KFM_LAYERS",
    "KALA_PAPER",
    "KalaCard",
    "RELATION_MESSAGES",
    "RETRIEVAL_MODES",
    "SYSTEM_NAMES",
]
