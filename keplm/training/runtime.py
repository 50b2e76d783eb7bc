"""The steps every run script shares: logging, split checks, features, entity-memory initialisation, training and
saving, recording metrics."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import datasets
import torch
import transformers
from accelerate import PartialState
from safetensors import SafetensorError, safe_open
from transformers import TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from keplm.data import limit_samples, load_qa_dataset
from keplm.metric_units import METRIC_UNIT, METRIC_UNIT_KEY

from .knowledge_setup import featurize, maybe_add_lora
from .metrics import squad_v1_metrics
from .model_card import KeplmModelCardData
from .subsets import subset_metrics

logger = logging.getLogger(__name__)

#: what the Trainer writes last into a checkpoint folder: a folder without it is an interrupted save
TRAINER_STATE_NAME = "trainer_state.json"


#: transformers' loggers whose INFO lines print every config, processor and weights file loaded (a capped NER run:
#: 15 config dumps, ~200 of its 328 lines); quiet unless --log_level debug
QUIET_BELOW_DEBUG = (
    "transformers.configuration_utils",
    "transformers.modeling_utils",
    "transformers.tokenization_utils_base",
    "transformers.processing_utils",
)


def drop_below_warning(record: logging.LogRecord) -> bool:
    """A logging filter that lets a logger's WARNING and ERROR records through, not its INFO dumps. A filter, not
    ``setLevel``: transformers checks the TP plan of every model it loads, warning "The following layers were not
    sharded", whenever ``transformers.modeling_utils``'s own level is WARNING or above."""
    return record.levelno >= logging.WARNING


def setup_logging(training_args: TrainingArguments) -> None:
    """HF example-script logging: INFO on the main process, warnings elsewhere."""
    if training_args.should_log:  # as HF's scripts: INFO on the main process unless --log_level says otherwise
        transformers.utils.logging.set_verbosity_info()
    log_at(training_args.get_process_log_level())
    warn_single_process_launch()


