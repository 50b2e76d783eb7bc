"""The real-data learning curve (design: docs/learning_curve.md): NER test F1 against the training-set size for
vanilla, KALA relational (keplm's defaults), KALA with the paper's eq. 3 and +1 layer, paired by seed.

    python -m harness.experiments curve --jobs 2                 # the whole design, resumable (--resume)
    python -m harness.experiments curve --datasets conll --sizes 50 100 --seeds 1
    python -m harness.experiments curve --hypotheses --sizes 100 500 --seeds 1 2 3   # part 2 of the design
    python -m harness.experiments curve-table outputs/curve --plot results/figures

Every run is ``run_scripts/run_ner.py`` on a nested random draw of the training split (``--train_sample_seed`` =
the seed: the same sentences for every system at a seed, a smaller size a subset of a larger one) with a step
budget (:func:`train_steps`), early stopping on the fixed validation sentences, and the fixed test sentences;
every KALA model is then checked with ``keplm check-knowledge``. The checkpoints are deleted after each run (the
final model stays). Runs land in ``<output_dir>/<dataset>/n<size>/seed<N>/<system>``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from harness import kala
from harness.runs import DONE_FILE, check_names, run_resumable

#: dataset → the KALA preset it starts from (KG, linking case) and its fixed validation / test sentences
DATASETS = {
    "conll": {"preset": "conll", "eval": "500", "predict": "2000"},
    "ncbi": {"preset": "ncbi", "eval": "500", "predict": "all"},
    "wnut": {"preset": "wnut", "eval": "500", "predict": "all"},
}
DEFAULT_DATASETS = ("conll", "ncbi")
SIZES = (50, 100, 250, 500, 1000, 2500)
#: system → run_ner.py arguments
SYSTEMS = {
    "vanilla": ["--system", "vanilla"],
    "relational": ["--system", "relational"],
    "relational_eq3": ["--system", "relational", "--relation_message", "entity"],
    "more_params": ["--system", "more_params"],
}
#: part 2 of the design (docs/learning_curve.md): KALA relational with one change from the defaults each, run at
#: HYPOTHESIS_SIZES with seeds 1-3 and paired with the curve's ``relational`` runs
HYPOTHESES = {
    "relational_random_memory": ["--system", "relational"],  # H3: without --init_entity_memory (see SETTINGS)
    "relational_dropout0": ["--system", "relational", "--entity_dropout", "0"],  # H4
    "relational_dropout05": ["--system", "relational", "--entity_dropout", "0.5"],  # H4
    "relational_klr1e-4": ["--system", "relational", "--knowledge_learning_rate", "1e-4"],  # H5
    "relational_klr2e-3": ["--system", "relational", "--knowledge_learning_rate", "2e-3"],  # H5
    "relational_no_kwarmup": ["--system", "relational", "--knowledge_warmup_steps", "0"],  # H5
    "relational_2x_steps": ["--system", "relational"],  # H6: twice the step budget (see STEP_FACTOR)
}
#: part 2's controls (a marked addition to the design), planned with the variants: vanilla at H6's longer budget
CONTROLS = {"vanilla_2x_steps": ["--system", "vanilla"]}
#: harness settings a system changes (kala.make_settings keys), and systems with a longer step budget
SETTINGS = {"relational_random_memory": {"init_entity_memory": False}}
STEP_FACTOR = {"relational_2x_steps": 2, "vanilla_2x_steps": 2}
HYPOTHESIS_SIZES = (100, 500)
PART_TWO = {**HYPOTHESES, **CONTROLS}
ALL_SYSTEMS = {**SYSTEMS, **PART_TWO}
KNOWLEDGE_SYSTEMS = ("relational", "relational_eq3", *HYPOTHESES)
#: +1 layer runs at these sizes only (the design's budget)
MORE_PARAMS_SIZES = (100, 1000)
BATCH = 16
#: the step budget: 20 epochs (the paper's NER fine-tuning), at least MIN_STEPS, at most MAX_STEPS
EPOCHS, MIN_STEPS, MAX_STEPS = 20, 150, 320
EVALUATIONS = 5  # validation evaluations per run (early stopping's checkpoints)
PATIENCE = 2
CHECK_EXAMPLES = 100  # test sentences keplm check-knowledge reads per KALA model


def train_steps(size: int) -> int:
    """Optimizer steps for ``size`` training sentences: 20 epochs, clipped to [150, 320] (2,500 sentences: 2
    epochs, the main job's budget)."""
    return min(max(math.ceil(EPOCHS * size / BATCH), MIN_STEPS), MAX_STEPS)


def run_commands(
    dataset: str,
    size: int,
    seed: str,
    system: str,
    run_dir: str,
    data_dir: str = "../shared/data",
    model: str | None = None,
) -> list[list[str]]:
    """The run-script command of one (dataset, size, seed, system) run, then (KALA) its knowledge check, then the
    deletion of its checkpoints."""
    spec = DATASETS[dataset]
    steps = train_steps(size) * STEP_FACTOR.get(system, 1)
    every = str(math.ceil(steps / EVALUATIONS))
    cfg = kala.make_settings(
        spec["preset"],
        data_dir,
        model=model,
        train=str(size),
        eval=spec["eval"],
        predict=spec["predict"],
        batch=str(BATCH),
        check_knowledge=CHECK_EXAMPLES,
    )
    cfg.update(SETTINGS.get(system, {}))
    options = [
        *ALL_SYSTEMS[system][2:],
        "--train_sample_seed",
        seed,
        "--max_steps",
        str(steps),
        "--eval_strategy",
        "steps",
        "--eval_steps",
        every,
        "--save_strategy",
        "steps",
        "--save_steps",
        every,
        "--save_total_limit",
        "1",
        "--load_best_model_at_end",
        "--metric_for_best_model",
        "f1",
        "--early_stopping_patience",
        str(PATIENCE),
    ]
    base_system = ALL_SYSTEMS[system][1]
    cmds = [kala.command(cfg, base_system, seed, run_dir) + options]
    if system in KNOWLEDGE_SYSTEMS:
        cmds.append(kala.check_command(cfg, run_dir))
    cmds.append(
        [
            sys.executable,
            "-c",
            "import shutil, glob, sys; [shutil.rmtree(p) for p in glob.glob(sys.argv[1] + '/checkpoint-*')]",
            run_dir,
        ]
    )
    return cmds


def plan(datasets, sizes, seeds, systems) -> list[tuple[str, int, str, str]]:
    """(dataset, size, seed, system) in queue order: seed-major, so a cut queue leaves every size with the same
    seeds; +1 layer only at ``MORE_PARAMS_SIZES``, the part-2 variants only at ``HYPOTHESIS_SIZES``."""
    return [
        (dataset, size, seed, system)
        for seed in seeds
        for dataset in datasets
        for size in sizes
        for system in systems
        if (system != "more_params" or size in MORE_PARAMS_SIZES)
        and (system not in PART_TWO or size in HYPOTHESIS_SIZES)
    ]


def run_dir(output_dir: str, dataset: str, size: int, seed: str, system: str) -> str:
    return os.path.join(output_dir, dataset, f"n{size}", f"seed{seed}", system)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(seeds=["1", "2", "3", "4", "5"])
    parser.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS), choices=sorted(DATASETS))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="comma-separated; the curve's: " + ",".join(SYSTEMS) + "; part 2's (--hypotheses): " + ",".join(PART_TWO),
    )
    parser.add_argument(
        "--hypotheses",
        action="store_true",
        help="part 2 of the design: every variant of HYPOTHESES and CONTROLS at sizes 100 and 500 (with --seeds 1 2 3)",
    )


