"""The benchmark harness: KALA's compared systems (models, batches, optimizers) and what every training-step
benchmark shares: one training step, timing, host memory, compile bookkeeping, and the machine and software a run
records."""

from __future__ import annotations

import datetime
import logging
import os
import platform
import re
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, replace

import torch

from benchmarks.report_paths import command_line
from benchmarks.synthetic import Preset, make_features
from keplm.data.collator import KeplmDataCollator
from keplm.tokenization.processing_kala import KalaProcessor

GRAPH_KEYS = ("entity_token_map", "node_entity_ids", "edge_index", "edge_relation_ids")

#: name -> (label, KALA retrieval_mode or None for transformers' own BertForQuestionAnswering, extra layers)
SYSTEMS = {
    "stock-bert": ("stock HF BertForQuestionAnswering (AdamW, eager)", None, 0),
    "vanilla": ("KALA retrieval=none (vanilla)", "none", 0),
    "plus1": ("KALA retrieval=none +1 layer", "none", 1),
    "pointwise": ("KALA pointwise", "pointwise", 0),
    "relational": ("KALA relational", "relational", 0),
    # opt-in: the suggested fix for the entity-memory cost (sparse embedding grads + SparseAdam for that table)
    "relational-sparse": ("KALA relational, sparse entity-memory grads + SparseAdam", "relational", 0),
    # opt-in: sparse grads + row-wise AdaGrad for the table (4 B of optimizer state per row instead of 8 B per weight)
    "relational-rowwise": ("KALA relational, sparse entity-memory grads + row-wise AdaGrad", "relational", 0),
    # opt-in: dense grads + row-wise AdaGrad (the memory-saving variant that torch.compile can compile)
    "relational-rowwise-dense": ("KALA relational, entity memory on row-wise AdaGrad", "relational", 0),
}
#: systems whose entity memory has sparse gradients
SPARSE_MEMORY = {"relational-sparse", "relational-rowwise"}
#: systems whose entity memory has its own optimizer -> KALA's entity_memory_optimizer option
MEMORY_OPTIMIZER = {
    "relational-sparse": "adam",
    "relational-rowwise": "rowwise_adagrad",
    "relational-rowwise-dense": "rowwise_adagrad",
}
DEFAULT_SYSTEMS = ("stock-bert", "vanilla", "plus1", "pointwise", "relational")
PHASES = ("bench_forward", "bench_backward", "bench_optimizer")
_ROWS_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000}


def split_system(name: str) -> tuple[str, int | None]:
    """``"SYSTEM"`` or ``"SYSTEM@ROWS"`` (a knowledge system with an entity memory of ROWS rows instead of the
    preset's, e.g. ``relational-rowwise@5M``: the scale of the memory, GPU issue part 2) -> (system, rows or None).
    Raises ``ValueError`` naming what is wrong."""
    base, rows = base_system(name), name.partition("@")[2]
    if base not in SYSTEMS:
        raise ValueError(f"unknown system {base!r}; choose from {list(SYSTEMS)}")
    if "@" not in name:
        return base, None
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", rows)
    if not found:
        raise ValueError(f"{name!r}: the entity memory size after '@' must be a row count such as 500000, 500k or 5M")
    if not uses_knowledge(base):
        raise ValueError(f"{name!r}: {base} has no entity memory to resize")
    count = round(float(found.group(1)) * _ROWS_SUFFIX[found.group(2).lower()])
    if count < 2:
        raise ValueError(f"{name!r}: the entity memory needs at least 2 rows (the null entity and one more)")
    return base, count


def system_preset(name: str, preset: Preset) -> tuple[str, Preset]:
    """The base system of ``name`` and the preset it runs with: ``preset`` with ``entity_vocab_size`` replaced for
    ``SYSTEM@ROWS``. The synthetic features draw the same graphs either way, only their entity ids spread over the
    larger table."""
    base, rows = split_system(name)
    return base, (preset if rows is None else replace(preset, entity_vocab_size=rows))


def system_label(name: str) -> str:
    base, rows = split_system(name)
    return SYSTEMS[base][0] + ("" if rows is None else f", {rows:,} entities")


def base_system(name: str) -> str:
    """``SYSTEM`` of ``SYSTEM@ROWS`` (the name itself without ``@``)."""
    return name.partition("@")[0]


def uses_knowledge(system: str) -> bool:
    return SYSTEMS[base_system(system)][1] not in (None, "none")


def is_compiled(system: str, compile_flag: bool) -> bool:
    """The stock reference is always plain eager AdamW (the issue's baseline); the others follow the flags."""
    return compile_flag and system != "stock-bert"


def build_model(system: str, preset: Preset, seed: int = 0) -> torch.nn.Module:
    from transformers import BertForQuestionAnswering

    from keplm.configuration.configuration_kala import KalaConfig
    from keplm.modeling.modeling_kala_heads import KalaForQuestionAnswering

    torch.manual_seed(seed)
    system, preset = system_preset(system, preset)
    _, retrieval, extra = SYSTEMS[system]
    if retrieval is None:
        return BertForQuestionAnswering(preset.encoder_config())
    config = KalaConfig(
        encoder_config=preset.encoder_config(),
        retrieval_mode=retrieval,
        num_extra_layers=extra,
        kfm_layers=[-1],
        entity_vocab_size=preset.entity_vocab_size,
        num_relations=preset.num_relations,
        sparse_entity_memory=system in SPARSE_MEMORY,
    )
    return KalaForQuestionAnswering(config)


