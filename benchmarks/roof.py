"""Training-step benchmark of Roof-Transformer: cached vs joint (uncached) knowledge encoding, Roof vs one encoder
with the knowledge appended, and the text-only encoder, side by side in one run (see benchmarks/README.md).

    python -m benchmarks roof --preset cpu-small --device cpu --threads 1
    python -m benchmarks roof --preset paper --device cuda --dtype bf16

Each system runs in its own process (isolated peak memory), warmed up in turn, then timed round robin
(``workers.run_round_robin``). Features are synthetic sentence pairs of the preset's text length with knowledge
filled to the knowledge budget by verbalised triples drawn from a fixed pool (so they recur across examples, as
selected triples do), batched by the real ``KeplmDataCollator``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks.harness import rss_kib, timed
from benchmarks.report import comparison_lines, fmt, header_lines, ratio, system_table, verdict
from benchmarks.synthetic import CLS_ID, FIRST_WORD_ID, SEP_ID, EncoderShape
from benchmarks.workers import StepRunner, parse_training_step_args, run_training_step_benchmark, training_step_parser

TARGET_CACHED = 1.5  # the GPU target: cached >= 1.5x the joint (uncached) training throughput


@dataclass(frozen=True)
class Preset(EncoderShape):
    batch_size: int
    text_len: int
    knowledge_len: int  # knowledge tokens after [CLS] (paper: 511)
    fusion_layers: int
    unit_pool: int  # distinct verbalised triples the examples draw from
    vocab_size: int = 30522

    def encoder_config(self, positions: int):
        return self.bert_config(self.vocab_size, positions)

    def describe(self) -> str:
        return (
            f"{self.encoder()}; batch {self.batch_size}; text {self.text_len} + knowledge {self.knowledge_len} "
            f"tokens (+[CLS]); roof {self.fusion_layers} transformer layers; units of 8-24 tokens from a pool of "
            f"{self.unit_pool}; the appended baseline reads text + knowledge in one sequence (position embeddings "
            "extended where needed)"
        )


PRESETS = {
    # BERT-base at the paper's GLUE setting: 512 text + 511 knowledge tokens, a 3-layer roof
    "paper": Preset(
        "paper", 768, 12, 12, 3072, batch_size=8, text_len=512, knowledge_len=511, fusion_layers=3, unit_pool=20_000
    ),
    # shrunk shape for a small CPU: same proportions (text : knowledge 1 : 1)
    "cpu-small": Preset(
        "cpu-small", 256, 4, 4, 1024, batch_size=4, text_len=128, knowledge_len=127, fusion_layers=3, unit_pool=2_000
    ),
}

SYSTEMS = {
    "bert": "text encoder alone (fusion=none)",
    "bert-appended": "one encoder, knowledge appended to the text",
    "roof": "Roof, joint KB encoding (trained)",
    "roof-cached": "Roof, cached KB encoder (frozen, §4.4)",
}


# ---------------------------------------------------------------------- synthetic features
def make_features(preset: Preset, count: int, seed: int = 0) -> list[dict]:
    """Sentence-pair features as ``RoofTransformerProcessor.prepare_pair_features`` emits them: full-length text,
    knowledge ``[CLS] u_1 [SEP] u_2 [SEP] ...`` filled to the budget with units of 8-24 tokens from the pool."""
    rng = np.random.default_rng(seed)
    pool = [
        rng.integers(FIRST_WORD_ID, preset.vocab_size, size=int(rng.integers(8, 25))).tolist()
        for _ in range(preset.unit_pool)
    ]
    features = []
    for _ in range(count):
        text = rng.integers(FIRST_WORD_ID, preset.vocab_size, size=preset.text_len)
        half = preset.text_len // 2
        text[0], text[half], text[-1] = CLS_ID, SEP_ID, SEP_ID
        knowledge, units = [CLS_ID], [-1]
        for number, index in enumerate(rng.permutation(len(pool))):
            unit = pool[index]
            if len(knowledge) + len(unit) + 1 > preset.knowledge_len + 1:
                break
            knowledge += [*unit, SEP_ID]
            units += [number] * len(unit) + [-1]
        features.append(
            {
                "input_ids": text.tolist(),
                "attention_mask": [1] * preset.text_len,
                "token_type_ids": [0] * (half + 1) + [1] * (preset.text_len - half - 1),
                "knowledge_input_ids": knowledge,
                "knowledge_attention_mask": [1] * len(knowledge),
                "knowledge_unit_ids": units,
                "labels": int(rng.integers(0, 2)),
            }
        )
    return features


def appended(feature: dict) -> dict:
    """The one-encoder baseline's feature: the knowledge units (without their [CLS]) after the text, type B."""
    knowledge = feature["knowledge_input_ids"][1:]
    return {
        "input_ids": feature["input_ids"] + knowledge,
        "attention_mask": [1] * (len(feature["input_ids"]) + len(knowledge)),
        "token_type_ids": feature["token_type_ids"] + [1] * len(knowledge),
        "labels": feature["labels"],
    }