def run(args: argparse.Namespace, output_dir: str) -> list[dict]:
    """Queue every planned run (``--resume`` skips the finished ones); the runs' results are read by
    ``curve-table``."""
    systems = list(PART_TWO) if args.hypotheses else check_names(args.systems.split(","), ALL_SYSTEMS, "systems")
    if any(size < 1 for size in args.sizes):
        raise ValueError(f"--sizes must be positive, got {args.sizes}")
    jobs = []
    for dataset, size, seed, system in plan(args.datasets, args.sizes, args.seeds, systems):
        where = run_dir(output_dir, dataset, size, seed, system)
        jobs.append(
            (
                f"{dataset}/n{size}/seed{seed}/{system}",
                run_commands(dataset, size, seed, system, where, args.data_dir, args.model),
                where + ".log",
            )
        )
    run_resumable(jobs, output_dir, args.jobs, args.resume)
    return []


# ----------------------------------------------------------------------------------------------- results
#: (row key, results key) read from each run's all_results.json
RESULT_KEYS = {
    "test_f1": "predict_f1",
    "with_unseen_f1": "predict_with_unseen_f1",
    "with_unseen_examples": "predict_with_unseen_examples",
    "unseen3_f1": "predict_unseen_f1",
    "unseen3_examples": "predict_unseen_examples",
    "validation_f1": "eval_f1",
    "train_seconds": "train_runtime",
}
COMPARED = ("relational", "relational_eq3", "more_params")  # each minus vanilla, paired by seed
#: one colour per system in both panels of a plot
COLORS = {"vanilla": "C0", "relational": "C1", "relational_eq3": "C2", "more_params": "C3"}


