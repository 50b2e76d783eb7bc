#!/usr/bin/env python
"""Mean ± std over seeds of main-job summaries: ``python scripts/summarize_runs.py outputs/compare/seed*/summary.json``."""

from __future__ import annotations

import json
import statistics
import sys

ROWS = [("validation F1", "eval_f1"), ("test F1", "predict_f1"), ("test F1, seen contexts", "predict_seen_f1"),
        ("test F1, unseen contexts", "predict_unseen_f1")]


def main(paths: list[str]) -> None:
    summaries = [json.load(open(p)) for p in paths]
    systems = summaries[0]["settings"]["systems"]
    print(f"{len(summaries)} seeds: {[s['settings']['seed'] for s in summaries]}; "
          f"unseen test contexts: {summaries[0]['results'][systems[0]].get('predict_unseen_examples')}")
    print("| metric | " + " | ".join(systems) + " |\n|---|" + "---:|" * len(systems))
    for label, key in ROWS:
        cells = []
        for system in systems:
            values = [100 * s["results"][system][key] for s in summaries if key in s["results"][system]]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.2f} ± {spread:.2f}" if values else "n/a")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
