"""Training-step benchmark: KALA (relational, pointwise) vs vanilla / +1-layer BERT at the paper's QA setting.

Each system runs in its own subprocess (same seed, same synthetic features batched by the real
``KeplmDataCollator``) so that peak memory and torch.compile state are measured in isolation; the
parent prints one side-by-side table. See benchmarks/README.md.

    python benchmarks/bench_kala.py --preset cpu-small --device cpu
    python benchmarks/bench_kala.py --preset paper --device cuda --dtype bf16 --optim adamw_fused --compile
    python benchmarks/bench_kala.py --preset cpu-small --device cpu --profile
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from harness import (  # noqa: E402
    DEFAULT_SYSTEMS,
    MEMORY_OPTIMIZER,
    SYSTEMS,
    device_name,
    load_average,
    make_collator,
    split_system,
    system_label,
)
from report_paths import command_line  # noqa: E402
from synthetic import PRESETS, feature_stats, make_features  # noqa: E402
from workers import fmt, ratio, run_round_robin, serve, write_outputs  # noqa: E402

TARGET_TIME, TARGET_MEMORY, TARGET_STOCK = 1.10, 1.15, 0.6
# entity-memory scale (GPU issue part 2): <= 1.2x vanilla at 5M rows, memory growing only by the table itself (the
# 5 % slack covers row-wise AdaGrad's 4 B per row, 0.1-0.4 % of a row's weights, and allocator rounding)
TARGET_SCALE_TIME, TARGET_SCALE_MEMORY = 1.20, 1.05


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu-small")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default=None,
                   help="autocast dtype (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--optim", choices=["adamw", "adamw_fused"], default="adamw",
                   help="optimizer of the KALA rows (the stock row always uses plain AdamW)")
    p.add_argument("--compile", action="store_true", help="torch.compile the KALA models (not the stock reference)")
    p.add_argument("--compile-dynamic", choices=["auto", "true", "false"], default="auto",
                   help="dynamic= of torch.compile (auto: static first, dynamic after the first shape change)")
    p.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune-no-cudagraphs"],
                   default="default", help="mode= of torch.compile (reduce-overhead: CUDA graphs, one per graph shape)")
    p.add_argument("--graph-pad", type=int, default=None,
                   help="collator graph_pad_to_multiple_of (default: the preset's with --compile, off otherwise; "
                   "0 = off)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default: 50 paper, 20 cpu-small)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default: 10 paper, 5 cpu-small)")
    p.add_argument("--num-batches", type=int, default=16, help="distinct collated batches, cycled")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma list of {', '.join(SYSTEMS)}; a knowledge system as SYSTEM@ROWS (e.g. "
                   "relational-rowwise@5M) gets an entity memory of ROWS rows instead of the preset's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--collator-seconds", type=float, default=3.0, help="how long to time the collator")
    p.add_argument("--json", help="write all results to this JSON file")
    p.add_argument("--markdown", help="also write the markdown report to this file")
    p.add_argument("--profile", action="store_true",
                   help="count ops/kernels per step instead of timing (profile_kala.py)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=None,
                   help="timed steps are split into this many round-robin rounds (default: one step per round)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads in the workers (default: torch's)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    paper = args.preset == "paper"
    args.steps = args.steps if args.steps is not None else (50 if paper else 20)
    args.warmup = args.warmup if args.warmup is not None else (10 if paper else 5)
    if args.graph_pad is None:
        args.graph_pad = PRESETS[args.preset].graph_pad_multiple if args.compile else 0
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for system in args.systems:
        try:
            split_system(system)
        except ValueError as error:
            p.error(str(error))
    return args


# ---------------------------------------------------------------------- all systems, interleaved rounds
def run_systems(args: argparse.Namespace, argv: list[str]) -> dict:
    """One worker per system, warmed up in turn, then timed round robin (``workers.run_round_robin``)."""
    return run_round_robin(__file__, argv, args.systems, {s: system_label(s) for s in args.systems}, args.steps,
                           args.rounds)


# ---------------------------------------------------------------------- collator throughput (parent, 1 thread)
def measure_collator(args: argparse.Namespace) -> dict:
    preset = PRESETS[args.preset]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        features = make_features(preset, 16 * preset.batch_size, seed=args.seed + 1)
        collator = make_collator(preset, args.graph_pad)
        chunks = [features[i:i + preset.batch_size] for i in range(0, len(features), preset.batch_size)]
        collator(chunks[0])
        count, start = 0, time.perf_counter()
        while count < 20 or time.perf_counter() - start < args.collator_seconds:
            collator(chunks[count % len(chunks)])
            count += 1
        elapsed = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    return {"batches_per_s": count / elapsed, "ms_per_batch": 1e3 * elapsed / count, "batches": count,
            "graph_pad": args.graph_pad}


# ---------------------------------------------------------------------- report
def vs_vanilla(results: dict, system: str, key: str, base: str = "vanilla") -> float | None:
    """``key`` of ``system`` over ``base`` (``workers.ratio``: step times as the median of paired per-round ratios)."""
    return ratio(results, system, base, key)


def table_growth(results: dict, system: str) -> float | None:
    """Peak-memory growth of ``SYSTEM@ROWS`` over ``SYSTEM`` (the preset's memory size, same run) as a multiple of
    the growth of its fp32 entity table: 1.0 = the memory grows by the table itself and nothing else (no
    table-sized gradient or optimizer state). None when either peak is missing or the table does not grow."""
    base, rows = split_system(system)
    a, b = results.get(system, {}), results.get(base, {})
    if rows is None or a.get("peak_memory_mib") is None or b.get("peak_memory_mib") is None:
        return None
    table_mib = (a["params_m"] - b["params_m"]) * 1e6 * 4 / 2**20
    return (a["peak_memory_mib"] - b["peak_memory_mib"]) / table_mib if table_mib > 0 else None


def targets(results: dict, compiled: bool) -> list[dict]:
    """The issue's targets for relational and pointwise (n/a when not measured), for any memory-optimizer
    variant in this run (``relational-rowwise``, ...) and for every resized memory (``SYSTEM@ROWS``)."""
    rows = []
    variants = [s for s in MEMORY_OPTIMIZER if s in results]
    for system in ("relational", "pointwise", *variants):
        rows.append({"target": f"KALA {system} step time <= {TARGET_TIME:.2f}x vanilla",
                     "value": vs_vanilla(results, system, "step_ms_median"), "limit": TARGET_TIME})
        rows.append({"target": f"KALA {system} peak memory <= {TARGET_MEMORY:.2f}x vanilla",
                     "value": vs_vanilla(results, system, "peak_memory_mib"), "limit": TARGET_MEMORY})
    for system in ("relational", "pointwise", *variants):
        note = "" if compiled else " (this run: eager KALA; the target is for compiled KALA)"
        rows.append({"target": f"compiled KALA {system} step <= {TARGET_STOCK}x stock vanilla step{note}",
                     "value": vs_vanilla(results, system, "step_ms_median", base="stock-bert"),
                     "limit": TARGET_STOCK})
    for system in (s for s in results if split_system(s)[1] is not None):
        rows.append({"target": f"KALA {system} step time <= {TARGET_SCALE_TIME:.2f}x vanilla",
                     "value": vs_vanilla(results, system, "step_ms_median"), "limit": TARGET_SCALE_TIME})
        rows.append({"target": f"KALA {system} peak-memory growth over {split_system(system)[0]} <= "
                     f"{TARGET_SCALE_MEMORY:.2f}x its table's growth", "value": table_growth(results, system),
                     "limit": TARGET_SCALE_MEMORY})
    for row in rows:
        row["result"] = "n/a" if row["value"] is None else ("PASS" if row["value"] <= row["limit"] else "FAIL")
    return rows


def markdown_report(meta: dict, results: dict, collator: dict, target_rows: list[dict]) -> str:
    cuda = meta["device"] == "cuda"
    mem_header = "Peak mem (MiB, max_allocated)" if cuda else "Peak RSS Δ (MiB)"
    lines = [
        f"# KALA training-step benchmark: preset `{meta['preset']}` on {meta['device_name']}",
        "",
        f"- Date: {meta['date']}",
        f"- Command: `{meta['command']}`",
        f"- Device: `{meta['device']}` — {meta['device_name']}; load average before/after: {meta['load_before']} / "
        f"{meta['load_after']}",
        f"- Software: torch {meta['torch']}, transformers {meta['transformers']}, torch_geometric {meta['pyg']}, "
        f"Python {meta['python']}",
        f"- Shape: {meta['shape']}",
        f"- Synthetic features (mean per context): {meta['feature_stats']}",
        f"- Settings: dtype {meta['dtype']}, optimizer {meta['optim']} (stock row: plain AdamW, eager), "
        f"compile {meta['compile']} (dynamic={meta['compile_dynamic']}, mode={meta['compile_mode']}), "
        f"graph_pad_to_multiple_of "
        f"{meta['graph_pad'] or 'off'}, warm-up {meta['warmup']} + {meta['steps']} timed steps in {meta['rounds']} "
        f"round-robin rounds, torch threads per worker {meta['threads']}, "
        f"{meta['num_batches']} distinct batches cycled",
        "- Step = host→device copy + forward + backward + optimizer.step + zero_grad"
        + (", CUDA-synchronised." if cuda else ".")
        + ("" if cuda else " Memory: peak RSS during the timed steps minus RSS before the model was built "
           "(weights, grads, AdamW state, activations, allocator caching; with --compile also compiler memory)."),
        "- Static MiB = fp32 weights + dense grads + the optimizer state tensors as allocated (AdamW m, v: 16 B/param "
        "in all; sparse tables: no dense grad, SparseAdam 8 B/weight or row-wise AdaGrad 4 B/row), exact and "
        "device-independent; the peak memory column adds activations and allocator overheads.",
        "",
        "| System | Params (M) | Static MiB | Step mean (ms) | Step median (ms) | min–max (ms) | Samples/s | "
        f"{mem_header} "
        "| Time × vanilla | Mem × vanilla | Notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for system, r in results.items():
        if "error" in r:
            lines.append(f"| {r['label']} | | | | | | | | | | ERROR: {r['error'][-200:].replace('|', '/')} |")
            continue
        notes = []
        if r.get("compiled"):
            notes.append(f"compiled; 1st step {r['first_step_s']:.1f}s; recompiles warm-up/timed "
                         f"{r['recompiles_in_warmup']}/{r['recompiles_in_timed_steps']}; graph breaks "
                         f"{r['graph_breaks']}; graphs {r['unique_graphs']}")
        if r.get("nodes_per_batch"):
            notes.append(f"{r['nodes_per_batch']:.0f} nodes/batch")
        if system == "stock-bert" or r["optim"] != meta["optim"]:
            notes.append(r["optim"])
        lines.append(
            f"| {r['label']} | {r['params_m']:.1f} | {r['static_mib']:.0f} | {r['step_ms_mean']:.1f} | "
            f"{r['step_ms_median']:.1f} | "
            f"{r['step_ms_min']:.0f}–{r['step_ms_max']:.0f} | {r['samples_per_s']:.1f} | "
            f"{fmt(r['peak_memory_mib'], 0)} | {fmt(vs_vanilla(results, system, 'step_ms_median'), 3, '×')} | "
            f"{fmt(vs_vanilla(results, system, 'peak_memory_mib'), 3, '×')} | {'; '.join(notes)} |"
        )
    lines += ["", "Time ratios: median over the round-robin rounds of (system step / reference step in the same "
              "round), "
              "which cancels slow load drifts; memory ratios: peak over peak. Targets from the issue:", "",
              "| Target | Value | Result |", "|---|---:|---|"]
    lines += [f"| {t['target']} | {fmt(t['value'], 3, '×')} | {t['result']} |" for t in target_rows]
    step_ref = {s: r["step_ms_median"] for s, r in results.items() if "step_ms_median" in r}
    lines += ["", f"Collator (`KeplmDataCollator`, one CPU thread, batch {meta['batch_size']}): "
              f"{collator['batches_per_s']:.0f} batches/s ({collator['ms_per_batch']:.2f} ms/batch)."]
    if "relational" in step_ref:
        share = collator["ms_per_batch"] / step_ref["relational"]
        lines.append(f"Collation takes {share:.3f}× the relational step time on this device "
                     f"({1 / share:.1f} batches collated per step on one core): "
                     + ("keeps up with one DataLoader worker." if share < 1 else "does NOT keep up with one worker."))
    return "\n".join(lines) + "\n"


def collect_meta(args: argparse.Namespace, argv: list[str]) -> dict:
    import torch_geometric
    import transformers

    preset = PRESETS[args.preset]
    device = torch.device(args.device)
    shape = (f"BERT {preset.num_layers} layers, hidden {preset.hidden_size}, {preset.num_heads} heads, FFN "
             f"{preset.intermediate_size}, vocab {preset.vocab_size}; batch {preset.batch_size} × seq "
             f"{preset.seq_len}; "
             f"entity memory {preset.entity_vocab_size} × {preset.hidden_size}; {preset.num_relations} relations "
             "(+ inverses); KFM on the last layer")
    stats = feature_stats(make_features(preset, 256, seed=args.seed))
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": command_line("benchmarks/bench_kala.py", argv),  # no machine paths (report_paths.portable_path)
        "device": args.device, "device_name": device_name(device), "preset": args.preset, "shape": shape,
        "batch_size": preset.batch_size, "dtype": args.dtype, "optim": args.optim, "compile": args.compile,
        "compile_dynamic": args.compile_dynamic, "compile_mode": args.compile_mode, "graph_pad": args.graph_pad,
        "steps": args.steps,
        "warmup": args.warmup, "num_batches": args.num_batches, "rounds": min(args.rounds or args.steps, args.steps),
        "threads": args.threads or torch.get_num_threads(), "torch": torch.__version__,
        "transformers": transformers.__version__, "pyg": torch_geometric.__version__,
        "python": sys.version.split()[0], "load_before": load_average(),
        "feature_stats": ", ".join(f"{k} {v:.2f}" for k, v in stats.items()),
    }


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        serve(args, args.worker)
        return
    if args.profile:
        from profile_kala import run_profile

        run_profile(args, argv)
        return
    meta = collect_meta(args, argv)
    print(f"# {meta['date']} — {meta['device_name']} — {meta['command']}", flush=True)
    results = run_systems(args, argv)
    collator = measure_collator(args)
    meta["load_after"] = load_average()
    target_rows = targets(results, args.compile)
    report = markdown_report(meta, results, collator, target_rows)
    print(report)
    write_outputs(args, report, {"meta": meta, "systems": results, "collator": collator, "targets": target_rows})


if __name__ == "__main__":
    main()