def log_at(level: int) -> None:
    """A script's log on stdout at ``level`` (keplm, the script, datasets and transformers), without the config and
    weights-file dumps (:data:`QUIET_BELOW_DEBUG`) unless ``level`` is DEBUG."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    logging.getLogger("keplm").setLevel(level)
    logger.setLevel(level)
    logging.getLogger("__main__").setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    for name in QUIET_BELOW_DEBUG:  # their INFO lines dump whole configs: shown with --log_level debug
        quiet = logging.getLogger(name)
        if level <= logging.DEBUG:
            quiet.removeFilter(drop_below_warning)
        else:
            quiet.addFilter(drop_below_warning)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()


def warn_single_process_launch(environ=None) -> bool:
    """Warn (and return True) when ``accelerate launch --cpu --num_processes N`` started this one process: its simple
    launcher sets MASTER_ADDR for N > 1 but starts a single process, so the run is not the N-process run asked for."""
    environ = os.environ if environ is None else environ
    cpu = environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes")
    if not (cpu and "MASTER_ADDR" in environ and "WORLD_SIZE" not in environ):
        return False
    logger.warning(
        "accelerate launch --cpu --num_processes N starts ONE process (accelerate's simple launcher): this "
        "run trains on one process. For N CPU processes launch with `accelerate launch --multi_gpu "
        "--num_processes N` (torchrun; gloo on the CPU), without --cpu."
    )
    return True


def end_distributed_run() -> None:
    """The last step of a run script under torchrun / ``accelerate launch``: wait for every process, then destroy the
    process group (accelerate's ``PartialState.destroy_process_group``, as ``Accelerator.end_training`` does). A gloo
    group still alive at interpreter exit aborts the process ("terminate called without an active exception"): 8 of
    20 bare two-process runs, 0 of 20 with this (docs/reliability.md, R42). One process: nothing to do."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        state = PartialState()
        state.wait_for_everyone()
        state.destroy_process_group()


# ---------------------------------------------------------------------------------------------- script steps
SPLIT_FLAGS = (("train", "do_train"), ("validation", "do_eval"), ("test", "do_predict"))


def check_splits(raw, training_args: TrainingArguments, hint: str | None = None) -> None:
    """Every requested stage (--do_train/--do_eval/--do_predict) has its split; ``hint``: the script's way to get
    the missing split, added to the error."""
    for split, flag in SPLIT_FLAGS:
        if getattr(training_args, flag) and split not in raw:
            raise ValueError(
                f"--{flag} needs a {split} split; the data has {list(raw)} ({hint or f'give --{split}_file'})"
            )


def used_splits(raw, training_args: TrainingArguments):
    """The splits a run uses, so nothing is linked or featurised for a stage it skips: train with --do_train (and
    with --do_predict, whose unseen-entity subsets are counted against the training mentions), validation with
    --do_eval, test with --do_predict."""
    keep = {
        "train": training_args.do_train or training_args.do_predict,
        "validation": training_args.do_eval,
        "test": training_args.do_predict,
    }
    for split in [s for s in raw if not keep.get(s, False)]:
        del raw[split]
    return raw


def check_max_seq_length(max_seq_length: int, model, option: str = "--max_seq_length") -> None:
    """ValueError, before any featurizing, when ``max_seq_length`` text tokens exceed what the model reads (a keplm
    config's ``max_text_length``, else the encoder's positions): a torch index error at the first long batch
    otherwise."""
    config = model.config
    limit = getattr(config, "max_text_length", None) or getattr(config, "max_position_embeddings", None)
    if limit is not None and max_seq_length > limit:
        raise ValueError(
            f"{option} {max_seq_length} exceeds the {limit} text tokens the model reads (its encoder's "
            f"positions): use at most {limit}"
        )


def linked_share(dataset) -> float:
    """Share of a split's examples whose ``knowledge`` column holds at least one entity mention."""
    rows = dataset["knowledge"] if "knowledge" in dataset.column_names else []
    return sum(bool(row["entities"]) for row in rows) / len(rows) if rows else 0.0


def build_features(raw, make_featurizer, data_args, training_args: TrainingArguments) -> dict:
    """``{split: features}`` for the requested splits; ``make_featurizer(split)`` gives the map function."""
    features = {}
    for split, flag in SPLIT_FLAGS:
        if not getattr(training_args, flag):
            continue
        with training_args.main_process_first(desc=f"{split} features"):
            features[split] = featurize(
                raw[split],
                make_featurizer(split),
                data_args.preprocessing_num_workers,
                data_args.overwrite_cache,
                desc=f"Tokenising {split}",
            )
        logger.info(
            "%s: %d examples -> %d features; %.1f%% of the examples have a linked entity mention",
            split,
            len(raw[split]),
            len(features[split]),
            100 * linked_share(raw[split]),
        )
    return features


def trainer_arguments(
    recipe, processor, model, raw, features: dict, model_args, data_args, training_args, card_facts, **card
) -> dict:
    """The keyword arguments every run script's Trainer takes, after the recipe's last step before training: the
    model (LoRA-wrapped with ``--lora_r``), the recipe's collator and parameter-group options, the card data (base
    model, the dataset (``--dataset_name`` unless ``card`` names it), the command, ``card_facts`` and ``card``'s
    fields, the recipe's own) and the train / validation features."""
    collator = recipe.collator(processor, model, data_args)
    recipe.before_training(model, features, collator, training_args)
    model = maybe_add_lora(model, model_args)
    group_options = recipe.parameter_group_options(training_args)
    card_data = KeplmModelCardData(
        base_model=model_args.model_name_or_path,
        command=["python", *sys.argv],
        card_facts=card_facts,
        **{"dataset": getattr(data_args, "dataset_name", None), **card},
        **recipe.card_options(raw, model, group_options),
    )
    return {
        "model": model,
        "args": training_args,
        "data_collator": collator,
        "processing_class": processor,
        "parameter_group_options": group_options,
        "card_data": card_data,
        "train_dataset": features.get("train"),
        "eval_dataset": features.get("validation"),
    }


def flatten(report: dict, prefix: str) -> dict:
    """A nested report as flat ``prefix_key_subkey`` numbers (what a results JSON of the Trainer holds)."""
    flat = {}
    for key, value in report.items():
        name = f"{prefix}_{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = value
    return flat


def record(trainer, split: str, metrics: dict) -> dict:
    """Log and save ``{split}_results.json`` (merged into ``all_results.json``), as HF's scripts, with the unit of
    its metrics (``metric_unit``: percent, :mod:`keplm.metric_units`) so that readers need not guess it."""
    metrics = {**metrics, METRIC_UNIT_KEY: METRIC_UNIT}
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)
    return metrics


