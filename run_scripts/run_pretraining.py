#!/usr/bin/env python
"""Knowledge-enhanced masked-LM pre-training with TRELM (or plain MLM, the baseline), in the style of Hugging
Face's ``run_mlm.py``.

    keplm train-kge --kg trex:../shared/data/lama --output_dir outputs/kge/trex-transe
    python run_scripts/run_pretraining.py --model_name_or_path <encoder> --system trelm \\
        --corpus trex:../shared/data/lama fewrel:../shared/data/fewrel/val_wiki.json.gz \\
        --kg outputs/kge/trex-transe --do_train --output_dir outputs/pretraining/trelm

The corpus is read with its entity annotations (:mod:`keplm.data.pretraining`); a seeded share of the LAMA T-REx
probe facts is held out (their sentences never enter pre-training, and they are removed from the KG), and
``seen_facts.tsv`` / ``held_out_facts.tsv`` are written next to the model. ``--system trelm`` scores every mention's
semantic importance under the start encoder (eq. 1, cached), injects KG embeddings at important mentions, decodes
each fact's tail entity against sampled negatives (CKA), keeps the memory bank (λ decays per epoch) and routes the
FFN updates every ``--routing_interval`` steps; ``--no_injection``, ``--no_cka``, ``--no_memory_bank`` and
``--no_routing`` switch each off (the paper's ablation). ``--system mlm`` is plain MLM on the same corpus
(``--entity_masking`` also masks the tail entities TRELM decodes). The LAMA probe's P@1 (seen and held-out facts) is
measured during training (``--probe_every_steps``) and written to ``probe_curve.json``; ``--max_train_seconds``
gives runs an equal wall-clock budget.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import transformers
from transformers import AutoModel, AutoTokenizer

from keplm import TrelmForMaskedLM, TrelmProcessor
from keplm.data.collator import KeplmDataCollator
from keplm.data.lama import fact_key, load_probe
from keplm.data.masking import MaskedLMCollator, MaskingEpochCallback
from keplm.data.pretraining import kg_without_facts, load_pretraining_corpus
from keplm.knowledge import KnowledgeAssets, load_kg
from keplm.tokenization.processing_trelm import feature_statistics
from keplm.training import runtime
from keplm.training.arguments import KeplmTrainingArguments, ModelArguments, parse_args
from keplm.training.knowledge_setup import Featurizer, featurize, maybe_add_lora
from keplm.training.model_card import KeplmModelCardData
from keplm.training.pretraining import (
    MemoryDecayCallback,
    PretrainingDataArguments,
    ProbeCallback,
    TimeBudgetCallback,
    TrainingClock,
    TrelmArguments,
    add_importance,
)
from keplm.training.trainer import KeplmTrainer

#: this project's card facts (its datasets' public names, the MiniLM package), for the model card
CARD_FACTS = Path(__file__).resolve().parents[1] / "harness" / "card_facts.json"

logger = logging.getLogger(__name__)


def check_kge_leak(kg, held_out_keys, trelm_args: TrelmArguments) -> None:
    """Injected KG embeddings trained on a graph holding held-out facts would leak them into pre-training: the
    probe's held-out P@1 would no longer measure generalisation. An error naming the fix, unless --allow_kge_leak."""
    if kg.entity_vectors is None or not (trelm_args.system == "trelm" and trelm_args.injection):
        return
    leaked = kg_without_facts(kg, held_out_keys, drop_vectors=True).build_report["facts_removed"]["triples_removed"]
    if leaked and not trelm_args.allow_kge_leak:
        raise ValueError(
            f"--kg {trelm_args.kg}: its KG embeddings were trained on a graph holding {leaked} of the "
            f"{len(held_out_keys)} held-out facts, so injection would leak them. Write the held-out facts (this "
            "script without --do_train writes OUTPUT_DIR/held_out_facts.tsv), train the embeddings without them "
            "(`keplm train-kge --kg ... --exclude_facts OUTPUT_DIR/held_out_facts.tsv`) and pass that folder, or "
            "accept the leak with --allow_kge_leak"
        )
    if leaked:
        logger.warning("--allow_kge_leak: the KG embeddings were trained on %d held-out facts", leaked)


