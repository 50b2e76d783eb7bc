"""``python -m benchmarks kala --profile`` (or ``profile-kala``): ops / kernel launches per training step and host
syncs, vanilla vs KALA.

On CUDA it counts GPU kernels and kernel-launch API calls per step (and runs one step under
``torch.cuda.set_sync_debug_mode("warn")``); on CPU it counts profiler op events. Ops that force a
device->host sync on a GPU (``aten::_local_scalar_dense`` = ``.item()``/``int(t)``/``bool(t)``,
``aten::nonzero`` = boolean-mask indexing, ...) are listed with the Python line that issued them.
"""

from __future__ import annotations

import collections
import gc
import warnings
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from benchmarks.harness import (
    PHASES,
    build_model,
    device_name,
    is_compiled,
    load_average,
    make_batches,
    make_optimizer,
    make_step,
    system_preset,
    uses_knowledge,
)
from benchmarks.report import write_outputs
from benchmarks.report_paths import command_line, portable_frame
from benchmarks.synthetic import PRESETS

#: ops that wait for the device when their input lives on a GPU (.item()/int()/bool() all end in _local_scalar_dense)
SYNC_OPS = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::nonzero_static",
}
#: metadata-only ops: never a kernel
VIEW_OPS = {
    "aten::view",
    "aten::_unsafe_view",
    "aten::as_strided",
    "aten::t",
    "aten::transpose",
    "aten::permute",
    "aten::expand",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::select",
    "aten::slice",
    "aten::detach",
    "aten::alias",
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::split",
    "aten::split_with_sizes",
    "aten::unbind",
    "aten::chunk",
    "aten::numpy_T",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::lift_fresh",
    "aten::result_type",
    "aten::_reshape_alias",
    "aten::expand_as",
    "aten::view_as",
    "aten::narrow",
    "aten::size",
    "aten::stride",
    "aten::is_nonzero",
    "aten::item",
    "aten::_nnz",
    "aten::_values",
    "aten::_indices",
    "aten::sparse_dim",
    "aten::dense_dim",
    "aten::is_coalesced",
    "aten::detach_",
    "aten::set_",
    "aten::resize_",
}
#: ops that copy only sometimes (no-op casts, already-contiguous tensors): they count when a child does work
MAYBE_COPY_OPS = {"aten::to", "aten::contiguous", "aten::reshape", "aten::type_as", "aten::flatten"}
#: allocation-only ops: no kernel when they have no child op
ALLOC_OPS = {
    "aten::new_empty",
    "aten::new_empty_strided",
    "aten::to",
    "aten::contiguous",
    "aten::reshape",
    "aten::type_as",
    "aten::flatten",
}
PHASE_NAMES = ("forward", "backward", "optimizer")
LAUNCH_API = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaGraphLaunch")


def _user_frame(event) -> str:
    """The innermost Python frame outside torch/ (or in torch/optim/) that issued an op (``with_stack=True``)."""
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if "): " in name and not name.startswith("<built-in"):
            if "torch/" not in name or "torch_geometric/" in name or "torch/optim/" in name:
                return name[name.index("torch/optim/") :] if "torch/optim/" in name else portable_frame(name)
        parent = parent.cpu_parent
    return "?"


def _phase_of(event, ranges) -> str:
    start = event.time_range.start
    for name, (begin, end) in ranges.items():
        if begin <= start <= end:
            return name.replace("bench_", "")
    return "other"


def _does_work(event) -> bool:
    if event.name in VIEW_OPS:
        return False
    if event.name in MAYBE_COPY_OPS:
        return any(_does_work(child) for child in event.cpu_children if child.name.startswith("aten::"))
    return True


def _is_leaf_kernel(event) -> bool:
    """An op that calls no other (non-view) op and is not a view or allocation: one kernel, on a GPU."""
    if event.name in VIEW_OPS or event.name in ALLOC_OPS:
        return False
    return not any(child.name.startswith("aten::") and child.name not in VIEW_OPS for child in event.cpu_children)