def make_optimizer(model: torch.nn.Module, kind: str, system: str = ""):
    """AdamW (fused if asked), with the model's parameter groups applied as the KeplmTrainer applies them: the
    entity memory goes to SparseAdam or row-wise AdaGrad (``MEMORY_OPTIMIZER``)."""
    from keplm.training.optim import apply_parameter_groups

    system = base_system(system)
    kwargs = {"fused": True} if kind == "adamw_fused" else {}
    dense = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-5, weight_decay=0.01, **kwargs)
    hook = getattr(model, "parameter_groups", None)
    if hook is None:  # the stock BERT reference
        return dense
    groups = hook(3e-5, entity_memory_optimizer=MEMORY_OPTIMIZER.get(system, "adam")) if uses_knowledge(system) else []
    return apply_parameter_groups(dense, groups, 3e-5, betas=(0.9, 0.999), eps=1e-8)


def make_collator(preset: Preset, graph_pad: int | None, knowledge: bool = True) -> KeplmDataCollator:
    return KeplmDataCollator(
        pad_token_id=0,
        pad_to_multiple_of=8,
        graph_pad_to_multiple_of=graph_pad or None,
        sequence_families=KalaProcessor.sequence_families,
        graph=knowledge,
        entity_vocab_size=preset.entity_vocab_size,
    )


def make_batches(
    preset: Preset, num_batches: int, graph_pad: int | None, knowledge: bool, seed: int, pin: bool = False
) -> list[dict]:
    """``num_batches`` distinct batches built by the real collator (graph sizes vary from batch to batch)."""
    features = make_features(preset, num_batches * preset.batch_size, seed=seed)
    collator = make_collator(preset, graph_pad)
    batches = []
    for i in range(num_batches):
        batch = collator(features[i * preset.batch_size : (i + 1) * preset.batch_size])
        if not knowledge:
            batch = {k: v for k, v in batch.items() if k not in GRAPH_KEYS}
        batches.append({k: v.pin_memory() for k, v in batch.items()} if pin else batch)
    return batches


def autocast_context(device: torch.device, dtype: str):
    return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bf16" else nullcontext()


def make_step(model, forward, optimizer, device: torch.device, dtype: str, annotate: bool = False):
    """One training step: host->device copy, forward (autocast), backward, optimizer step, zero_grad."""
    from torch.profiler import record_function

    def phase(name):
        return record_function(name) if annotate else nullcontext()

    def step(batch: dict) -> None:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with phase(PHASES[0]), autocast_context(device, dtype):
            loss = forward(**batch).loss
        with phase(PHASES[1]):
            loss.backward()
        with phase(PHASES[2]):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return step


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, *args) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn(*args)
    synchronize(device)
    return time.perf_counter() - start


# ---------------------------------------------------------------------- host memory (Linux)
def rss_kib() -> int | None:
    return _status_kib("VmRSS")


def peak_rss_kib() -> int | None:
    return _status_kib("VmHWM")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; Linux >= 4.0."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            match = re.search(rf"^{field}:\s+(\d+)\s+kB", handle.read(), re.MULTILINE)
        return int(match.group(1)) if match else None
    except OSError:
        return None


# ---------------------------------------------------------------------- compile bookkeeping
class RecompileCounter(logging.Handler):
    """Counts torch._dynamo recompilations (the ``recompiles`` log artifact) and keeps the first reasons."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.reasons: list[str] = []
        torch._logging.set_logs(recompiles=True)
        logging.getLogger("torch._dynamo.guards.__recompiles").addHandler(self)

    def emit(self, record):
        self.count += 1
        if len(self.reasons) < 4:
            message = record.getMessage()
            self.reasons.append(" ".join(line.strip() for line in message.splitlines()[:4])[:300])


def dynamo_counts() -> dict:
    from torch._dynamo.utils import counters

    return {
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_break_reasons": sorted({reason.splitlines()[0][:120] for reason in counters["graph_break"]}),
    }


# ---------------------------------------------------------------------- environment
def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            found = re.search(r"^model name\s*:\s*(.+)$", handle.read(), re.MULTILINE)
        model = found.group(1).strip() if found else model
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} logical CPUs)"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def run_meta(benchmark: str, argv: list[str], args, preset) -> dict:
    """What a training-step report records of its run: date, command line (no machine paths), device, preset (name,
    values and shape as ``preset.describe()`` writes it), the step settings, library versions and the load average
    before the run."""
    import transformers

    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": command_line(benchmark, argv),
        "device": args.device,
        "device_name": device_name(torch.device(args.device)),
        "preset": args.preset,
        "preset_values": asdict(preset),
        "shape": preset.describe(),
        "dtype": args.dtype,
        "steps": args.steps,
        "warmup": args.warmup,
        "num_batches": args.num_batches,
        "rounds": min(args.rounds or args.steps, args.steps),
        "threads": args.threads or torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "load_before": load_average(),
    }
