"""DeepSpeed ZeRO-1/2/3 for every keplm model (issue 27, items 3 and 6), on CPU with gloo.

accelerate sets DeepSpeed up only on accelerators (on a machine without one, ``keplm.training.engines.check_engine``
refuses the Trainer's ``--deepspeed`` rather than running plain DDP), so these tests drive ``deepspeed.initialize``
as the Trainer does on GPUs: the model is built while the run's DeepSpeed config is live (transformers'
``HfDeepSpeedConfig``; under ZeRO-3 every parameter is partitioned as it is created), a torch Adam is DeepSpeed's
client optimizer, two processes take halves of a fixed batch for 3 steps. KALA (both retrieval modes) and Roof follow
one process over the whole batch, TRELM follows two-process DDP (``tests/test_fsdp2.check_against_references``); the
whole weights gathered from the engine save as safetensors with ``knowledge/`` and load in one process.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from keplm import KalaForTokenClassification, RoofTransformerForSequenceClassification, TrelmForMaskedLM
from keplm.modeling.zero3 import full_state_dict, is_partitioned

from .distributed_helpers import reported, spawn_two
from .run_args import FOUR_STEPS_SAVED_EVERY_2
from .test_fsdp2 import (
    EPS,
    LR,
    STEPS,
    _arrays,
    _mean_over_processes,
    _train,
    _trelm_case,
    check_against_references,
    engine_cases,
)

deepspeed = pytest.importorskip("deepspeed", reason="DeepSpeed is installed by scripts/setup.sh")


def ds_config(stage: int) -> dict:
    """A 2 x 2-example ZeRO config whose optimizer step is torch's Adam, unclipped, as the references train."""
    return {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 4,
        "gradient_clipping": 0.0,  # DeepSpeed clips at 1.0 by default; the references do not clip
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**6,
    }