def finished(run) -> bool:
    """Whether a run folder holds a finished run: its test results (``predict_results.json``, written after
    testing; ``run_ner`` writes ``all_results.json`` before training) and, for a KALA system, its knowledge check;
    or the queue's ``job_done.json``."""
    if (run / DONE_FILE).is_file():
        return True
    checked = run.name not in KNOWLEDGE_SYSTEMS or (run / "knowledge_check" / "knowledge_sensitivity.json").is_file()
    return (run / "predict_results.json").is_file() and checked


def collect(output_dir: str) -> list[dict]:
    """One row per :func:`finished` run under ``output_dir``: its dataset, size, seed, system, test / validation F1,
    the steps trained and the best step, and (KALA) the knowledge check's flip rates and mean shifts."""
    import json
    from pathlib import Path

    rows = []
    for results_file in sorted(Path(output_dir).glob("*/n*/seed*/*/all_results.json")):
        run = results_file.parent
        if not finished(run):
            continue  # in progress (or stopped mid-run)
        dataset, size, seed, system = run.parent.parent.parent.name, run.parent.parent.name, run.parent.name, run.name
        results = json.loads(results_file.read_text())
        state = json.loads((run / "trainer_state.json").read_text()) if (run / "trainer_state.json").is_file() else {}
        row = {
            "dataset": dataset,
            "size": int(size[1:]),
            "seed": int(seed[4:]),
            "system": system,
            **{key: results.get(source) for key, source in RESULT_KEYS.items()},
            "steps": state.get("global_step"),
            "best_step": state.get("best_global_step"),
        }
        check = run / "knowledge_check" / "knowledge_sensitivity.json"
        if check.is_file():
            report = json.loads(check.read_text())
            row["checked_examples_with_facts"] = report["examples_with_facts"]
            for edit, stats in report["overall"].items():
                row[f"{edit}_flip_rate"] = stats["flip_rate"]
                row[f"{edit}_mean_shift"] = stats["mean_shift"]
                row[f"{edit}_edits"] = stats["edits"]
        rows.append(row)
    return rows


