"""One process per benchmarked system, driven in interleaved rounds by the parent.

Each worker builds its model, optimizer and batches once, then runs the steps the parent asks for. Systems
take turns (round robin, order rotated every round), so slow drifts of the machine (other jobs on a shared
CPU, GPU clocks) hit all of them alike, while memory and torch.compile state stay isolated per process.
A worker is the parent's own command line with ``--worker SYSTEM`` added (``python -m benchmarks <name> ...``,
``benchmarks.worker_command``), so it parses exactly the options its parent was given. Protocol: the parent writes
one command per line on stdin (``warmup``, ``run N``, ``finish``); the worker answers one ``@@{json}`` line on
stdout. Worker stderr (compile logs) goes to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch

from benchmarks import worker_command
from benchmarks.harness import (
    autocast_context,
    load_average,
    make_step,
    peak_rss_kib,
    reset_peak_rss,
    run_meta,
    synchronize,
    timed,
)
from benchmarks.report import write_outputs

PREFIX = "@@"


class StepRunner:
    """The timing loop every benchmarked system shares. A subclass calls :meth:`setup`, then sets ``batches``,
    ``model``, ``optimizer`` and ``baseline_kib`` (RSS before the model was built), and ``forward`` where the step
    calls something else than the model (a compiled model); :meth:`timing` is the common part of its ``finish()``
    result."""

    position = 0
    forward = None
    _step = None
    times: list[float]
    warmup_times: list[float]

    def setup(self, args, system: str, preset) -> None:
        """The system's options, preset, device and torch threads (``--threads``)."""
        self.args, self.system, self.preset = args, system, preset
        self.batch_size = preset.batch_size
        self.device = torch.device(args.device)
        if args.threads:
            torch.set_num_threads(args.threads)

    def on_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def autocast(self):
        return autocast_context(self.device, self.args.dtype)

    def step(self, batch: dict) -> None:
        """One training step (``harness.make_step``): host->device copy, forward under autocast, backward,
        optimizer step, zero_grad."""
        if self._step is None:
            # `is not None`, not `or`: a compiled module's truth value calls __len__, which raises on torch 2.13
            forward = self.forward if self.forward is not None else self.model
            self._step = make_step(self.model, forward, self.optimizer, self.device, self.args.dtype)
        self._step(batch)

    def _run(self, count: int) -> list[float]:
        out = []
        for _ in range(count):
            out.append(timed(self.step, self.device, self.batches[self.position % len(self.batches)]))
            self.position += 1
        return out

    def after_warmup(self) -> None:
        """Hook run once the warm-up steps are done, before the peak-memory mark is reset."""

    def warmup(self) -> dict:
        self.times = []
        self.warmup_times = self._run(self.args.warmup)
        self.after_warmup()
        synchronize(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            reset_peak_rss()
        return {"warmup_ms": [1e3 * t for t in self.warmup_times]}

    def run(self, count: int) -> dict:
        times = self._run(count)
        self.times += times
        return {"step_ms": [1e3 * t for t in times]}

    def timing(self) -> dict:
        """Step-time statistics, throughput, peak memory of the timed steps, parameter and static sizes."""
        times = self.times
        if self.device.type == "cuda":
            memory = {
                "peak_memory_mib": torch.cuda.max_memory_allocated(self.device) / 2**20,
                "memory_kind": "torch.cuda.max_memory_allocated during the timed steps",
            }
        else:
            peak = peak_rss_kib()
            memory = {
                "peak_memory_mib": (peak - self.baseline_kib) / 1024 if peak and self.baseline_kib else None,
                "memory_kind": "peak RSS during the timed steps - RSS before the model was built",
            }
        return {
            "system": self.system,
            "params_m": sum(p.numel() for p in self.model.parameters()) / 1e6,
            "trainable_m": sum(p.numel() for p in self.model.parameters() if p.requires_grad) / 1e6,
            "static_mib": static_training_mib(self.model, self.optimizer),
            "steps": len(times),
            "step_ms_mean": 1e3 * statistics.fmean(times),
            "step_ms_median": 1e3 * statistics.median(times),
            "step_ms_min": 1e3 * min(times),
            "step_ms_max": 1e3 * max(times),
            "step_ms_stdev": 1e3 * statistics.stdev(times) if len(times) > 1 else 0.0,
            "samples_per_s": self.batch_size / statistics.fmean(times),
            "first_step_s": self.warmup_times[0] if self.warmup_times else None,
            "warmup_ms": [1e3 * t for t in self.warmup_times],
            **memory,
        }


def static_training_mib(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """fp32 weights + dense gradients (sparse-gradient tables have none to speak of) + every tensor in the
    optimizer's state as allocated (AdamW: m and v, 8 B/param; row-wise AdaGrad: 4 B per table row)."""
    sparse = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse}
    total = sum(p.numel() * p.element_size() * (1 if id(p) in sparse else 2) for p in model.parameters())
    for part in (getattr(optimizer, "dense", optimizer), getattr(optimizer, "tables", None)):
        for state in part.state.values() if part is not None else ():
            total += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
    return total / 2**20


def serve(args, system: str, runner_class) -> None:
    """Worker main loop (``python -m benchmarks <name> ... --worker SYSTEM``); ``runner_class(args, system)`` has
    ``warmup()``, ``run(count)`` and ``finish()``."""
    runner = runner_class(args, system)
    _answer({"ready": True})
    for line in sys.stdin:
        command = line.split()
        if not command:
            continue
        if command[0] == "warmup":
            _answer(runner.warmup())
        elif command[0] == "run":
            _answer(runner.run(int(command[1])))
        elif command[0] == "finish":
            _answer(runner.finish())
            return


def _answer(payload: dict) -> None:
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


class WorkerProcess:
    """Parent-side handle of one worker process."""

    def __init__(self, benchmark: str, argv: list[str], system: str):
        self.system = system
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"bench-{system}-", suffix=".log", delete=False)
        command, env = worker_command(benchmark, argv, "--worker", system)
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1, env=env
        )
        self.error: str | None = None

    def request(self, command: str | None) -> dict | None:
        if self.error:
            return None
        try:
            if command is not None:
                self.proc.stdin.write(command + "\n")
                self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith(PREFIX):
                    return json.loads(line[len(PREFIX) :])
        except (BrokenPipeError, OSError):
            pass
        self.proc.wait()
        self.log.flush()
        with open(self.log.name) as handle:
            self.error = f"exit {self.proc.returncode}: {handle.read()[-1500:]}"
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.log.close()
        os.unlink(self.log.name)