def _start(rank: int, port: int) -> None:
    """This process's half of a 2-process gloo group."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2"
    )
    deepspeed.init_distributed("gloo", verbose=False)
    torch.set_num_threads(1)


def live_config(stage: int):
    """The run's DeepSpeed config as the Trainer makes it live: while the returned object lives, transformers builds
    models for it (under ZeRO-3, partitioned)."""
    from transformers.integrations import HfDeepSpeedConfig

    return HfDeepSpeedConfig(ds_config(stage))


def _train_engine(engine, batch) -> list[float]:
    losses = []
    for _ in range(STEPS):
        loss = engine(**batch).loss
        engine.backward(loss)
        engine.step()
        losses.append(_mean_over_processes(loss.detach()))
    return losses


def _worker(rank: int, port: int, cases: list[dict], stage: int, queue) -> None:
    with reported(rank, queue):
        from torch.nn.parallel import DistributedDataParallel

        _start(rank, port)
        results = {case["name"]: {} for case in cases}
        for case in cases:  # the DDP references first: under a live ZeRO-3 config they would be built partitioned
            if case["ddp"]:
                torch.manual_seed(1)  # the same draws (TRELM's negatives) in the DDP and the DeepSpeed run
                ddp = DistributedDataParallel(case["cls"].from_pretrained(case["init"]).train())
                results[case["name"]]["ddp_losses"] = _train(ddp, case["halves"][rank], _mean_over_processes)
                results[case["name"]]["ddp_state"] = _arrays(ddp.module.state_dict())
        config = live_config(stage)  # noqa: F841  (read by from_pretrained while it lives)
        for case in cases:
            cls, batch, result = case["cls"], case["halves"][rank], results[case["name"]]
            torch.manual_seed(1)
            model = cls.from_pretrained(case["init"]).train()
            result["partitioned"] = is_partitioned(model.parameters())
            engine, *_ = deepspeed.initialize(
                model=model, optimizer=torch.optim.Adam(model.parameters(), lr=LR, eps=EPS), config=ds_config(stage)
            )
            result["losses"] = _train_engine(engine, batch)
            state = full_state_dict(engine.module)  # every process takes part
            if rank == 0:
                engine.module.save_pretrained(case["saved"], state_dict=state)
                result["state"] = _arrays(state)
        queue.put((rank, results))


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stages_follow_one_process_and_ddp_and_save_safetensors(tmp_path, tokenizer, kg, assets, stage):
    cases, singles = engine_cases(tmp_path, tokenizer, kg, assets, f"zero{stage}")
    results = dict(spawn_two(_worker, cases, stage))
    assert all(isinstance(r, dict) for r in results.values()), results
    for case in cases:  # ZeRO-3 partitions the parameters while from_pretrained builds the model
        assert results[0][case["name"]]["partitioned"] == (stage == 3), case["name"]
    check_against_references(cases, results, singles)


NEW_MODELS = {  # a new model around the tiny encoder, as the run scripts build one: (class, options)
    "kala": (KalaForTokenClassification, {"num_labels": 3, "num_extra_layers": 1}),
    "roof": (
        RoofTransformerForSequenceClassification,
        {"num_labels": 2, "fusion": "transformer", "fusion_layers": 1, "max_knowledge_length": 32},
    ),
    "trelm": (TrelmForMaskedLM, {}),
}


def _build_worker(rank: int, port: int, encoder: str, assets, queue) -> None:
    with reported(rank, queue):
        _start(rank, port)
        config = live_config(3)  # noqa: F841
        built = {}
        for name, (cls, options) in NEW_MODELS.items():
            model = cls.from_base_pretrained(encoder, knowledge_assets=assets, **options)
            built[name] = {
                "partitioned": all(p.numel() == 0 for p in model.parameters()),
                "state": _arrays(full_state_dict(model)),
            }
        queue.put((rank, built))


@pytest.mark.slow
def test_zero3_builds_new_models_around_an_encoder_partitioned_with_its_weights(tiny, assets):
    """``from_base_pretrained`` under ZeRO-3 (the run scripts' path for a new model): every parameter is partitioned
    from the start, yet the encoders hold the checkpoint's weights, Roof's fusion layer copies the encoder's last
    layer, KALA's extra layer and the other new modules are initialised (the null entity row zero), and both processes
    see the same model. Before, KALA's initialisation indexed a partitioned embedding (IndexError)."""
    results = dict(spawn_two(_build_worker, tiny["model"], assets))
    assert all(isinstance(r, dict) for r in results.values()), results
    torch.set_num_threads(1)
    for name, (cls, options) in NEW_MODELS.items():
        got = {key: torch.from_numpy(value) for key, value in results[0][name]["state"].items()}
        assert results[0][name]["partitioned"] and results[1][name]["partitioned"], name
        for key, value in results[1][name]["state"].items():
            assert torch.equal(got[key], torch.from_numpy(value)), f"{name} {key}: the processes differ"
        plain = cls.from_base_pretrained(tiny["model"], knowledge_assets=assets, **options).state_dict()
        assert set(got) == set(plain), name
        encoder_keys = [key for key in plain if ".encoder." in key or key.startswith("encoder.")]
        assert len(encoder_keys) > 20, name
        for key in encoder_keys:
            assert torch.equal(got[key], plain[key]), f"{name} {key}: not the checkpoint's weight"
        for key, value in got.items():
            assert torch.isfinite(value).all(), f"{name} {key}"
            initialised = value.dtype.is_floating_point and value.numel() > 1 and key.endswith("weight")
            if initialised and "LayerNorm" not in key:
                assert value.std() > 0, f"{name} {key}: left uninitialised"
    kala = {key: torch.from_numpy(v) for key, v in results[0]["kala"]["state"].items()}
    assert not kala["kala.entity_memory.embeddings.weight"][0].any()  # the null entity
    roof = {key: torch.from_numpy(v) for key, v in results[0]["roof"]["state"].items()}
    fusion = [key for key in roof if ".fusion.layers.0." in key]
    last = max(int(key.split(".")[4]) for key in roof if key.startswith("roof.encoder.encoder.layer."))
    assert fusion and last > 0
    for key in fusion:  # the roof starts as a copy of the text encoder's last layer
        source = key.replace("fusion.layers.0.", f"encoder.encoder.layer.{last}.")
        assert torch.equal(roof[key], roof[source]), key


@pytest.mark.parametrize(
    "zero, level",
    [({"stage": 3}, "INFO"), ({"stage": 3, "stage3_gather_16bit_weights_on_model_save": False}, "WARNING")],
)
def test_zero3_runs_save_whole_weights_as_safetensors(tmp_path, caplog, zero, level):
    """The Trainer writes a ZeRO-3 model as safetensors only with ``stage3_gather_16bit_weights_on_model_save``;
    without it, its final folder holds DeepSpeed's pickled shards and no loadable model. keplm's training arguments
    turn it on (saying so; louder when the config had turned it off), in the config DeepSpeed reads."""
    from keplm.training.arguments import KeplmTrainingArguments

    with caplog.at_level("INFO", logger="keplm.training.arguments"):
        args = KeplmTrainingArguments(
            output_dir=str(tmp_path),
            report_to="none",
            deepspeed={"zero_optimization": dict(zero), "train_micro_batch_size_per_gpu": 2},
        )
    key = "stage3_gather_16bit_weights_on_model_save"
    assert args.deepspeed_plugin.deepspeed_config["zero_optimization"][key] is True
    assert [r.levelname for r in caplog.records if key in r.getMessage()] == [level]
    two = KeplmTrainingArguments(
        output_dir=str(tmp_path), report_to="none", deepspeed={"zero_optimization": {"stage": 2}}
    )
    assert key not in two.hf_deepspeed_config.config["zero_optimization"]  # only ZeRO-3 shards the weights


ROUTED_STEPS, SGD_LR = 4, 0.1


def _routed_steps(model, run, backward, step, optimizer, batch) -> list[float]:
    """ROUTED_STEPS steps with TRELM's per-step routing hook (as the KeplmTrainer calls it): routing every 2 steps
    re-routes at step 2, folding the deltas learned in steps 0-1 into the weights."""
    losses = []
    for global_step in range(ROUTED_STEPS):
        model.before_training_step(batch, SimpleNamespace(global_step=global_step), optimizer)
        loss = run(**batch).loss
        backward(loss)
        step()
        losses.append(_mean_over_processes(loss.detach()))
    return losses


def _routed(cls, init: str):
    model = cls.from_pretrained(init).train()
    model.config.routing_interval = 2
    model.enable_knowledge_routing()
    return model, [p for p in model.parameters() if p.requires_grad]


def _routing_worker(rank: int, port: int, init: str, cls, halves, stage: int, queue) -> None:
    with reported(rank, queue):
        from deepspeed.utils import safe_get_full_optimizer_state
        from torch.nn.parallel import DistributedDataParallel

        _start(rank, port)
        batch, result = halves[rank], {}
        torch.manual_seed(1)
        model, trained = _routed(cls, init)
        ddp, sgd = DistributedDataParallel(model), torch.optim.SGD(trained, lr=SGD_LR)

        def ddp_step():
            sgd.step()
            sgd.zero_grad()

        result["ddp_losses"] = _routed_steps(model, ddp, torch.Tensor.backward, ddp_step, sgd, batch)
        result["ddp_state"] = _arrays(model.state_dict())
        config = live_config(stage)  # noqa: F841
        torch.manual_seed(1)
        model, trained = _routed(cls, init)
        engine, optimizer, *_ = deepspeed.initialize(
            model=model, optimizer=torch.optim.SGD(trained, lr=SGD_LR), config=ds_config(stage)
        )
        result["losses"] = _routed_steps(model, engine, engine.backward, engine.step, optimizer, batch)
        result["state"] = _arrays(full_state_dict(model))
        # Adam's moments of the deltas are reset with them (the other parameters keep theirs)
        torch.manual_seed(1)
        model, trained = _routed(cls, init)
        engine, optimizer, *_ = deepspeed.initialize(
            model=model, optimizer=torch.optim.Adam(trained, lr=LR), config=ds_config(stage)
        )
        engine.backward(engine(**batch).loss)
        engine.step()
        model.before_training_step(batch, SimpleNamespace(global_step=2), optimizer)
        deltas = {id(p) for p in model.router.delta_parameters()}
        moments = {True: 0.0, False: 0.0}  # is a delta: the largest first moment
        for p in trained:
            moment = float(safe_get_full_optimizer_state(p, "exp_avg").abs().max())
            moments[id(p) in deltas] = max(moments[id(p) in deltas], moment)
        result["moments"] = moments
        queue.put((rank, result))


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_trelm_knowledge_routing_under_zero_follows_ddp(tmp_path, tokenizer, kg, stage):
    """Routing under DeepSpeed: re-routing folds the deltas into the weights and zeroes them, and DeepSpeed's own fp32
    copy of the deltas must be zeroed too, or the old delta comes back at the next step (and grows: the bug the issue
    saw). With SGD (no moments to differ by DeepSpeed's per-group step count), 4 steps re-routed at step 2 equal
    two-process DDP's losses and weights, routed deltas included; under ZeRO-3 the attribution reads the head's
    weights gathered. With Adam, the deltas' moments are zero after re-routing."""
    model, halves, _ = _trelm_case(tokenizer, kg)
    model.save_pretrained(tmp_path / "init")
    results = dict(spawn_two(_routing_worker, str(tmp_path / "init"), type(model), halves, stage))
    assert all(isinstance(r, dict) for r in results.values()), results
    got = results[0]
    assert got["losses"] == pytest.approx(got["ddp_losses"], abs=1e-6)
    assert len(set(got["losses"])) == ROUTED_STEPS
    routed = [key for key in got["ddp_state"] if "route_weight" in key]
    assert routed and any(abs(got["ddp_state"][key]).max() > 0 for key in routed)  # steps 2-3 trained new deltas
    for key, value in got["ddp_state"].items():
        torch.testing.assert_close(
            torch.from_numpy(got["state"][key]),
            torch.from_numpy(value),
            atol=1e-6,
            rtol=1e-5,
            msg=lambda m, k=key: f"{k}: {m}",
        )
    assert got["moments"][True] == 0.0 and got["moments"][False] > 0


def _run_ner_under_deepspeed(tmp_path, tiny, config: dict, output_dir, *extra: str) -> dict:
    """run_ner.py in 2 torchrun processes under DeepSpeed through the KeplmTrainer (tests/deepspeed_cpu_launch.py);
    returns the losses logged per step."""
    import json

    from .test_ddp import launch, torchrun
    from .test_run_scripts import ROOT, linked_ner_inputs

    config_file = tmp_path / "ds_config.json"
    config_file.write_text(json.dumps(config))
    command = torchrun(
        ROOT / "tests" / "deepspeed_cpu_launch.py",
        str(ROOT / "run_scripts" / "run_ner.py"),
        *linked_ner_inputs(tiny),
        *FOUR_STEPS_SAVED_EVERY_2,
        "--learning_rate",
        "1e-3",
        "--output_dir",
        str(output_dir),
        "--deepspeed",
        str(config_file),
        *extra,
    )
    launch(command, tmp_path)
    history = json.loads((Path(output_dir) / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


PICKLES = (".bin", ".pt", ".pth", ".pkl")


@pytest.mark.slow
def test_run_ner_under_zero3_through_the_trainer_saves_safetensors_and_resumes_exactly(tmp_path, tiny):
    """The whole Trainer path under ZeRO-3 (config from the user, "auto" values filled by transformers): the final
    folder is an ordinary checkpoint (safetensors, knowledge/, no pickle) that loads in one process; a checkpoint
    holds DeepSpeed's own partitions (under global_step*/) and keplm's scheduler and RNG states (no .pt / .pth), and
    resuming from it continues the uninterrupted run's losses."""
    from transformers import AutoModelForTokenClassification

    config = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
        "zero_optimization": {"stage": 3},
    }
    run = tmp_path / "run"
    uninterrupted = _run_ner_under_deepspeed(tmp_path, tiny, config, run)
    assert set(uninterrupted) == {1, 2, 3, 4}
    final = {p.name for p in run.iterdir()}
    assert {"model.safetensors", "knowledge", "config.json"} <= final
    assert not [name for name in final if name.endswith(PICKLES)], final
    checkpoint = run / "checkpoint-2"
    outside_engine = [
        str(p.relative_to(checkpoint))
        for p in checkpoint.rglob("*")
        if p.name.endswith(PICKLES) and not p.relative_to(checkpoint).parts[0].startswith("global_step")
    ]
    assert not outside_engine, outside_engine
    assert any(p.name.startswith("scheduler") for p in checkpoint.iterdir())
    assert {"rng_state_0.json", "rng_state_1.json"} <= {p.name for p in checkpoint.iterdir()}
    model = AutoModelForTokenClassification.from_pretrained(run)
    assert model.knowledge_assets is not None and not is_partitioned(model.parameters())

    resumed = _run_ner_under_deepspeed(
        tmp_path, tiny, config, tmp_path / "resumed", "--resume_from_checkpoint", str(checkpoint)
    )
    assert [resumed[step] for step in (3, 4)] == pytest.approx([uninterrupted[step] for step in (3, 4)], abs=1e-6)