def _is_top_level(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def count_events(prof) -> dict:
    """Top-level ops (dispatcher calls from Python or from autograd nodes, views excluded) per phase."""
    events = prof.events()
    # the host-side ranges only: on CUDA each record_function also appears as a GPU-timeline annotation (later
    # timestamps), which, kept last, left the backward ops outside every range ("bwd ops 0" on the H100)
    ranges = {
        e.name: (e.time_range.start, e.time_range.end)
        for e in events
        if e.name in PHASES and e.device_type == DeviceType.CPU
    }
    per_phase = collections.Counter()
    names = collections.Counter()
    all_aten = 0
    syncs = collections.Counter()
    kernels = memcpy = launches = 0
    kernel_us = collections.Counter()  # GPU time per kernel name: where the device time of a step goes
    for event in events:
        name = event.name
        if event.device_type == DeviceType.CUDA:
            if "memcpy" in name.lower() or "memset" in name.lower():
                memcpy += 1
            else:
                kernels += 1
                kernel_us[name[:100]] += event.time_range.end - event.time_range.start
            continue
        if name in LAUNCH_API:
            launches += 1
            per_phase[f"launches_{_phase_of(event, ranges)}"] += 1
        if name in SYNC_OPS or "Synchronize" in name:
            syncs[f"{name} @ {_user_frame(event)}"] += 1
        if not name.startswith("aten::"):
            continue
        all_aten += 1
        if _is_leaf_kernel(event):  # composite ops (linear + autocast casts, index_select_backward, ...) by parts
            per_phase[f"leaf_{_phase_of(event, ranges)}"] += 1
        if _is_top_level(event) and _does_work(event):
            names[name] += 1
            per_phase[_phase_of(event, ranges)] += 1
    phase_ms = {name.replace("bench_", ""): (end - begin) / 1e3 for name, (begin, end) in ranges.items()}
    return {
        "ops": sum(names.values()),
        "aten_events": all_aten,
        "per_phase": dict(per_phase),
        "phase_ms": phase_ms,
        "op_names": dict(names),
        "sync_ops": dict(syncs),
        "cuda_kernels": kernels,
        "cuda_memcpy_memset": memcpy,
        "launch_calls": launches,
        "kernel_us": dict(kernel_us),
    }


def profile_system(args, system: str) -> dict:
    _, preset = system_preset(system, PRESETS[args.preset])
    device = torch.device(args.device)
    batches = make_batches(
        preset, max(args.warmup, 2) + 1, args.graph_pad, uses_knowledge(system), args.seed, pin=device.type == "cuda"
    )
    model = build_model(system, preset, args.seed).to(device).train()
    optimizer = make_optimizer(model, args.optim, system)
    forward = torch.compile(model, mode=args.compile_mode) if is_compiled(system, args.compile) else model
    step = make_step(model, forward, optimizer, device, args.dtype, annotate=True)
    for batch in batches[:-1]:
        step(batch)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, with_stack=True) as prof:
        step(batches[-1])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    counts = count_events(prof)
    if device.type == "cuda":  # runtime check: every synchronising CUDA call inside one step
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step(batches[-1])
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts["sync_debug_warnings"] = dict(
            collections.Counter(
                f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message).lower()
            )
        )
    del model, optimizer, forward, step
    gc.collect()
    return counts


def _fwd_bwd(result: dict, prefix: str = "") -> int:
    phase = result.get("per_phase", {})
    return phase.get(f"{prefix}forward", 0) + phase.get(f"{prefix}backward", 0)


def _phase_times(result: dict) -> str:
    return " / ".join(f"{result['phase_ms'].get(name, 0):.0f}" for name in PHASE_NAMES)