def corpus_name(sources: list[str]) -> str:
    """The card's dataset: the source kinds (``trex+fewrel``) for the public corpora, else the first source."""
    kinds = [source.split(":", 1)[0] for source in sources]
    return "+".join(kinds) if set(kinds) <= {"trex", "fewrel"} else sources[0]


def build_assets(corpus, trelm_args: TrelmArguments) -> KnowledgeAssets:
    """The entity vocabulary of the corpus mentions (with their counts) and the KG (minus the held-out facts)."""
    if not trelm_args.uses_knowledge:
        return KnowledgeAssets()
    if not trelm_args.kg:
        raise ValueError(
            "--system trelm (and --entity_masking) need --kg: the KG with KG embeddings written by "
            "`keplm train-kge` (entity names for the CKA negatives, vectors for injection)"
        )
    kg = load_kg(trelm_args.kg)
    if trelm_args.system == "trelm" and trelm_args.injection and kg.entity_vectors is None:
        raise ValueError(
            f"--kg {trelm_args.kg} has no KG embeddings: train them with `keplm train-kge --kg ... "
            "--output_dir DIR` and pass DIR, or switch injection off (--no_injection)"
        )
    check_kge_leak(kg, corpus.held_out_keys, trelm_args)
    if trelm_args.exclude_held_out_from_kg:
        kg = kg_without_facts(kg, corpus.held_out_keys)
    entity_ids = [str(m["id"]) for k in corpus.dataset["knowledge"] for m in k["entities"] if m["id"] is not None]
    relation_ids = sorted({t["r"] for k in corpus.dataset["knowledge"] for t in k["triplets"]})
    return KnowledgeAssets.build(entity_ids, relation_ids, kg=kg)


def add_kg_entity_rows(model, processor) -> None:
    """``--kg_entity_rows``: rows for the KG's entities with a KG vector and none yet, on the model and the processor
    (``extend_entity_vocabulary``), before saving."""
    assets = processor.knowledge_assets
    if not getattr(model.config, "use_injection", False) or assets.kg is None or assets.kg.entity_vectors is None:
        raise ValueError("--kg_entity_rows needs knowledge injection and a KG with KG embeddings (keplm train-kge)")
    extended = assets.with_entities(assets.kg.entity_ids)
    if extended is not assets:
        logger.info(
            "--kg_entity_rows: %d KG entities get an entity row (%d before)",
            extended.num_entities - assets.num_entities,
            assets.num_entities,
        )
        model.extend_entity_vocabulary(extended)
        processor.knowledge_assets = extended


