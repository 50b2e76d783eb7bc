"""One process per benchmarked system, driven in interleaved rounds by the parent.

Each worker builds its model, optimizer and batches once, then runs the steps the parent asks for. Systems
take turns (round robin, order rotated every round), so slow drifts of the machine (other jobs on a shared
CPU, GPU clocks) hit all of them alike, while memory and torch.compile state stay isolated per process.
Protocol: the parent writes one command per line on stdin (``warmup``, ``run N``, ``finish``); the worker
answers one ``@@{json}`` line on stdout. Worker stderr (compile logs) goes to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from harness import (
    RecompileCounter,
    build_model,
    dynamo_counts,
    is_compiled,
    make_batches,
    make_optimizer,
    make_step,
    peak_rss_kib,
    reset_peak_rss,
    rss_kib,
    synchronize,
    system_label,
    system_preset,
    timed,
    uses_knowledge,
)
from synthetic import PRESETS

PREFIX = "@@"


class StepRunner:
    """The timing loop every benchmarked system shares. A subclass sets ``args``, ``system``, ``device``,
    ``batches``, ``batch_size``, ``model``, ``optimizer`` and ``baseline_kib`` (RSS before the model was built) and
    defines ``step(batch)``; :meth:`timing` is the common part of its ``finish()`` result."""

    position = 0
    times: list[float]
    warmup_times: list[float]

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
            memory = {"peak_memory_mib": torch.cuda.max_memory_allocated(self.device) / 2**20,
                      "memory_kind": "torch.cuda.max_memory_allocated during the timed steps"}
        else:
            peak = peak_rss_kib()
            memory = {"peak_memory_mib": (peak - self.baseline_kib) / 1024 if peak and self.baseline_kib else None,
                      "memory_kind": "peak RSS during the timed steps - RSS before the model was built"}
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


class Runner(StepRunner):
    """KALA's systems (bench_kala.py): model, optimizer, optional torch.compile and batches of one system."""

    def __init__(self, args, system: str):
        self.args, self.system = args, system
        _, self.preset = system_preset(system, PRESETS[args.preset])  # SYSTEM@ROWS: a resized entity memory
        self.batch_size = self.preset.batch_size
        self.device = torch.device(args.device)
        if args.threads:
            torch.set_num_threads(args.threads)
        self.batches = make_batches(self.preset, args.num_batches, args.graph_pad, uses_knowledge(system), args.seed,
                                    pin=self.device.type == "cuda")
        self.baseline_kib = rss_kib()
        self.model = build_model(system, self.preset, args.seed).to(self.device).train()
        self.optim = "adamw" if system == "stock-bert" else args.optim
        self.optimizer = make_optimizer(self.model, self.optim, system)
        self.compiled = is_compiled(system, args.compile)
        self.counter = RecompileCounter() if self.compiled else None
        forward = self.model
        if self.compiled:
            dynamic = {"auto": None, "true": True, "false": False}[args.compile_dynamic]
            forward = torch.compile(self.model, dynamic=dynamic, mode=args.compile_mode)
        self.step = make_step(self.model, forward, self.optimizer, self.device, args.dtype)
        self.recompiles_in_warmup = 0

    def after_warmup(self) -> None:
        self.recompiles_in_warmup = self.counter.count if self.counter else 0

    def finish(self) -> dict:
        result = {
            **self.timing(),
            "label": system_label(self.system),
            "optim": self.optim,
            "compiled": self.compiled,
            "nodes_per_batch": (statistics.fmean(b["node_entity_ids"].shape[0] for b in self.batches)
                                if uses_knowledge(self.system) else None),
        }
        result.pop("trainable_m")
        if self.compiled:
            result.update(dynamo_counts(), recompiles_in_warmup=self.recompiles_in_warmup,
                          recompiles_in_timed_steps=self.counter.count - self.recompiles_in_warmup,
                          recompile_reasons=self.counter.reasons)
        return result


def static_training_mib(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """fp32 weights + dense gradients (sparse-gradient tables have none to speak of) + every tensor in the
    optimizer's state as allocated (AdamW: m and v, 8 B/param; row-wise AdaGrad: 4 B per table row)."""
    sparse = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse}
    total = sum(p.numel() * p.element_size() * (1 if id(p) in sparse else 2) for p in model.parameters())
    for part in (getattr(optimizer, "dense", optimizer), getattr(optimizer, "tables", None)):
        for state in (part.state.values() if part is not None else ()):
            total += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
    return total / 2**20


