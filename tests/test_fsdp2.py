"""FSDP2 for every keplm model (issue 27, items 2 and 6), on CPU with ``fully_shard`` + gloo (accelerate turns FSDP
on only on accelerators, so the test shards by hand with :func:`keplm.training.fsdp.shard_model`).

Two processes, each a half of a fixed global batch, 3 Adam steps: KALA (relational and pointwise retrieval) and
Roof follow one process over the whole batch (losses per step, final weights); TRELM follows two-process DDP (its
negative sampler draws per process, so one process over the whole batch draws other negatives). The full state dict
saved by rank 0 with ``save_pretrained`` (``knowledge/`` assets, safetensors) loads in one process and answers as
the one-process model. The Trainer refuses the parameter-group optimizers FSDP2 and DeepSpeed cannot run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from keplm import (
    KalaForTokenClassification,
    KalaProcessor,
    RoofTransformerForSequenceClassification,
    TrelmProcessor,
)
from keplm.data.collator import KeplmDataCollator
from keplm.data.masking import MaskedLMCollator

from .distributed_helpers import reported, spawn_two
from .test_kala_model import TEXTS, batch_of, make_model
from .test_roof_model import _batch, _config, _processor
from .test_trelm import ANNOTATION, TEXT, features, with_kge
from .test_trelm import make_model as make_trelm

OTHER = "mary visited paris in france ."  # TEXT's mentions at TEXT's offsets

STEPS, LR = 3, 1e-3
# Adam's step lr·m/(√v + eps) turns a gradient difference δ into a step difference of up to lr·δ/eps where the
# gradient is near 0 (attention key biases, rarely used weights): summing in another order (2 x half batch vs the
# whole batch, any thread count) leaves δ ~ 1e-8, so eps = 1e-4 keeps that at ~1e-7 per step; torch's 1e-8 would
# make it ~1e-3. Losses and weights are O(1) float32: their rounding differences stay far below 1e-5.
EPS = 1e-4
ATOL, RTOL = 1e-5, 1e-4


def _adam(model):
    return torch.optim.Adam(model.parameters(), lr=LR, eps=EPS)


def _train(model, batch, reduce=None) -> list[float]:
    """STEPS Adam steps on one batch, the loss of each (averaged over processes by ``reduce``)."""
    optimizer, losses = _adam(model), []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        losses.append(reduce(loss.detach()) if reduce else float(loss.detach()))
    return losses


def _mean_over_processes(value: torch.Tensor) -> float:
    value = value.clone()
    dist.all_reduce(value)
    return float(value) / dist.get_world_size()


def _arrays(state: dict) -> dict:
    """Tensors as numpy arrays, which the queue pickles by value (a tensor would travel as a shared-memory handle
    that dies with the worker)."""
    return {key: value.detach().cpu().numpy().copy() for key, value in state.items()}


def _worker(rank: int, port: int, cases: list[dict], queue) -> None:
    with reported(rank, queue, port):
        from torch.nn.parallel import DistributedDataParallel

        from keplm.training.fsdp import full_state_dict, shard_model
        from keplm.training.sharded_checkpoint import load_sharded, save_sharded

        results = {}
        for case in cases:
            cls, batch = case["cls"], case["halves"][rank]
            result = {}
            if case["ddp"]:
                torch.manual_seed(1)  # the same draws (TRELM's negatives) in the DDP and the FSDP run
                ddp = DistributedDataParallel(cls.from_pretrained(case["init"]).train())
                result["ddp_losses"] = _train(ddp, batch, _mean_over_processes)
                result["ddp_state"] = _arrays(ddp.module.state_dict())
            torch.manual_seed(1)
            model = shard_model(cls.from_pretrained(case["init"]).train())
            result["losses"] = _train(model, batch, _mean_over_processes)
            state = full_state_dict(model)  # every process takes part; rank 0 gets the whole model
            if rank == 0:
                model.save_pretrained(case["saved"], state_dict=state)
                result["state"] = _arrays(state)
            # the sharded checkpoint: each process writes its rows, a new sharded model reads them back
            save_sharded(model, case["sharded"])
            fresh = shard_model(cls.from_pretrained(case["init"]))
            load_sharded(fresh, case["sharded"])
            reloaded = full_state_dict(fresh)
            if rank == 0:
                result["reloaded"] = all(torch.equal(reloaded[key], value) for key, value in state.items())
            results[case["name"]] = result
        queue.put((rank, results))


def _halves_and_whole(collate, rows):
    return [collate(rows[:2]), collate(rows[2:])], collate(rows)


def _with_labels(batch, labels: torch.Tensor):
    """``labels`` (rows x L) on the first L tokens of every row, -100 on the rest: each half holds as many labelled
    tokens as the other, so the mean of the two processes' token-averaged losses is the whole batch's."""
    padded = torch.full(batch["input_ids"].shape, -100)
    padded[:, : labels.shape[1]] = labels
    return {**batch, "labels": padded}


def _kala_case(tokenizer, assets, mode):
    model = make_model(KalaForTokenClassification, tokenizer, assets, mode, num_labels=3, knowledge_dropout=0.0)
    processor = KalaProcessor(tokenizer, assets)
    texts = [*TEXTS, "john lives in berlin ."]
    halves, whole = _halves_and_whole(lambda rows: batch_of(processor, rows), texts)
    length = min(int(b["attention_mask"].sum(1).min()) for b in halves)
    labels = torch.randint(3, (len(texts), length), generator=torch.Generator().manual_seed(0))
    return (
        model,
        [_with_labels(halves[0], labels[:2]), _with_labels(halves[1], labels[2:])],
        _with_labels(whole, labels),
    )


def _roof_case(tokenizer, kg):
    torch.manual_seed(0)
    model = RoofTransformerForSequenceClassification(_config(tokenizer, fusion="transformer", num_labels=2))
    processor = _processor(tokenizer, kg)
    model.set_knowledge_assets(processor.knowledge_assets)
    pairs = [
        ("paris is a city in france .", "the seine flows through paris ."),
        ("john visited berlin .", "berlin is in germany ."),
        ("mary works for acme bank .", "who works ?"),
        ("london is in england .", "where is london ?"),
    ]
    labels = (0, 1, 1, 0)
    halves = [_batch(processor, model, pairs[:2], labels[:2]), _batch(processor, model, pairs[2:], labels[2:])]
    return model, halves, _batch(processor, model, pairs, labels)


def _trelm_case(tokenizer, kg):
    assets = with_kge(kg)
    model = make_trelm(tokenizer, assets)
    processor = TrelmProcessor(tokenizer, assets)
    collator = MaskedLMCollator(
        KeplmDataCollator.from_processor(processor), tokenizer.mask_token_id, len(tokenizer), mlm_probability=0.5
    )
    halves = []
    for seed, texts in ((0, [TEXT, OTHER]), (1, [OTHER, OTHER])):  # same mention offsets, other words and masks
        out = features(processor, texts=texts, annotations=[ANNOTATION] * 2)
        torch.manual_seed(seed)
        halves.append(collator([{k: v[i] for k, v in out.items()} for i in range(2)]))
    probe = make_trelm(tokenizer, assets).train()  # a copy: a training forward moves the memory bank
    assert all(probe(**half).cka_loss is not None for half in halves)  # both losses of eq. 3 train
    return model, halves, None


def _tensors(arrays: dict) -> dict:
    return {key: torch.from_numpy(value) for key, value in arrays.items()}


def engine_cases(tmp_path, tokenizer, kg, assets, tag: str) -> tuple[list[dict], dict]:
    """The four models (KALA relational and pointwise, Roof, TRELM) saved as each run's start, their halves of the
    batch, and the whole batch of the one-process reference (None for TRELM, which follows two-process DDP)."""
    cases, singles = [], {}
    built = {
        "kala_relational": _kala_case(tokenizer, assets, "relational"),
        "kala_pointwise": _kala_case(tokenizer, assets, "pointwise"),
        "roof": _roof_case(tokenizer, kg),
        "trelm": _trelm_case(tokenizer, kg),
    }
    for name, (model, halves, whole) in built.items():
        init, saved = tmp_path / f"{name}_init", tmp_path / f"{name}_{tag}"
        model.save_pretrained(init)
        cases.append(
            {
                "name": name,
                "cls": type(model),
                "init": str(init),
                "saved": str(saved),
                "halves": halves,
                "ddp": whole is None,
                "sharded": str(tmp_path / f"{name}_{tag}_sharded"),
            }
        )
        singles[name] = whole
    return cases, singles


def check_against_references(cases: list[dict], results: dict, singles: dict) -> None:
    """Each engine run's losses and final weights equal the one-process run's (DDP's for TRELM), and rank 0's save
    (safetensors with the knowledge assets) loads in one process and answers as the reference."""
    assert all(isinstance(r, dict) for r in results.values()), results
    torch.set_num_threads(1)
    for case in cases:
        name, got = case["name"], results[0][case["name"]]
        state = _tensors(got["state"])
        assert results[1][name]["losses"] == got["losses"], name  # both processes log the same mean loss
        whole = singles[name]
        if whole is None:  # TRELM: against two-process DDP over the same halves
            expected_losses, expected_state = got["ddp_losses"], _tensors(got["ddp_state"])
            reference = None
        else:
            reference = case["cls"].from_pretrained(case["init"]).train()
            expected_losses = _train(reference, whole)
            expected_state = reference.state_dict()
        torch.testing.assert_close(
            torch.tensor(got["losses"]),
            torch.tensor(expected_losses),
            atol=ATOL,
            rtol=RTOL,
            msg=lambda m, n=name: f"{n} losses: {m}",
        )
        assert len(set(got["losses"])) == STEPS, f"{name}: the loss must move over the steps"
        assert set(state) == set(expected_state), name
        for key, value in expected_state.items():
            torch.testing.assert_close(
                state[key], value, atol=ATOL, rtol=RTOL, msg=lambda m, n=name, k=key: f"{n} {k}: {m}"
            )

        saved = os.listdir(case["saved"])
        assert "model.safetensors" in saved and not any(f.endswith((".bin", ".pt", ".pkl")) for f in saved), saved
        loaded = case["cls"].from_pretrained(case["saved"]).eval()
        assert loaded.knowledge_assets is not None, name
        if reference is not None:
            with torch.no_grad():
                expected, actual = reference.eval()(**whole).logits, loaded(**whole).logits
            torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL)
        else:
            for key, value in loaded.state_dict().items():
                torch.testing.assert_close(value, expected_state[key], atol=ATOL, rtol=RTOL)


@pytest.mark.slow
def test_fsdp2_follows_one_process_and_ddp_and_its_full_and_sharded_state_dicts_load(tmp_path, tokenizer, kg, assets):
    """Besides the checks of ``check_against_references``: the sharded checkpoint (each process's rows in its own
    safetensors file, no pickle) loads back into a model sharded the same way, and consolidates in one process into
    an ordinary checkpoint with the trained weights and the knowledge assets."""
    from keplm.training.sharded_checkpoint import consolidate_sharded, read_index

    cases, singles = engine_cases(tmp_path, tokenizer, kg, assets, "fsdp")
    results = dict(spawn_two(_worker, cases))
    check_against_references(cases, results, singles)
    for case in cases:
        name, sharded = case["name"], Path(case["sharded"])
        assert results[0][name]["reloaded"], name
        files = sorted(p.name for p in sharded.iterdir())
        assert {
            "model-shard-00000-of-00002.safetensors",
            "model-shard-00001-of-00002.safetensors",
            "sharded_index.json",
            "config.json",
            "knowledge",
        } <= set(files), files
        assert not any(f.endswith((".bin", ".pt", ".pkl", ".distcp")) for f in files), files
        index = read_index(sharded)
        split = [entry["shards"] for entry in index["tensors"].values() if "shards" in entry]
        assert split and all(len(shards) == 2 for shards in split), name
        consolidated = consolidate_sharded(sharded, tmp_path / f"{name}_consolidated")
        loaded = case["cls"].from_pretrained(tmp_path / f"{name}_consolidated")
        assert loaded.knowledge_assets is not None and isinstance(consolidated, case["cls"])
        for key, value in _tensors(results[0][name]["state"]).items():
            assert torch.equal(loaded.state_dict()[key], value), f"{name} {key}"


def _trainer(tmp_path, model, engine: str, **options):
    """A KeplmTrainer on CPU with ``engine``'s flag forced on (accelerate never turns FSDP on without accelerators,
    so the real flag cannot be true here)."""
    from transformers import TrainingArguments

    from keplm.training.trainer import KeplmTrainer

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    trainer = KeplmTrainer(model=model, args=args, parameter_group_options=options)
    trainer.is_fsdp_enabled, trainer.is_deepspeed_enabled = engine == "FSDP", engine == "DeepSpeed"
    return trainer


@pytest.mark.parametrize("engine", ["FSDP", "DeepSpeed"])
@pytest.mark.parametrize(
    "sparse, options, group",
    [
        (
            False,
            {"entity_memory_optimizer": "rowwise_adagrad"},
            "'entity_memory' trains with an optimizer of its own ('rowwise_adagrad')",
        ),
        (True, {}, "'entity_memory' has sparse gradients and an optimizer of its own ('sparse_adam')"),
        (False, {"knowledge_optimizer": "adamw"}, "'knowledge' trains with an optimizer of its own ('adamw')"),
    ],
)
def test_trainer_refuses_group_optimizers_under_fsdp_and_deepspeed(
    tmp_path, tokenizer, assets, engine, sparse, options, group
):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3, sparse_entity_memory=sparse)
    trainer = _trainer(tmp_path, model, engine, **options)
    with pytest.raises(ValueError) as error:
        trainer.create_optimizer()
    message = str(error.value)
    assert f"parameter group {group} cannot train under {engine}" in message
    assert ("DTensor" if engine == "FSDP" else "one optimizer of its own") in message
    assert "Trainer's optimizer" in message
    for key, value in options.items():  # the run options that chose it, to change
        assert f"{key}={value!r}" in message
    assert ("kala.entity_memory.embeddings.weight" in message) == sparse


@pytest.mark.parametrize("engine", ["FSDP", "DeepSpeed"])
def test_groups_of_the_trainers_optimizer_pass_under_fsdp_and_deepspeed(tmp_path, tokenizer, assets, engine):
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    optimizer = _trainer(tmp_path, model, engine, knowledge_learning_rate=5e-2).create_optimizer()
    assert isinstance(optimizer, torch.optim.AdamW)  # one optimizer, the knowledge modules in a group at 5e-2
    assert 5e-2 in {group["lr"] for group in optimizer.param_groups}


def test_shard_model_refuses_sparse_tables_and_a_missing_process_group(tokenizer, assets):
    from keplm.training.fsdp import shard_model

    sparse = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3, sparse_entity_memory=True)
    with pytest.raises(ValueError, match=r"sparse gradients \(kala\.entity_memory\.embeddings\)"):
        shard_model(sparse)
    with pytest.raises(ValueError, match="initialised torch.distributed process group"):
        shard_model(make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3))


def test_accelerates_fsdp2_auto_wrap_shards_the_blocks_shard_model_shards(tokenizer, kg, assets):
    """Through accelerate on accelerators (``--fsdp_version 2``, transformer-based wrap), the units FSDP2 shards come
    from the model's ``_no_split_modules``, which transformers gathers from the encoders: every block that
    ``shard_model`` shards (encoder layers, KALA's extra layer, Roof's fusion layers) is one of them, so a keplm model
    is sharded per layer there too and not as one root unit (the policy is built on CPU; applying it needs GPUs)."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy

    from keplm.training.fsdp import _blocks

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap")
    models = {
        "kala": make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3, num_extra_layers=1),
        "roof": _roof_case(tokenizer, kg)[0],
        "trelm": make_trelm(tokenizer, with_kge(kg)),
    }
    for name, model in models.items():
        policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
        wrapped = {id(module) for module in model.modules() if policy(module)}
        blocks = _blocks(model)
        assert len(blocks) >= 2, name
        assert {id(block) for block in blocks} <= wrapped, name


