"""What the multi-process CPU tests share: a free local port, and a target run in two spawned processes."""

from __future__ import annotations

import socket

import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_two(target, *args, results: int = 2, timeout: float = 120) -> list:
    """Run ``target(rank, port, *args, queue)`` in two spawned processes (ranks 0 and 1, one free port) and return the
    ``results`` items they put on the queue, in arrival order; an AssertionError, with those items, when a process
    fails."""
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = free_port()
    processes = [context.Process(target=target, args=(rank, port, *args, queue)) for rank in range(2)]
    for process in processes:
        process.start()
    items = [queue.get() for _ in range(results)]
    for process in processes:
        process.join(timeout=timeout)
    assert all(process.exitcode == 0 for process in processes), items
    return items
