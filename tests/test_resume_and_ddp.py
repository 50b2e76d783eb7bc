"""Beyond single inputs: a run killed with SIGKILL mid-epoch and resumed from its checkpoint ends exactly where an
uninterrupted run ends (entity-memory optimizer state, RNG state and data order included), with no pickle in any
output folder; and a 2-process CPU DDP run follows the 1-process loss curve with the same global batch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from keplm.push_utils import pickled_files

from .run_args import QUIET
from .test_ddp import accelerate_ddp, launch
from .test_run_glue import glue_args, write_glue_files
from .test_run_scripts import ROOT, _conll_dir, linked_ner_inputs, write_tiny_files

#: runs a run script's main in a fresh process; with KEPLM_TEST_KILL_AT=N the process SIGKILLs itself after step N
KILLABLE = """
import os, signal, sys
sys.path.insert(0, {root!r})
from transformers import TrainerCallback
import keplm.training.trainer as trainer_module

class Kill(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == int(os.environ["KEPLM_TEST_KILL_AT"]):
            os.kill(os.getpid(), signal.SIGKILL)

if os.environ.get("KEPLM_TEST_KILL_AT"):
    original = trainer_module.KeplmTrainer.__init__
    def patched(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.add_callback(Kill())
    trainer_module.KeplmTrainer.__init__ = patched
import importlib.util
spec = importlib.util.spec_from_file_location("run_script", {script!r})
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
module.main(sys.argv[1:])
"""


def _run(args, env_extra=None, expect_kill=False, script="run_ner"):
    code = KILLABLE.format(root=str(ROOT), script=str(ROOT / "run_scripts" / f"{script}.py"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **(env_extra or {})}
    result = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if expect_kill:
        assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    else:
        assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.slow
def test_resume_after_sigkill_reaches_the_uninterrupted_result(tmp_path, tokenizer, kg):
    tiny = write_tiny_files(tmp_path / "tiny", tokenizer, kg)

    def args(out, *extra):
        return [
            *linked_ner_inputs(tiny, out),
            "--do_eval",
            "--max_steps",
            "8",
            "--per_device_train_batch_size",
            "3",
            "--learning_rate",
            "1e-3",
            "--entity_memory_optimizer",
            "rowwise_adagrad",
            "--save_strategy",
            "steps",
            "--save_steps",
            "2",
            "--logging_steps",
            "1",
            *QUIET,
            "--use_cpu",
            "--seed",
            "3",
            *extra,
        ]

    _run(args(tmp_path / "whole"))
    _run(args(tmp_path / "killed"), {"KEPLM_TEST_KILL_AT": "5"}, expect_kill=True)  # mid-epoch 2 of 3 steps
    assert (tmp_path / "killed" / "checkpoint-4").is_dir() and not (tmp_path / "killed" / "checkpoint-6").exists()
    # a kill in the middle of the next save: checkpoint-6 half written, without the trainer_state.json written last
    partial = tmp_path / "killed" / "checkpoint-6"
    shutil.copytree(tmp_path / "killed" / "checkpoint-4", partial)
    (partial / "trainer_state.json").unlink()
    (partial / "model.safetensors").write_bytes((partial / "model.safetensors").read_bytes()[:100])
    _run(args(tmp_path / "killed", "--resume_from_checkpoint", "True"))  # the newest complete one: checkpoint-4
    whole, resumed = (
        load_file(tmp_path / "whole" / "model.safetensors"),
        load_file(tmp_path / "killed" / "model.safetensors"),
    )
    for name, tensor in whole.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-5, atol=1e-5, msg=name)
    losses = [
        {
            h["step"]: h["loss"]
            for h in json.loads((tmp_path / run / "trainer_state.json").read_text())["log_history"]
            if "loss" in h
        }
        for run in ("whole", "killed")
    ]
    assert all(losses[1][step] == pytest.approx(losses[0][step], rel=1e-5) for step in range(5, 9))
    evals = [json.loads((tmp_path / run / "eval_results.json").read_text()) for run in ("whole", "killed")]
    assert evals[1]["eval_loss"] == pytest.approx(evals[0]["eval_loss"], rel=1e-5)
    for run in ("whole", "killed"):  # the optimizer, scheduler and RNG states are safetensors + JSON
        assert pickled_files(tmp_path / run) == [], run
        assert (tmp_path / run / "checkpoint-8" / "optimizer.safetensors").is_file()


@pytest.mark.slow
def test_two_process_ddp_follows_the_one_process_loss_curve(tmp_path, tokenizer, kg):
    """Same global batch (2 × 1 vs 1 × 2), sequential order, no dropout, sentences of equal length (so the mean of
    the two ranks' token-averaged losses is the global token average): the loss curves agree to fp32 precision."""
    tiny = write_tiny_files(tmp_path / "tiny", tokenizer, kg)
    sentences = [
        ("john lives in paris .", "B-PER O O B-LOC O"),
        ("mary visited berlin .", "B-PER O B-LOC O"),
        ("john visited london .", "B-PER O B-LOC O"),
        ("mary lives in germany .", "B-PER O O B-LOC O"),
        ("the seine flows through france .", "O B-LOC O O B-LOC O"),
        ("mary works for acme bank .", "B-PER O O B-ORG I-ORG O"),
    ]
    # pairs of equal labelled-token counts: (5, 4) would not average alike, so reorder into equal pairs
    ordered = [sentences[0], sentences[3], sentences[1], sentences[2], sentences[4], sentences[5]]
    data = _conll_dir(tmp_path / "equal", {"train": ordered, "valid": ordered[:2]})
    common = [
        "--model_name_or_path",
        tiny["model"],
        "--dataset_name",
        data,
        "--system",
        "pointwise",
        "--knowledge",
        "link",
        "--kg",
        tiny["kg"],
        "--do_train",
        "--max_steps",
        "3",
        "--entity_dropout",
        "0",
        "--train_sampling_strategy",
        "sequential",
        "--learning_rate",
        "1e-2",
        "--save_strategy",
        "no",
        "--logging_steps",
        "1",
        *QUIET,
        "--seed",
        "0",
    ]
    log = _one_process_and_ddp(tmp_path, common, "run_ner")
    assert "2 process(es), distributed=distributed" in log


def _one_process_and_ddp(tmp_path, common: list[str], script: str) -> str:
    """``script`` with ``common`` in one process (batch 2) and under ``accelerate launch`` in two (batch 1 each): the
    same three-step loss curve, no pickles; the two-process run's log."""
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    _run([*common, "--output_dir", str(single), "--per_device_train_batch_size", "2", "--use_cpu"], script=script)
    command = [*accelerate_ddp(script), *common, "--output_dir", str(ddp), "--per_device_train_batch_size", "1"]
    log = launch(command, tmp_path)
    _assert_same_loss_curves(single, ddp, steps=3)
    return log


def _assert_same_loss_curves(single, ddp, steps: int) -> None:
    curves = [
        [h["loss"] for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in h]
        for out in (single, ddp)
    ]
    assert len(curves[0]) == len(curves[1]) == steps
    assert curves[1] == pytest.approx(curves[0], rel=1e-4)
    assert pickled_files(ddp) == [] and pickled_files(single) == []


@pytest.mark.slow
@pytest.mark.parametrize("fusion", ["transformer", "cached"])
def test_two_process_ddp_roof_follows_the_one_process_loss_curve(tmp_path, tokenizer, kg, fusion):
    """Roof-Transformer under ``accelerate launch`` (2 CPU processes): every parameter of the TASK encoder, KB encoder
    (or the frozen cached one) and roof takes part in each step, and the loss curve is the 1-process one."""
    tiny = write_tiny_files(tmp_path / "tiny", tokenizer, kg)
    files = write_glue_files(tmp_path / "glue")
    cached = ["--knowledge_cache_dir", str(tmp_path / "cache"), "--cached_knowledge_encoder"]
    common = [
        a
        for a in glue_args(tiny, files, "unused", "--system", "roof", *(cached if fusion == "cached" else []))
        if a != "--use_cpu"
    ]
    common = _replace(common, {"--output_dir": None, "--max_steps": "3", "--per_device_train_batch_size": None})
    common += ["--train_sampling_strategy", "sequential", "--learning_rate", "1e-2", "--logging_steps", "1"]
    log = _one_process_and_ddp(tmp_path, common, "run_glue")
    assert "2 process(es), distributed=distributed, find_unused_parameters=False" in log


def _replace(args: list[str], values: dict) -> list[str]:
    """``args`` with each ``--option value`` pair of ``values`` replaced (None: removed)."""
    out, i = [], 0
    while i < len(args):
        if args[i] in values:
            if values[args[i]] is not None:
                out += [args[i], values[args[i]]]
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out