def test_knowledge_routing_is_refused_under_fsdp_and_runs_under_deepspeed(tmp_path, tokenizer, kg):
    """TRELM's routing runs the inner encoder between steps (attribution) and folds deltas into the weights: under
    FSDP2 that was a DTensor error deep in torch ("got mixed torch.Tensor and DTensor"). Refused by name instead,
    by the Trainer and by shard_model (before any process group is needed); without routing TRELM passes. DeepSpeed
    runs it (``tests/test_deepspeed.py``)."""
    from keplm.training.fsdp import shard_model

    model = make_trelm(tokenizer, with_kge(kg))
    model.enable_knowledge_routing()
    with pytest.raises(ValueError, match=r"cannot train under FSDP: knowledge routing .* --no_routing"):
        _trainer(tmp_path, model, "FSDP").create_optimizer()
    with pytest.raises(ValueError, match="FSDP2 cannot shard this TrelmForMaskedLM: knowledge routing"):
        shard_model(model)
    _trainer(tmp_path, make_trelm(tokenizer, with_kge(kg)), "FSDP").create_optimizer()
    _trainer(tmp_path, model, "DeepSpeed").create_optimizer()


def test_a_folder_that_is_not_a_sharded_checkpoint_is_a_clear_error(tmp_path):
    from keplm.training.sharded_checkpoint import INDEX, read_index

    with pytest.raises(FileNotFoundError, match="is not a keplm sharded checkpoint: no sharded_index.json"):
        read_index(tmp_path)
    (tmp_path / INDEX).write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="has format 'other'; this keplm reads 'keplm-sharded-1'"):
        read_index(tmp_path)
