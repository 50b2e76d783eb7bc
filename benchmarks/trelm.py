"""Training-step benchmark of TRELM pre-training: plain MLM vs TRELM without and with knowledge routing, and the
cost of the routing attribution step, side by side in one run (see benchmarks/README.md).

    python -m benchmarks trelm --preset cpu-small --device cpu --threads 1
    python -m benchmarks trelm --preset paper --device cuda --dtype bf16

Each system runs in its own process (isolated peak memory), warmed up in turn, then timed round robin
(``workers.run_round_robin``). The features come from the real path: synthetic sentences over an in-memory
vocabulary, each with entity mentions (KG names of two words), facts between them (so CKA has targets), turned into
features by ``TrelmProcessor.prepare_pretraining_features`` and batched by ``MaskedLMCollator``. Routing is
attributed once on the first batch before the warm-up (the IG pass timed apart as the attribution step, a few
times), so the timed steps are the steady state between two re-routings; the per-step cost including the
re-routing every ``routing_interval`` steps is reported as well.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import statistics
import sys
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks.harness import rss_kib, timed
from benchmarks.report import comparison_lines, fmt, header_lines, ratio, system_table, verdict
from benchmarks.synthetic import EncoderShape
from benchmarks.workers import StepRunner, parse_training_step_args, run_training_step_benchmark, training_step_parser

TARGET_ROUTING = 1.3  # the GPU target: TRELM step with routing <= 1.3x the plain MLM step

SYSTEMS = {
    "mlm": "plain MLM (same model class, every TRELM mechanism off)",
    "trelm-no-routing": "TRELM: injection + CKA + memory bank, every parameter trains",
    "trelm": "TRELM with knowledge routing (only the routed FFN paths train)",
}


@dataclass(frozen=True)
class Preset(EncoderShape):
    batch_size: int
    seq_len: int
    num_entities: int
    kge_dim: int
    vocab_size: int = 30522

    def encoder_config(self):
        return self.bert_config(self.vocab_size)

    def describe(self) -> str:
        return (
            f"{self.encoder()}, vocabulary {self.vocab_size}; batch {self.batch_size} × {self.seq_len} tokens; "
            f"four 2-token entity mentions and two facts per example ({self.num_entities} entities, KGE dim "
            f"{self.kge_dim}); 15 % MLM masking + CKA targets"
        )


PRESETS = {
    # BERT-base at the shape: batch 64 x 128 tokens
    "paper": Preset("paper", 768, 12, 12, 3072, batch_size=64, seq_len=128, num_entities=20_000, kge_dim=128),
    # shrunk for a small CPU
    "cpu-small": Preset(
        "cpu-small", 256, 4, 4, 1024, batch_size=8, seq_len=64, num_entities=2_000, kge_dim=64, vocab_size=8_000
    ),
}


# ---------------------------------------------------------------------- synthetic corpus through the real path
def make_processor_and_texts(preset: Preset, count: int, seed: int):
    """An in-memory tokenizer, a KG with names and KGE vectors, the TRELM processor and ``count`` annotated texts
    of about ``seq_len`` word tokens: four mentions each, two facts between them."""
    from transformers import BertTokenizerFast

    from keplm import KnowledgeAssets, KnowledgeGraph, TrelmProcessor

    rng = np.random.default_rng(seed)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [f"w{i}" for i in range(preset.vocab_size - len(specials))]
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(specials + words)}, do_lower_case=True)
    # two-word names from 2k name words (k^2 >= entities distinct pairs), the rest of the vocabulary is filler
    k = math.isqrt(preset.num_entities - 1) + 1
    if 2 * k >= len(words) // 2:
        raise ValueError(
            f"preset {preset.name!r}: a vocabulary of {preset.vocab_size} leaves too few filler words "
            f"beside {2 * k} entity-name words"
        )
    names = {f"Q{e}": f"{words[e // k]} {words[k + e % k]}" for e in range(preset.num_entities)}
    triples = [
        (f"Q{h}", f"P{int(r)}", f"Q{t}")
        for h, r, t in zip(
            rng.integers(0, preset.num_entities, 4 * preset.num_entities),
            rng.integers(0, 20, 4 * preset.num_entities),
            rng.integers(0, preset.num_entities, 4 * preset.num_entities),
        )
        if h != t
    ]
    kg = KnowledgeGraph.from_triples(triples, entity_names=names)
    kg = KnowledgeGraph(
        kg.entity_ids,
        kg.relation_ids,
        kg.triples,
        entity_names=kg.entity_names,
        entity_vectors=rng.normal(size=(kg.num_entities, preset.kge_dim)).astype(np.float32),
    )
    filler = words[2 * k :]
    texts, annotations, mentioned = [], [], []
    for _ in range(count):
        entities = [f"Q{e}" for e in rng.choice(preset.num_entities, 4, replace=False)]
        parts, spans, position = [], [], 0
        chunk = max(1, (preset.seq_len - 12) // 5)
        for entity in entities + [None]:
            for word in rng.choice(filler, chunk):
                parts.append(str(word))
                position += len(word) + 1
            if entity is not None:
                spans.append(
                    {"text": names[entity], "start": position, "end": position + len(names[entity]), "id": entity}
                )
                parts.append(names[entity])
                position += len(names[entity]) + 1
        texts.append(" ".join(parts))
        annotations.append(
            {
                "entities": spans,
                "triplets": [
                    {"h": entities[0], "r": "P0", "t": entities[1]},
                    {"h": entities[2], "r": "P1", "t": entities[3]},
                ],
            }
        )
        mentioned += entities
    assets = KnowledgeAssets.build(mentioned, kg=kg)
    return TrelmProcessor(tokenizer, assets), texts, annotations


def make_batches(preset: Preset, system: str, num_batches: int, seed: int, pin: bool):
    from keplm.data.collator import KeplmDataCollator
    from keplm.data.masking import MaskedLMCollator

    processor, texts, annotations = make_processor_and_texts(preset, num_batches * preset.batch_size, seed)
    knowledge = system != "mlm"
    features = processor.prepare_pretraining_features(
        {"text": texts, "knowledge": annotations}, max_length=preset.seq_len, with_knowledge=knowledge
    )
    tokenizer = processor.tokenizer
    collator = MaskedLMCollator(
        KeplmDataCollator.from_processor(processor),
        tokenizer.mask_token_id,
        len(tokenizer),
        mask_knowledge_targets=knowledge,
        special_token_ids=tuple(tokenizer.all_special_ids),
        seed=seed,
    )
    rows = [{k: v[i] for k, v in features.items()} for i in range(len(texts))]
    torch.manual_seed(seed)
    batches = [collator(rows[i * preset.batch_size : (i + 1) * preset.batch_size]) for i in range(num_batches)]
    if pin:
        batches = [{k: v.pin_memory() for k, v in b.items()} for b in batches]
    return processor, batches


class TrelmRunner(StepRunner):
    """One system in its own process: TrelmForMaskedLM with the system's mechanisms, AdamW over what trains."""

    def __init__(self, args, system: str):
        from keplm import TrelmConfig, TrelmForMaskedLM

        self.setup(args, system, PRESETS[args.preset])
        processor, self.batches = make_batches(
            self.preset, system, args.num_batches, args.seed, self.device.type == "cuda"
        )
        self.baseline_kib = rss_kib()
        torch.manual_seed(args.seed)
        trelm = system != "mlm"
        config = TrelmConfig(
            encoder_config=self.preset.encoder_config(),
            entity_vocab_size=(processor.knowledge_assets.num_entities),
            kge_dim=self.preset.kge_dim,
            use_injection=trelm,
            use_cka=trelm,
            use_memory_bank=trelm,
            use_routing=system == "trelm",
            routing_fraction=args.routing_fraction,
            routing_steps=args.routing_steps,
            routing_batch_steps=args.routing_batch_steps,
            routing_interval=args.routing_interval,
        )
        self.model = TrelmForMaskedLM(config)
        if trelm:
            self.model.set_knowledge_assets(processor.knowledge_assets)
            self.model.set_cka_entities(*processor.entity_name_table())
        self.model.to(self.device).train()
        if system == "trelm":
            self.model.enable_knowledge_routing()
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=1e-4)
        self.attribution_ms = []
        if system == "trelm":  # attribution + re-route on the first batch (the step that runs every N steps)
            for _ in range(args.attribution_repeats):
                self.attribution_ms.append(1e3 * timed(self._reroute, self.device, self.batches[0]))

    def after_warmup(self) -> None:
        if self.device.type == "cpu":  # hand the attribution pass's freed heap back, or peak RSS would count it
            try:
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            except OSError:
                pass

    def _reroute(self, batch: dict) -> None:
        from transformers import TrainerState

        with self.autocast():
            self.model.before_training_step(self.on_device(batch), TrainerState(global_step=0), self.optimizer)

    def finish(self) -> dict:
        result = {
            **self.timing(),
            "label": SYSTEMS[self.system],
            "attribution_ms": statistics.median(self.attribution_ms) if self.attribution_ms else None,
            "attribution_ms_all": self.attribution_ms,
            "optimizer_state_mib": sum(
                v.numel() * v.element_size()
                for s in self.optimizer.state.values()
                for v in s.values()
                if torch.is_tensor(v)
            )
            / 2**20,
        }
        if result["attribution_ms"] is not None:
            result["amortised_step_ms"] = (
                result["step_ms_median"] + result["attribution_ms"] / self.args.routing_interval
            )
        return result


