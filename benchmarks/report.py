"""What the benchmark reports share: number formatting, paired ratios, the header of a training-step report, its
per-system table (a failed system gets an error row), and writing the markdown and JSON outputs. Light (no torch
import): the pipeline benchmark's build workers time their own imports."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def ratio(results: dict, system: str, base: str, key: str = "step_ms_median") -> float | None:
    """``key`` of ``system`` over ``base``; step times: the median of the paired per-round ratios (``round_ms``),
    which cancels slow drifts of a shared machine."""
    a, b = results.get(system, {}), results.get(base, {})
    if a.get(key) is None or not b.get(key):
        return None
    if key == "step_ms_median" and a.get("round_ms") and len(a["round_ms"]) == len(b.get("round_ms", [])):
        return statistics.median(x / y for x, y in zip(a["round_ms"], b["round_ms"]))
    return a[key] / b[key]


def verdict(value: float | None, limit: float, at_least: bool = False) -> str:
    """PASS / FAIL of a target (``value <= limit``, or ``>=`` with ``at_least``); n/a when not measured."""
    if value is None:
        return "n/a"
    return "PASS" if (value >= limit if at_least else value <= limit) else "FAIL"


def header_lines(
    title: str, meta: dict, details: list[str], cpu_memory_note: str = "", notes: tuple[str, ...] = ()
) -> list[str]:
    """The head of a training-step report: title, date, command, device with the load average before / after,
    software (torch_geometric where the run recorded it), shape, the benchmark's ``details`` (settings, ...), what
    one timed step and the peak-memory column cover, then ``notes``. ``meta`` as ``harness.run_meta`` fills it."""
    pyg = f"torch_geometric {meta['pyg']}, " if "pyg" in meta else ""
    cuda = meta["device"] == "cuda"
    memory = (
        "torch.cuda.max_memory_allocated during the timed steps."
        if cuda
        else f"peak RSS during the timed steps minus RSS before the model was built{cpu_memory_note}."
    )
    return [
        f"# {title}: preset `{meta['preset']}` on {meta['device_name']}",
        "",
        f"- Date: {meta['date']}",
        f"- Command: `{meta['command']}`",
        f"- Device: `{meta['device']}` — {meta['device_name']}; load average before/after: {meta['load_before']} "
        f"/ {meta['load_after']}",
        f"- Software: torch {meta['torch']}, transformers {meta['transformers']}, {pyg}Python {meta['python']}",
        f"- Shape: {meta['shape']}",
        *details,
        "- Step = host→device copy + forward + backward + optimizer.step + zero_grad"
        + (", CUDA-synchronised." if cuda else ".")
        + " Memory: "
        + memory,
        *notes,
        "",
    ]


def comparison_lines(
    reference: str, comparisons: list[tuple[str, float | None, int]], target: str, result: str, cuda: bool
) -> list[str]:
    """The end of a training-step report: how the ratios are taken (paired against ``reference``), the table of
    (comparison, value, digits) rows, and the closing line on the ``target`` set for the GPU at the paper's shapes
    (a CPU run only informs)."""
    return [
        "",
        f"Time ratios: median over the rounds of (system step / {reference} step in the same round); memory: "
        "peak over peak.",
        "",
        "| Comparison | Value |",
        "|---|---:|",
        *(f"| {label} | {fmt(value, digits, '×')} |" for label, value, digits in comparisons),
        "",
        f"Target {target} — this run: {result}"
        + ("" if cuda else " (CPU, shrunk shape: informative only; the target is checked on the GPU)")
        + ".",
    ]


def system_table(header: str, separator: str, results: dict, row) -> list[str]:
    """The per-system table: ``row(system, result)`` formats a measured system; a system whose worker failed gets
    its label and the end of the error in the last column."""
    columns = header.count("|") - 1
    lines = [header, separator]
    for system, r in results.items():
        if "error" in r:
            error = r["error"][-200:].replace("|", "/")
            lines.append(f"| {r['label']} |" + " |" * (columns - 2) + f" ERROR: {error} |")
        else:
            lines.append(row(system, r))
    return lines


def write_outputs(args, report: str, payload: dict) -> None:
    """The markdown report to ``--markdown`` and the JSON payload to ``--json`` (folders created)."""
    for path, text in ((args.markdown, report), (args.json, json.dumps(payload, indent=1) if args.json else None)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
