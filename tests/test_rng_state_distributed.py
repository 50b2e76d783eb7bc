"""Resuming on machines without a shared disk (issue 27): a distributed checkpoint's RNG states are gathered, so the
folder that the saving process wrote holds every process's generators, and each process resumes its own from it."""

from __future__ import annotations

import os
import random
import types

import numpy as np
import pytest
import torch

from keplm.training.trainer import KeplmTrainer

from .distributed_helpers import reported, spawn_two


def _trainer_stand_in(rank: int, world_size: int, should_save: bool):
    """The parts of a KeplmTrainer its RNG-state methods read (building a whole Trainer per process is slow)."""
    stand_in = types.SimpleNamespace(
        args=types.SimpleNamespace(world_size=world_size, process_index=rank, should_save=should_save)
    )
    stand_in._plain_checkpoints = stand_in._rng_is_ours = lambda: True
    stand_in._rng_state_name = types.MethodType(KeplmTrainer._rng_state_name, stand_in)
    return stand_in


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _worker(rank: int, port: int, root: str, queue) -> None:
    with reported(rank, queue, port):
        _seed_all(100 + rank)  # each process's generators in their own state
        torch.rand(rank + 1)
        # each "machine" saves to its own disk; only process 0 saves the checkpoint (save_on_each_node off)
        KeplmTrainer._save_rng_state(_trainer_stand_in(rank, 2, rank == 0), os.path.join(root, f"machine{rank}"))
        queue.put((rank, torch.rand(3), random.random(), float(np.random.rand())))


@pytest.mark.slow
def test_one_machines_checkpoint_resumes_every_process_generators(tmp_path):
    next_draws = {rank: draws for rank, *draws in spawn_two(_worker, str(tmp_path))}
    saved = sorted(os.listdir(tmp_path / "machine0"))
    assert saved == ["rng_state_0.json", "rng_state_0.safetensors", "rng_state_1.json", "rng_state_1.safetensors"]
    assert not (tmp_path / "machine1").exists()  # process 1 wrote nothing on its own disk
    assert not torch.equal(next_draws[0][0], next_draws[1][0])
    for rank in range(2):  # a process resuming from machine 0's folder continues its own streams exactly
        _seed_all(0)
        KeplmTrainer._load_rng_state(_trainer_stand_in(rank, 2, rank == 0), str(tmp_path / "machine0"))
        assert torch.equal(torch.rand(3), next_draws[rank][0])
        assert random.random() == next_draws[rank][1]
        assert float(np.random.rand()) == next_draws[rank][2]
