"""run_scripts/run_pretraining.py end to end on a tiny model and a tiny T-REx corpus: TRELM and plain MLM, the P@1
curve over training time, the losses logged apart, checkpoints with the memory bank, resume after a kill."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, BertModel, pipeline

import keplm  # noqa: F401  (registers the Auto classes)
from keplm.data.pretraining import kg_without_facts, load_pretraining_corpus
from keplm.knowledge import KnowledgeGraph, load_kg
from keplm.training.state import load_state

from .conftest import tiny_encoder_config
from .run_args import QUIET_RUN
from .test_resume_and_ddp import _run as run_script
from .test_run_scripts import load_script

FACTS = [
    ("Q90", "paris", "Q142", "france", "paris is a city in [MASK] ."),
    ("Q64", "berlin", "Q183", "germany", "berlin is a city in [MASK] ."),
    ("Q84", "london", "Q21", "england", "london is the capital of [MASK] ."),
    ("Q1471", "seine", "Q142", "france", "the seine flows through [MASK] ."),
    ("Q60", "new york", "Q30", "usa", "new york is a city in [MASK] ."),
    ("Q999", "unknownia", "Q142", "france", "unknownia is a country in [MASK] ."),
]


@pytest.fixture(scope="module")
def tiny_pretraining(tmp_path_factory, tokenizer):
    """A LAMA-like folder (TREx/P17.jsonl.gz, relations.jsonl), a tiny BERT without MLM head, a KG with vectors."""
    root = tmp_path_factory.mktemp("pretraining")
    lama = root / "data" / "lama"
    (lama / "TREx").mkdir(parents=True)
    (lama / "relations").mkdir()
    with gzip.open(lama / "TREx" / "P17.jsonl.gz", "wt") as f:
        for sub_uri, sub, obj_uri, obj, masked in FACTS:
            evidences = [
                {"sub_surface": sub, "obj_surface": obj, "masked_sentence": masked},
                {"sub_surface": sub, "obj_surface": obj, "masked_sentence": f"john visited {masked}"},
            ]
            f.write(
                json.dumps(
                    {
                        "uuid": sub_uri,
                        "sub_uri": sub_uri,
                        "sub_label": sub,
                        "obj_uri": obj_uri,
                        "obj_label": obj,
                        "predicate_id": "P17",
                        "evidences": evidences,
                    }
                )
                + "\n"
            )
    (lama / "relations" / "relations.jsonl").write_text(
        json.dumps({"relation": "P17", "template": "[X] is located in [Y] .", "label": "country"}) + "\n"
    )
    torch.manual_seed(0)
    model_dir = root / "tiny-bert"
    BertModel(tiny_encoder_config(tokenizer), add_pooling_layer=False).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    # the KG embeddings must not have seen the held-out facts (run_pretraining checks): the KG without them
    held_out = load_pretraining_corpus([f"trex:{lama}"], 0.34, seed=0).held_out_keys
    kg = kg_without_facts(load_kg(f"trex:{lama}"), held_out)
    vectors = np.random.default_rng(0).normal(size=(kg.num_entities, 8)).astype(np.float32)
    kg.replace(entity_vectors=vectors).save_pretrained(root / "kg")
    leaky = load_kg(f"trex:{lama}")
    KnowledgeGraph(
        leaky.entity_ids,
        leaky.relation_ids,
        leaky.triples,
        entity_names=leaky.entity_names,
        entity_vectors=np.zeros((leaky.num_entities, 8), np.float32),
    ).save_pretrained(root / "leaky_kg")
    return {
        "model": str(model_dir),
        "lama": str(lama),
        "data": str(root / "data"),
        "kg": str(root / "kg"),
        "leaky_kg": str(root / "leaky_kg"),
    }


def pretraining_args(tiny, out, system="trelm", *extra) -> list[str]:
    return [
        "--model_name_or_path",
        tiny["model"],
        "--corpus",
        f"trex:{tiny['lama']}",
        "--system",
        system,
        "--held_out_fraction",
        "0.34",
        "--probe_data_dir",
        tiny["data"],
        "--output_dir",
        str(out),
        "--do_train",
        "--max_steps",
        "4",
        "--per_device_train_batch_size",
        "4",
        "--learning_rate",
        "1e-3",
        "--logging_steps",
        "1",
        "--probe_every_steps",
        "2",
        "--memory_window",
        "2",
        "--routing_interval",
        "2",
        "--routing_steps",
        "3",
        "--routing_fraction",
        "0.25",
        "--cka_num_negatives",
        "4",
        *QUIET_RUN,
        "--use_cpu",
        *(["--kg", tiny["kg"]] if system == "trelm" else []),
        *extra,
    ]


def test_trelm_pretraining_end_to_end(tiny_pretraining, tmp_path):
    out = tmp_path / "trelm"
    results = load_script("run_pretraining").main(
        pretraining_args(tiny_pretraining, out, "trelm", "--routing_batch_steps", "2")
    )
    curve = json.loads((out / "probe_curve.json").read_text())
    assert [p["step"] for p in curve] == [0, 2, 4]
    assert all(0.0 <= p["p_at_1"] <= 100.0 and p["metric_unit"] == "percent" for p in curve)  # P@1 in percent
    assert curve[-1]["train_seconds"] > 0
    assert curve[-1]["seen"] is not None and curve[-1]["held_out"] is not None
    from keplm.data.lama import read_fact_keys

    assert len(read_fact_keys(out / "held_out_facts.tsv")) == 2  # 34 % of six probe facts
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    losses = [h for h in history if "loss" in h]
    assert losses and all("mlm_loss" in h and "cka_loss" in h for h in losses)  # both losses apart (eq. 3)
    assert any("routing_targets" in h for h in history)  # re-routed at steps 0 and 2
    probes = [h for h in history if "probe_p_at_1" in h]
    assert [h["probe_p_at_1"] for h in probes] == [p["p_at_1"] for p in curve]
    assert not any("probe_metric_unit" in h for h in probes)  # the log history holds numbers only
    assert results["probe_p_at_1"] == curve[-1]["p_at_1"] and results["metric_unit"] == "percent"
    assert results["data_selection_mentions"] > 0 and results["data_features_examples_with_cka_target"] > 0
    model = AutoModelForMaskedLM.from_pretrained(out)
    assert model.config.use_routing and model.knowledge_assets.kg.entity_vectors is not None
    assert model.config.routing_batch_steps == 2  # attribution in passes of 2 + 1 of the 3 Riemann steps
    assert not [k for k in load_file(out / "model.safetensors") if ".route_" in k]
    assert len(pipeline("fill-mask", model=str(out), top_k=2)("paris is a city in [MASK] .")) == 2


def test_kg_entity_rows_give_kg_only_entities_their_vectors(tiny_pretraining, tmp_path):
    """``--kg_entity_rows``: the saved vocabulary is the corpus mentions' then every other KG entity, and the saved
    injection table holds each new entity's KG vector (TRELM 3.1), so an entity found only in the KG is injected."""
    plain, rows = tmp_path / "plain", tmp_path / "rows"
    load_script("run_pretraining").main(pretraining_args(tiny_pretraining, plain, "trelm"))
    load_script("run_pretraining").main(pretraining_args(tiny_pretraining, rows, "trelm", "--kg_entity_rows"))
    before = AutoModelForMaskedLM.from_pretrained(plain)
    after = AutoModelForMaskedLM.from_pretrained(rows)
    kg = after.knowledge_assets.kg
    old, vocab = before.knowledge_assets.entity_vocab, after.knowledge_assets.entity_vocab
    assert vocab[: len(old)] == old and set(vocab[1:]) == set(kg.entity_ids) and len(old) < len(vocab)
    assert after.config.entity_vocab_size == len(vocab)
    new = vocab[-1]
    assert torch.equal(
        after.trelm.injection.kge[len(vocab) - 1], torch.from_numpy(kg.entity_vectors[kg.entity_index(new)])
    )
    # training is unchanged (the rows are added after it; no saved weight is per entity): the same weights
    weights = after.state_dict()
    for key, value in before.state_dict().items():
        assert torch.allclose(value, weights[key], atol=1e-5), key
    with pytest.raises(ValueError, match="--kg_entity_rows needs knowledge injection"):
        load_script("run_pretraining").main(
            pretraining_args(tiny_pretraining, tmp_path / "x", "trelm", "--no_injection", "--kg_entity_rows")
        )