def paired_interval(differences: list[float]) -> tuple[float, float, float]:
    """Mean of paired differences and its 95 % t-interval (nan bounds for fewer than 2 pairs)."""
    import statistics

    from scipy.stats import t

    mean = statistics.mean(differences)
    if len(differences) < 2:
        return mean, float("nan"), float("nan")
    half = t.ppf(0.975, len(differences) - 1) * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def aggregate(rows: list[dict], key: str = "test_f1", baseline: str = "vanilla", compared=COMPARED) -> dict:
    """{(dataset, size): {system: [values by seed]}, plus (dataset, size, system, "diff"): (mean, low, high, n)}
    with each ``compared`` system − ``baseline`` paired over the seeds that finished both."""
    cells: dict = {}
    for row in rows:
        if row.get(key) is not None:
            cells.setdefault((row["dataset"], row["size"]), {}).setdefault(row["system"], {})[row["seed"]] = row[key]
    out = {}
    for (dataset, size), systems in sorted(cells.items()):
        out[(dataset, size)] = {system: [by_seed[s] for s in sorted(by_seed)] for system, by_seed in systems.items()}
        vanilla = systems.get(baseline, {})
        for system in compared:
            seeds = sorted(set(vanilla) & set(systems.get(system, {})))
            if seeds:
                out[(dataset, size, system, "diff")] = (
                    *paired_interval([systems[system][s] - vanilla[s] for s in seeds]),
                    len(seeds),
                )
    return out


def table(rows: list[dict], key: str = "test_f1", title: str = "test F1") -> str:
    """Markdown: per dataset and size, mean ± sd (seeds) of ``key`` per system and each KALA − vanilla paired
    difference with its 95 % interval."""
    from harness.tables import cell

    stats = aggregate(rows, key)
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in rows)]
    compared = [s for s in COMPARED if s in systems]
    lines = [
        f"| dataset | size | seeds | {' | '.join(f'{s} {title}' for s in systems)} | "
        + " | ".join(f"{s} − vanilla (95 % CI)" for s in compared)
        + " |",
        "|---|---:|---:|" + "---:|" * (len(systems) + len(compared)),
    ]
    for cell_key, by_system in stats.items():
        if len(cell_key) != 2:
            continue
        dataset, size = cell_key
        seeds = max(len(v) for v in by_system.values())
        values = [cell(by_system.get(s, []), 2, "") for s in systems]
        diffs = []
        for system in compared:
            found = stats.get((dataset, size, system, "diff"))
            diffs.append(
                ""
                if found is None
                else f"{found[0]:+.2f} [{found[1]:+.2f}, {found[2]:+.2f}] (n={found[3]})"
                if found[3] > 1
                else f"{found[0]:+.2f} (n=1)"
            )
        lines.append(f"| {dataset} | {size} | {seeds} | " + " | ".join(values + diffs) + " |")
    return "\n".join(lines)


