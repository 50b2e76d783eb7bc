"""The Roof-Transformer reference card of ``model_cards/`` (``harness/make_cards.py`` writes it): the best Roof
configuration of the committed CPU runs, from their saved summaries (``docs/runs/roof-2026-11-23/<task>/seed*.json``,
written by ``python -m harness.experiments roof``); the weights were not kept."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from harness.card_facts import CPU_MACHINE, CPU_RUN_VERSIONS, MINILM, command_line, cpu_scale_note, reference_spec
from keplm.hub.card import KnowledgeFacts, ModelCardSpec, TrainingFacts, results_from_runs

ROOT = Path(__file__).resolve().parent.parent
ROOF_RUNS = Path("docs/runs/roof-2026-11-23")
ROOF_CARD = "roof-minilm-mrpc"
ROOF_TASK = "mrpc"
#: how the comparison rows are labelled (the runs' variant names)
ROOF_SYSTEMS = {"bert": "MiniLM alone", "bert_with_knowledge": "MiniLM, knowledge appended",
                "roof": "Roof-Transformer (all seeds)", "roof_cached": "Roof, cached KB encoder"}
#: the merged KG every run read, as its log reports it (`Loaded KnowledgeGraph(...)`)
KG_SIZE = {"kg_entities": 80_693, "kg_relations": 278, "kg_triples": 371_889}


def roof_card() -> tuple[str, ModelCardSpec]:
    paths = sorted((ROOT / ROOF_RUNS / ROOF_TASK).glob("seed*.json"))
    summaries = [json.loads(p.read_text()) for p in paths]
    summaries = [s for s in summaries if "roof" in s["results"]]
    settings = summaries[0]["settings"]
    runs = {system: [s["results"][system] for s in summaries if system in s["results"]] for system in ROOF_SYSTEMS}
    roof = runs["roof"]
    seeds = ", ".join(s["settings"]["seed"] for s in summaries)
    rows = {ROOF_SYSTEMS[s]: results_from_runs(r, "text-classification") for s, r in runs.items() if r}
    # the card's checkpoint: the best Roof run (validation accuracy); the comparison: every system over the seeds
    best = max(range(len(roof)), key=lambda i: roof[i]["eval_accuracy"])
    best_seed = summaries[best]["settings"]["seed"]

    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in roof)

    examples = roof[0]["knowledge_train_examples"]
    knowledge = KnowledgeFacts(
        kg_spec=settings["kg"], case_sensitive=True, **KG_SIZE,
        method_rows=[("knowledge source", "triples whose head's name or alias occurs in the pair (case-sensitive, "
                                          "word boundaries), verbalised and encoded by the KB encoder"),
                     ("triple selection", f"selection `has_tail`, verbalization `exp2`, at most "
                                          f"{settings['max_knowledge_length']} knowledge tokens"),
                     ("training examples with any triple",
                      f"{100 * mean('knowledge_train_share_with_knowledge'):.1f} %"),
                     ("triples per training example", f"{mean('knowledge_train_kept_per_example'):.2f} kept, "
                                                      f"{mean('knowledge_train_cut') / examples:.2f} cut by the "
                                                      "knowledge budget"),
                     ("validation examples with any triple",
                      f"{100 * mean('knowledge_validation_share_with_knowledge'):.1f} %")],
        note="KG size as the runs' logs report it; selection statistics are means over the seeds' run summaries.")
    command = ["python", "run_scripts/run_glue.py", "--task_name", ROOF_TASK, "--data_dir", "../shared/data/glue",
               "--model_name_or_path", MINILM, "--kg", settings["kg"], "--link_case_sensitive",
               "--max_train_samples", settings["train"], "--do_train", "--do_eval",
               "--output_dir", f"outputs/roof_experiments/{ROOF_TASK}/seed{best_seed}/roof",
               "--num_train_epochs", settings["epochs"], "--learning_rate", settings["lr"], "--warmup_steps", "0.1",
               "--per_device_train_batch_size", settings["batch"], "--seed", best_seed, "--max_seq_length",
               settings["max_seq_length"], "--max_knowledge_length", settings["max_knowledge_length"],
               "--fusion_layers", settings["fusion_layers"], "--system", "roof"]
    training = TrainingFacts(
        dataset=ROOF_TASK,
        examples={"train": roof[0]["train_samples"], "validation": roof[0]["eval_samples"]},
        hyperparameters={"learning rate": settings["lr"], "epochs": settings["epochs"],
                         "batch size per device": settings["batch"], "seed": best_seed, "warm-up": "0.1",
                         "fusion learning rate": "10x the encoders' (paper 4.5, appendix 6.3)",
                         "training subset": f"the first {settings['train']} MRPC training pairs"},
        command=command_line(command),
        command_note="Run by `python -m harness.experiments roof --preset mrpc --seeds 1 2 3` (one command per seed "
                     "and variant, two at a time with one thread each).",
        epochs=float(roof[0]["epoch"]), device=CPU_MACHINE, date="2026-11-23",
        wall_time=f"{summaries[best]['durations_s']['roof']:.0f} s (two runs sharing the 2 cores)",
    )
    spec = reference_spec(
        model_type="roof_transformer", architecture="RoofTransformerForSequenceClassification",
        auto_class="AutoModelForSequenceClassification", pipeline_tag="text-classification",
        task="text-classification", processor_class="RoofTransformerProcessor", system="roof",
        model_name="Roof-Transformer (MiniLM-L6) for paraphrase detection on GLUE MRPC",
        uses_knowledge=True,
        settings={"fusion": "transformer", "fusion_layers": int(settings["fusion_layers"]), "segmentation": "type2",
                  "knowledge_encoding": "joint", "max_knowledge_length": int(settings["max_knowledge_length"]),
                  "num_text_encoders": 1},
        license="cc-by-nc-4.0", knowledge=knowledge, training=training,
        results=results_from_runs([roof[best]], "text-classification"), comparison=rows,
        comparison_intro=f"This checkpoint is seed {best_seed}, the best of the Roof runs with seeds {seeds}. Every "
                         "system of the same runs (same data and KG), mean ± std over those seeds — Roof's column is "
                         "the mean of its runs, not this checkpoint:",
        versions=CPU_RUN_VERSIONS,
        provenance=[f"Numbers: `{ROOF_RUNS.as_posix()}/{ROOF_TASK}/seed*.json` (settings, every variant's "
                    '`all_results.json`, wall times); discussed in `docs/results.md` ("Roof-Transformer").'],
        notes=[cpu_scale_note("1,000 training pairs, 2 epochs, MiniLM-L6", "scores say", "its baselines at this size",
                              "BERT-base")],
    )
    return ROOF_CARD, spec