# ---------------------------------------------------------------------- report
def markdown_report(meta: dict, results: dict) -> str:
    cuda = meta["device"] == "cuda"
    routed = ratio(results, "trelm", "mlm")
    trelm = results.get("trelm", {})
    amortised = (
        trelm["amortised_step_ms"] / results["mlm"]["step_ms_median"]
        if trelm.get("amortised_step_ms") and results.get("mlm", {}).get("step_ms_median")
        else None
    )
    lines = header_lines(
        "TRELM pre-training step benchmark",
        meta,
        [
            f"- Settings: dtype {meta['dtype']}, AdamW over the trainable parameters, warm-up {meta['warmup']} + "
            f"{meta['steps']} timed steps in {meta['rounds']} round-robin rounds, torch threads per worker "
            f"{meta['threads']}, {meta['num_batches']} distinct batches cycled; routing: {meta['routing']}."
        ],
        " (freed heap returned with malloc_trim after the warm-up, so the attribution pass before it does not count)",
    )
    lines += system_table(
        "| System | Params (M) | Trainable (M) | Optimizer state (MiB) | Step median (ms) | min–max (ms) | "
        "Samples/s | Peak mem (MiB) | Time × MLM | Mem × MLM | Attribution step (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        results,
        lambda system, r: (
            f"| {r['label']} | {r['params_m']:.1f} | {r['trainable_m']:.2f} | {r['optimizer_state_mib']:.0f} | "
            f"{r['step_ms_median']:.1f} | {r['step_ms_min']:.0f}–{r['step_ms_max']:.0f} | {r['samples_per_s']:.2f} | "
            f"{fmt(r['peak_memory_mib'], 0)} | {fmt(ratio(results, system, 'mlm'), 3, '×')} | "
            f"{fmt(ratio(results, system, 'mlm', 'peak_memory_mib'), 3, '×')} | {fmt(r.get('attribution_ms'), 0)} |"
        ),
    )
    attribution = trelm.get("attribution_ms")
    lines += comparison_lines(
        "MLM",
        [
            ("TRELM with routing step / plain MLM step", routed, 3),
            ("TRELM with routing step / TRELM without routing step", ratio(results, "trelm", "trelm-no-routing"), 3),
            ("TRELM without routing step / plain MLM step", ratio(results, "trelm-no-routing", "mlm"), 3),
            (
                "attribution step / TRELM with routing step",
                attribution / trelm["step_ms_median"] if attribution else None,
                2,
            ),
            (
                f"TRELM with routing, re-routed every {meta['routing_interval']} steps (amortised) / plain MLM step",
                amortised,
                3,
            ),
        ],
        f"(GPU, BERT-base bs 64 × 128): TRELM step with routing ≤ {TARGET_ROUTING}× plain MLM",
        verdict(routed, TARGET_ROUTING),
        cuda,
    )
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = training_step_parser("trelm", __doc__.splitlines()[0], PRESETS, SYSTEMS, 4)
    p.add_argument("--routing-fraction", type=float, default=0.1, help="share of FFN neurons routed per layer")
    p.add_argument("--routing-steps", type=int, default=20, help="IG Riemann steps m (paper: 20)")
    p.add_argument(
        "--routing-batch-steps",
        type=int,
        default=None,
        help="Riemann steps per batched attribution pass (default: all m at once; the paper preset's "
        "batch of 64 x m = 20 copies does not fit one GPU, 4 does)",
    )
    p.add_argument("--routing-interval", type=int, default=100, help="re-route every N steps (amortised cost)")
    p.add_argument("--attribution-repeats", type=int, default=3, help="timed attribution steps (median reported)")
    return parse_training_step_args(p, argv, SYSTEMS)


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    meta = {
        "routing": (
            f"{args.routing_fraction:g} of the FFN neurons per layer, IG with {args.routing_steps} steps in "
            + (
                "one batched pass"
                if args.routing_batch_steps is None
                else f"batched passes of {args.routing_batch_steps}"
            )
        ),
        "routing_interval": args.routing_interval,
    }
    run_training_step_benchmark("trelm", argv, args, PRESETS[args.preset], SYSTEMS, TrelmRunner, meta, markdown_report)
