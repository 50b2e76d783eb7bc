"""``--shard_entity_memory`` through the KeplmTrainer and run_ner.py (issue 27, item 5), on CPU with 2 torchrun
processes (gloo).

A sharded run follows the same run under plain DDP step by step (losses within 1e-6, gradient clipping by the
global norm in effect), with the Trainer's Adam and with ``--entity_memory_optimizer rowwise_adagrad`` on the local
rows; its final folder is an ordinary checkpoint that loads in one process with DDP's weights; a save at step 2
holds each process's optimizer state of its rows, and ``--resume_from_checkpoint`` gives the uninterrupted run's
losses at steps 3-4. The refusals (sparse tables, FSDP / DeepSpeed, ``--save_on_each_node``, resuming with another
process count or across sharded and whole tables) are checked in one process.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from transformers import AutoModelForTokenClassification

from keplm import KalaForTokenClassification
from keplm.training.state import load_state

from .run_args import FOUR_STEPS_SAVED_EVERY_2
from .test_ddp import launch, torchrun
from .test_kala_model import make_model
from .test_run_scripts import linked_ner_inputs


def _run(tmp_path: Path, tiny: dict, out: Path, *extra: str) -> tuple[dict[int, tuple[float, float]], str]:
    """run_ner.py in 2 torchrun processes (4 steps, logged every step): ``{step: (loss, gradient norm)}`` and the
    log."""
    args = [
        *linked_ner_inputs(tiny, out),
        *FOUR_STEPS_SAVED_EVERY_2,
        "--learning_rate",
        "1e-2",
        "--knowledge_learning_rate",
        "5e-2",
        "--max_grad_norm",
        "0.05",
        "--dataloader_num_workers",
        "0",
        *extra,
    ]
    log = launch(torchrun("run_ner", *args), tmp_path)
    assert "2 process(es), distributed=distributed" in log, log[-6000:]
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: (entry["loss"], entry["grad_norm"]) for entry in history if "loss" in entry}, log


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return dict(AutoModelForTokenClassification.from_pretrained(folder).state_dict())


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adam", "rowwise_adagrad"])
def test_a_sharded_run_follows_ddp_saves_an_ordinary_model_and_resumes_exactly(tmp_path, tiny, optimizer):
    extra = ["--entity_memory_optimizer", optimizer]
    ddp, _ = _run(tmp_path, tiny, tmp_path / "ddp", *extra)
    sharded, log = _run(tmp_path, tiny, tmp_path / "sharded", *extra, "--shard_entity_memory")
    assert "kala.entity_memory holds rows [0, " in log
    assert set(ddp) == set(sharded) == {1, 2, 3, 4}
    assert [sharded[s][0] for s in range(1, 5)] == pytest.approx([ddp[s][0] for s in range(1, 5)], abs=1e-6)
    # the norm clipped by is the whole model's (far above --max_grad_norm: clipping is in effect)
    assert [sharded[s][1] for s in range(1, 5)] == pytest.approx([ddp[s][1] for s in range(1, 5)], rel=1e-5)
    assert min(norm for _, norm in ddp.values()) > 0.5
    assert len({round(loss, 6) for loss, _ in ddp.values()}) > 1  # it trains
    # the final folder is an ordinary checkpoint (the whole table, knowledge/) that loads in one process
    ddp_weights, sharded_weights = _weights(tmp_path / "ddp"), _weights(tmp_path / "sharded")
    assert sharded_weights.keys() == ddp_weights.keys()
    assert "kala.entity_memory.embeddings.weight" in sharded_weights
    for name, value in ddp_weights.items():
        torch.testing.assert_close(sharded_weights[name], value, atol=1e-6, rtol=1e-5, msg=name)
    assert (tmp_path / "sharded" / "knowledge").is_dir()
    if importlib.util.find_spec("matplotlib") is not None:  # the card's figure read process 0's rows, no gather
        assert "those this process holds of the row-sharded table" in (tmp_path / "sharded" / "README.md").read_text()
    checkpoint = tmp_path / "sharded" / "checkpoint-2"
    names = {p.name for p in checkpoint.iterdir()}
    assert {"optimizer_shard_0.json", "optimizer_shard_1.json", "optimizer.json", "model.safetensors"} <= names
    assert not any(name.endswith((".pt", ".pth", ".bin")) for name in names)
    for rank in (0, 1):  # each process's optimizer state of its own rows, written by that process
        shard = load_state(checkpoint, f"optimizer_shard_{rank}")
        assert shard["world_size"] == 2 and shard["rank"] == rank and shard["states"]
    resumed, _ = _run(
        tmp_path,
        tiny,
        tmp_path / "resumed",
        *extra,
        "--shard_entity_memory",
        "--resume_from_checkpoint",
        str(checkpoint),
    )
    assert [resumed[s][0] for s in (3, 4)] == pytest.approx([sharded[s][0] for s in (3, 4)], abs=1e-6)


def test_shard_entity_memory_refuses_sparse_tables_engines_and_saves_on_each_node(tokenizer, assets, monkeypatch):
    from keplm.training.sharded_training import shard_for_training

    for variable in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(variable, raising=False)
    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    args = dict(
        shard_entity_memory=True, world_size=2, process_index=0, save_on_each_node=False, fsdp=None, deepspeed=None
    )
    with pytest.raises(ValueError, match=r"--shard_entity_memory cannot be combined with FSDP \(--fsdp full_shard\)"):
        shard_for_training(model, SimpleNamespace(**{**args, "fsdp": "full_shard"}))
    with pytest.raises(ValueError, match=r"--shard_entity_memory cannot be combined with DeepSpeed \(--deepspeed\)"):
        shard_for_training(model, SimpleNamespace(**{**args, "deepspeed": "ds.json"}))
    with pytest.raises(ValueError, match="--save_on_each_node"):
        shard_for_training(model, SimpleNamespace(**{**args, "save_on_each_node": True}))
    sparse = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3, sparse_entity_memory=True)
    with pytest.raises(ValueError, match=r"sparse gradients \(kala\.entity_memory\).*--sparse_entity_memory"):
        shard_for_training(sparse, SimpleNamespace(**args))
    shard_for_training(model, SimpleNamespace(**{**args, "world_size": 1}))  # one process: nothing to shard
    assert type(model.kala.entity_memory).__name__ == "EntityMemory"


def test_resuming_refuses_another_process_count_and_mixing_sharded_and_whole_tables(tmp_path, tokenizer, assets):
    from keplm.training.sharded_memory import shard_entity_memory
    from keplm.training.sharded_training import ShardedMemoryTraining
    from keplm.training.state import save_state

    from .distributed_helpers import free_port

    class Stub(ShardedMemoryTraining):  # the mixin's resume checks, before any optimizer state is read
        def __init__(self, model, world_size: int = 1):
            self.model, self.args = model, SimpleNamespace(world_size=world_size, process_index=0)

    two = tmp_path / "two"
    for rank in (0, 1):
        save_state({"world_size": 2, "rank": rank, "rows": {}, "states": []}, two, f"optimizer_shard_{rank}")
    whole = tmp_path / "whole"
    save_state({"state": {}, "param_groups": []}, whole, "optimizer")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        sharded = Stub(shard_entity_memory(make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)))
        with pytest.raises(ValueError, match="with 1 processes: its sharded entity memories were saved by 2"):
            sharded.load_optimizer_state(str(two))
        (two / "optimizer_shard_0.json").rename(two / "elsewhere.json")  # machine 0 lacks this process's file
        with pytest.raises(ValueError, match="optimizer_shard_0 .* is missing; every process writes its own"):
            Stub(sharded.model, world_size=2).load_optimizer_state(str(two))
        with pytest.raises(ValueError, match="saved without sharded entity memories"):
            sharded.load_optimizer_state(str(whole))
        plain = Stub(make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3))
        with pytest.raises(ValueError, match="without --shard_entity_memory: it was saved by a run with sharded"):
            plain.load_optimizer_state(str(two))
    finally:
        dist.destroy_process_group()