def serve(args, system: str, runner_class=None) -> None:
    """Worker main loop (``bench_kala.py --worker SYSTEM``); ``runner_class`` (default: KALA's :class:`Runner`)
    has ``warmup()``, ``run(count)`` and ``finish()``."""
    runner = (runner_class or Runner)(args, system)
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

    def __init__(self, script: str, argv: list[str], system: str):
        self.system = system
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"bench-{system}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, script, *argv, "--worker", system], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
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
                    return json.loads(line[len(PREFIX):])
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


def run_round_robin(script: str, argv: list[str], systems: list[str], labels: dict[str, str], steps: int,
                    rounds: int | None) -> dict:
    """Start one worker per system, warm each up in turn (builds and compilations do not overlap), then time them
    round robin: ``rounds`` rounds (default: one step per system per round), order rotated each round. Each
    result gets ``round_ms``, the mean step of every round, for paired per-round ratios."""
    workers = {}
    try:
        for system in systems:
            workers[system] = WorkerProcess(os.path.abspath(script), argv, system)
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


def ratio(results: dict, system: str, base: str, key: str = "step_ms_median") -> float | None:
    """``key`` of ``system`` over ``base``; step times: the median of the paired per-round ratios (``round_ms``)."""
    a, b = results.get(system, {}), results.get(base, {})
    if a.get(key) is None or not b.get(key):
        return None
    if key == "step_ms_median" and a.get("round_ms") and len(a["round_ms"]) == len(b.get("round_ms", [])):
        return statistics.median(x / y for x, y in zip(a["round_ms"], b["round_ms"]))
    return a[key] / b[key]


def fmt(value, digits: int = 2, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def write_outputs(args, report: str, payload: dict) -> None:
    """The markdown report to ``--markdown`` and the JSON payload to ``--json`` (folders created)."""
    for path, text in ((args.markdown, report), (args.json, json.dumps(payload, indent=1) if args.json else None)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)


def training_step_parser(description: str, presets: dict, systems: dict, num_batches: int) -> argparse.ArgumentParser:
    """The options every training-step benchmark takes (bench_roof.py, bench_trelm.py); add the script's own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", choices=sorted(presets), default="cpu-small")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default: 30 paper, 12 cpu-small)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=None, help="round-robin rounds (default: one step per round)")
    p.add_argument("--num-batches", type=int, default=num_batches, help="distinct collated batches, cycled")
    p.add_argument("--systems", default=",".join(systems), help=f"comma list of {', '.join(systems)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", help="write all results to this JSON file")
    p.add_argument("--markdown", help="also write the markdown report to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p


def parse_training_step_args(parser: argparse.ArgumentParser, argv, systems: dict) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch.cuda.is_available() is False")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.steps = args.steps if args.steps is not None else (30 if args.preset == "paper" else 12)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in systems]
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {list(systems)}")
    return args


def run_training_step_benchmark(script: str, argv: list[str], args, systems: dict, runner_class, meta: dict,
                                markdown_report) -> None:
    """A worker serves its system; the parent completes ``meta`` (date, command, device, versions, load), times
    the systems round robin, prints ``markdown_report(meta, results)`` and writes the outputs."""
    import datetime

    import transformers
    from harness import device_name, load_average
    from report_paths import command_line

    if args.worker:
        serve(args, args.worker, runner_class)
        return
    meta = {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": command_line(f"benchmarks/{Path(script).name}", argv), "device": args.device,
        "device_name": device_name(torch.device(args.device)), "preset": args.preset, **meta,
        "dtype": args.dtype, "steps": args.steps, "warmup": args.warmup, "num_batches": args.num_batches,
        "rounds": min(args.rounds or args.steps, args.steps), "threads": args.threads or torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__, "python": sys.version.split()[0],
        "load_before": load_average(),
    }
    print(f"# {meta['date']} — {meta['device_name']} — {meta['command']}", flush=True)
    results = run_round_robin(script, argv, args.systems, systems, args.steps, args.rounds)
    meta["load_after"] = load_average()
    report = markdown_report(meta, results)
    print(report)
    write_outputs(args, report, {"meta": meta, "systems": results})
