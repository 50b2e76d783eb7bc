"""A row-sharded entity memory that is never gathered (issue 27, item 5), on CPU with two gloo processes.

The lookup (``ShardedEntityMemory``) is checked by hand against the whole table: outputs and row gradients at equal
and unequal numbers of ids per process, a row count that does not divide by two, the gradient's mean and sum over
processes, the null row, ``initialize_rows``; ``clip_grad_norm_`` against torch's over the one-process model. A KALA
model with DDP on the rest and the sharded table (``shard_entity_memory``) follows one process over the whole batch
for 3 Adam steps (both retrieval modes; the cases and checks of ``test_fsdp2``), each process holding about half the
rows, and rank 0's gathered save loads in one process and answers the same. The KeplmTrainer takes such a model
(``--shard_entity_memory`` end to end: tests/test_sharded_trainer.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from keplm import KalaForTokenClassification
from keplm.modeling.entity_memory import EntityMemory

from .distributed_helpers import reported, spawn_two
from .test_fsdp2 import _arrays, _kala_case, _mean_over_processes, _train, check_against_references
from .test_kala_model import make_model

DIM = 3
#: (rows, ids of process 0, ids of process 1, average_gradients): equal and unequal numbers of ids, ids of either
#: block in either process, repeats and the null row; 7 rows split 4 + 3
LOOKUPS = [
    (7, [[1, 5], [0, 6]], [[3, 3], [2, 4]], True),
    (7, [6, 1, 0, 6, 2], [4], False),
]


def _table(rows: int) -> torch.Tensor:
    weight = torch.randn(rows, DIM, generator=torch.Generator().manual_seed(rows))
    weight[0] = 0
    return weight


def _output_weights(ids: list, rank: int) -> torch.Tensor:
    """A fixed non-uniform weight per output value, so that each id's gradient differs."""
    shape = (*torch.tensor(ids).shape, DIM)
    return torch.arange(1.0, 1.0 + torch.Size(shape).numel()).reshape(shape) * (rank + 1)