def hypotheses_table(rows: list[dict]) -> str:
    """Markdown for part 2: per dataset, size and variant, test F1 (mean ± sd), its paired difference to the default
    ``relational`` run of the same seeds (95 % interval) and the mean tail- and relation-edit flip rates (%)."""
    from harness.tables import cell

    stats = aggregate(rows, baseline="relational", compared=tuple(HYPOTHESES))
    flips: dict = {}
    for row in rows:
        if "tail_flip_rate" in row:
            flips.setdefault((row["dataset"], row["size"], row["system"]), []).append(row)
    lines = [
        "| dataset | size | system | seeds | test F1 | − relational (95 % CI) | tail flips % | relation flips % |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for key, by_system in stats.items():
        if len(key) != 2 or not any((*key, system, "diff") in stats for system in HYPOTHESES):
            continue  # a size without a variant run: the curve's tables show its relational runs
        for system in ("relational", *HYPOTHESES):
            if system not in by_system or (system != "relational" and (*key, system, "diff") not in stats):
                continue
            shown = _shown_diff(stats.get((*key, system, "diff")))
            group = flips.get((*key, system), [])
            lines.append(
                f"| {key[0]} | {key[1]} | {system} | {len(by_system[system])} | {cell(by_system[system])} | {shown} | "
                f"{cell([100 * r['tail_flip_rate'] for r in group], 1, '')} | "
                f"{cell([100 * r['relation_flip_rate'] for r in group], 1, '')} |"
            )
    return "\n".join(lines)


def h6_control_table(rows: list[dict]) -> str:
    """Markdown for H6's control: per dataset and size, KALA relational − vanilla both at twice the step budget,
    paired by seed (95 % interval), beside the same difference at the curve's budget over the same seeds."""
    from harness.tables import cell

    longer = aggregate(rows, baseline="vanilla_2x_steps", compared=("relational_2x_steps",))
    lines = [
        "| dataset | size | seeds | vanilla 2× F1 | relational 2× F1 | relational − vanilla, 2× steps (95 % CI) | "
        "relational − vanilla, curve's steps, same seeds (95 % CI) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, diff in longer.items():
        if len(key) != 4:
            continue
        dataset, size = key[0], key[1]
        seeds = {
            r["seed"] for r in rows if (r["dataset"], r["size"], r["system"]) == (dataset, size, "vanilla_2x_steps")
        }
        seeds &= {
            r["seed"] for r in rows if (r["dataset"], r["size"], r["system"]) == (dataset, size, "relational_2x_steps")
        }
        same = aggregate([r for r in rows if r["seed"] in seeds]).get((dataset, size, "relational", "diff"))
        by_system = longer[(dataset, size)]
        lines.append(
            f"| {dataset} | {size} | {diff[3]} | {cell(by_system['vanilla_2x_steps'])} | "
            f"{cell(by_system['relational_2x_steps'])} | {_shown_diff(diff)} | {_shown_diff(same)} |"
        )
    return "\n".join(lines)


def _shown_diff(diff) -> str:
    """A paired difference as the tables show it: mean [low, high] (n=seeds), the mean alone for one seed."""
    if diff is None:
        return ""
    return f"{diff[0]:+.2f} [{diff[1]:+.2f}, {diff[2]:+.2f}] (n={diff[3]})" if diff[3] > 1 else f"{diff[0]:+.2f}"


def knowledge_table(rows: list[dict]) -> str:
    """Markdown: per dataset, size and KALA system, mean ± sd over seeds of the check's flip rates and shifts (%)."""
    from harness.tables import cell

    groups: dict = {}
    for row in rows:
        if "relation_flip_rate" in row:
            groups.setdefault((row["dataset"], row["size"], row["system"]), []).append(row)
    lines = [
        "| dataset | size | system | seeds | relation flips % | tail flips % | remove flips % | "
        "relation shift % | tail shift % | remove shift % |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (dataset, size, system), group in sorted(groups.items()):
        values = [
            cell([100 * r[f"{edit}_{stat}"] for r in group], 1)
            for stat in ("flip_rate", "mean_shift")
            for edit in ("relation", "tail", "remove")
        ]
        lines.append(f"| {dataset} | {size} | {system} | {len(group)} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], dataset: str, path: str, command: str) -> None:
    """Test F1 against size (log x), a line and ±1 sd band per system; below, each KALA − vanilla paired
    difference with its 95 % interval."""
    import statistics

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = aggregate([r for r in rows if r["dataset"] == dataset])
    sizes = sorted(k[1] for k in stats if len(k) == 2)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 7), sharex=True, height_ratios=[3, 2])
    for system in SYSTEMS:
        points = [(n, stats[(dataset, n)][system]) for n in sizes if stats[(dataset, n)].get(system)]
        if not points:
            continue
        x = [n for n, _ in points]
        mean = [statistics.mean(v) for _, v in points]
        sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for _, v in points]
        color = COLORS.get(system)
        top.plot(x, mean, marker="o", label=system, color=color)
        top.fill_between(
            x, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)], alpha=0.2, color=color
        )
    top.set_xscale("log")
    top.set_ylabel("test F1 (mean ± sd over seeds)")
    top.set_title(f"{dataset}: learning curve")
    top.legend(fontsize=8)
    for offset, system in zip((-0.03, 0.0, 0.03), COMPARED):
        found = [(n, stats[(dataset, n, system, "diff")]) for n in sizes if (dataset, n, system, "diff") in stats]
        if not found:
            continue
        x = [n * (1 + offset) for n, _ in found]
        mean = [d[0] for _, d in found]
        low = [d[0] - d[1] if d[3] > 1 else 0.0 for _, d in found]
        high = [d[2] - d[0] if d[3] > 1 else 0.0 for _, d in found]
        bottom.errorbar(
            x, mean, yerr=[low, high], marker="o", capsize=3, label=f"{system} − vanilla", color=COLORS.get(system)
        )
    bottom.axhline(0, color="grey", linewidth=0.8)
    bottom.set_xscale("log")
    bottom.set_xlabel("training sentences")
    bottom.set_ylabel("paired difference, F1 (95 % CI)")
    bottom.legend(fontsize=8)
    figure.text(0.01, 0.005, command, fontsize=6, color="grey")
    figure.tight_layout(rect=(0, 0.02, 1, 1))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def read_records(path: str) -> list[dict]:
    """The rows of an earlier ``runs.jsonl`` (runs whose folders are gone: only their committed rows are left)."""
    import json
    from pathlib import Path

    if not Path(path).is_file():
        raise FileNotFoundError(f"--records: no file {path} (a runs.jsonl that curve-table wrote)")
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        row = json.loads(line)
        if not {"dataset", "size", "seed", "system"} <= row.keys():
            raise ValueError(f"{path}:{number}: a curve row needs dataset, size, seed and system, got {sorted(row)}")
        rows.append(row)
    return rows