def run_round_robin(
    benchmark: str, argv: list[str], systems: list[str], labels: dict[str, str], steps: int, rounds: int | None
) -> dict:
    """Start one worker per system, warm each up in turn (builds and compilations do not overlap), then time them
    round robin: ``rounds`` rounds (default: one step per system per round), order rotated each round. Each
    result gets ``round_ms``, the mean step of every round, for paired per-round ratios."""
    workers = {}
    try:
        for system in systems:
            workers[system] = WorkerProcess(benchmark, argv, system)
            workers[system].request(None)  # "ready"
            warm = workers[system].request("warmup")
            if warm:
                print(f"  {system:<17} warm-up ms: {', '.join(f'{t:.0f}' for t in warm['warmup_ms'])}", flush=True)
        rounds = max(1, min(rounds or steps, steps))
        order = list(workers)
        round_ms = {system: [] for system in workers}
        for index in range(rounds):
            count = steps // rounds + (1 if index < steps % rounds else 0)
            for system in order:
                answer = workers[system].request(f"run {count}")
                if answer:
                    round_ms[system].append(statistics.fmean(answer["step_ms"]))
            order = order[1:] + order[:1]
        results = {}
        for system, worker in workers.items():
            result = worker.request("finish")
            results[system] = result or {"system": system, "label": labels[system], "error": worker.error}
            results[system]["round_ms"] = round_ms[system]
            r = results[system]
            status = r.get("error", "")[-300:] or f"median {r['step_ms_median']:.1f} ms"
            print(f"  {system:<17} {status}", flush=True)
        return results
    finally:
        for worker in workers.values():
            worker.close()