def test_plain_mlm_baseline_needs_no_kg(tiny_pretraining, tmp_path):
    out = tmp_path / "mlm"
    load_script("run_pretraining").main(pretraining_args(tiny_pretraining, out, "mlm"))
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert [h for h in history if "loss" in h] and not any("cka_loss" in h for h in history)
    config = json.loads((out / "config.json").read_text())
    assert not any(config[k] for k in ("use_injection", "use_cka", "use_memory_bank", "use_routing"))


def test_trelm_without_kg_embeddings_is_a_clear_error(tiny_pretraining, tmp_path):
    args = pretraining_args(tiny_pretraining, tmp_path, "trelm")
    args[args.index("--kg") + 1] = f"trex:{tiny_pretraining['lama']}"  # a KG without vectors
    with pytest.raises(ValueError, match="has no KG embeddings: train them with `keplm train-kge"):
        load_script("run_pretraining").main(args)


def _run(args, kill_at=None):
    """run_pretraining.main in a fresh process (test_resume_and_ddp's killable runner); SIGKILLed after ``kill_at``."""
    run_script(
        args,
        {"KEPLM_TEST_KILL_AT": str(kill_at)} if kill_at else None,
        expect_kill=bool(kill_at),
        script="run_pretraining",
    )


@pytest.mark.slow
def test_resume_after_a_kill_restores_the_memory_bank(tiny_pretraining, tmp_path):
    """A TRELM run SIGKILLed after step 5 and resumed from checkpoint-4 ends with the weights and the memory bank of
    the uninterrupted run: the bank (training state, not in the weights) and the routed neurons are in the
    checkpoint."""

    def args(out, *extra):
        base = pretraining_args(tiny_pretraining, out, "trelm", "--probe_every_steps", "0", *extra)
        base[base.index("--max_steps") + 1] = "6"
        base[base.index("--save_strategy") + 1] = "steps"
        return [*base, "--save_steps", "2", "--routing_interval", "3"]

    _run(args(tmp_path / "whole"))
    _run(args(tmp_path / "killed"), kill_at=5)
    assert (tmp_path / "killed" / "checkpoint-4").is_dir() and not (tmp_path / "killed" / "checkpoint-6").exists()
    state = load_state(tmp_path / "killed" / "checkpoint-4", "model_training_state")
    assert state["memory_bank"]["seen"].any() and len(state["route_indices"]) == 2
    _run(args(tmp_path / "killed", "--resume_from_checkpoint", str(tmp_path / "killed" / "checkpoint-4")))
    whole, resumed = (load_file(tmp_path / run / "model.safetensors") for run in ("whole", "killed"))
    for name, tensor in whole.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-5, atol=1e-5, msg=name)
    banks = [load_state(tmp_path / run / "checkpoint-6", "model_training_state") for run in ("whole", "killed")]
    for key in ("local", "global_sum", "global_count", "seen"):
        torch.testing.assert_close(banks[1]["memory_bank"][key], banks[0]["memory_bank"][key], rtol=1e-5, atol=1e-5)
    for a, b in zip(banks[0]["route_indices"], banks[1]["route_indices"]):
        assert torch.equal(a, b)
    # a checkpoint without the model's training state is refused, not resumed with an empty bank
    broken = tmp_path / "broken" / "checkpoint-4"
    shutil.copytree(tmp_path / "killed" / "checkpoint-4", broken)
    for path in broken.glob("model_training_state*"):
        path.unlink()
    with pytest.raises(FileNotFoundError, match="no model_training_state"):
        load_script("run_pretraining").main(args(tmp_path / "broken", "--resume_from_checkpoint", str(broken)))


