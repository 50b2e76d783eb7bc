#!/usr/bin/env python
"""Mean ± std over seeds of run summaries (``harness/experiments.py``, ``harness/main_job.py``):

    python -m harness.summarize_runs outputs/experiments/wnut/seed*/summary.json

A seed may be split over several summaries (systems run later into another folder, e.g. TAPT beside the four
systems of a committed table): a system counts the distinct seeds it ran with.

Prints a markdown table: validation and test scores (F1, EM for QA, accuracy / F1 / Matthews for GLUE), test F1 on
the seen / unseen subsets (KALA 5.4) and the unseen subset's size, Roof-Transformer's knowledge selection statistics
(share of training examples with any triple, triples kept and cut per example, appended tokens), and each run's
wall time.
"""

from __future__ import annotations

import json
import statistics
import sys

#: (label, results key, scaled): scaled rows are fractions for seqeval and GLUE, percentages for SQuAD
ROWS = [("validation accuracy", "eval_accuracy", True), ("validation F1", "eval_f1", True),
        ("validation Matthews corr.", "eval_matthews_correlation", True), ("validation EM", "eval_exact_match", True),
        ("validation macro-F1 (SemEval official)", "eval_macro_f1", True),
        ("test EM", "predict_exact_match", True), ("test F1", "predict_f1", True),
        ("test macro-F1 (SemEval official)", "predict_macro_f1", True),
        ("test F1, seen contexts", "predict_seen_f1", True), ("test F1, unseen contexts", "predict_unseen_f1", True),
        ("train examples with knowledge (%)", "knowledge_train_share_with_knowledge", "percent"),
        ("train triples kept per example", "knowledge_train_kept_per_example", False),
        ("train triples cut per example", "knowledge_train_cut", "per_example"),
        ("train knowledge tokens appended per example", "knowledge_train_appended_tokens_per_example", False),
        # keplm check-knowledge on the trained model (harness/experiments.py --check_knowledge N)
        ("checked test examples with a fact on a mention (%)", "knowledge_examples_with_facts", "percent"),
        ("KG edit, relation swapped: prediction flips (%)", "knowledge_relation_flip_rate", "percent"),
        ("KG edit, relation swapped: mean shift (TV, %)", "knowledge_relation_mean_shift", "percent"),
        ("KG edit, other end swapped: prediction flips (%)", "knowledge_tail_flip_rate", "percent"),
        ("KG edit, other end swapped: mean shift (TV, %)", "knowledge_tail_mean_shift", "percent"),
        ("KG edit, fact removed: prediction flips (%)", "knowledge_remove_flip_rate", "percent"),
        ("KG edit, fact removed: mean shift (TV, %)", "knowledge_remove_mean_shift", "percent")]
QA_TASKS = ("qa", "squad")


def _cell(values: list[float], digits: int = 2) -> str:
    if not values:
        return "n/a"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {spread:.{digits}f}"


def main(paths: list[str]) -> None:
    summaries = [json.load(open(p)) for p in paths]
    # systems in first-seen order; a system run with fewer seeds than the others says how many
    systems = list(dict.fromkeys(system for s in summaries for system in s["settings"]["systems"]))
    first = summaries[0]["results"][systems[0]]
    scale = 1.0 if summaries[0]["settings"].get("task") in QA_TASKS else 100.0  # seqeval/GLUE: fractions
    all_seeds = list(dict.fromkeys(str(s["settings"]["seed"]) for s in summaries))
    count = len(all_seeds)
    subsets = (f"; test contexts seen / unseen: {first['predict_seen_examples']} / {first['predict_unseen_examples']}"
               if "predict_seen_examples" in first else "")  # KALA's seen/unseen split (paper 5.4) only
    print(f"{count} seed{'s' if count > 1 else ''}: {all_seeds}{subsets}")
    seeds = {system: len({str(s["settings"]["seed"]) for s in summaries if system in s["results"]})
             for system in systems}
    headers = [system if seeds[system] == count else f"{system} ({seeds[system]} seed"
               f"{'s' if seeds[system] > 1 else ''})" for system in systems]
    print("| metric | " + " | ".join(headers) + " |\n|---|" + "---:|" * len(systems))
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
                factor = {True: scale, False: 1.0, "percent": 100.0,
                          "per_example": 1.0 / max(result.get("knowledge_train_examples", 1), 1)}[scaled]
                values.append(factor * result[key])
            cells.append(_cell(values))
        print(f"| {label} | " + " | ".join(cells) + " |")
    times = [_cell([s["durations_s"][system] for s in summaries if s.get("durations_s", {}).get(system)], 0)
             for system in systems]
    print("| wall time per run (s) | " + " | ".join(times) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
