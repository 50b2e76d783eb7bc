"""What the multi-process CPU tests share: a free local port, and a target run in two spawned processes."""

from __future__ import annotations

import pickle
import socket
import time
import warnings
from multiprocessing.connection import wait

import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ResultQueue:
    """The workers' end of the results pipe: ``put`` sends an item pickled by value.

    torch.multiprocessing's queues send a tensor as a handle to shared memory that the receiver fetches from the
    sender's process: a worker that puts its result and exits at once can be gone before the test reads it
    (FileNotFoundError on the sender's socket). Plain ``pickle`` copies the tensor's bytes into the message instead.
    """

    def __init__(self, connection, lock):
        self.connection, self.lock = connection, lock

    def put(self, item) -> None:
        data = pickle.dumps(item)
        with self.lock:  # two writers on one pipe: a message is written whole
            self.connection.send_bytes(data)


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
                items.append(pickle.loads(reader.recv_bytes()))
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
