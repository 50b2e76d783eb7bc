"""TRELM pre-training (``run_scripts/run_pretraining.py``): its arguments, the importance pass over the corpus, the
model and the callbacks (λ decay, LAMA probing over training time, a wall-clock budget)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from datasets.fingerprint import Hasher
from transformers import TrainerCallback

from keplm.io_utils import fingerprinted_map
from keplm.knowledge.annotation import KnowledgeAnnotation
from keplm.knowledge.importance import select_important, semantic_importance
from keplm.metric_units import METRIC_UNIT, METRIC_UNIT_KEY

from .arguments import option
from .probing import probe

logger = logging.getLogger(__name__)


@dataclass
class PretrainingDataArguments:
    _argument_group_name = "data"  # the --help group

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "held_out_fraction": "[0, 1)",
        "max_train_samples": "[1, inf)",
        "max_seq_length": "[8, inf)",
        "mlm_probability": "(0, 1)",
        "preprocessing_num_workers": "[1, inf)",
        "probe_max_facts_per_relation": "[1, inf)",
        "probe_every_steps": "[0, inf)",
        "probe_batch_size": "[1, inf)",
        "max_train_seconds": "(0, inf)",
    }

    corpus: list[str] = option(
        ["trex:../shared/data/lama", "fewrel:../shared/data/fewrel/val_wiki.json.gz"],
        "Corpus sources: trex:<lama dir> (T-REx evidence sentences), fewrel:<file>, "
        "annotations:<keplm build-kg file or folder>.",
    )
    held_out_fraction: float = option(
        0.2, "Share of the LAMA T-REx probe facts whose sentences never enter pre-training."
    )
    max_train_samples: int | None = option(None, "Keep this many corpus sentences.")
    max_seq_length: int = option(128, "Tokens per sentence (longer: truncated).")
    mlm_probability: float = option(0.15, "Share of ordinary tokens masked (BERT).")
    preprocessing_num_workers: int | None = option(None, "Processes for datasets.map.")
    overwrite_cache: bool = option(False, "Recompute cached features.")
    probe: str = option(
        "lama_trex", "Probe of the P@1 curve (see run_probe.py; none: no curve, e.g. pre-training on a task's text)."
    )
    probe_data_dir: str = option("../shared/data", "Folder with lama/ and pararel/.")
    probe_relations: list[str] | None = option(None, "Probe only these relations.")
    probe_max_facts_per_relation: int | None = option(
        100, "Facts per relation in the P@1 curve (keeps each probe to seconds on a CPU)."
    )
    probe_every_steps: int = option(0, "Probe every N steps (0: at the end only).")
    probe_batch_size: int = option(64, "Probe queries per forward pass.")
    max_train_seconds: float | None = option(
        None,
        "Stop training after this many seconds of training (probing excluded): "
        "the equal-wall-clock budget of a comparison.",
    )


@dataclass
class TrelmArguments:
    """TRELM's settings (paper 3, 4.6-4.8); ``--system mlm`` is plain MLM continued pre-training (the baseline)."""

    _argument_group_name = "TRELM: knowledge and systems"  # the --help group

    #: the options' valid intervals, checked once after parsing (keplm.training.option_checks)
    option_ranges: ClassVar[dict[str, str]] = {
        "si_quantile": "[0, 1]",
        "long_tail_quantile": "[0, 1]",
        "cka_weight": "[0, 1]",
        "cka_num_negatives": "[1, inf)",
        "memory_window": "[0, inf)",
        "memory_momentum": "[0, 1]",
        "memory_lambda": "[0, 1]",
        "memory_decay": "[1, inf)",
        "routing_fraction": "[0, 1]",
        "routing_steps": "[1, inf)",
        "routing_batch_steps": "[1, inf)",
        "routing_interval": "[1, inf)",
    }

    system: Literal["mlm", "trelm"] = option("trelm", "mlm (the baseline) or trelm.")
    kg: str | None = option(
        None,
        "The KG with KG embeddings for injection and entity names for the CKA negatives: a folder "
        "written by `keplm train-kge` (or any load_kg spec when injection is off).",
    )
    injection: bool = option(True, "Knowledge injection (3.1); --no_injection: ablation.")
    injection_mode: Literal["replace", "add"] = option("replace", "Replace or add (3.1).")
    injection_selection: Literal["si", "long_tail", "si_long_tail", "all"] = option(
        "si_long_tail", "Which mentions are important (3.1, 4.5)."
    )
    si_quantile: float = option(0.5, "SI threshold as a quantile of the corpus scores.")
    long_tail_quantile: float = option(0.5, "Long-tail count threshold (quantile).")
    cka: bool = option(True, "Contrastive knowledge assessing (eq. 2); --no_cka: ablation.")
    cka_weight: float = option(0.5, "θ of eq. 3 (paper best: 0.5).")
    cka_num_negatives: int = option(16, "Negatives per CKA target.")
    cka_sampler: Literal["uniform", "frequency"] = option("uniform", "Q of eq. 2.")
    memory_bank: bool = option(True, "Memory bank (3.2); --no_memory_bank: ablation.")
    memory_window: int = option(16, "Half window k (eq. 4; paper best 16).")
    memory_momentum: float = option(0.1, "γ of eq. 5.")
    memory_lambda: float = option(0.5, "λ of eq. 7 (paper: 0.5).")
    memory_decay: float = option(2.0, "β of eq. 8 (paper best: 2).")
    routing: bool = option(True, "Knowledge routing (3.3); --no_routing: ablation.")
    routing_fraction: float = option(0.1, "Share of FFN neurons per layer routed.")
    routing_steps: int = option(20, "Riemann steps m of eq. 11 (paper: 20).")
    routing_batch_steps: int | None = option(
        None,
        "Riemann steps per batched attribution pass (default: all m in one pass, "
        "which holds m copies of the batch's activations; smaller fits large batches).",
    )
    routing_interval: int = option(100, "Re-route every N training steps.")
    entity_masking: bool = option(
        False,
        "mlm system: also always mask the tail-entity tokens TRELM decodes (separates "
        "the effect of entity masking from TRELM's mechanisms).",
    )
    exclude_held_out_from_kg: bool = option(True, "Remove the held-out facts from the KG (no leak through injection).")
    export_encoder: bool = option(
        False,
        "Also write the pre-trained encoder alone with the tokenizer to OUTPUT_DIR/"
        "encoder, a plain checkpoint the fine-tuning scripts take (TAPT, downstream tasks).",
    )
    kg_entity_rows: bool = option(
        False,
        "After training, give every KG entity with a KG vector an entity row (the "
        "vocabulary is the corpus mentions'), so that entities found only in the KG are "
        "injected when the saved model reads them; training is unchanged "
        "(docs/knowledge_checks.md, TRELM's cloze check).",
    )
    allow_kge_leak: bool = option(
        False,
        "Accept KG embeddings trained on a graph that holds held-out facts (by "
        "default an error: train them with `keplm train-kge --exclude_facts "
        "OUTPUT_DIR/held_out_facts.tsv`).",
    )

    @property
    def uses_knowledge(self) -> bool:
        return self.system == "trelm" or self.entity_masking

    def model_config(self) -> dict:
        trelm = self.system == "trelm"
        return {
            "use_injection": trelm and self.injection,
            "injection_mode": self.injection_mode,
            "use_cka": trelm and self.cka,
            "cka_weight": self.cka_weight,
            "cka_num_negatives": self.cka_num_negatives,
            "cka_sampler": self.cka_sampler,
            "use_memory_bank": trelm and self.memory_bank,
            "memory_window": self.memory_window,
            "memory_momentum": self.memory_momentum,
            "memory_lambda": self.memory_lambda,
            "memory_decay": self.memory_decay,
            "use_routing": trelm and self.routing,
            "routing_fraction": self.routing_fraction,
            "routing_steps": self.routing_steps,
            "routing_batch_steps": self.routing_batch_steps,
            "routing_interval": self.routing_interval,
        }