class _Toy(nn.Module):
    """An entity memory beside a replicated layer, for the global gradient norm."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.memory = EntityMemory(7, DIM)
        self.memory.embeddings.weight.data.copy_(_table(7))
        self.linear = nn.Linear(DIM, 1)

    def forward(self, ids):
        return self.linear(self.memory(ids)).pow(2).mean()


TOY_IDS = ([1, 5, 5, 0], [6, 3])


def _lookup_worker(rank: int, port: int, queue) -> None:
    with reported(rank, queue, port):
        from torch.nn.parallel import DistributedDataParallel

        from keplm.modeling.sharded_entity_memory import ShardedEntityMemory
        from keplm.training.sharded_memory import clip_grad_norm_, shard_entity_memory

        results = {"lookups": []}
        for rows, *ids, average in LOOKUPS:
            memory = ShardedEntityMemory.from_full(_table(rows), average_gradients=average)
            out = memory(torch.tensor(ids[rank]))
            (out * _output_weights(ids[rank], rank)).sum().backward()
            results["lookups"].append((memory.start, memory.stop, out.detach().numpy(), memory.weight.grad.numpy()))
        memory.initialize_rows(torch.tensor([0, 2, 5]), torch.full((3, DIM), 9.0))  # each process writes its own
        results["initialized"] = memory.full_weight().numpy()
        try:
            memory(torch.tensor([7]))
        except ValueError as error:  # raised before any collective, in the process that holds the bad id
            results["range_error"] = str(error)

        toy = shard_entity_memory(_Toy())
        assert toy._ddp_params_and_buffers_to_ignore == ["memory.weight"]
        model = DistributedDataParallel(toy)
        assert "memory.weight" in model.parameters_to_ignore
        model(torch.tensor(TOY_IDS[rank])).backward()
        results["norm"] = float(clip_grad_norm_(model, 0.1))
        results["toy_grads"] = {name: p.grad.numpy().copy() for name, p in toy.named_parameters()}
        queue.put((rank, results))


@pytest.mark.slow
def test_sharded_lookup_and_gradients_equal_the_whole_tables_and_the_global_norm_clips():
    results = dict(spawn_two(_lookup_worker))
    assert all(isinstance(r, dict) for r in results.values()), results
    for setting, (rows, *ids, average) in enumerate(LOOKUPS):
        reference = EntityMemory(rows, DIM)
        reference.embeddings.weight.data.copy_(_table(rows))
        losses = [(reference(torch.tensor(ids[rank])) * _output_weights(ids[rank], rank)).sum() for rank in (0, 1)]
        (sum(losses) / (2 if average else 1)).backward()
        expected_grad = reference.embeddings.weight.grad
        assert expected_grad[0].abs().sum() == 0 and expected_grad[1:].abs().sum() > 0
        blocks = []
        for rank in (0, 1):
            start, stop, out, grad = results[rank]["lookups"][setting]
            assert (start, stop) == ((0, 4) if rank == 0 else (4, 7))  # 7 rows: 4 + 3
            torch.testing.assert_close(torch.from_numpy(out), reference(torch.tensor(ids[rank])).detach())
            blocks.append(torch.from_numpy(grad))
        torch.testing.assert_close(torch.cat(blocks), expected_grad)
    expected = _table(7)
    expected[[2, 5]] = 9.0  # the null row stays zero
    for rank in (0, 1):
        assert "outside the entity memory (size 7)" in results[rank]["range_error"]
        torch.testing.assert_close(torch.from_numpy(results[rank]["initialized"]), expected)

    toy = _Toy()  # one process over both processes' ids: DDP's gradient is the mean of the two losses'
    sum(toy(torch.tensor(ids)) for ids in TOY_IDS).div(2).backward()
    norm = torch.nn.utils.clip_grad_norm_(toy.parameters(), 0.1)
    assert norm > 0.1  # it clips
    for rank in (0, 1):
        assert results[rank]["norm"] == pytest.approx(float(norm), rel=1e-5)
        grads = {name: torch.from_numpy(value) for name, value in results[rank]["toy_grads"].items()}
        torch.testing.assert_close(grads["linear.weight"], toy.linear.weight.grad)
        torch.testing.assert_close(grads["linear.bias"], toy.linear.bias.grad)
        start, stop = (0, 4) if rank == 0 else (4, 7)
        torch.testing.assert_close(grads["memory.weight"], toy.memory.embeddings.weight.grad[start:stop])


def _kala_worker(rank: int, port: int, cases: list[dict], queue) -> None:
    with reported(rank, queue, port):
        from torch.nn.parallel import DistributedDataParallel

        from keplm.training.sharded_memory import gather_entity_memory_state, shard_entity_memory, sharded_memories

        results = {}
        for case in cases:
            torch.manual_seed(1)
            model = shard_entity_memory(case["cls"].from_pretrained(case["init"]).train())
            (memory,) = sharded_memories(model).values()
            ddp = DistributedDataParallel(model, find_unused_parameters=model.ddp_find_unused_parameters)
            result = {
                "losses": _train(ddp, case["halves"][rank], _mean_over_processes),
                "shard": (memory.start, memory.stop, memory.num_entities, tuple(memory.weight.shape)),
            }
            state = gather_entity_memory_state(ddp)  # every process takes part; rank 0 gets the whole model
            if rank == 0:
                model.save_pretrained(case["saved"], state_dict=state)
                result["state"] = _arrays(state)
            results[case["name"]] = result
        queue.put((rank, results))


@pytest.mark.slow
def test_kala_with_a_sharded_table_follows_one_process_and_its_gathered_save_loads(tmp_path, tokenizer, assets):
    cases, singles = [], {}
    for mode in ("relational", "pointwise"):
        name = f"kala_{mode}"
        model, halves, whole = _kala_case(tokenizer, assets, mode)
        init, saved = tmp_path / f"{name}_init", tmp_path / f"{name}_sharded"
        model.save_pretrained(init)
        cases.append(
            {"name": name, "cls": type(model), "init": str(init), "saved": str(saved), "halves": halves, "ddp": False}
        )
        singles[name] = whole
    results = dict(spawn_two(_kala_worker, cases))
    check_against_references(cases, results, singles)
    rows = assets.num_entities
    for rank in (0, 1):
        for case in cases:
            start, stop, total, shape = results[rank][case["name"]]["shard"]
            assert total == rows and shape[0] == stop - start  # the block's rows, no more
            assert (start, stop) == ((0, (rows + 1) // 2) if rank == 0 else ((rows + 1) // 2, rows))


def test_the_trainer_takes_a_model_sharded_beforehand_and_shards_nothing_in_one_process(
    tmp_path, tokenizer, assets, caplog
):
    """The KeplmTrainer trains a model sharded by the user (clipping by the global norm, gathered saves: see
    tests/test_sharded_trainer.py); ``--shard_entity_memory`` in one process says there is nothing to shard."""
    import logging

    from keplm.training.arguments import KeplmTrainingArguments
    from keplm.training.sharded_memory import shard_entity_memory
    from keplm.training.trainer import KeplmTrainer

    from .distributed_helpers import free_port

    args = KeplmTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, shard_entity_memory=True)
    whole = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    with caplog.at_level(logging.INFO, logger="keplm.training.sharded_training"):
        trainer = KeplmTrainer(model=whole, args=args)
    assert "one process, nothing to shard" in caplog.text
    assert not trainer._has_sharded_tables and type(whole.kala.entity_memory).__name__ == "EntityMemory"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        model = shard_entity_memory(make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3))
        trainer = KeplmTrainer(model=model, args=args)
        assert trainer._has_sharded_tables
        (group,) = model.parameter_groups(1e-3, entity_memory_optimizer="rowwise_adagrad")
        assert group.parameters == [model.kala.entity_memory.weight]  # the shard: one accessor for both classes
    finally:
        dist.destroy_process_group()


def test_shard_entity_memory_refuses_a_missing_group_ddp_and_sparse_tables(tokenizer, assets):
    from torch.nn.parallel import DistributedDataParallel

    from keplm.training.sharded_memory import shard_entity_memory

    from .distributed_helpers import free_port

    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    with pytest.raises(ValueError, match="initialised torch.distributed process group"):
        shard_entity_memory(model)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="before DistributedDataParallel wraps it"):
            shard_entity_memory(DistributedDataParallel(model))
        sparse = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3, sparse_entity_memory=True)
        with pytest.raises(ValueError, match=r"sparse gradients \(kala\.entity_memory\)"):
            shard_entity_memory(sparse)
    finally:
        dist.destroy_process_group()
