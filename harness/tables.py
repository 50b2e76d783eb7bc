"""Tables and plots of the harness's run summaries (``seed<N>/summary.json``).

``summary_table``: mean ± std over seeds per system / variant: validation and test scores (F1, EM for QA, accuracy /
F1 / Matthews for GLUE, SemEval's macro-F1), test F1 on the seen / unseen subsets (KALA 5.4) and the unseen subset's
size, Roof-Transformer's knowledge selection statistics, the counterfactual check's flip rates and each run's wall
time. A seed may be split over several summaries (systems run later into another folder): a system counts the
distinct seeds it ran with.

``curves_table`` / ``plot_curves``: TRELM's pre-training runs: per variant, optimizer steps in the time budget, final
LAMA T-REx P@1 on all / seen / held-out facts, and the training seconds until P@1 first reaches the plain-MLM run's
final P@1 of the same seed (``-`` when it never does); the plot draws every seed's curve, seen and held-out facts
side by side.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from keplm.metric_units import percent_factor

#: (label, results key, scale): True: a task metric, shown in percent (the record's metric_unit, or its task's old
#: unit); "percent": a share recorded as a fraction; False: shown as recorded; "per_example": divided by the examples
ROWS = [
    ("validation accuracy", "eval_accuracy", True),
    ("validation F1", "eval_f1", True),
    ("validation Matthews corr.", "eval_matthews_correlation", True),
    ("validation EM", "eval_exact_match", True),
    ("validation macro-F1 (SemEval official)", "eval_macro_f1", True),
    ("test EM", "predict_exact_match", True),
    ("test F1", "predict_f1", True),
    ("test macro-F1 (SemEval official)", "predict_macro_f1", True),
    ("test F1, seen contexts", "predict_seen_f1", True),
    ("test F1, unseen contexts", "predict_unseen_f1", True),
    ("train examples with knowledge (%)", "knowledge_train_share_with_knowledge", "percent"),
    ("train triples kept per example", "knowledge_train_kept_per_example", False),
    ("train triples cut per example", "knowledge_train_cut", "per_example"),
    ("train knowledge tokens appended per example", "knowledge_train_appended_tokens_per_example", False),
    # keplm check-knowledge on the trained model (python -m harness.experiments kala --check_knowledge N)
    ("checked test examples with a fact on a mention (%)", "knowledge_examples_with_facts", "percent"),
    ("KG edit, relation swapped: prediction flips (%)", "knowledge_relation_flip_rate", "percent"),
    ("KG edit, relation swapped: mean shift (TV, %)", "knowledge_relation_mean_shift", "percent"),
    ("KG edit, other end swapped: prediction flips (%)", "knowledge_tail_flip_rate", "percent"),
    ("KG edit, other end swapped: mean shift (TV, %)", "knowledge_tail_mean_shift", "percent"),
    ("KG edit, fact removed: prediction flips (%)", "knowledge_remove_flip_rate", "percent"),
    ("KG edit, fact removed: mean shift (TV, %)", "knowledge_remove_mean_shift", "percent"),
]
QA_TASKS = ("qa", "squad")
REFERENCE = "mlm"  # the curves table's reference variant: the seconds until a variant reaches its final P@1


def cell(values: list[float], digits: int = 2, empty: str = "n/a") -> str:
    """``mean ± std`` of ``values``; a lone value bare (one seed has no spread, not a spread of 0); ``empty``
    without any."""
    if not values:
        return empty
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def load_summaries(paths: list[str]) -> list[dict]:
    """The summaries in ``paths``: files, or folders holding ``seed*/summary.json`` (an output folder) or
    ``seed*.json`` (its committed copy under results/runs)."""
    files = []
    for path in map(Path, paths):
        files += sorted([*path.glob("seed*/summary.json"), *path.glob("seed*.json")]) if path.is_dir() else [path]
    if not files:
        raise SystemExit(f"no summaries in {paths} (seed*/summary.json or seed*.json)")
    return [json.loads(file.read_text()) for file in files]


def by_seed(summaries: list[dict]) -> dict[str, dict]:
    """Summaries keyed by their seed (the curves table's input)."""
    return {str(summary["settings"]["seed"]): summary for summary in summaries}


def summary_table(summaries: list[dict]) -> str:
    """The markdown table of ``summaries``, headed by the seeds (and the seen / unseen sizes)."""
    lines = []
    # systems in first-seen order; a system run with fewer seeds than the others says how many
    systems = list(dict.fromkeys(system for s in summaries for system in s["settings"]["systems"]))
    first = summaries[0]["results"][systems[0]]
    # records without metric_unit predate it: SQuAD EM/F1 were percent already, seqeval/GLUE/SemEval fractions
    legacy_unit = "percent" if summaries[0]["settings"].get("task") in QA_TASKS else "fraction"
    all_seeds = list(dict.fromkeys(str(s["settings"]["seed"]) for s in summaries))
    count = len(all_seeds)
    subsets = (
        f"; test contexts seen / unseen: {first['predict_seen_examples']} / {first['predict_unseen_examples']}"
        if "predict_seen_examples" in first
        else ""
    )  # KALA's seen/unseen split (paper 5.4) only
    lines.append(f"{count} seed{'s' if count > 1 else ''}: {all_seeds}{subsets}")
    seeds = {
        system: len({str(s["settings"]["seed"]) for s in summaries if system in s["results"]}) for system in systems
    }
    headers = [
        system if seeds[system] == count else f"{system} ({seeds[system]} seed{'s' if seeds[system] > 1 else ''})"
        for system in systems
    ]
    lines.append("| metric | " + " | ".join(headers) + " |\n|---|" + "---:|" * len(systems))
    for label, key, scaled in ROWS:
        if not any(key in s["results"].get(system, {}) for s in summaries for system in systems):
            continue
        cells = []
        for system in systems:
            values = []
            for s in summaries:
                result = s["results"].get(system, {})
                if key not in result:
                    continue
                factor = {
                    True: percent_factor(result, legacy_unit),
                    False: 1.0,
                    "percent": 100.0,
                    "per_example": 1.0 / max(result.get("knowledge_train_examples", 1), 1),
                }[scaled]
                values.append(factor * result[key])
            cells.append(cell(values))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    times = [
        cell([s["durations_s"][system] for s in summaries if s.get("durations_s", {}).get(system)], 0)
        for system in systems
    ]
    lines.append("| wall time per run (s) | " + " | ".join(times) + " |")
    return "\n".join(lines)


def _pcell(values: list[float], digits: int = 2) -> str:
    """A curves-table cell: ``-`` without any value, a lone value bare."""
    return cell([v for v in values if v is not None], digits, empty="-")


PROBE_SCORES = ("p_at_1", "seen", "held_out")


def percent_curve(curve: list[dict]) -> list[dict]:
    """A probe curve (``probe_curve.json``) with its P@1 values in percent: the points' ``metric_unit``, or
    fractions for curves written before it."""
    return [
        {
            **point,
            **{
                key: None if point.get(key) is None else percent_factor(point, "fraction") * point[key]
                for key in PROBE_SCORES
                if key in point
            },
        }
        for point in curve
    ]


def time_to_reach(curve: list[dict], target: float) -> float | None:
    """Training seconds of the first probe point whose P@1 is at least ``target``."""
    return next((point["train_seconds"] for point in curve if point["p_at_1"] >= target), None)


def curves_table(summaries: dict[str, dict]) -> str:
    """TRELM's pre-training variants over the seeds of ``summaries`` (seed → summary)."""
    variants = [
        v
        for v in ("mlm", "trelm", "trelm_no_injection", "trelm_no_routing")
        if any(v in s["probe_curves"] for s in summaries.values())
    ]
    rows = [
        "| variant | seeds | steps | P@1 all | P@1 seen | P@1 held-out | s to MLM's final P@1 (seeds reaching) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for variant in variants:
        curves = {
            seed: percent_curve(s["probe_curves"][variant])
            for seed, s in summaries.items()
            if variant in s["probe_curves"]
        }
        finals = [curve[-1] for curve in curves.values()]
        reach = []
        for seed, curve in curves.items():
            reference = summaries[seed]["probe_curves"].get(REFERENCE)
            if reference:
                reach.append(time_to_reach(curve, percent_curve(reference)[-1]["p_at_1"]))
        reached = [r for r in reach if r is not None]
        reach_cell = f"{_pcell(reached, 0)} ({len(reached)} of {len(reach)})" if reached else f"- (0 of {len(reach)})"
        rows.append(
            f"| {variant} | {len(curves)} | {_pcell([p['step'] for p in finals], 0)} | "
            f"{_pcell([p['p_at_1'] for p in finals])} | {_pcell([p['seen'] for p in finals])} | "
            f"{_pcell([p['held_out'] for p in finals])} | {reach_cell} |"
        )
    return "\n".join(rows)


def plot_curves(summaries: dict[str, dict], path: str, command: str) -> None:
    """TRELM's P@1 curves of every seed (seed → summary) to the PNG ``path``, the ``command`` printed under them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {
        "mlm": "tab:gray",
        "trelm": "tab:blue",
        "trelm_no_injection": "tab:orange",
        "trelm_no_routing": "tab:green",
    }
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for axis, subset, title in zip(axes, ("seen", "held_out"), ("seen facts", "held-out facts")):
        labelled = set()
        for _, summary in sorted(summaries.items()):
            for variant, curve in summary["probe_curves"].items():
                label = variant if variant not in labelled else None
                labelled.add(variant)
                curve = percent_curve(curve)
                axis.plot(
                    [p["train_seconds"] for p in curve],
                    [p[subset] or 0.0 for p in curve],
                    color=colors.get(variant, "black"),
                    alpha=0.8,
                    marker=".",
                    label=label,
                )
        axis.set_title(f"LAMA T-REx P@1, {title}")
        axis.set_xlabel("training seconds (probe time excluded)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("P@1 (%)")
    axes[0].legend()
    figure.text(0.01, 0.01, command, fontsize=7, family="monospace")
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
