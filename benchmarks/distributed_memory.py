"""Per-process peak host memory of a 2-process KALA training run on CPU (gloo): plain DDP, where every process holds
the whole entity memory with its gradient and AdamW state, against FSDP2 (``keplm.training.fsdp.shard_model``: each
encoder block, then the root, which splits the entity memory by rows but gathers it for every step) and DDP with a
row-sharded table that is never gathered (``ddp+sharded``: ``keplm.training.sharded_memory.shard_entity_memory``,
then DDP on the rest), and DeepSpeed ZeRO-2 (optimizer state and gradients split) and ZeRO-3 (the weights too, gathered
per module for its forward and backward), at several entity-memory sizes (issue 27, "an entity memory that does not
replicate"). One process over the whole batch is the reference.

Each run starts fresh worker processes; a worker reports its resident memory after imports and its peak (VmHWM,
reset after imports) over building the model and ``--steps`` AdamW steps on its half of a synthetic batch
(``benchmarks.synthetic``, the ``cpu-small`` shape with the hidden size of ``--hidden``). Ratios are measured side by
side in one run; absolute MiB depend on the machine.

    python -m benchmarks distributed-memory [--rows 1M 5M] [--hidden 32] [--steps 2]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
from dataclasses import replace

import torch

ENGINES = ("single", "ddp", "fsdp2", "ddp+sharded", "zero2", "zero3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _preset(rows: int, hidden: int):
    from benchmarks.synthetic import PRESETS

    heads = max(1, hidden // 32)
    return replace(
        PRESETS["cpu-small"], hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden, entity_vocab_size=rows
    )


def _worker(rank: int, world: int, port: int, engine: str, rows: int, hidden: int, steps: int, queue) -> None:
    from benchmarks.harness import build_model, make_batches, peak_rss_kib, reset_peak_rss, rss_kib

    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        preset = _preset(rows, hidden)
        batch = make_batches(preset, 1, None, True, seed=0)[0]  # the same global batch in every process
        if world > 1:  # this process's half of it: the rows and the graph nodes their mentions read
            batch = _half(batch, rank, world)
        if engine.startswith("zero"):
            import deepspeed  # noqa: F401  (before the baseline: its import is not the run's growth)
        after_imports = rss_kib()
        reset_peak_rss()
        model = build_model("relational", preset, seed=0).train()
        if engine == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
        elif engine == "fsdp2":
            from keplm.training.fsdp import shard_model

            model = shard_model(model)
        elif engine == "ddp+sharded":
            from keplm.training.sharded_memory import shard_entity_memory

            model = torch.nn.parallel.DistributedDataParallel(shard_entity_memory(model))
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
        if engine.startswith("zero"):  # DeepSpeed ZeRO-2 / ZeRO-3 over the same gloo group, AdamW as its client
            import deepspeed

            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
            deepspeed.init_distributed("gloo", verbose=False)
            config = {
                "train_micro_batch_size_per_gpu": batch["input_ids"].shape[0],
                "gradient_accumulation_steps": 1,
                "gradient_clipping": 0.0,
                "zero_optimization": {"stage": int(engine[-1])},
                "zero_allow_untested_optimizer": True,
                "zero_force_ds_cpu_optimizer": False,
                "steps_per_print": 10**6,
            }
            model, optimizer, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        for _ in range(steps):
            optimizer.zero_grad()
            loss = model(**batch).loss
            if engine.startswith("zero"):
                model.backward(loss)
                model.step()
            else:
                loss.backward()
                optimizer.step()
        queue.put((rank, after_imports, peak_rss_kib()))
    except BaseException as error:
        queue.put((rank, repr(error), None))
        raise
    finally:
        if world > 1:
            torch.distributed.destroy_process_group()


def _half(batch: dict, rank: int, world: int) -> dict:
    """Rows ``rank::world`` of the batch's per-example tensors; the graph (nodes, edges) stays whole: each process
    reads the same graph tensors, which are small, and its rows' mentions index into them."""
    size = batch["input_ids"].shape[0]
    return {
        key: value[rank::world]
        if torch.is_tensor(value)
        and value.dim() >= 1
        and value.shape[0] == size
        and not key.startswith(("node_", "edge_"))
        else value
        for key, value in batch.items()
    }


def measure(engine: str, rows: int, hidden: int, steps: int) -> list[tuple[float, float]]:
    """``[(MiB after imports, peak MiB)]`` per process of one run."""
    import torch.multiprocessing as mp

    world = 1 if engine == "single" else 2
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = _free_port()
    processes = [
        context.Process(target=_worker, args=(rank, world, port, engine, rows, hidden, steps, queue))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    results = dict((rank, (base, peak)) for rank, base, peak in (queue.get() for _ in range(world)))
    for process in processes:
        process.join()
    failed = {rank: base for rank, (base, peak) in results.items() if peak is None}
    if failed:
        raise RuntimeError(f"{engine} at {rows:,} rows failed: {failed}")
    return [(results[rank][0] / 1024, results[rank][1] / 1024) for rank in range(world)]


def _rows(text: str) -> int:
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks distributed-memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", nargs="+", default=["1M", "5M"], help="entity-memory sizes (e.g. 500k 1M 5M)")
    parser.add_argument("--hidden", type=int, default=32, help="hidden size, which is also the entity dimension")
    parser.add_argument("--steps", type=int, default=2, help="AdamW steps per run")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    args = parser.parse_args(argv)
    print(
        f"# Per-process peak memory, 2-process KALA (relational) on CPU, {datetime.date.today()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, hidden = entity dim "
        f"{args.hidden}, {args.steps} AdamW steps"
    )
    print(
        "\n| rows | table MiB (fp32) | engine | processes | MiB after imports | peak MiB (max over processes) | "
        "peak over imports | / DDP |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for text in args.rows:
        rows = _rows(text)
        table = rows * args.hidden * 4 / 2**20
        measured = {engine: measure(engine, rows, args.hidden, args.steps) for engine in args.engines}
        growth = {engine: max(peak - base for base, peak in runs) for engine, runs in measured.items()}
        for engine, runs in measured.items():
            base = max(b for b, _ in runs)
            peak = max(p for _, p in runs)
            ratio = f"{growth[engine] / growth['ddp']:.2f}" if "ddp" in growth else "–"
            print(
                f"| {rows:,} | {table:,.0f} | {engine} | {len(runs)} | {base:,.0f} | {peak:,.0f} | "
                f"{growth[engine]:,.0f} | {ratio} |"
            )


if __name__ == "__main__":
    main()