def _markdown(args, results: dict, argv) -> str:
    cuda = args.device == "cuda"
    base = results.get("vanilla", {})
    lines = [
        f"# Ops per training step: preset `{args.preset}` on {device_name(torch.device(args.device))}",
        "",
        f"- Command: `{command_line('kala', argv)}`; load average {load_average()}",
        f"- dtype {args.dtype}, optimizer {args.optim}, compile {args.compile}; one profiled step after warm-up",
        "- ops = top-level `aten::` calls (issued by Python or by an autograd node, not by another op), "
        "views/metadata ops and no-op casts excluded: ≈ kernel launches in eager mode; leaf ops = ops that call "
        "no other op (composites such as `linear` with its autocast casts counted by parts), views and "
        "allocations excluded: a closer kernel count (on CPU it also counts CPU-only dtype copies)",
        "",
    ]
    header = (
        "| System | fwd ops | bwd ops | optim ops | total | Δ vs vanilla | Δ fwd+bwd | leaf ops fwd+bwd | Δ leaf "
        "| all aten events | sync ops | fwd / bwd / optim ms (profiled) |"
    )
    if cuda:
        header += " GPU kernels | Δ kernels | GPU kernel ms | launch calls | memcpy/memset | sync-debug warnings |"
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for system, r in results.items():
        phase = r["per_phase"]
        row = (
            f"| {system} | {phase.get('forward', 0)} | {phase.get('backward', 0)} | {phase.get('optimizer', 0)} | "
            f"{r['ops']} | {r['ops'] - base.get('ops', 0):+d} | {_fwd_bwd(r) - _fwd_bwd(base):+d} | "
            f"{_fwd_bwd(r, 'leaf_')} | {_fwd_bwd(r, 'leaf_') - _fwd_bwd(base, 'leaf_'):+d} | {r['aten_events']} | "
            f"{sum(r['sync_ops'].values())} | {_phase_times(r)} |"
        )
        if cuda:
            row += (
                f" {r['cuda_kernels']} | {r['cuda_kernels'] - base.get('cuda_kernels', 0):+d} | "
                f"{sum(r['kernel_us'].values()) / 1e3:.1f} | "
                f"{r['launch_calls']} | {r['cuda_memcpy_memset']} | {sum(r['sync_debug_warnings'].values())} |"
            )
        lines.append(row)
    for system in results:
        if system == "vanilla" or not base:
            continue
        diff = collections.Counter(results[system]["op_names"])
        diff.subtract(base["op_names"])
        extra = [(n, c) for n, c in diff.most_common() if c > 0][:15]
        lines += ["", f"Ops {system} adds over vanilla (top 15): " + ", ".join(f"`{n}` +{c}" for n, c in extra)]
        if cuda:  # GPU time by kernel name, system minus vanilla: which kernels the extra device time is spent in
            time_diff = collections.Counter(results[system]["kernel_us"])
            time_diff.subtract(base["kernel_us"])
            lines += [
                "",
                f"GPU kernel time {system} adds over vanilla (top 10, µs): "
                + ", ".join(f"`{n}` +{us:.0f}" for n, us in time_diff.most_common(10) if us > 0),
            ]
    for system, r in results.items():
        sites = r["sync_ops"] | r.get("sync_debug_warnings", {})
        if sites:
            lines += ["", f"Host-sync ops in one {system} step:", ""]
            lines += [f"- {count}× {site}" for site, count in sorted(sites.items(), key=lambda kv: -kv[1])]
    if not cuda:
        lines += [
            "",
            "Reading the sync sites on CPU: keplm `EntityMemory.forward` / `KalaModel._knowledge_state` are "
            "the index validations, which run only for CPU tensors (no sync on a GPU); `torch/optim` ones are "
            "AdamW step counters, CPU tensors for the non-capturable optimizers (no sync on a GPU either); "
            "`transformers/masking_utils` `padding_mask.all()` is a real device sync on a GPU, in stock HF BERT "
            "as much as in KALA (KALA's extra layers build the mask a second time).",
        ]
    return "\n".join(lines) + "\n"


def run_profile(args, argv) -> dict:
    """Profile vanilla and every other system of ``--systems`` in this process; print and write the report."""
    if args.threads:
        torch.set_num_threads(args.threads)
    systems = ["vanilla"] + [s for s in args.systems if s != "vanilla"]
    results = {system: profile_system(args, system) for system in systems}
    report = _markdown(args, results, argv)
    print(report)
    write_outputs(args, report, {"profile": results})
    return results


def main(argv=None) -> None:
    """``python -m benchmarks profile-kala [kala options]``: the KALA benchmark's ``--profile`` mode."""
    import sys

    from benchmarks import kala

    kala.main([*(sys.argv[1:] if argv is None else argv), "--profile"])
