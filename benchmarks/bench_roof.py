#!/usr/bin/env python
"""Training-step benchmark of Roof-Transformer: cached vs joint (uncached) knowledge encoding, Roof vs one encoder
with the knowledge appended, and the text-only encoder, side by side in one run (see benchmarks/README.md).

    python benchmarks/bench_roof.py --preset cpu-small --device cpu --threads 1
    python benchmarks/bench_roof.py --preset paper --device cuda --dtype bf16

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
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from harness import autocast_context, rss_kib, timed  # noqa: E402
from synthetic import EncoderShape  # noqa: E402
from workers import (  # noqa: E402
    StepRunner,
    fmt,
    parse_training_step_args,
    ratio,
    run_training_step_benchmark,
    training_step_parser,
)

CLS_ID, SEP_ID, FIRST_WORD_ID = 101, 102, 1000
TARGET_CACHED = 1.5  # the GPU target: cached >= 1.5x the joint (uncached) training throughput

SYSTEMS = {
    "bert": "text encoder alone (fusion=none)",
    "bert-appended": "one encoder, knowledge appended to the text",
    "roof": "Roof, joint KB encoding (trained)",
    "roof-cached": "Roof, cached KB encoder (frozen, §4.4)",
}


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


PRESETS = {
    # BERT-base at the paper's GLUE setting: 512 text + 511 knowledge tokens, a 3-layer roof
    "paper": Preset("paper", 768, 12, 12, 3072, batch_size=8, text_len=512, knowledge_len=511, fusion_layers=3,
                    unit_pool=20_000),
    # shrunk shape for a small CPU: same proportions (text : knowledge 1 : 1)
    "cpu-small": Preset("cpu-small", 256, 4, 4, 1024, batch_size=4, text_len=128, knowledge_len=127,
                        fusion_layers=3, unit_pool=2_000),
}


# ---------------------------------------------------------------------- synthetic features
def make_features(preset: Preset, count: int, seed: int = 0) -> list[dict]:
    """Sentence-pair features as ``RoofTransformerProcessor.prepare_pair_features`` emits them: full-length text,
    knowledge ``[CLS] u_1 [SEP] u_2 [SEP] ...`` filled to the budget with units of 8-24 tokens from the pool."""
    rng = np.random.default_rng(seed)
    pool = [rng.integers(FIRST_WORD_ID, preset.vocab_size, size=int(rng.integers(8, 25))).tolist()
            for _ in range(preset.unit_pool)]
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
        features.append({
            "input_ids": text.tolist(), "attention_mask": [1] * preset.text_len,
            "token_type_ids": [0] * (half + 1) + [1] * (preset.text_len - half - 1),
            "knowledge_input_ids": knowledge, "knowledge_attention_mask": [1] * len(knowledge),
            "knowledge_unit_ids": units, "labels": int(rng.integers(0, 2)),
        })
    return features


def appended(feature: dict) -> dict:
    """The one-encoder baseline's feature: the knowledge units (without their [CLS]) after the text, type B."""
    knowledge = feature["knowledge_input_ids"][1:]
    return {"input_ids": feature["input_ids"] + knowledge, "attention_mask": [1] * (len(feature["input_ids"])
                                                                                   + len(knowledge)),
            "token_type_ids": feature["token_type_ids"] + [1] * len(knowledge), "labels": feature["labels"]}


