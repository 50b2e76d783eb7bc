"""The multi-process tests' result channel delivers what a worker sent, exactly, after the worker has exited."""

import json

import torch
import torch.multiprocessing as mp

from .distributed_helpers import ResultQueue, from_json, receive, to_json


def _put_and_exit(queue) -> None:
    queue.put((1, {"bank": torch.arange(1_000, dtype=torch.float32)}))


def test_a_tensor_put_by_a_worker_that_exited_still_arrives():
    """torch.multiprocessing's SimpleQueue sends a tensor as a handle into the sender's process: read after the
    sender exited, it fails (FileNotFoundError, the CI failure of test_trelm_distributed). ResultQueue copies it."""
    context = mp.get_context("spawn")
    reader, writer = context.Pipe(duplex=False)
    queue = ResultQueue(writer, context.Lock())  # held: its lock must outlive the child's start
    process = context.Process(target=_put_and_exit, args=(queue,))
    process.start()
    writer.close()
    process.join(timeout=120)  # the message is small enough (4 kB) for the pipe's buffer: the worker exits first
    assert process.exitcode == 0
    rank, state = receive(reader)
    assert rank == 1 and torch.equal(state["bank"], torch.arange(1_000, dtype=torch.float32))


def test_results_cross_the_pipe_exactly():
    """What the workers send comes back equal, bit for bit: tensors of several dtypes and shapes (empty, scalar,
    non-finite), numpy arrays and scalars, tuples, and dicts with non-string keys."""
    import numpy as np

    item = (
        0,
        {
            "bank": torch.randn(3, 2),
            "half": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
            "ids": torch.arange(4).reshape(2, 2),
            "empty": torch.zeros(0, 3),
            "scalar": torch.tensor(float("nan")),
            "flags": torch.tensor([True, False]),
            ("a", 1): np.array([[1.0, np.inf]], dtype=np.float32),
            2: [np.float32(0.1), "text", None, (1, 2)],
        },
    )
    back = from_json(json.loads(json.dumps(to_json(item))))
    assert back[0] == 0 and set(back[1]) == set(item[1])
    for key, value in item[1].items():
        if isinstance(value, torch.Tensor):
            assert back[1][key].dtype == value.dtype and back[1][key].shape == value.shape
            assert torch.equal(back[1][key], value) or (value.isnan().all() and back[1][key].isnan().all())
    array = back[1][("a", 1)]
    assert array.dtype == np.float32 and np.array_equal(array, item[1][("a", 1)])
    assert back[1][2] == [np.float32(0.1).item(), "text", None, (1, 2)]