#: what the run scripts write into --output_dir besides the model and its processor (which replace themselves whole,
#: keplm.io_utils.committed_save): checkpoints, results, the card and its figures, predictions, exported encoders
RUN_OUTPUTS = (
    f"{PREFIX_CHECKPOINT_DIR}-*",
    "*_results.json",
    "*_predictions.json",
    "predictions.txt",
    "tagged_text.json",
    "relations.json",
    "featurization.json",
    "probe_curve.json",
    TRAINER_STATE_NAME,
    "training_args.json",
    "README.md",
    "figures",
    "encoder",
    "pretrained_encoder",
)

#: what marks a folder as an earlier run's (the Trainer writes these): only then are RUN_OUTPUTS removed
RUN_MARKERS = (f"{PREFIX_CHECKPOINT_DIR}-*", TRAINER_STATE_NAME, "all_results.json", "training_args.json")


def resuming(resume_from_checkpoint) -> bool:
    """Whether ``--resume_from_checkpoint`` asks to resume (a folder, ``True`` or ``last``)."""
    return resume_from_checkpoint not in (None, False, "", "False", "false")


def start_run(training_args: TrainingArguments, model_name_or_path: str | None = None) -> None:
    """A run script's first steps, as HF's example scripts take them: logging (:func:`setup_logging`), an earlier
    run's outputs removed (:func:`clear_earlier_run`), the seed set."""
    setup_logging(training_args)
    clear_earlier_run(training_args, model_name_or_path)
    transformers.set_seed(training_args.seed)


