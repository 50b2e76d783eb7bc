"""What the multi-process CPU tests share: a free local port, and a target run in two spawned processes."""

from __future__ import annotations

import socket
import time
from multiprocessing.connection import wait

import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_two(target, *args, results: int = 2, timeout: float = 900) -> list:
    """Run ``target(rank, port, *args, queue)`` in two spawned processes (ranks 0 and 1, one free port) and return the
    ``results`` items they put on the queue, in arrival order; an AssertionError, with those items and the exit codes,
    when a process fails or the processes end (or ``timeout`` seconds pass) before every item came."""
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = free_port()
    processes = [context.Process(target=target, args=(rank, port, *args, queue)) for rank in range(2)]
    for process in processes:
        process.start()
    items, deadline = [], time.monotonic() + timeout
    reader = queue._reader  # the SimpleQueue's receiving end, waited on together with the processes' exits
    while len(items) < results:
        alive = [process.sentinel for process in processes if process.exitcode is None]
        ready = wait([reader, *alive], timeout=max(0.0, deadline - time.monotonic()))
        if reader in ready:  # taken at once: a tensor sent through the queue needs its sender alive to arrive
            items.append(queue.get())
            continue
        # a process that died without reporting (an error before its report, a crash) would leave the queue empty
        # forever, and the other one waiting in a collective: fail with the exit codes instead of hanging the suite
        if not ready or any(process.exitcode not in (None, 0) for process in processes):
            break
        if all(process.exitcode is not None for process in processes) and not reader.poll():
            break
    for process in processes:
        if len(items) < results:  # a failed run: the rest would only wait for the dead process
            process.kill()
        process.join(timeout=120)
        if process.is_alive():
            process.kill()
    codes = [process.exitcode for process in processes]
    assert len(items) == results and all(code == 0 for code in codes), (items, f"exit codes {codes}")
    return items