def main(args: list[str] | None = None) -> dict:
    model_args, data_args, trelm_args, training_args = parse_args(
        (ModelArguments, PretrainingDataArguments, TrelmArguments, KeplmTrainingArguments), args
    )
    runtime.start_run(training_args, model_args.model_name_or_path)
    path = model_args.model_name_or_path
    with training_args.main_process_first(desc="corpus"):
        corpus = load_pretraining_corpus(
            data_args.corpus, data_args.held_out_fraction, seed=0, max_examples=data_args.max_train_samples
        )
    if training_args.should_save:
        corpus.save(training_args.output_dir)
    assets = build_assets(corpus, trelm_args)
    tokenizer = AutoTokenizer.from_pretrained(path, **model_args.hub_kwargs())
    processor = TrelmProcessor(tokenizer, assets)
    dataset, selection = corpus.dataset, {}
    if trelm_args.system == "trelm" and trelm_args.injection:
        with training_args.main_process_first(desc="importance"):
            # scored where training runs: on a GPU the pass over the corpus takes seconds, on 2 CPU cores minutes
            encoder = AutoModel.from_pretrained(path, **model_args.hub_kwargs()).to(training_args.device)
            dataset, selection = add_importance(
                dataset,
                encoder,
                tokenizer,
                trelm_args,
                data_args.max_seq_length,
                encoder_name=path,
                overwrite_cache=data_args.overwrite_cache,
            )
            del encoder
    with training_args.main_process_first(desc="features"):
        features = featurize(
            dataset,
            Featurizer(
                processor,
                "prepare_pretraining_features",
                with_knowledge=trelm_args.uses_knowledge,
                max_length=data_args.max_seq_length,
            ),
            data_args.preprocessing_num_workers,
            data_args.overwrite_cache,
            desc="Tokenising corpus",
        )
    model = TrelmForMaskedLM.from_base_pretrained(
        path, knowledge_assets=assets if trelm_args.uses_knowledge else None, **trelm_args.model_config()
    )
    runtime.check_max_seq_length(data_args.max_seq_length, model)
    if model.config.use_cka:
        model.set_cka_entities(*processor.entity_name_table())
    if model.config.use_routing:
        if model_args.lora_r is not None:
            raise ValueError(
                "--lora_r freezes the encoder while knowledge routing (3.3) trains its FFN paths: use one "
                "of them (--no_routing with --lora_r)"
            )
        model.enable_knowledge_routing()
    model = maybe_add_lora(model, model_args)
    collator = MaskedLMCollator(
        KeplmDataCollator.from_processor(processor, model),
        tokenizer.mask_token_id,
        len(tokenizer),
        data_args.mlm_probability,
        mask_knowledge_targets=trelm_args.uses_knowledge,
        special_token_ids=tuple(tokenizer.all_special_ids),
        seed=training_args.seed,
    )
    if trelm_args.export_encoder and model_args.lora_r is not None:
        raise ValueError("--export_encoder writes the whole pre-trained encoder: not with LoRA adapters (--lora_r)")
    clock = TrainingClock()
    callbacks, prober = [MemoryDecayCallback(), MaskingEpochCallback(collator)], None
    if data_args.probe != "none":
        probe_data = load_probe(
            data_args.probe, data_args.probe_data_dir, data_args.probe_relations, data_args.probe_max_facts_per_relation
        )
        # facts whose sentences only --max_train_samples dropped are neither seen nor held out: not probed
        facts = [f for f in probe_data["facts"] if fact_key(f) not in corpus.capped_keys]
        if len(facts) < len(probe_data["facts"]):
            logger.info(
                "probe: %d of %d facts left out, unseen only because of --max_train_samples",
                len(probe_data["facts"]) - len(facts),
                len(probe_data["facts"]),
            )
        prober = ProbeCallback(
            tokenizer,
            facts,
            corpus.seen_keys,
            data_args.probe_every_steps,
            data_args.probe_batch_size,
            clock,
            training_args.output_dir,
        )
        callbacks.append(prober)
    if data_args.max_train_seconds:
        callbacks.append(TimeBudgetCallback(data_args.max_train_seconds, clock))
    trainer = KeplmTrainer(
        model=model,
        args=training_args,
        data_collator=collator,
        processing_class=processor,
        train_dataset=features,
        callbacks=callbacks,
        card_data=KeplmModelCardData(
            base_model=path, dataset=corpus_name(data_args.corpus), command=["python", *sys.argv], card_facts=CARD_FACTS
        ),
    )
    results = runtime.flatten(
        {
            "corpus": {k: v for k, v in corpus.report.items() if isinstance(v, (int, float, dict))},
            "selection": selection,
            "features": feature_statistics(features) if trelm_args.uses_knowledge else {"examples": len(features)},
            "kge": getattr(model, "kge_coverage", {}),
        },
        "data",
    )
    trainer.save_metrics("data", results)
    if training_args.do_train:
        train_result = trainer.train(
            resume_from_checkpoint=runtime.resume_checkpoint(
                training_args.resume_from_checkpoint, training_args.output_dir
            )
        )
        if trelm_args.kg_entity_rows:
            add_kg_entity_rows(model, processor)
        trainer.save_model()
        if trelm_args.export_encoder and training_args.should_save:
            model.save_encoder(os.path.join(training_args.output_dir, "encoder"), tokenizer)
        curve = prober.curve if prober is not None else []
        metrics = dict(train_result.metrics, train_samples=len(features), train_seconds=round(clock.elapsed(), 2))
        if curve:  # a probe without seen (or held-out) facts has no P@1 for them: None, left out
            last = {
                "probe_p_at_1": curve[-1]["p_at_1"],
                "probe_seen_p_at_1": curve[-1]["seen"],
                "probe_held_out_p_at_1": curve[-1]["held_out"],
            }
            metrics.update({key: value for key, value in last.items() if value is not None})
        results.update(runtime.record(trainer, "train", metrics))
        trainer.save_state()
        trainer.create_model_card()
        if training_args.push_to_hub:
            trainer.push_to_hub()
    return results


if __name__ == "__main__":
    transformers.utils.logging.enable_explicit_format()
    main()
    runtime.end_distributed_run()
