"""Figures for model cards (PNG, matplotlib): entity-frequency long tail, KFM γ/β magnitudes, training curves and a
comparison of systems over seeds.

matplotlib is optional (the ``reports`` extra): without it :func:`matplotlib_available` is False, the card builder
logs one line saying the figures were skipped, and the card is written without them. Every function writes one PNG
and returns its path; the PNGs carry no software-version metadata, so regenerating them with the same inputs does
not churn committed files.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

logger = logging.getLogger(__name__)

#: file names of the figures inside a card's figures folder
ENTITY_FREQUENCY_PNG = "entity_frequency.png"
MODULATION_PNG = "kfm_modulation.png"
TRAINING_CURVES_PNG = "training_curves.png"
COMPARISON_PNG = "systems.png"

_MODULATION_PARTS = ("γ₁ − 1 (after LN 1)", "β₁ (after LN 1)", "γ₂ − 1 (after LN 2)", "β₂ (after LN 2)")


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path: Path, dpi: int = 110, **layout) -> Path:
    """Write ``figure`` as a PNG without software-version metadata (``layout``: ``tight_layout``'s arguments)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout(**layout)
    figure.savefig(path, dpi=dpi, metadata={"Software": None})
    _pyplot().close(figure)
    return path


# --------------------------------------------------------------------------------------------- entity frequency
def relation_label(relation_id: str, name: str | None = None, width: int = 40) -> str:
    """A relation as a plot or summary label: a Freebase path id (FB15k-237's ``/people/person/nationality``) by its
    type and property in words, ``person nationality``, a compound one by its first type and property and its last
    property (``/film/actor/film./film/performance/character``: ``actor film character``); any other relation by its
    ``name`` (else its id); cut to ``width`` characters with an ellipsis."""
    label = name or relation_id
    if relation_id.startswith("/") and " " not in relation_id:
        paths = [path.strip("/").split("/") for path in relation_id.split("./")]
        words = [*paths[0][-2:], *(paths[-1][-1:] if len(paths) > 1 else [])]
        label = " ".join(words).replace("_", " ") or label
    return label if len(label) <= width else label[: width - 1] + "…"


def entity_frequency_figure(
    counts: Sequence[int], path, title: str = "Entity memory: mentions per entity", max_points: int = 10_000
) -> Path:
    """Rank/frequency (log-log) and a log2-bucket histogram of the training mentions of each entity-memory row
    (the null row and zero counts left out), as KALA appendix Fig. 13-14. The histogram counts every row; the
    rank/frequency curve draws every rank up to ``max_points`` entities, beyond that ``max_points`` ranks spaced
    evenly on its log axis (the first and the last included), so a 5M-row memory draws what the eye can see."""
    values = np.asarray(counts, dtype=np.int64)
    frequencies = -np.sort(-values[values > 0])
    if not frequencies.size:
        raise ValueError("no entity with a training mention: nothing to plot")
    ranks = np.arange(1, frequencies.size + 1)
    if frequencies.size > max_points:
        ranks = np.unique(np.geomspace(1, frequencies.size, max_points).round().astype(np.int64))
    figure, (rank_axis, hist_axis) = _pyplot().subplots(1, 2, figsize=(9, 3.4))
    rank_axis.loglog(ranks, frequencies[ranks - 1], marker=".", linestyle="none", markersize=3)
    rank_axis.set_xlabel("entity rank")
    rank_axis.set_ylabel("training mentions")
    rank_axis.set_title("rank / frequency")
    buckets = np.bincount(np.frexp(frequencies.astype(np.float64))[1] - 1)  # floor(log2(frequency)), exact
    keys = range(len(buckets))
    labels = [f"{2**k}" if k == 0 else f"{2**k}-{2 ** (k + 1) - 1}" for k in keys]
    hist_axis.bar(keys, buckets.tolist(), color="tab:blue")
    hist_axis.set_xticks(keys, labels, rotation=45, ha="right", fontsize=8)
    hist_axis.set_xlabel("training mentions")
    hist_axis.set_ylabel("entities")
    once = int((frequencies == 1).sum())
    hist_axis.set_title(f"{frequencies.size:,} entities, {once:,} seen once")
    figure.suptitle(title, fontsize=10)
    return _save(figure, path)


# --------------------------------------------------------------------------------------------- KFM modulation
#: entity-memory rows the card's KFM figure and numbers are computed on: a seeded sample of this many rows when the
#: memory has more (a 5M-row memory through the KFM MLPs at once took 15.7 GB), every row otherwise
CARD_SAMPLE_ROWS = 10_000


def sample_rows(num_rows: int, max_rows: int, seed: int = 0):
    """Sorted indices of a seeded sample of ``max_rows`` of ``num_rows`` rows, drawn without replacement in
    O(``max_rows``) memory; ``None`` when ``num_rows <= max_rows`` (every row is used)."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    if num_rows <= max_rows:
        return None
    return np.sort(np.random.default_rng(seed).choice(num_rows, size=max_rows, replace=False))


def _memory_and_layers(model):
    """The entity memory (an ``EntityMemory``, or a ``ShardedEntityMemory`` of which this process holds a block of
    rows) and the KFM layers of a KALA-like model (duck typing: ``base_model.entity_memory`` with ``table``,
    ``base_model.knowledge_layers``), or ``(None, None)``."""
    base = getattr(model, "base_model", model)
    memory = getattr(base, "entity_memory", None)
    layers = getattr(base, "knowledge_layers", None)
    return (memory, layers) if memory is not None and hasattr(memory, "table") and layers else (None, None)


def entity_memory_rows(model) -> int:
    """The entity-memory rows of a KALA-like model, the null row left out (0 without a memory)."""
    memory, _ = _memory_and_layers(model)
    return memory.num_entities - 1 if memory is not None else 0


def held_entity_memory_rows(model) -> tuple[int, int] | None:
    """``(start, stop)`` of the rows this process holds of a row-sharded entity memory (the card reads only those:
    the whole table is never gathered for it); ``None`` for a whole table or no memory."""
    memory, _ = _memory_and_layers(model)
    return (memory.start, memory.stop) if memory is not None and hasattr(memory, "start") else None


def kfm_modulation_table(model, max_rows: int | None = None, seed: int = 0) -> dict[int, object]:
    """``{encoder layer index: tensor [rows, 4, hidden]}``: h1..h4(v) (γ₁ − 1, β₁, γ₂ − 1, β₂) of the entity-memory
    rows but the null one, passed through each KFM layer's MLPs: every row in order when there are at most
    ``max_rows`` (default :data:`CARD_SAMPLE_ROWS`), else a seeded sample of ``max_rows`` rows in row order
    (:func:`sample_rows`; only those rows are read). Of a row-sharded memory, the rows this process holds
    (:func:`held_entity_memory_rows`), sampled the same way.

    This is the *pointwise* view of the memory (KALA eq. 2 with v = the row itself): with relational retrieval the
    vector a token meets is the GNN's aggregate over its context graph, which differs per context. ``{}`` for a
    model without an entity memory and KFM layers (a baseline, another method).
    """
    memory, layers = _memory_and_layers(model)
    if memory is None:
        return {}
    weight = memory.table.detach()  # the whole table, or this process's rows of a sharded one
    first = int(getattr(memory, "start", 0) == 0)  # the null row (global row 0) is left out
    chosen = sample_rows(weight.shape[0] - first, CARD_SAMPLE_ROWS if max_rows is None else max_rows, seed)
    rows = weight[first:] if chosen is None else weight[torch.as_tensor(chosen + first, device=weight.device)]
    if rows.shape[0] == 0:
        return {}
    tables = {}
    with torch.no_grad():
        for name, layer in layers.items():
            modulation = getattr(layer, "modulation", None)
            if modulation is None:
                continue
            knows = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
            tables[int(name)] = modulation(rows.to(next(modulation.parameters()).dtype), knows).float().cpu()
    return dict(sorted(tables.items()))


def modulation_summary(tables: dict) -> dict[int, dict[str, float]]:
    """Per KFM layer: the median over entity rows of mean |h_k(v)| for k = γ₁ − 1, β₁, γ₂ − 1, β₂."""
    return {
        layer: dict(zip(("gamma1", "beta1", "gamma2", "beta2"), table.abs().mean(dim=-1).median(dim=0).values.tolist()))
        for layer, table in tables.items()
    }


def modulation_figure(tables: dict, path, num_layers: int | None = None, total_rows: int | None = None) -> Path:
    """One panel per KFM layer: histograms over entity rows of mean |h_k(v)| for the four modulations;
    ``total_rows``: the memory's rows when the tables hold a sample of them (said in the title)."""
    if not tables:
        raise ValueError("no KFM layer to plot")
    figure, axes = _pyplot().subplots(1, len(tables), figsize=(max(6.0, 4.2 * len(tables)), 3.6), squeeze=False)
    for axis, (layer, table) in zip(axes[0], tables.items()):
        magnitude = table.abs().mean(dim=-1).numpy()  # [rows, 4]
        high = float(magnitude.max()) or 1.0
        for k, label in enumerate(_MODULATION_PARTS):
            axis.hist(magnitude[:, k], bins=40, range=(0.0, high), histtype="step", label=label)
        depth = f" of {num_layers}" if num_layers else ""
        axis.set_title(f"KFM on encoder layer {layer + 1}{depth}")
        axis.set_xlabel("mean |h(v)| over hidden units")
        axis.set_ylabel("entity-memory rows")
    axes[0][0].legend(fontsize=7)
    rows = next(iter(tables.values())).shape[0]
    which = f"a sample of {rows:,} of the {total_rows:,}" if total_rows and total_rows > rows else f"the {rows:,}"
    figure.suptitle(f"KFM modulation of {which} entity-memory rows\n(γ = 1 + h, β = h; h = 0: no change)", fontsize=10)
    return _save(figure, path)


# --------------------------------------------------------------------------------------------- training curves
def curves_from_log_history(log_history: Sequence[dict]) -> dict[str, list[tuple[float, float]]]:
    """``{name: [(step, value), ...]}`` of the training loss, the learning rate(s) and every ``eval_*`` metric
    logged more than once (``trainer_state.json``'s ``log_history``)."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for entry in log_history:
        step = entry.get("step")
        if step is None:
            continue
        for key, value in entry.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if key in ("loss", "learning_rate") or (
                key.startswith("eval_") and not key.endswith(("runtime", "per_second", "samples"))
            ):
                curves.setdefault(key, []).append((float(step), float(value)))
    return {key: points for key, points in curves.items() if len(points) > 1 or key == "loss"}


def training_curves_figure(log_history: Sequence[dict], path) -> Path:
    """Training loss and learning rate against the optimizer step, and the evaluation metrics if logged."""
    curves = curves_from_log_history(log_history)
    if not curves.get("loss"):
        raise ValueError("the log history has no training loss")
    evals = [key for key in curves if key.startswith("eval_")]
    panels = [  # (title, curves, marker)
        ("training loss", ["loss"], "." if len(curves["loss"]) < 30 else None),
        ("learning rate", ["learning_rate"], None),
        ("evaluation", evals, "."),
    ]
    panels = [panel for panel in panels if panel[1] and panel[1][0] in curves]
    figure, axes = _pyplot().subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for axis, (title, keys, marker) in zip(axes[0], panels):
        for key in keys:
            axis.plot(*zip(*curves[key]), marker=marker, label=key.removeprefix("eval_"))
        axis.set_title(title)
        axis.set_xlabel("step")
    if evals:
        axes[0][-1].legend(fontsize=7)
    return _save(figure, path)


# --------------------------------------------------------------------------------------------- systems compared
def comparison_figure(
    groups: dict[str, dict[str, tuple[float, float | None]]],
    path,
    metric_label: str,
    highlight: str | None = None,
    runs: int | None = None,
) -> Path:
    """Dot-and-whisker chart: for every group (e.g. "test", "unseen subset") the mean ± std of each system.

    ``groups`` is ``{group: {system: (mean, std)}}``; ``highlight`` names the card's own system.
    """
    if not groups:
        raise ValueError("nothing to compare")
    figure, axes = _pyplot().subplots(1, len(groups), figsize=(3.6 * len(groups), 3.0), squeeze=False)
    for axis, (group, systems) in zip(axes[0], groups.items()):
        for i, (name, (mean, std)) in enumerate(systems.items()):
            color = "tab:red" if name == highlight else "tab:blue"
            axis.errorbar([mean], [i], xerr=[std or 0.0], fmt="o", color=color, capsize=3)
        axis.set_yticks(range(len(systems)), list(systems), fontsize=8)
        axis.invert_yaxis()
        axis.set_title(group, fontsize=9)
        axis.set_xlabel(metric_label)
        axis.grid(axis="x", alpha=0.3)
    if runs:
        figure.suptitle(f"mean ± std over {runs} seeds", fontsize=9)
    return _save(figure, path)


__all__ = [
    "matplotlib_available",
    "entity_frequency_figure",
    "kfm_modulation_table",
    "modulation_summary",
    "modulation_figure",
    "curves_from_log_history",
    "training_curves_figure",
    "comparison_figure",
    "ENTITY_FREQUENCY_PNG",
    "MODULATION_PNG",
    "TRAINING_CURVES_PNG",
    "COMPARISON_PNG",
]