def make_batches(preset: Preset, system: str, num_batches: int, seed: int, pin: bool) -> list[dict]:
    from keplm.data.collator import KeplmDataCollator
    from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor

    collator = KeplmDataCollator(
        pad_token_id=0, pad_to_multiple_of=8, sequence_families=dict(RoofTransformerProcessor.sequence_families)
    )
    features = make_features(preset, num_batches * preset.batch_size, seed)
    if system == "bert":
        features = [{k: f[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")} for f in features]
    elif system == "bert-appended":
        features = [appended(f) for f in features]
    batches = [collator(features[i * preset.batch_size : (i + 1) * preset.batch_size]) for i in range(num_batches)]
    return [{k: v.pin_memory() for k, v in b.items()} for b in batches] if pin else batches


def build_model(system: str, preset: Preset, seed: int, cache_dir: str):
    from keplm.configuration.configuration_roof_transformer import RoofTransformerConfig
    from keplm.modeling.modeling_roof_transformer import RoofTransformerForSequenceClassification

    torch.manual_seed(seed)
    positions = 512 if system != "bert-appended" else max(512, preset.text_len + preset.knowledge_len)
    roof = system.startswith("roof")
    config = RoofTransformerConfig(
        encoder_config=preset.encoder_config(positions),
        num_labels=2,
        fusion="transformer" if roof else "none",
        fusion_layers=preset.fusion_layers,
        knowledge_encoding={"roof": "joint", "roof-cached": "cached"}.get(system, "none"),
        max_knowledge_length=preset.knowledge_len,
    )
    model = RoofTransformerForSequenceClassification(config)
    if system == "roof-cached":
        model.set_knowledge_cache_directory(cache_dir)
    return model


class RoofRunner(StepRunner):
    """One system in its own process: model, AdamW (the roof at 10x through the model's parameter groups), batches.
    The cached system first fills its cache over every batch (the first epoch's extra cost, reported apart)."""

    def __init__(self, args, system: str):
        from keplm.training.optim import apply_parameter_groups

        self.setup(args, system, PRESETS[args.preset])
        self.batches = make_batches(self.preset, system, args.num_batches, args.seed, self.device.type == "cuda")
        self.baseline_kib = rss_kib()
        self.cache_dir = tempfile.mkdtemp(prefix="bench-roof-cache-")
        self.model = build_model(system, self.preset, args.seed, self.cache_dir).to(self.device).train()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=3e-5, weight_decay=0.01)
        groups = self.model.parameter_groups(3e-5, fusion_lr_multiplier=10) if system.startswith("roof") else []
        self.optimizer = apply_parameter_groups(optimizer, groups, 3e-5, betas=(0.9, 0.999), eps=1e-8)
        self.cache_fill_ms = None
        if system == "roof-cached":
            self.cache_fill_ms = 1e3 * timed(self._fill_cache, self.device) / len(self.batches)

    @torch.no_grad()
    def _fill_cache(self) -> None:
        for batch in self.batches:
            batch = self.on_device(batch)
            roof = self.model.roof
            roof.knowledge_cache.encode(
                roof.knowledge_encoder,
                batch["knowledge_input_ids"],
                batch["knowledge_attention_mask"],
                batch["knowledge_unit_ids"],
            )

    def finish(self) -> dict:
        cache = self.model.roof.knowledge_cache if self.system.startswith("roof") else None
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        return {
            **self.timing(),
            "label": SYSTEMS[self.system],
            "tokens_per_example": statistics.fmean(
                b["input_ids"].shape[1] + b.get("knowledge_input_ids", torch.empty(0, 0)).shape[1] for b in self.batches
            ),
            "cache_fill_ms_per_batch": self.cache_fill_ms,
            "cache_hits": cache.hits if cache is not None else None,
            "cache_misses": cache.misses if cache is not None else None,
        }


# ---------------------------------------------------------------------- report
def markdown_report(meta: dict, results: dict) -> str:
    cuda = meta["device"] == "cuda"
    speedup = ratio(results, "roof", "roof-cached")  # joint step / cached step = cached throughput gain
    lines = header_lines(
        "Roof-Transformer training-step benchmark",
        meta,
        [
            f"- Settings: dtype {meta['dtype']}, AdamW (roof at 10x), warm-up {meta['warmup']} + {meta['steps']} timed "
            f"steps in {meta['rounds']} round-robin rounds, torch threads per worker {meta['threads']}, "
            f"{meta['num_batches']} distinct batches cycled; the cached system's cache is filled over all batches "
            "before its warm-up (steady state after the first epoch; the fill is reported per batch)."
        ],
    )

    def row(system: str, r: dict) -> str:
        notes = []
        if r.get("cache_fill_ms_per_batch") is not None:
            notes.append(
                f"cache fill {r['cache_fill_ms_per_batch']:.0f} ms/batch; hits/misses "
                f"{r['cache_hits']}/{r['cache_misses']}"
            )
        return (
            f"| {r['label']} | {r['params_m']:.1f} | {r['trainable_m']:.1f} | {r['static_mib']:.0f} | "
            f"{r['tokens_per_example']:.0f} | {r['step_ms_median']:.1f} | "
            f"{r['step_ms_min']:.0f}–{r['step_ms_max']:.0f} | {r['samples_per_s']:.2f} | "
            f"{fmt(r['peak_memory_mib'], 0)} | {fmt(ratio(results, system, 'roof'), 3, '×')} | "
            f"{fmt(ratio(results, system, 'roof', 'peak_memory_mib'), 3, '×')} | {'; '.join(notes)} |"
        )

    lines += system_table(
        "| System | Params (M) | Trainable (M) | Static MiB | Tokens/example | Step median (ms) | "
        "min–max (ms) | Samples/s | Peak mem (MiB) | Time × roof | Mem × roof | Notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        results,
        row,
    )
    lines += comparison_lines(
        "roof",
        [
            ("cached throughput / joint (uncached) throughput", speedup, 3),
            ("Roof (joint) step / one encoder with knowledge appended", ratio(results, "roof", "bert-appended"), 3),
            (
                "Roof (cached) step / one encoder with knowledge appended",
                ratio(results, "roof-cached", "bert-appended"),
                3,
            ),
            ("Roof (joint) step / text encoder alone", ratio(results, "roof", "bert"), 3),
            (
                "Roof (joint) peak memory / one encoder with knowledge appended",
                ratio(results, "roof", "bert-appended", "peak_memory_mib"),
                3,
            ),
        ],
        f"(GPU, BERT-base shapes): cached ≥ {TARGET_CACHED}× joint throughput",
        verdict(speedup, TARGET_CACHED, at_least=True),
        cuda,
    )
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    return parse_training_step_args(
        training_step_parser("roof", __doc__.splitlines()[0], PRESETS, SYSTEMS, 8), argv, SYSTEMS
    )


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    run_training_step_benchmark("roof", argv, args, PRESETS[args.preset], SYSTEMS, RoofRunner, {}, markdown_report)
