"""Roof-Transformer's run recipe: its systems (one encoder, one encoder with the knowledge appended, the roof), the
triples selected from each text (linked, or read from ``--triple_files``), the roof's learning-rate multiplier and
the selection statistics."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

from transformers import AutoTokenizer

from keplm.knowledge import KnowledgeAssets, load_kg
from keplm.tokenization import KeplmProcessor
from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor
from keplm.tokenization.roof_knowledge import add_triples_column, knowledge_statistics, read_triple_lists

from ..arguments import LinkingArguments, ModelArguments, option, split_paths
from ..knowledge_setup import checkpoint_processor, is_keplm_checkpoint
from ..run_recipe import RunRecipe

logger = logging.getLogger(__name__)


@dataclass
class RoofArguments(LinkingArguments):
    """Roof-Transformer's settings (paper §3-4, appendix 6.3 for the defaults) and its knowledge source."""

    _argument_group_name = "Roof-Transformer (--model_type roof_transformer): knowledge and systems"  # the --help group

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "max_knowledge_length": "[1, inf)",
        "fusion_layers": "[1, inf)",
        "fusion_lr_multiplier": "(0, inf)",
        "num_text_encoders": "[1, inf)",
    }

    system: Literal["bert", "bert_with_knowledge", "roof"] = option(
        "roof",
        "bert (one encoder alone), bert_with_knowledge (one encoder reading the verbalised knowledge "
        "after the text) or roof (TASK + KB encoders fused by a roof).",
    )
    kg: str | None = option(
        None,
        "Knowledge graph spec for keplm.knowledge.load_kg, e.g. 'trex:../shared/data/lama' or "
        "'fb15k237:<dir>+trex:<dir>'. With a keplm checkpoint: a knowledge update without retraining.",
    )
    triple_files: list[str] | None = option(
        None,
        "Precomputed triple lists per split as SPLIT=PATH (JSON {example id: [[h, r, t], ...]}), "
        "instead of selecting triples from --kg.",
    )
    selection: Literal["has_tail", "no_tail"] = option(
        "has_tail", "Select triples whose head (has_tail: and tail) occur in the passage."
    )
    verbalization: Literal["exp0", "exp1", "exp2"] = option("exp2", "Triple verbalisation.")
    max_knowledge_length: int = option(511, "Knowledge tokens after [CLS] (paper: 511).")
    fusion: Literal["transformer", "transformer_random", "lstm", "linear"] = option(
        "transformer",
        "The roof: transformer layers copied from the encoder's last "
        "--fusion_layers layers, random ones, an LSTM or a linear layer.",
    )
    fusion_layers: int = option(3, "Depth of a transformer roof (paper: 3 GLUE, 4 QA).")
    segmentation: Literal["type1", "type2", "none"] = option(
        "type2",
        "Segment types (paper 4.5); 'none' (every token type 0) for encoders with "
        "one token type (RoBERTa, XLM-R checkpoints).",
    )
    cached_knowledge_encoder: bool = option(
        False, "Frozen KB encoder whose per-triple encodings are cached (paper 4.4)."
    )
    knowledge_cache_dir: str | None = option(
        None, "Where cached encodings live (default $KEPLM_CACHE/knowledge_encodings)."
    )
    fusion_lr_multiplier: float = option(10.0, "Learning rate of the roof as a multiple of the encoders' (paper: 10).")
    num_text_encoders: int = option(1, "Text encoders for texts longer than one window.")

    @property
    def uses_knowledge(self) -> bool:
        return self.system != "bert"

    def triple_paths(self) -> dict[str, str]:
        return split_paths(self.triple_files, "--triple_files")

    def model_config(self) -> dict:
        """RoofTransformerConfig arguments of the chosen system."""
        if self.system != "roof":
            return {"fusion": "none", "knowledge_encoding": "none", "num_text_encoders": self.num_text_encoders}
        return {
            "fusion": self.fusion,
            "fusion_layers": self.fusion_layers,
            "segmentation": self.segmentation,
            "knowledge_encoding": "cached" if self.cached_knowledge_encoder else "joint",
            "max_knowledge_length": self.max_knowledge_length,
            "num_text_encoders": self.num_text_encoders,
        }