def make_batches(preset: Preset, system: str, num_batches: int, seed: int, pin: bool) -> list[dict]:
    from keplm.data.collator import KeplmDataCollator
    from keplm.tokenization.processing_roof_transformer import RoofTransformerProcessor

    collator = KeplmDataCollator(pad_token_id=0, pad_to_multiple_of=8,
                                 sequence_families=dict(RoofTransformerProcessor.sequence_families))
    features = make_features(preset, num_batches * preset.batch_size, seed)
    if system == "bert":
        features = [{k: f[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")} for f in features]
    elif system == "bert-appended":
        features = [appended(f) for f in features]
    batches = [collator(features[i * preset.batch_size:(i + 1) * preset.batch_size]) for i in range(num_batches)]
    return [{k: v.pin_memory() for k, v in b.items()} for b in batches] if pin else batches


def build_model(system: str, preset: Preset, seed: int, cache_dir: str):
    from keplm.configuration.configuration_roof_transformer import RoofTransformerConfig
    from keplm.modeling.modeling_roof_transformer import RoofTransformerForSequenceClassification

    torch.manual_seed(seed)
    positions = 512 if system != "bert-appended" else max(512, preset.text_len + preset.knowledge_len)
    roof = system.startswith("roof")
    config = RoofTransformerConfig(
        encoder_config=preset.encoder_config(positions), num_labels=2,
        fusion="transformer" if roof else "none", fusion_layers=preset.fusion_layers,
        knowledge_encoding={"roof": "joint", "roof-cached": "cached"}.get(system, "none"),
        max_knowledge_length=preset.knowledge_len)
    model = RoofTransformerForSequenceClassification(config)
    if system == "roof-cached":
        model.set_knowledge_cache_directory(cache_dir)
    return model


class RoofRunner(StepRunner):
    """One system in its own process: model, AdamW (the roof at 10x through the model's parameter groups), batches.
    The cached system first fills its cache over every batch (the first epoch's extra cost, reported apart)."""

    def __init__(self, args, system: str):
        from keplm.training.optim import apply_parameter_groups

        self.args, self.system, self.preset = args, system, PRESETS[args.preset]
        self.batch_size = self.preset.batch_size
        self.device = torch.device(args.device)
        if args.threads:
            torch.set_num_threads(args.threads)
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
            batch = {k: v.to(self.device) for k, v in batch.items()}
            roof = self.model.roof
            roof.knowledge_cache.encode(roof.knowledge_encoder, batch["knowledge_input_ids"],
                                        batch["knowledge_attention_mask"], batch["knowledge_unit_ids"])

    def step(self, batch: dict) -> None:
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        with autocast_context(self.device, self.args.dtype):
            loss = self.model(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def finish(self) -> dict:
        cache = self.model.roof.knowledge_cache if self.system.startswith("roof") else None
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        return {
            **self.timing(), "label": SYSTEMS[self.system],
            "tokens_per_example": statistics.fmean(b["input_ids"].shape[1] + b.get(
                "knowledge_input_ids", torch.empty(0, 0)).shape[1] for b in self.batches),
            "cache_fill_ms_per_batch": self.cache_fill_ms,
            "cache_hits": cache.hits if cache is not None else None,
            "cache_misses": cache.misses if cache is not None else None,
        }


# ---------------------------------------------------------------------- report
def markdown_report(meta: dict, results: dict) -> str:
    cuda = meta["device"] == "cuda"
    speedup = ratio(results, "roof", "roof-cached")  # joint step / cached step = cached throughput gain
    verdict = "n/a" if speedup is None else ("PASS" if speedup >= TARGET_CACHED else "FAIL")
    lines = [
        f"# Roof-Transformer training-step benchmark: preset `{meta['preset']}` on {meta['device_name']}", "",
        f"- Date: {meta['date']}", f"- Command: `{meta['command']}`",
        f"- Device: `{meta['device']}` — {meta['device_name']}; load average before/after: {meta['load_before']} / "
        f"{meta['load_after']}",
        f"- Software: torch {meta['torch']}, transformers {meta['transformers']}, Python {meta['python']}",
        f"- Shape: {meta['shape']}",
        f"- Settings: dtype {meta['dtype']}, AdamW (roof at 10x), warm-up {meta['warmup']} + {meta['steps']} timed "
        f"steps in {meta['rounds']} round-robin rounds, torch threads per worker {meta['threads']}, "
        f"{meta['num_batches']} distinct batches cycled; the cached system's cache is filled over all batches "
        "before its warm-up (steady state after the first epoch; the fill is reported per batch).",
        "- Step = host→device copy + forward + backward + optimizer.step + zero_grad"
        + (", CUDA-synchronised." if cuda else ".") + " Memory: "
        + ("torch.cuda.max_memory_allocated during the timed steps." if cuda else
           "peak RSS during the timed steps minus RSS before the model was built."),
        "",
        "| System | Params (M) | Trainable (M) | Static MiB | Tokens/example | Step median (ms) | min–max (ms) | "
        "Samples/s | Peak mem (MiB) | Time × roof | Mem × roof | Notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for system, r in results.items():
        if "error" in r:
            lines.append(f"| {r['label']} | | | | | | | | | | | ERROR: {r['error'][-200:].replace('|', '/')} |")
            continue
        notes = []
        if r.get("cache_fill_ms_per_batch") is not None:
            notes.append(f"cache fill {r['cache_fill_ms_per_batch']:.0f} ms/batch; hits/misses "
                         f"{r['cache_hits']}/{r['cache_misses']}")
        lines.append(
            f"| {r['label']} | {r['params_m']:.1f} | {r['trainable_m']:.1f} | {r['static_mib']:.0f} | "
            f"{r['tokens_per_example']:.0f} | {r['step_ms_median']:.1f} | {r['step_ms_min']:.0f}–{r['step_ms_max']:.0f}"
            f" | {r['samples_per_s']:.2f} | {fmt(r['peak_memory_mib'], 0)} | "
            f"{fmt(ratio(results, system, 'roof'), 3, '×')} | "
            f"{fmt(ratio(results, system, 'roof', 'peak_memory_mib'), 3, '×')} | {'; '.join(notes)} |")
    lines += [
        "", "Time ratios: median over the rounds of (system step / roof step in the same round); memory: peak over "
        "peak.", "",
        "| Comparison | Value |", "|---|---:|",
        f"| cached throughput / joint (uncached) throughput | {fmt(speedup, 3, '×')} |",
        f"| Roof (joint) step / one encoder with knowledge appended | "
        f"{fmt(ratio(results, 'roof', 'bert-appended'), 3, '×')} |",
        f"| Roof (cached) step / one encoder with knowledge appended | "
        f"{fmt(ratio(results, 'roof-cached', 'bert-appended'), 3, '×')} |",
        f"| Roof (joint) step / text encoder alone | {fmt(ratio(results, 'roof', 'bert'), 3, '×')} |",
        f"| Roof (joint) peak memory / one encoder with knowledge appended | "
        f"{fmt(ratio(results, 'roof', 'bert-appended', 'peak_memory_mib'), 3, '×')} |",
        "",
        f"Target (GPU, BERT-base shapes): cached ≥ {TARGET_CACHED}× joint throughput — this run: {verdict}"
        + ("" if cuda else " (CPU, shrunk shape: informative only; the target is checked on the GPU)") + ".",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    return parse_training_step_args(training_step_parser(__doc__.splitlines()[0], PRESETS, SYSTEMS, 8), argv,
                                    SYSTEMS)


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    preset = PRESETS[args.preset]
    meta = {
        "preset_values": asdict(preset),
        "shape": (f"BERT {preset.num_layers} layers, hidden {preset.hidden_size}, {preset.num_heads} heads, FFN "
                  f"{preset.intermediate_size}; batch {preset.batch_size}; text {preset.text_len} + knowledge "
                  f"{preset.knowledge_len} tokens (+[CLS]); roof {preset.fusion_layers} transformer layers; units of "
                  f"8-24 tokens from a pool of {preset.unit_pool}; the appended baseline reads text + knowledge in one "
                  "sequence (position embeddings extended where needed)"),
    }
    run_training_step_benchmark(__file__, argv, args, SYSTEMS, RoofRunner, meta, markdown_report)


if __name__ == "__main__":
    main()