def report(
    output_dir: str, record_dir: str | None, plot_dir: str | None, command: str, records: str | None = None
) -> str:
    """The tables of the runs under ``output_dir`` and, with ``records``, of the rows of an earlier ``runs.jsonl``
    (a run in both must be recorded alike: the file may be the one ``record_dir`` rewrites); with ``record_dir``,
    every run's row into ``runs.jsonl`` there; with ``plot_dir``, one plot per dataset
    (``learning-curve-<dataset>.png``)."""
    import json
    from pathlib import Path

    rows = read_records(records) if records else []
    recorded = {(r["dataset"], r["size"], r["seed"], r["system"]): r for r in rows}
    for row in collect(output_dir):
        key = (row["dataset"], row["size"], row["seed"], row["system"])
        if key not in recorded:
            rows.append(row)
        elif json.loads(json.dumps(row)) != recorded[key]:  # the same run recorded before is fine, another is not
            raise ValueError(f"run {'/'.join(map(str, key))} differs between {records} and {output_dir}")
    if not rows:
        raise FileNotFoundError(
            f"no finished curve run under {output_dir} (<dataset>/n<size>/seed<N>/<system>/all_results.json)"
        )
    text = "\n\n".join(
        [
            f"Command: `{command}`",
            "Test F1 (all test sentences):",
            table(rows),
            "Test F1 on the sentences with an entity unseen in the run's training sentences:",
            table(rows, "with_unseen_f1", "F1 w/ unseen"),
            "Knowledge checks (KALA models):",
            knowledge_table(rows),
            *(
                ["Part 2, one change from KALA relational's defaults each:", hypotheses_table(rows)]
                if any(r["system"] in HYPOTHESES for r in rows)
                else []
            ),
            *(
                ["Part 2, H6 control: KALA relational − vanilla at twice the step budget:", h6_control_table(rows)]
                if any(r["system"] in CONTROLS for r in rows)
                else []
            ),
        ]
    )
    if record_dir:
        Path(record_dir).mkdir(parents=True, exist_ok=True)
        with open(Path(record_dir) / "runs.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        (Path(record_dir) / "tables.md").write_text(text + "\n", encoding="utf-8")
    if plot_dir:
        Path(plot_dir).mkdir(parents=True, exist_ok=True)
        for dataset in sorted({r["dataset"] for r in rows}):
            plot(rows, dataset, str(Path(plot_dir) / f"learning-curve-{dataset}.png"), command)
    return text
