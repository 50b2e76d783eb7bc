"""What the multi-process CPU tests share: a free local port, and a target run in two spawned processes."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import warnings
from multiprocessing.connection import wait

import numpy as np
import torch
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_json(item):
    """A worker's result as JSON values, exactly: tensors and arrays with their dtype and shape, tuples and dicts
    (any keys) tagged, so that :func:`from_json` rebuilds them equal, bit for bit."""
    if isinstance(item, torch.Tensor):
        return {"tensor": item.detach().cpu().tolist(), "dtype": str(item.dtype)[6:], "shape": list(item.shape)}
    if isinstance(item, np.ndarray):
        return {"array": item.tolist(), "dtype": str(item.dtype), "shape": list(item.shape)}
    if isinstance(item, np.generic):
        return item.item()
    if isinstance(item, tuple):
        return {"tuple": [to_json(value) for value in item]}
    if isinstance(item, dict):
        return {"dict": [[to_json(key), to_json(value)] for key, value in item.items()]}
    if isinstance(item, list):
        return [to_json(value) for value in item]
    if item is None or isinstance(item, (bool, int, float, str)):
        return item
    raise TypeError(f"a worker result of type {type(item).__name__} has no JSON form here: {item!r}")


def from_json(value):
    """The inverse of :func:`to_json`."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "tensor" in value:
        dtype = getattr(torch, value["dtype"])
        return torch.tensor(value["tensor"], dtype=dtype).reshape(value["shape"])
    if "array" in value:
        return np.array(value["array"], dtype=value["dtype"]).reshape(value["shape"])
    if "tuple" in value:
        return tuple(from_json(v) for v in value["tuple"])
    return {_hashable(from_json(key)): from_json(v) for key, v in value["dict"]}


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


class ResultQueue:
    """The workers' end of the results pipe: ``put`` sends an item as JSON (:func:`to_json`), by value.

    torch.multiprocessing's queues send a tensor as a handle to shared memory that the receiver fetches from the
    sender's process: a worker that puts its result and exits at once can be gone before the test reads it
    (FileNotFoundError on the sender's socket). The JSON message carries the values themselves.
    """

    def __init__(self, connection, lock):
        self.connection, self.lock = connection, lock

    def put(self, item) -> None:
        data = json.dumps(to_json(item)).encode("utf-8")
        with self.lock:  # two writers on one pipe: a message is written whole
            self.connection.send_bytes(data)


def receive(reader):
    """The next item a :class:`ResultQueue` sent through the pipe end ``reader``."""
    return from_json(json.loads(reader.recv_bytes().decode("utf-8")))


def spawn_two(target, *args, results: int = 2, timeout: float = 900) -> list:
    """Run ``target(rank, port, *args, queue)`` in two spawned processes (ranks 0 and 1, one free port) and return the
    ``results`` items they put on the queue, in arrival order; an AssertionError, with those items and the exit codes,
    when a process fails or the processes end (or ``timeout`` seconds pass) before every item came."""
    context = mp.get_context("spawn")
    reader, writer = context.Pipe(duplex=False)
    queue = ResultQueue(writer, context.Lock())
    port = free_port()
    processes = [context.Process(target=target, args=(rank, port, *args, queue)) for rank in range(2)]
    for process in processes:
        process.start()
    writer.close()  # the workers hold their copies; this process only reads
    items, deadline = [], time.monotonic() + timeout
    while len(items) < results:
        alive = [process.sentinel for process in processes if process.exitcode is None]
        ready = wait([reader, *alive], timeout=max(0.0, deadline - time.monotonic()))
        if reader in ready:
            try:
                items.append(receive(reader))
            except EOFError:  # every worker closed its end without sending the rest
                break
            continue
        # a process that died without reporting (an error before its report, a crash) would leave the queue empty
        # forever, and the other one waiting in a collective: fail with the exit codes instead of hanging the suite
        if not ready or any(process.exitcode not in (None, 0) for process in processes):
            break
        if all(process.exitcode is not None for process in processes) and not reader.poll():
            break
    stuck = []
    for process in processes:
        if len(items) < results:  # a failed run: the rest would only wait for the dead process
            process.kill()
        process.join(timeout=120)
        if process.is_alive():
            process.kill()
            process.join()
            stuck.append(process.pid)
    codes = [process.exitcode for process in processes]
    if len(items) == results and stuck:
        # every result came, so the worker was in its teardown: gloo's process-group shutdown at times never returns
        # under load (1 of about 6 full-suite runs, never alone; docs/reliability.md, R54)
        warnings.warn(f"worker(s) {stuck} sent their results but had not exited after 120 s: killed", stacklevel=2)
        codes = [0 if process.pid in stuck else code for process, code in zip(processes, codes)]
    assert len(items) == results and all(code == 0 for code in codes), (items, f"exit codes {codes}")
    return items


@contextlib.contextmanager
def reported(rank: int, queue, port: int | None = None):
    """A spawned worker's body: an error is put on ``queue`` as its result (the parent reports it instead of waiting
    for a result forever) and raised; the process group is destroyed at the end either way. ``port``: first join the
    two-process gloo group on 127.0.0.1 at that port, with one intra-op thread."""
    import torch.distributed as dist

    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=2)
        torch.set_num_threads(1)
    try:
        yield
    except BaseException as error:
        queue.put((rank, repr(error)))
        raise
    finally:
        dist.destroy_process_group()
