#!/usr/bin/env python
"""Mean ± std over seeds of run summaries (``scripts/experiments.py``, ``scripts/main_job.py``):

    python scripts/summarize_runs.py outputs/experiments/wnut/seed*/summary.json

Prints a markdown table: validation and test F1 (and EM for QA), test F1 on the seen / unseen subsets (paper 5.4),
the unseen subset's size, and each run's wall time.
"""

from __future__ import annotations

import json
import statistics
import sys

ROWS = [("validation F1", "eval_f1"), ("test EM", "predict_exact_match"), ("test F1", "predict_f1"),
        ("test F1, seen contexts", "predict_seen_f1"), ("test F1, unseen contexts", "predict_unseen_f1")]


def _cell(values: list[float], digits: int = 2) -> str:
    if not values:
        return "n/a"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {spread:.{digits}f}"


def main(paths: list[str]) -> None:
    summaries = [json.load(open(p)) for p in paths]
    systems = summaries[0]["settings"]["systems"]
    first = summaries[0]["results"][systems[0]]
    scale = 1.0 if summaries[0]["settings"].get("task") == "qa" else 100.0  # seqeval gives fractions, SQuAD percent
    print(f"{len(summaries)} seeds: {[s['settings']['seed'] for s in summaries]}; test contexts seen / unseen: "
          f"{first.get('predict_seen_examples')} / {first.get('predict_unseen_examples')}")
    print("| metric | " + " | ".join(systems) + " |\n|---|" + "---:|" * len(systems))
    for label, key in ROWS:
        if not any(key in s["results"][system] for s in summaries for system in systems):
            continue
        cells = [_cell([scale * s["results"][system][key] for s in summaries if key in s["results"][system]])
                 for system in systems]
        print(f"| {label} | " + " | ".join(cells) + " |")
    times = [_cell([s["durations_s"][system] for s in summaries if s.get("durations_s", {}).get(system)], 0)
             for system in systems]
    print("| wall time per run (s) | " + " | ".join(times) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
