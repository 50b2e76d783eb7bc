"""No silent engine fallback (issue 27): FSDP asked for on a machine where accelerate runs plain CPU DDP is an error
that says so; asking for DeepSpeed keeps keplm from forcing accelerate's CPU mode (which switches DeepSpeed off)."""

from __future__ import annotations

import os
import subprocess

import pytest
from transformers import TrainingArguments

from keplm.training.engines import asked_engines, asks_for_deepspeed
from tests.test_ddp import launch, launch_env, torchrun
from tests.test_run_scripts import ROOT, linked_ner_inputs, write_tiny_files


def test_the_engines_asked_for_are_read_from_the_arguments_and_accelerates_launch_environment(tmp_path):
    plain = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert asked_engines(plain, environ={}) == {}
    assert asked_engines(plain, environ={"ACCELERATE_USE_FSDP": "true", "ACCELERATE_USE_DEEPSPEED": "1"}) == {
        "FSDP": "accelerate launch --use_fsdp (ACCELERATE_USE_FSDP)",
        "DeepSpeed": "accelerate launch --use_deepspeed (ACCELERATE_USE_DEEPSPEED)",
    }
    assert asked_engines(plain, environ={"ACCELERATE_USE_FSDP": "false"}) == {}
    assert asks_for_deepspeed(["--deepspeed", "ds.json"], environ={}) == "--deepspeed"
    assert asks_for_deepspeed(["--deepspeed=ds.json"], environ={}) == "--deepspeed"
    assert asks_for_deepspeed(["--do_train"], environ={}) is None


@pytest.mark.slow
@pytest.mark.parametrize("asked", ["accelerate", "trainer"])
def test_fsdp_on_a_cpu_machine_is_an_error_naming_what_would_run_instead(tmp_path, tokenizer, kg, asked):
    """Two processes (torchrun, as ``accelerate launch --multi_gpu`` starts them) asking for FSDP through accelerate's
    environment or the Trainer's ``--fsdp``: accelerate would run MULTI_CPU DDP; the run stops before training with
    a ValueError that names the request, the engine that would run and why."""
    tiny = write_tiny_files(tmp_path / "tiny", tokenizer, kg)
    command = torchrun(
        "run_ner",
        *linked_ner_inputs(tiny, tmp_path / "out"),
        "--max_steps",
        "1",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
    )
    env = launch_env(tmp_path)
    if asked == "accelerate":
        env["ACCELERATE_USE_FSDP"] = "true"
        how = "accelerate launch --use_fsdp (ACCELERATE_USE_FSDP)"
    else:
        command += ["--fsdp", "full_shard"]
        how = "--fsdp"
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode != 0, log[-4000:]
    assert (
        f"ValueError: FSDP was asked for ({how}) but accelerate runs MULTI_CPU (accelerate applies it only on "
        "GPUs" in log
    ), log[-4000:]
    assert "Drop the FSDP option to train with plain data parallelism knowingly" in log
    assert not (tmp_path / "out" / "train_results.json").exists()


def test_a_deepspeed_launch_without_accelerators_is_a_clear_error(monkeypatch, tmp_path):
    """A multi-process launch without accelerators gets ``ACCELERATE_USE_CPU`` (CPU DDP over gloo). Asking for
    DeepSpeed there (on the command line, in a JSON settings file, or by accelerate) is a ValueError: CPU mode would
    switch DeepSpeed off, and without it accelerate counts one process where DeepSpeed counts two, which ended in
    DeepSpeed's batch-size assertion."""
    from dataclasses import dataclass

    from keplm.training.arguments import parse_args

    @dataclass
    class Settings:
        deepspeed: str | None = None

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    parse_args((Settings,), [])
    assert os.environ.get("ACCELERATE_USE_CPU") == "true"
    settings_file = tmp_path / "settings.json"
    settings_file.write_text('{"deepspeed": "ds.json"}')
    for argv, how in ((["--deepspeed", "ds.json"], "--deepspeed"), ([str(settings_file)], "ds.json")):
        with pytest.raises(
            ValueError,
            match=rf"DeepSpeed was asked for \({how}\) in a multi-process launch on a "
            "machine without GPUs",
        ):
            parse_args((Settings,), argv)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match=r"accelerate launch --use_deepspeed .* deepspeed\.initialize in your own"):
        parse_args((Settings,), [])
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("LOCAL_RANK")
    parse_args((Settings,), [])  # one process: the Trainer's engine check says what runs instead


@pytest.mark.slow
def test_cpu_ddp_is_a_cpu_run_so_bf16_is_not_refused(tmp_path, tokenizer, kg):
    """torchrun with two CPU processes and --bf16 (without --use_cpu): the training arguments get use_cpu as well,
    so the run trains with CPU autocast instead of failing with transformers' "Your setup doesn't support bf16/gpu"."""
    import json

    tiny = write_tiny_files(tmp_path / "tiny", tokenizer, kg)
    out = tmp_path / "out"
    command = torchrun(
        "run_ner",
        *linked_ner_inputs(tiny, out),
        "--max_steps",
        "2",
        "--bf16",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "1",
    )
    log = launch(command, tmp_path)
    assert "2 process(es), distributed=distributed" in log
    results = json.loads((out / "train_results.json").read_text())
    assert results["train_loss"] == results["train_loss"]  # trained, loss not NaN
