"""The TRELM reference card of ``model_cards/`` (``harness/make_cards.py`` writes it): the seed-1 TRELM checkpoint of
the committed CPU comparison with plain MLM at equal wall-clock, from the runs' saved summaries
(``docs/runs/trelm-2026-11-23/seed*.json``, written by ``python -m harness.experiments trelm``); the weights were not
kept in the repository."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from harness.card_facts import CPU_MACHINE, CPU_RUN_VERSIONS, MINILM, command_line, cpu_scale_note, reference_spec
from keplm.hub.card import (
    KnowledgeFacts,
    ModelCardSpec,
    ResultRow,
    Score,
    TrainingFacts,
    method_card,
)

ROOT = Path(__file__).resolve().parent.parent
TRELM_RUNS = Path("docs/runs/trelm-2026-11-23")
TRELM_CARD = "trelm-minilm-trex"
TRELM_SEED = "1"
#: comparison rows: the runs' variant names and their labels
TRELM_SYSTEMS = {"mlm": "plain MLM", "trelm": "TRELM (all seeds)", "trelm_no_injection": "TRELM without injection",
                 "trelm_no_routing": "TRELM without routing"}
#: the LAMA T-REx probe's subsets: (ResultRow subset, probe-curve key)
PROBE_SUBSETS = ((None, "p_at_1"), ("seen", "seen"), ("held_out", "held_out"))
PROBE = "LAMA T-REx probe"
#: the KG the KG embeddings were trained on (docs/runs/trelm-2026-11-23/kge_report.json)
KG_SPEC = "trex:../shared/data/lama"


def probe_rows(curves: list[list[dict]], facts: int | None = None) -> list[ResultRow]:
    """P@1 rows (all / seen / held-out facts) of the final probe points of one or more runs (mean ± std)."""
    rows = []
    for subset, key in PROBE_SUBSETS:
        values = [100 * curve[-1][key] for curve in curves if curve[-1].get(key) is not None]
        if values:
            std = statistics.stdev(values) if len(values) > 1 else None
            rows.append(ResultRow(PROBE, {"p@1": Score(statistics.mean(values), std, len(values))}, subset,
                                  facts if subset is None else None))
    return rows


def trelm_card() -> tuple[str, ModelCardSpec]:
    summaries = {s["settings"]["seed"]: s for s in
                 (json.loads(p.read_text()) for p in sorted((ROOT / TRELM_RUNS).glob("seed*.json")))}
    own = summaries[TRELM_SEED]
    settings, metrics = own["settings"], own["results"]["trelm"]
    kge = json.loads((ROOT / TRELM_RUNS / "kge_report.json").read_text())
    # the seeds each variant ran with; the comparison averages each variant's final probe points over them
    ran = {variant: sorted(seed for seed, s in summaries.items() if variant in s.get("probe_curves", {}))
           for variant in TRELM_SYSTEMS}
    comparison = {TRELM_SYSTEMS[variant]: probe_rows([summaries[seed]["probe_curves"][variant] for seed in seeds])
                  for variant, seeds in ran.items() if seeds}
    seed_counts = "; ".join(f"{TRELM_SYSTEMS[variant].removesuffix(' (all seeds)')}: "
                            f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"
                            for variant, seeds in ran.items() if seeds)
    graph = kge["kg"]
    knowledge = KnowledgeFacts(
        kg_spec=KG_SPEC, kg_entities=graph["entities"], kg_relations=graph["relations"],
        kg_triples=kge["triples"]["total"], kge_vectors=(graph["entities"], kge["dim"]),
        method_rows=[("KG embedding training",
                      f"{kge['torch_geometric_class']}, {kge['dim']} dimensions, {kge['epochs']} epochs of `keplm "
                      f"train-kge` on the T-REx facts without the {kge['excluded_facts']['keys']:,} held-out probe "
                      "facts"),
                     *method_card("trelm").knowledge_rows(None, metrics)],
        note="The held-out LAMA facts are in neither the pre-training text nor the KG the embeddings were trained on.")
    command = ["python", "run_scripts/run_pretraining.py", "--model_name_or_path", MINILM, "--max_train_samples",
               settings["train"], "--max_train_seconds", settings["seconds"], "--num_train_epochs", "100",
               "--learning_rate", settings["lr"], "--warmup_steps", "10", "--per_device_train_batch_size",
               settings["batch"], "--max_seq_length", settings["max_seq_length"], "--probe_every_steps",
               settings["probe_every_steps"], "--seed", TRELM_SEED, "--do_train", "--output_dir",
               f"outputs/trelm_experiments/seed{TRELM_SEED}/trelm", "--use_cpu", "--system", "trelm", "--kg",
               settings["kg"]]
    curve = own["probe_curves"]["trelm"]
    training = TrainingFacts(
        dataset="trex+fewrel",
        examples={"train": metrics["train_samples"]},
        hyperparameters={"learning rate": settings["lr"], "batch size per device": settings["batch"],
                         "seed": TRELM_SEED, "warm-up steps": 10, "training time budget": f"{settings['seconds']} s",
                         "corpus": f"{settings['train']} sentences of T-REx evidences + FewRel, held-out facts removed",
                         "mechanisms": "injection, CKA loss (θ 0.5), memory bank (k 16), knowledge routing (10 %)"},
        command=command_line(command),
        command_note="Run by `python -m harness.experiments trelm --seeds 1 2 3 --jobs 2` (two runs at a time with "
                     "one thread each). The KG embeddings come from `keplm train-kge` (see docs/trelm.md).",
        steps=curve[-1]["step"], device=CPU_MACHINE, date="2026-11-23",
        wall_time=f"{metrics['train_seconds']:.0f} s of training (probing excluded)",
    )
    spec = reference_spec(
        model_type="trelm", architecture="TrelmForMaskedLM", auto_class="AutoModelForMaskedLM",
        pipeline_tag="fill-mask", task="fill-mask", processor_class="TrelmProcessor", system="trelm",
        model_name="TRELM (MiniLM-L6) pre-trained on T-REx and FewRel sentences, CPU scale",
        uses_knowledge=True, license="cc-by-nc-4.0", knowledge=knowledge,
        training=training, results=probe_rows([curve], None), comparison=comparison,
        comparison_intro=f"This checkpoint is seed {TRELM_SEED}. Every variant of the same comparison (same corpus "
                         f"sample, same training seconds), mean ± std over the seeds it ran with ({seed_counts}):",
        versions=CPU_RUN_VERSIONS,
        provenance=[f"Numbers: `{TRELM_RUNS.as_posix()}/seed*.json` (settings, every variant's `all_results.json` "
                    'and probe curve); discussed in `docs/results.md` ("TRELM").'],
        notes=[cpu_scale_note("minutes of pre-training from an encoder without an MLM head", "P@1 says",
                              "plain MLM at this budget", "BERT/RoBERTa")],
    )
    return TRELM_CARD, spec
