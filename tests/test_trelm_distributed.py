"""TRELM's memory bank in a multi-process run (issue 27, item 4): every process folds every process's mentions, so
the banks of two gloo processes are equal to each other and to one process's bank over both batches in rank order,
including when one process's batch has no mention at all."""

from __future__ import annotations

import pytest
import torch

from keplm.modeling.trelm_modules import MemoryBank, gather_rows

from .distributed_helpers import reported, spawn_two
from .test_pretraining import tiny_pretraining  # noqa: F401, F811  (fixture)

VOCAB, HIDDEN = 7, 4


def _batches(seed: int, empty_second: bool) -> list[dict[str, torch.Tensor]]:
    """Two per-process batches (2 and 3 examples, length 6) with mentions of entities 1..6; entity 2 in both."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for entity_rows, empty in (
        ([[0, 2, 2, 0, 5, 0], [3, 3, 0, 0, 2, 0]], False),
        ([[0, 0, 1, 1, 0, 0], [2, 0, 0, 6, 6, 0], [0, 4, 0, 0, 0, 0]], empty_second),
    ):
        entities = torch.tensor(entity_rows)
        if empty:
            entities = torch.zeros_like(entities)
        # mention index: consecutive tokens of one entity form one mention
        mentions = torch.full_like(entities, -1)
        for row in range(entities.shape[0]):
            index, previous = -1, 0
            for col in range(entities.shape[1]):
                if entities[row, col] > 0:
                    index += int(entities[row, col] != previous)
                    mentions[row, col] = index
                previous = int(entities[row, col])
        out.append(
            {
                "hidden_states": torch.randn(*entities.shape, HIDDEN, generator=generator),
                "attention_mask": torch.ones_like(entities),
                "entity_ids": entities,
                "mention_token_map": mentions,
            }
        )
    return out


def _bank() -> MemoryBank:
    return MemoryBank(VOCAB, HIDDEN, window=1, momentum=0.3, lam=0.5, decay=2.0)


def _worker(rank: int, port: int, empty_second: bool, queue) -> None:
    with reported(rank, queue, port):
        bank = _bank()
        for step in range(2):
            bank.update(**_batches(step, empty_second)[rank])
        sizes = gather_rows(torch.arange(rank + 2))[0]
        queue.put((rank, {k: v.clone() for k, v in bank.training_state().items()}, sizes))


@pytest.mark.slow
@pytest.mark.parametrize("empty_second", [False, True])
def test_two_processes_keep_equal_banks_equal_to_one_process_over_both_batches(empty_second):
    results = dict((rank, (state, sizes)) for rank, state, sizes in spawn_two(_worker, empty_second))
    single = _bank()
    for step in range(2):
        first, second = _batches(step, empty_second)
        length = first["entity_ids"].shape[1]
        both = {key: torch.cat([first[key], second[key]]) for key in first}
        assert both["hidden_states"].shape[1] == length
        single.update(**both)
    expected = single.training_state()
    assert expected["seen"].sum() >= 3  # the test folds real mentions
    for rank in (0, 1):
        state, sizes = results[rank]
        for name in ("local", "seen", "global_sum", "global_count"):
            torch.testing.assert_close(state[name], expected[name], rtol=1e-5, atol=1e-6, msg=f"rank {rank} {name}")
        # rows of different lengths per process come back in rank order
        assert sizes.tolist() == [0, 1, 0, 1, 2]


def test_gather_rows_is_the_identity_outside_a_multi_process_run():
    rows = torch.arange(6).reshape(3, 2)
    assert gather_rows(rows)[0] is rows


@pytest.mark.slow
def test_run_pretraining_trains_trelm_as_a_two_process_cpu_ddp_run(tiny_pretraining, tmp_path):  # noqa: F811
    """``run_pretraining.py`` under torchrun with two gloo processes: the memory bank's gathers run on every
    training step of both processes (no deadlock, including around the routing passes), and the run ends with its
    P@1 curve and a model that loads."""
    from transformers import AutoModelForMaskedLM

    from tests.test_ddp import launch, torchrun
    from tests.test_pretraining import pretraining_args

    out = tmp_path / "ddp"
    args = [a for a in pretraining_args(tiny_pretraining, out, "trelm") if a != "--use_cpu"]
    log = launch(torchrun("run_pretraining", *args), tmp_path)
    assert "2 process(es), distributed=distributed" in log, log[-5000:]
    assert [p["step"] for p in __import__("json").loads((out / "probe_curve.json").read_text())] == [0, 2, 4]
    assert AutoModelForMaskedLM.from_pretrained(out).config.model_type == "trelm"