# ---------------------------------------------------------------------------------------------- importance (3.1)
class ImportanceScorer:
    """``datasets.map(batched=True)`` function adding ``si_scores`` (eq. 1 per mention) under the start encoder."""

    def __init__(self, encoder, tokenizer, max_length: int):
        self.encoder, self.tokenizer, self.max_length = encoder.eval(), tokenizer, max_length

    def __call__(self, batch: dict) -> dict:
        annotations = [KnowledgeAnnotation.from_dict(a) for a in batch["knowledge"]]
        return {
            "si_scores": semantic_importance(
                self.encoder, self.tokenizer, batch["text"], annotations, max_length=self.max_length
            )
        }


def add_importance(
    dataset,
    encoder,
    tokenizer,
    args: TrelmArguments,
    max_length: int,
    encoder_name: str,
    num_proc: int | None = None,
    overwrite_cache: bool = False,
):
    """The corpus with ``important`` flags per mention (:func:`keplm.knowledge.importance.select_important`) and
    the selection report. SI scores are computed once per corpus and start encoder (cached by datasets)."""
    ids = [[m["id"] for m in k["entities"]] for k in dataset["knowledge"]]
    if args.injection_selection in ("si", "si_long_tail"):
        signature = {
            "encoder": encoder_name,
            "tokenizer": Hasher.hash(tokenizer),
            "max_length": max_length,
            "function": "semantic_importance-v1",
        }
        dataset = fingerprinted_map(
            dataset,
            ImportanceScorer(encoder, tokenizer, max_length),
            signature,
            num_proc=None,
            overwrite_cache=overwrite_cache,
            batch_size=256,
            desc="Semantic importance (TRELM eq. 1)",
        )
        scores = dataset["si_scores"]
    else:
        scores = [[0.0] * len(row) for row in ids]
    counts = Counter(str(entity) for row in ids for entity in row if entity is not None)
    flags, report = select_important(
        scores, ids, counts, args.injection_selection, args.si_quantile, args.long_tail_quantile
    )
    if "important" in dataset.column_names:
        dataset = dataset.remove_columns("important")
    return dataset.add_column("important", flags), report