def clear_earlier_run(training_args: TrainingArguments, model_name_or_path: str | None = None) -> list[str]:
    """Before a training run that is not resumed, remove what an earlier run left in ``--output_dir``
    (:data:`RUN_OUTPUTS`, logged as a warning; a folder without :data:`RUN_MARKERS` is no run's and is left alone),
    so that the folder never holds an earlier run's checkpoints, results or card beside this run's files:
    interrupted, it holds this run's files only, beside the earlier model until this run saves its own, and
    ``--resume_from_checkpoint last`` finds this run's checkpoints only. Returns the names removed (the main process
    removes them; the others wait). An earlier output that holds ``model_name_or_path`` is a ValueError: the run
    would delete the model it starts from."""
    if not training_args.do_train or resuming(training_args.resume_from_checkpoint):
        return []
    # every process enters (the main one first, the others after it): one that looked before the main process
    # removed the markers, and so skipped the context, would leave the main process waiting at its barrier
    with training_args.main_process_first(desc="clearing the earlier run's outputs"):
        removed = _remove_earlier_outputs(Path(training_args.output_dir), model_name_or_path)
    if removed:
        logger.warning(
            "%s holds an earlier run: removed its %s before this run writes (resume it with "
            "--resume_from_checkpoint instead to keep them)",
            training_args.output_dir,
            ", ".join(removed),
        )
    return removed


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None: no ``trainer_state.json`` (the Trainer writes it last, so
    the save was interrupted), a ``trainer_state.json`` that is not whole JSON, or a safetensors file of the folder
    whose header does not cover the file (cut short by a kill or a full disk)."""
    state = checkpoint / TRAINER_STATE_NAME
    if not state.is_file():
        return f"no {TRAINER_STATE_NAME} (an interrupted save)"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return f"{TRAINER_STATE_NAME} is not whole JSON ({error})"
    for weights in sorted(checkpoint.glob("*.safetensors")):
        try:
            with safe_open(str(weights), "pt"):
                pass
        except SafetensorError as error:
            return f"{weights.name} is damaged or cut short ({error})"
    return None


def _remove_earlier_outputs(output_dir: Path, model_name_or_path: str | None) -> list[str]:
    """:func:`clear_earlier_run`'s removal in one process; the names removed."""
    if not output_dir.is_dir() or not any(next(output_dir.glob(p), None) is not None for p in RUN_MARKERS):
        return []  # no earlier run here (e.g. a project folder with its own README.md): nothing is removed
    earlier = sorted({path for pattern in RUN_OUTPUTS for path in output_dir.glob(pattern)})
    source = Path(model_name_or_path).resolve() if model_name_or_path and Path(model_name_or_path).exists() else None
    for path in earlier:
        if source is not None and (source == path.resolve() or path.resolve() in source.parents):
            raise ValueError(
                f"--model_name_or_path {model_name_or_path} is an earlier run's output in --output_dir "
                f"{output_dir}, which a new training run clears first: copy it out of the folder, resume with "
                "--resume_from_checkpoint, or give another --output_dir"
            )
    removed = []
    for path in earlier:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)  # ignore: another node's main process on a shared disk
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def resume_checkpoint(resume_from_checkpoint, output_dir: str) -> str | None:
    """The checkpoint ``--resume_from_checkpoint`` names: a folder, or ``True`` / ``last`` for the newest complete
    checkpoint of ``output_dir``. A checkpoint :func:`checkpoint_problem` finds fault with (a save interrupted by a
    kill: no or a truncated ``trainer_state.json``, a cut safetensors file) is passed over by ``True`` (logged), and
    naming it is a ValueError that names the file and lists the complete ones, where the Trainer would load the
    half-written files or fail on them without saying which."""
    if not resuming(resume_from_checkpoint):
        return None
    if resume_from_checkpoint in (True, "True", "true", "last"):
        numbered = [
            path
            for path in Path(output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*")
            if path.is_dir() and path.name.rsplit("-", 1)[1].isdigit()
        ]
        for path in sorted(numbered, key=lambda path: int(path.name.rsplit("-", 1)[1]), reverse=True):  # newest first
            problem = checkpoint_problem(path)
            if problem is None:
                return str(path)
            logger.warning("%s: %s; not resumed from", path, problem)
        raise ValueError(f"--resume_from_checkpoint {resume_from_checkpoint}: no complete checkpoint in {output_dir}")
    path = Path(resume_from_checkpoint)
    problem = checkpoint_problem(path) if path.is_dir() else None
    if problem is not None:
        complete = sorted(
            str(p) for p in path.parent.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.is_dir() and not checkpoint_problem(p)
        )
        raise ValueError(
            f"--resume_from_checkpoint {path}: {problem}, so its save was interrupted and its files may be "
            f"half-written; resume from a complete one ({complete or 'none here'})"
        )
    return str(resume_from_checkpoint)


def train_and_save(trainer, training_args: TrainingArguments, num_samples: int, **extra_metrics) -> dict:
    """Train (from :func:`resume_checkpoint` when resuming), save the model and its processor (tokenizer + knowledge
    assets) to ``output_dir``; the train metrics gain ``extra_metrics`` (e.g. the linked-mention share of the training
    split)."""
    checkpoint = resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
    # the step the Trainer resumes from, read before training may rotate the checkpoint away (--save_total_limit)
    state_file = os.path.join(checkpoint or "", TRAINER_STATE_NAME)
    resumed_from = (
        TrainerState.load_from_json(state_file).global_step if checkpoint and os.path.isfile(state_file) else 0
    )
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model()
    # the stock train_loss averages the steps this run trained: after a resume, not the whole run (say which steps)
    extra_metrics["train_loss_steps"] = trained = trainer.state.global_step - resumed_from
    if resumed_from:
        extra_metrics["train_resumed_from_step"] = resumed_from
        logger.info(
            "train_loss covers the %d steps after the checkpoint's step %d, not the whole run", trained, resumed_from
        )
    metrics = record(trainer, "train", dict(train_result.metrics, train_samples=num_samples, **extra_metrics))
    trainer.save_state()
    return metrics


def load_qa_splits(data_args) -> tuple[datasets.DatasetDict, dict]:
    """The QA splits ``run_qa.py`` / ``run_generative_qa.py`` read (``QaDataArguments``), limited and sampled as the
    options say, and the loader's report (files, answer-start checks, the article split it made)."""
    extra = {"name": data_args.dataset_config_name} if data_args.dataset_config_name else {}
    raw, report = load_qa_dataset(
        data_args.dataset_name,
        train_file=data_args.train_file,
        validation_file=data_args.validation_file,
        test_file=data_args.test_file,
        split_by_article=data_args.article_split(),
        fix_answer_starts=data_args.fix_answer_starts,
        return_report=True,
        **extra,
    )
    return limit_samples(raw, data_args.sample_limits(), data_args.sample_seeds()), report


#: how a single SQuAD-style file gets its validation and test splits
QA_SPLIT_HINT = (
    "one SQuAD-style file has one split: --split_by_article 38 5 5 splits SQuAD v1.1 dev by article, or "
    "give --validation_file / --test_file"
)


def qa_predict_results(recipe, raw, predictions: dict) -> dict:
    """The test split's method results, and (KALA §5.4) EM / F1 on the questions whose context has >= 3 entities
    unseen in training against the rest, from ``{question id: answer text}``."""
    metrics = recipe.split_results(raw, "test", "predict")
    counts = recipe.unseen_entity_counts(raw, "test")
    if counts is not None:
        predictions = {str(k): v for k, v in predictions.items()}
        metrics.update(
            subset_metrics(
                lambda p, r: squad_v1_metrics(dict(enumerate(p)), dict(enumerate(r))),
                [predictions.get(str(i), "") for i in raw["test"]["id"]],
                [answers["text"] for answers in raw["test"]["answers"]],
                counts,
                "predict",
            )
        )
    return metrics


def qa_train_evaluate_predict(trainer, training_args, raw, features, data_results: dict, recipe) -> dict:
    """The shared end of the QA scripts (extractive and generative): data report, training, EM/F1 on validation
    and test (with :func:`qa_predict_results`), card and push."""
    results = {}
    if data_results:
        trainer.save_metrics("data", data_results)
        results.update(data_results)
    if training_args.do_train:
        train_extra = recipe.split_results(raw, "train", "train")
        results.update(train_and_save(trainer, training_args, len(features["train"]), **train_extra))
    if training_args.do_eval:
        results.update(record(trainer, "eval", dict(trainer.evaluate(), eval_samples=len(raw["validation"]))))
    if training_args.do_predict:
        output = trainer.predict(features["test"], raw["test"], metric_key_prefix="predict")
        metrics = dict(output.metrics, predict_samples=len(raw["test"]))
        metrics.update(qa_predict_results(recipe, raw, output.predictions))
        results.update(record(trainer, "predict", metrics))
    if training_args.do_train:
        trainer.create_model_card()
        if training_args.push_to_hub:  # the final push carries the card with every split's results
            trainer.push_to_hub()
    return results


__all__ = [
    "QA_SPLIT_HINT",
    "load_qa_splits",
    "qa_predict_results",
    "qa_train_evaluate_predict",
    "setup_logging",
    "log_at",
    "start_run",
    "warn_single_process_launch",
    "linked_share",
    "flatten",
    "check_splits",
    "used_splits",
    "check_max_seq_length",
    "build_features",
    "record",
    "train_and_save",
    "resume_checkpoint",
]
