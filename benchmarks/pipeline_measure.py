"""Measurements of the raw-text pipeline benchmark (``python -m benchmarks pipeline``) on pipelines already built in
this process: interleaved throughput rounds (relational and vanilla in turn, order rotated each round, paired per-round
ratios), the stage breakdown of instrumented passes (``Stages`` wraps one pipeline instance's preprocess, linking,
graph features, collation, forward and postprocess and hooks the KALA knowledge modules, changing nothing in keplm),
and the cProfile summaries (hottest functions by own time, keplm functions by cumulative time, paths made portable),
which the build workers of ``pipeline_setup.py`` use as well.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from benchmarks.pipeline_setup import SYSTEMS
from benchmarks.report_paths import portable_frame

KNOWLEDGE_INPUTS = "knowledge inputs (index checks + entity memory)"
KNOWLEDGE_LAYERS = "knowledge layers"
#: the three parts of the knowledge layers' time (the last one derived: what the first two leave)
GNN, MLPS, NODE_CONTEXT = "relational GNN", "γ/β MLPs", "node context + bookkeeping"
ENCODER = "encoder + head + KFM hooks"
OVERHEAD = "pipeline overhead (iterators, DataLoader, unbatching)"
TOP_STAGES = ("linking", "graph features", "tokenisation + alignment", "collation", "model forward", "postprocess")
#: stages that only the relational pipeline runs (their time is knowledge cost by construction)
KNOWLEDGE_ONLY = ("linking", "graph features", KNOWLEDGE_INPUTS, KNOWLEDGE_LAYERS)


# ---------------------------------------------------------------------- throughput (interleaved rounds)
def timed_pass(pipe, inputs, batch_size: int) -> float:
    begin = time.perf_counter()
    outputs = pipe(inputs, batch_size=batch_size)
    elapsed = time.perf_counter() - begin
    if len(outputs) != len(inputs):
        raise RuntimeError(f"the pipeline returned {len(outputs)} outputs for {len(inputs)} inputs")
    return elapsed


def interleaved(rounds: int, measure, pipes: dict, task: str, texts: list, batch_size: int) -> dict[str, list]:
    """``rounds`` rounds of ``measure(pipe, texts, batch_size)`` on every system's ``task`` pipeline, the order
    rotated each round (relational and vanilla alternate which goes first); the measurements per system."""
    results = {system: [] for system in SYSTEMS}
    order = list(SYSTEMS)
    for _ in range(rounds):
        for system in order:
            results[system].append(measure(pipes[(task, system)], texts, batch_size))
        order = order[1:] + order[:1]
    return results


def cases(args) -> list[tuple[str, int]]:
    """(task, batch size) of every measured case."""
    return [(task, batch_size) for task in args.tasks for batch_size in args.batch_sizes]


def measure_throughput(args, pipes: dict, inputs: dict) -> dict:
    results = {}
    for task, batch_size in cases(args):
        times = interleaved(args.rounds, timed_pass, pipes, task, inputs[task], batch_size)
        count = len(inputs[task])
        rates = {system: [count / t for t in times[system]] for system in SYSTEMS}
        paired = [r / v for r, v in zip(rates["relational"], rates["vanilla"])]
        results[f"{task}/bs{batch_size}"] = {
            "task": task,
            "batch_size": batch_size,
            "examples": count,
            "seconds": times,
            "per_s": rates,
            "per_s_median": {s: statistics.median(rates[s]) for s in SYSTEMS},
            "ratio_rounds": paired,
            "ratio_median": statistics.median(paired),
            "ratio_min": min(paired),
            "ratio_max": max(paired),
        }
        print(
            f"  {task} bs={batch_size}: relational {statistics.median(rates['relational']):.1f}/s, vanilla "
            f"{statistics.median(rates['vanilla']):.1f}/s, ratio {statistics.median(paired):.3f} "
            f"(rounds {', '.join(f'{x:.2f}' for x in paired)})",
            flush=True,
        )
    return results


# ---------------------------------------------------------------------- stage breakdown (instrumented pass)
class Stages:
    """Instance-level timing wrappers on one pipeline (nothing in keplm is changed; removed on exit)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.seconds: dict[str, float] = {}
        self.counts = {
            "features": 0,
            "mentions": 0,
            "nodes": 0,
            "mention_nodes": 0,
            "edges": 0,
            "batches": 0,
            "features_without_mentions": 0,
        }
        self._patched: list[tuple[object, str]] = []
        self._hooks = []

    def add(self, key: str, seconds: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def _wrap(self, owner, name: str, key: str, generator: bool = False, after=None):
        function = getattr(owner, name)
        stages = self

        if generator:

            def wrapper(*a, **k):
                iterator = function(*a, **k)
                while True:
                    begin = time.perf_counter()
                    try:
                        item = next(iterator)
                    except StopIteration:
                        stages.add(key, time.perf_counter() - begin)
                        return
                    stages.add(key, time.perf_counter() - begin)
                    yield item
        else:

            def wrapper(*a, **k):
                begin = time.perf_counter()
                result = function(*a, **k)
                stages.add(key, time.perf_counter() - begin)
                if after is not None:
                    after(result)
                return result

        setattr(owner, name, wrapper)
        self._patched.append((owner, name))

    def _count_features(self, features: dict) -> None:
        self.counts["features"] += 1
        self.counts["nodes"] += len(features.get("node_entity_ids", []))
        read = len({n for n in features.get("entity_token_map", []) if n >= 0})
        self.counts["mention_nodes"] += read
        self.counts["features_without_mentions"] += read == 0
        self.counts["edges"] += len(features.get("edge_relation_ids", []))

    def _count_batch(self, _batch) -> None:
        self.counts["batches"] += 1

    def _count_link(self, annotation) -> None:
        self.counts["mentions"] += len(annotation.entities)

    def __enter__(self):
        from keplm.modeling.kfm import KnowledgeFeatureModulation
        from keplm.modeling.modeling_kala import KalaKnowledgeLayer
        from keplm.modeling.relational_retrieval import RelationalRetrieval
        from keplm.pipelines import KeplmQuestionAnsweringPipeline

        pipe = self.pipe
        qa = isinstance(pipe, KeplmQuestionAnsweringPipeline)  # its preprocess yields one feature per window
        self._wrap(pipe, "preprocess", "preprocess", generator=qa)
        if pipe.with_knowledge:
            self._wrap(pipe.processor.linker, "link", "linking", after=self._count_link)
            self._wrap(pipe.processor, "knowledge_features", "graph features", after=self._count_features)
        self._wrap(pipe, "_collate", "collation", after=self._count_batch)
        self._wrap(pipe.model, "forward", "model forward")
        base = getattr(pipe.model, "kala", None)
        if base is not None and pipe.with_knowledge:
            self._wrap(base, "_knowledge_state", KNOWLEDGE_INPUTS)
        for module in pipe.model.modules():
            key = {
                KalaKnowledgeLayer: KNOWLEDGE_LAYERS,
                RelationalRetrieval: GNN,
                KnowledgeFeatureModulation: MLPS,
            }.get(type(module))
            if key is None:
                continue
            begin: list[float] = []
            self._hooks.append(module.register_forward_pre_hook(lambda *_, b=begin: b.append(time.perf_counter())))
            self._hooks.append(
                module.register_forward_hook(lambda *_, b=begin, k=key: self.add(k, time.perf_counter() - b.pop()))
            )
        self._wrap(pipe, "postprocess", "postprocess")
        return self

    def __exit__(self, *exc):
        for owner, name in reversed(self._patched):
            delattr(owner, name)  # the instance attribute goes; the class's method is seen again
        for hook in self._hooks:
            hook.remove()
        return False


def instrumented_pass(pipe, inputs, batch_size: int) -> dict:
    """One pass under :class:`Stages`: seconds per stage (derived stages filled in) and feature counts."""
    with Stages(pipe) as stages:
        total = timed_pass(pipe, inputs, batch_size)
    seconds = dict(stages.seconds)
    nested = seconds.get("linking", 0.0) + seconds.get("graph features", 0.0)
    seconds["tokenisation + alignment"] = seconds.pop("preprocess", 0.0) - nested
    if KNOWLEDGE_LAYERS in seconds:
        seconds[NODE_CONTEXT] = seconds[KNOWLEDGE_LAYERS] - seconds.get(GNN, 0.0) - seconds.get(MLPS, 0.0)
    inside = seconds.get(KNOWLEDGE_LAYERS, 0.0) + seconds.get(KNOWLEDGE_INPUTS, 0.0)
    seconds[ENCODER] = seconds.get("model forward", 0.0) - inside
    seconds[OVERHEAD] = total - sum(seconds.get(k, 0.0) for k in TOP_STAGES)
    return {"total_s": total, "seconds": seconds, "counts": stages.counts}


def measure_stages(args, pipes: dict, inputs: dict) -> dict:
    """``--stage-rounds`` instrumented passes per task, batch size and system, relational and vanilla alternating;
    per-stage medians over the rounds, and the share of each relational pass spent in knowledge-only stages."""
    results = {}
    for task, batch_size in cases(args):
        runs = interleaved(args.stage_rounds, instrumented_pass, pipes, task, inputs[task], batch_size)
        entry = {}
        for system, passes in runs.items():
            keys = {k for r in passes for k in r["seconds"]}
            entry[system] = {
                "total_s": statistics.median(r["total_s"] for r in passes),
                "seconds": {k: statistics.median(r["seconds"].get(k, 0.0) for r in passes) for k in keys},
                "counts": passes[0]["counts"],
                "examples": len(inputs[task]),
                "rounds": [{"total_s": r["total_s"], "seconds": r["seconds"]} for r in passes],
            }
        shares = [sum(r["seconds"].get(k, 0.0) for k in KNOWLEDGE_ONLY) / r["total_s"] for r in runs["relational"]]
        entry["knowledge_share"] = statistics.median(shares)
        entry["knowledge_share_rounds"] = shares
        results[f"{task}/bs{batch_size}"] = entry
    return results


def frame_name(filename: str, line: int, name: str) -> str:
    """A profiler frame as reports record it: keplm and repo files relative to the repo root, installed packages and
    the standard library by their module path (``transformers/pipelines/base.py``), built-ins by name."""
    if filename == "~":
        return name
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return f"{'/'.join(parts[parts.index(marker) + 1 :])}({line}): {name}"
    python = [i for i, part in enumerate(parts) if part.startswith("python3") and i and parts[i - 1] == "lib"]
    if python:
        return f"{'/'.join(parts[python[-1] + 1 :])}({line}): {name}"
    return portable_frame(f"{filename}({line}): {name}")


def profile_summary(profiler, top: int) -> dict:
    """The ``top`` functions by own time, and the keplm functions by cumulative time, paths made portable."""
    import pstats

    stats = pstats.Stats(profiler).stats
    total = sum(v[2] for v in stats.values())

    def row(key, value):
        return {"function": frame_name(*key), "calls": value[1], "own_s": value[2], "cumulative_s": value[3]}

    own = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    keplm_root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keplm") + os.sep
    keplm_cum = sorted(((k, v) for k, v in stats.items() if k[0].startswith(keplm_root)), key=lambda kv: -kv[1][3])[
        :top
    ]
    return {
        "profiled_s": total,
        "by_own_time": [row(*kv) for kv in own],
        "keplm_by_cumulative": [row(*kv) for kv in keplm_cum],
    }


def profile_relational(args, pipes: dict, inputs: dict) -> dict:
    """cProfile of one relational pass per task at the first batch size: hottest functions (own time) and the
    keplm functions with the most cumulative time."""
    import cProfile

    results = {}
    batch_size = args.batch_sizes[0]
    for task in args.tasks:
        profiler = cProfile.Profile()
        profiler.enable()
        timed_pass(pipes[(task, "relational")], inputs[task], batch_size)
        profiler.disable()
        results[task] = {"batch_size": batch_size, **profile_summary(profiler, args.profile_top)}
    return results