def test_trelm_pretraining_with_lora(tiny_pretraining, tmp_path):
    """--lora_r: adapters on the encoder, injection and head trained fully, memory bank and CKA still on; an adapter
    folder with the KG and its vectors. LoRA and routing both decide what trains: together they are an error."""
    out = tmp_path / "lora"
    results = load_script("run_pretraining").main(
        pretraining_args(tiny_pretraining, out, "trelm", "--no_routing", "--lora_r", "4")
    )
    assert results["train_samples"] == 8, sorted(results)
    assert (out / "adapter_config.json").is_file()
    assert (out / "knowledge" / "kg" / "entity_vectors.safetensors").is_file()
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert all("cka_loss" in h for h in history if "loss" in h)
    with pytest.raises(ValueError, match="--lora_r freezes the encoder while knowledge routing"):
        load_script("run_pretraining").main(
            pretraining_args(tiny_pretraining, tmp_path / "both", "trelm", "--lora_r", "4")
        )


def test_kg_embeddings_trained_on_held_out_facts_are_refused(tiny_pretraining, tmp_path):
    """Injection with KG embeddings whose graph held the held-out facts would leak them: a named error pointing at
    `keplm train-kge --exclude_facts`, whose output then passes; --allow_kge_leak accepts the leak knowingly."""
    args = pretraining_args(tiny_pretraining, tmp_path / "leak", "trelm")
    args[args.index("--kg") + 1] = tiny_pretraining["leaky_kg"]
    with pytest.raises(ValueError, match=r"trained on a graph holding 2 of the 2 held-out facts.*--exclude_facts"):
        load_script("run_pretraining").main(args)
    held_out = tmp_path / "leak" / "held_out_facts.tsv"
    assert held_out.is_file()  # written before the check: the file train-kge needs
    from keplm.cli import main as keplm_cli

    assert (
        keplm_cli(
            [
                "train-kge",
                "--kg",
                f"pretrained:{tiny_pretraining['leaky_kg']}",
                "--output_dir",
                str(tmp_path / "kge"),
                "--dim",
                "8",
                "--epochs",
                "2",
                "--batch_size",
                "4",
                "--valid_fraction",
                "0",
                "--exclude_facts",
                str(held_out),
                "--no_progress",
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "kge" / "kge_report.json").read_text())
    assert report["excluded_facts"]["triples_removed"] == 2 and report["triples"]["total"] == len(FACTS) - 2
    args[args.index("--kg") + 1] = str(tmp_path / "kge")
    args[args.index("--output_dir") + 1] = str(tmp_path / "clean")
    assert load_script("run_pretraining").main(args)["train_samples"] > 0
    args[args.index("--kg") + 1] = tiny_pretraining["leaky_kg"]
    args[args.index("--output_dir") + 1] = str(tmp_path / "accepted")
    assert load_script("run_pretraining").main([*args, "--allow_kge_leak"])["train_samples"] > 0