def training_step_parser(
    benchmark: str,
    description: str,
    presets: dict,
    systems: dict,
    num_batches: int,
    steps: str = "30 paper, 12 cpu-small",
    warmup: str = "3",
    default_systems=None,
    systems_help: str = "",
) -> argparse.ArgumentParser:
    """The options every training-step benchmark takes (kala, roof, trelm); the benchmark adds its own. ``steps``
    and ``warmup`` are their defaults per preset as help text (``parse_training_step_args`` applies them)."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks {benchmark}", description=description)
    p.add_argument("--preset", choices=sorted(presets), default="cpu-small")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--dtype", choices=["bf16", "fp32"], default=None, help="autocast dtype (default: bf16 on cuda, fp32 on cpu)"
    )
    p.add_argument("--steps", type=int, default=None, help=f"timed steps (default: {steps})")
    p.add_argument("--warmup", type=int, default=None, help=f"untimed steps first (default: {warmup})")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed steps are split into this many round-robin rounds (default: one step per round)",
    )
    p.add_argument("--num-batches", type=int, default=num_batches, help="distinct collated batches, cycled")
    p.add_argument(
        "--systems",
        default=",".join(default_systems or systems),
        help=f"comma list of {', '.join(systems)}{systems_help}",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads in the workers (default: torch's)")
    p.add_argument("--json", help="write all results to this JSON file")
    p.add_argument("--markdown", help="also write the markdown report to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p


def parse_training_step_args(
    parser: argparse.ArgumentParser, argv, systems: dict, check_system=None, steps=(30, 12), warmup=(3, 3)
) -> argparse.Namespace:
    """Parsed options with the defaults filled in: dtype by device, ``steps`` and ``warmup`` as (paper, other
    presets), ``--systems`` as a list, each one of ``systems`` or, with ``check_system(name)`` (raises
    ``ValueError``), whatever that accepts."""
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch.cuda.is_available() is False")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    paper = args.preset == "paper"
    args.steps = args.steps if args.steps is not None else steps[not paper]
    args.warmup = args.warmup if args.warmup is not None else warmup[not paper]
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for system in args.systems:
        try:
            if check_system is not None:
                check_system(system)
            elif system not in systems:
                raise ValueError(f"unknown system {system!r}; choose from {list(systems)}")
        except ValueError as error:
            parser.error(str(error))
    return args


def run_training_step_benchmark(
    benchmark: str,
    argv: list[str],
    args,
    preset,
    labels: dict,
    runner_class,
    meta: dict,
    markdown_report,
    measure_more=None,
) -> None:
    """A worker serves its system; the parent adds ``meta`` (the benchmark's own) to what every run records
    (``harness.run_meta`` of the run's ``preset``), times the systems round robin, runs ``measure_more(results)``
    (a dict of further results, or nothing), prints ``markdown_report(meta, results, **more)`` and writes the
    outputs."""
    if args.worker:
        serve(args, args.worker, runner_class)
        return
    meta = {**run_meta(benchmark, argv, args, preset), **meta}
    print(f"# {meta['date']} — {meta['device_name']} — {meta['command']}", flush=True)
    results = run_round_robin(benchmark, argv, args.systems, labels, args.steps, args.rounds)
    more = measure_more(results) if measure_more else {}
    meta["load_after"] = load_average()
    report = markdown_report(meta, results, **more)
    print(report)
    write_outputs(args, report, {"meta": meta, "systems": results, **more})