def prepare_roof_knowledge(model_args: ModelArguments, roof_args, raw, text_columns, num_proc: int | None = None):
    """The Roof-Transformer processor (a checkpoint's, or the base tokenizer with ``--kg`` and the selection and
    verbalisation settings) and the splits with what selection reads: the linked ``knowledge`` columns of their
    text columns (one linking pass per split), or the ``--triple_files`` lists."""
    path, hub = model_args.model_name_or_path, model_args.hub_kwargs()
    if is_keplm_checkpoint(path, **hub):
        processor = checkpoint_processor(path, roof_args.kg if roof_args.uses_knowledge else None, **hub)
    else:
        kg = None
        if roof_args.uses_knowledge and roof_args.kg:
            logger.info("Loading the knowledge graph %s", roof_args.kg)
            kg = load_kg(roof_args.kg)
            logger.info("Loaded %r", kg)
        processor = RoofTransformerProcessor(
            AutoTokenizer.from_pretrained(path, **hub),
            KnowledgeAssets(kg=kg),
            selection=roof_args.selection,
            verbalization=roof_args.verbalization,
            max_knowledge_length=roof_args.max_knowledge_length,
            linker_kwargs=roof_args.linker_kwargs(),
        )
    if not roof_args.uses_knowledge:
        return processor.without_knowledge(), raw
    files = roof_args.triple_paths()
    if files:
        for split in list(raw):
            if split not in files:
                raise ValueError(f"--triple_files has no entry for the {split} split")
            id_column = "idx" if "idx" in raw[split].column_names else "id"
            raw[split] = add_triples_column(raw[split], read_triple_lists(files[split]), id_column=id_column)
        return processor, raw
    if processor.kg is None:
        raise ValueError("Roof-Transformer's knowledge needs --kg (or --triple_files)")
    for split in list(raw):
        raw[split] = processor.link_text_columns(raw[split], list(text_columns), num_proc=num_proc)
    return processor, raw


def build_roof_model(model_class, model_args: ModelArguments, roof_args, processor: KeplmProcessor, **config_kwargs):
    """A Roof-Transformer (or baseline) model around ``model_name_or_path``, or the keplm checkpoint itself."""
    path, hub = model_args.model_name_or_path, model_args.hub_kwargs()
    if is_keplm_checkpoint(path, **hub):
        # the processor's assets, loaded from the same checkpoint, when they are the checkpoint's: one KG per process
        model = model_class.from_pretrained(path, knowledge_assets=processor.knowledge_assets, **hub)
        if roof_args.kg and getattr(model, "knowledge_assets", None) is not None:
            model.set_knowledge_assets(processor.knowledge_assets)  # prepare_roof_knowledge's knowledge update
    else:
        assets = processor.knowledge_assets if roof_args.system == "roof" else None
        model = model_class.from_base_pretrained(
            path, knowledge_assets=assets, **roof_args.model_config(), **config_kwargs
        )
    if getattr(roof_args, "knowledge_cache_dir", None) and model.knowledge_cache is not None:
        model.set_knowledge_cache_directory(roof_args.knowledge_cache_dir)
    return model


class RoofTransformerRunRecipe(RunRecipe):
    arguments: ClassVar[type] = RoofArguments
    tasks: ClassVar[tuple[str, ...]] = ("qa", "sequence_classification")

    def __init__(self, model_type, model_args, method_args, task):
        super().__init__(model_type, model_args, method_args, task)
        if task == "qa" and method_args.system == "bert_with_knowledge":
            raise ValueError(
                "--system bert_with_knowledge appends knowledge to sentence pairs (run_glue.py); for QA "
                "use --system bert or roof"
            )

    def prepare(self, raw, text_columns, num_proc=None):
        return prepare_roof_knowledge(self.model_args, self.args, raw, list(text_columns), num_proc)

    def build_model(self, processor, **config_kwargs):
        return build_roof_model(self.model_class, self.model_args, self.args, processor, **config_kwargs)

    def reads_knowledge(self, model) -> bool:
        return self.args.uses_knowledge  # bert_with_knowledge: the baseline model reads the knowledge appended

    def feature_options(self, processor, data_args) -> dict:
        """bert_with_knowledge: the text keeps its ``max_seq_length`` and the knowledge its ``max_knowledge_length``
        after it, as Roof's two encoders read them, within the encoder's positions (``model_max_length``)."""
        if self.args.system != "bert_with_knowledge":
            return {}
        total = data_args.max_seq_length + self.args.max_knowledge_length
        limit = processor.tokenizer.model_max_length
        if total > limit:
            logger.warning(
                "text + knowledge = %d tokens exceed the encoder's %d: the knowledge is cut at %d", total, limit, limit
            )
        return {"append_knowledge": True, "max_total_length": min(total, limit)}

    def parameter_group_options(self, training_args) -> dict:
        return {"fusion_lr_multiplier": self.args.fusion_lr_multiplier} if self.args.system == "roof" else {}

    def data_results(self, processor, raw, features, model) -> dict:
        """How much knowledge the features carry per split: selected / kept / cut triples (per example where the
        features name it, else per window), or the appended tokens of bert_with_knowledge."""
        results = {}
        for split, data in features.items():
            if self.args.system == "roof":
                grouped = "example_id" in data.column_names
                stats = knowledge_statistics(data, data["example_id"] if grouped else None)
                prefix = f"knowledge_{split}" if grouped or self.task != "qa" else f"knowledge_{split}_windows"
            elif self.args.system == "bert_with_knowledge":
                appended, cut = list(data["num_appended_knowledge_tokens"]), list(data["num_cut_knowledge_tokens"])
                count = max(len(appended), 1)
                stats = {
                    "examples": len(appended),
                    "appended_tokens_per_example": sum(appended) / count,
                    "share_with_knowledge": sum(a > 0 for a in appended) / count,
                    "cut_tokens": sum(cut),
                }
                prefix = f"knowledge_{split}"
            else:
                continue
            results.update({f"{prefix}_{key}": value for key, value in stats.items()})
        return results
