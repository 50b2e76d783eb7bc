#!/usr/bin/env python
"""Table and P@1-over-time plot of ``harness/trelm_experiments.py`` runs.

    python -m harness.trelm_report outputs/trelm_experiments --plot docs/figures/trelm-p-at-1.png

Per variant over the seeds (mean ± std): optimizer steps in the time budget, final LAMA T-REx P@1 on all / seen /
held-out facts, and the training seconds until P@1 first reaches the plain-MLM run's final P@1 of the same seed
(``-`` when it never does; MLM reaches it by definition at its last point). The plot draws every seed's curve, seen
and held-out facts side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REFERENCE = "mlm"


def _cell(values: list[float], scale: float = 100.0, digits: int = 2) -> str:
    values = [v * scale for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def time_to_reach(curve: list[dict], target: float) -> float | None:
    """Training seconds of the first probe point whose P@1 is at least ``target``."""
    return next((point["train_seconds"] for point in curve if point["p_at_1"] >= target), None)


def load(root: str) -> dict[str, dict]:
    summaries = {}
    # an output folder (seed*/summary.json) or its committed copy (docs/runs/...: seed*.json)
    for path in sorted([*Path(root).glob("seed*/summary.json"), *Path(root).glob("seed*.json")]):
        summary = json.loads(path.read_text())
        summaries[summary["settings"]["seed"]] = summary
    if not summaries:
        raise SystemExit(f"no seed*/summary.json or seed*.json under {root}")
    return summaries


def table(summaries: dict[str, dict]) -> str:
    variants = [v for v in ("mlm", "trelm", "trelm_no_injection", "trelm_no_routing")
                if any(v in s["probe_curves"] for s in summaries.values())]
    rows = ["| variant | seeds | steps | P@1 all | P@1 seen | P@1 held-out | s to MLM's final P@1 (seeds reaching) |",
            "|---|---:|---:|---:|---:|---:|---|"]
    for variant in variants:
        curves = {seed: s["probe_curves"][variant] for seed, s in summaries.items() if variant in s["probe_curves"]}
        finals = [curve[-1] for curve in curves.values()]
        reach = []
        for seed, curve in curves.items():
            reference = summaries[seed]["probe_curves"].get(REFERENCE)
            if reference:
                reach.append(time_to_reach(curve, reference[-1]["p_at_1"]))
        reached = [r for r in reach if r is not None]
        reach_cell = (f"{_cell(reached, 1.0, 0)} ({len(reached)} of {len(reach)})" if reached
                      else f"- (0 of {len(reach)})")
        rows.append(f"| {variant} | {len(curves)} | {_cell([p['step'] for p in finals], 1.0, 0)} | "
                    f"{_cell([p['p_at_1'] for p in finals])} | {_cell([p['seen'] for p in finals])} | "
                    f"{_cell([p['held_out'] for p in finals])} | {reach_cell} |")
    return "\n".join(rows)


def plot(summaries: dict[str, dict], path: str, command: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"mlm": "tab:gray", "trelm": "tab:blue", "trelm_no_injection": "tab:orange",
              "trelm_no_routing": "tab:green"}
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for axis, subset, title in zip(axes, ("seen", "held_out"), ("seen facts", "held-out facts")):
        labelled = set()
        for _, summary in sorted(summaries.items()):
            for variant, curve in summary["probe_curves"].items():
                label = variant if variant not in labelled else None
                labelled.add(variant)
                axis.plot([p["train_seconds"] for p in curve], [100 * (p[subset] or 0.0) for p in curve],
                          color=colors.get(variant, "black"), alpha=0.8, marker=".", label=label)
        axis.set_title(f"LAMA T-REx P@1, {title}")
        axis.set_xlabel("training seconds (probe time excluded)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("P@1 (%)")
    axes[0].legend()
    figure.text(0.01, 0.01, command, fontsize=7, family="monospace")
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the --output_dir of harness/trelm_experiments.py")
    parser.add_argument("--plot", default=None, help="write the P@1 curves to this PNG")
    args = parser.parse_args(argv)
    summaries = load(args.root)
    print(f"{len(summaries)} seed(s): {sorted(summaries)}")
    print(table(summaries))
    if args.plot:
        plot(summaries, args.plot, "python -m harness.trelm_report " + " ".join(sys.argv[1:] if argv is None else argv))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