# ---------------------------------------------------------------------------------------------- callbacks
class MemoryDecayCallback(TrainerCallback):
    """Eq. (8): λ of the memory bank decays by β every pre-training epoch."""

    def on_epoch_begin(self, args, state, control, model=None, **kwargs):
        set_epoch = getattr(getattr(getattr(model, "trelm", None), "memory_bank", None), "set_epoch", None)
        if set_epoch is not None:
            epoch = int(state.epoch or 0)
            logger.info("epoch %d: memory-bank λ = %.4f", epoch, set_epoch(epoch))


class TrainingClock:
    """Training seconds since the start, without the time spent in the probe callbacks."""

    def __init__(self):
        self.start, self.paused = None, 0.0

    def begin(self) -> None:
        """Start the clock, unless it runs already (the callbacks that share it each start it)."""
        if self.start is None:
            self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.paused if self.start is not None else 0.0


class TimeBudgetCallback(TrainerCallback):
    """Stops training once ``max_seconds`` of training (probing excluded) have passed: equal wall-clock budgets."""

    def __init__(self, max_seconds: float, clock: TrainingClock):
        self.max_seconds, self.clock = max_seconds, clock

    def on_train_begin(self, args, state, control, **kwargs):
        self.clock.begin()

    def on_step_end(self, args, state, control, **kwargs):
        if self.clock.elapsed() >= self.max_seconds:
            logger.info("training time budget of %.0f s reached at step %d", self.max_seconds, state.global_step)
            control.should_training_stop = True


class ProbeCallback(TrainerCallback):
    """P@1 over training time: the LAMA probe (seen and held-out facts) every ``every_steps`` steps and at the end,
    each point ``{"step", "train_seconds", "p_at_1", "seen", "held_out", "metric_unit"}`` (P@1 in percent) logged,
    kept in ``curve`` and written to ``<output_dir>/probe_curve.json``; the probing time is not training time
    (:class:`TrainingClock`). Curves written before ``metric_unit`` existed hold fractions."""

    def __init__(
        self, tokenizer, facts, seen_keys, every_steps: int, batch_size: int, clock: TrainingClock, output_dir: str
    ):
        self.tokenizer, self.facts, self.seen_keys = tokenizer, facts, seen_keys
        self.every_steps, self.batch_size, self.clock, self.output_dir = every_steps, batch_size, clock, output_dir
        self.curve: list[dict] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.clock.begin()
        if not self.curve:
            self.measure(model, state, args)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every_steps and state.global_step % self.every_steps == 0:
            self.measure(model, state, args)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if not self.curve or self.curve[-1]["step"] != state.global_step:
            self.measure(model, state, args)

    def measure(self, model, state, args) -> dict:
        started = time.perf_counter()
        train_seconds = self.clock.elapsed()
        was_training = model.training
        model.eval()
        try:
            results, _ = probe(
                model,
                self.tokenizer,
                self.facts,
                ks=(1,),
                batch_size=self.batch_size,
                progress=False,
                seen_fact_keys=self.seen_keys,
            )
        finally:
            model.train(was_training)
        subsets = results.get("subsets", {})
        point = {
            "step": state.global_step,
            "train_seconds": round(train_seconds, 2),
            "p_at_1": results["precision_at_1"],
            "seen": subsets.get("seen", {}).get("precision_at_1"),
            "held_out": subsets.get("held_out", {}).get("precision_at_1"),
            "probe_seconds": round(time.perf_counter() - started, 2),
            METRIC_UNIT_KEY: METRIC_UNIT,
        }
        self.curve.append(point)
        state.log_history.append(
            {
                "step": state.global_step,
                **{f"probe_{k}": v for k, v in point.items() if k not in ("step", METRIC_UNIT_KEY)},
            }
        )
        logger.info(
            "probe at step %d (%.0f s of training): P@1 %s (seen %s, held-out %s)",
            point["step"],
            train_seconds,
            point["p_at_1"],
            point["seen"],
            point["held_out"],
        )
        if args.should_save:
            os.makedirs(self.output_dir, exist_ok=True)
            Path(self.output_dir, "probe_curve.json").write_text(json.dumps(self.curve, indent=1), encoding="utf-8")
        self.clock.paused += time.perf_counter() - started
        return point


__all__ = [
    "PretrainingDataArguments",
    "TrelmArguments",
    "ImportanceScorer",
    "add_importance",
    "MemoryDecayCallback",
    "TimeBudgetCallback",
    "ProbeCallback",
    "TrainingClock",
]
