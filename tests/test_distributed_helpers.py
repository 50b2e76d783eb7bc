"""The multi-process tests' result channel delivers what a worker sent after the worker has exited."""

import pickle

import torch
import torch.multiprocessing as mp

from .distributed_helpers import ResultQueue


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
    rank, state = pickle.loads(reader.recv_bytes())
    assert rank == 1 and torch.equal(state["bank"], torch.arange(1_000, dtype=torch.float32))
