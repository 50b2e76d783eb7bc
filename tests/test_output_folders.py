"""The commands that write a folder (build-kg, kg-coverage, check-knowledge, train-kge) write it whole or not at all
(``keplm.io_utils.replaced_folder``): interrupted at any point (an error, Ctrl-C), the earlier output stays as it was
and no partial folder is left beside it; a folder holding other files is refused, not replaced. A model's
``save_pretrained`` (``keplm.io_utils.committed_save``) leaves the earlier model or a folder loading refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from keplm.cli import main
from keplm.io_utils import replaced_folder

from .test_kg_coverage import TEST, TRAIN, _write


def _files(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("interrupt", [RuntimeError("disk full"), KeyboardInterrupt()])
@pytest.mark.parametrize("after_files", [0, 1, 2])
def test_an_interrupted_write_leaves_the_earlier_output(tmp_path, interrupt, after_files):
    target = tmp_path / "out"
    with replaced_folder(target, "report.json", "tool") as staging:
        (staging / "report.json").write_text("{}")
        (staging / "a.json").write_text("old")
    before = _files(target)
    with pytest.raises(type(interrupt)):
        with replaced_folder(target, "report.json", "tool") as staging:
            for i in range(after_files):
                (staging / f"new{i}.json").write_text("new")
            raise interrupt
    assert _files(target) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no partial folder left


def test_a_finished_write_replaces_the_whole_earlier_output(tmp_path):
    target = tmp_path / "out"
    for files in (("report.json", "train.json", "test.json"), ("report.json", "train.json")):
        with replaced_folder(target, "report.json", "tool") as staging:
            for name in files:
                (staging / name).write_text(name)
    assert sorted(_files(target)) == ["report.json", "train.json"]  # no stale test.json from the first run
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_folder_of_other_files_is_refused_not_replaced(tmp_path):
    (tmp_path / "data.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"not an earlier tool output \(no report.json; found \['data.txt'\]\)"):
        with replaced_folder(tmp_path, "report.json", "tool"):
            pass
    assert (tmp_path / "data.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        with replaced_folder(tmp_path / "file", "report.json", "tool"):
            pass


@pytest.mark.parametrize(
    "command",
    [
        ["build-kg", "--task", "ner", "--dataset", "missing_data", "--kg", "missing_kg"],
        ["kg-coverage", "--data", "missing_data", "--kg", "missing_kg"],
        ["check-knowledge", "--model", "missing_model", "--data", "missing_data"],
        ["train-kge", "--kg", "missing_kg"],
    ],
)
def test_a_command_refuses_a_folder_of_other_files_before_its_work(tmp_path, command):
    """Each command checks its --output_dir first: a folder of other files stops it at once (its data, model and KG,
    all missing here, are not read), not after a long run."""
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"output_dir .* holds files that are not an earlier .* output"):
        main([*command, "--output_dir", str(tmp_path)])
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.fixture()
def ner_and_kg(tmp_path, kg):
    data = tmp_path / "ner"
    data.mkdir()
    for split, sentences in (("train", TRAIN), ("valid", TRAIN), ("test", TEST)):
        _write(data, split, sentences)
    kg.save_pretrained(tmp_path / "kg")
    return str(data), str(tmp_path / "kg")


def test_build_kg_interrupted_after_its_first_split_keeps_the_earlier_annotations(ner_and_kg, tmp_path, monkeypatch):
    """The reported data loss: build-kg into the folder of an earlier run, interrupted after writing train.json, used
    to leave the new train.json beside the old validation/test/report files."""
    from keplm.commands import build_kg

    data, kg_dir = ner_and_kg
    out = tmp_path / "annotations"
    args = ["build-kg", "--task", "ner", "--dataset", data, "--kg", kg_dir, "--output_dir", str(out), "--no_plot"]
    main(args)
    before = _files(out)
    assert {"train.json", "validation.json", "test.json", "report.json"} <= set(before)
    written = build_kg.write_kala_annotations

    def interrupted_after_first(annotations, path):
        written(annotations, path)
        raise KeyboardInterrupt

    monkeypatch.setattr(build_kg, "write_kala_annotations", interrupted_after_first)
    with pytest.raises(KeyboardInterrupt):
        main([*args, "--link_case_sensitive"])
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["annotations", "kg", "ner"]


def test_kg_coverage_interrupted_at_its_plot_keeps_the_earlier_report(ner_and_kg, tmp_path, monkeypatch):
    from keplm.commands import kg_coverage

    data, kg_dir = ner_and_kg
    out = tmp_path / "coverage"
    main(["kg-coverage", "--data", data, "--kg", kg_dir, "--output_dir", str(out)])
    before = _files(out)

    def failing_plot(report, path):
        path.write_bytes(b"half a png")
        raise RuntimeError("plot failed")

    monkeypatch.setattr(kg_coverage, "plot", failing_plot)
    with pytest.raises(RuntimeError, match="plot failed"):
        main(["kg-coverage", "--data", data, "--kg", kg_dir, "--train_size", "1", "--output_dir", str(out)])
    assert _files(out) == before
    assert json.loads(before["kg_coverage.json"])["settings"]["train_size"] is None


@pytest.mark.parametrize("fail_at", ["after_kg", "inside_kg"])
def test_train_kge_interrupted_keeps_the_earlier_kg_and_report(kg, tmp_path, monkeypatch, fail_at):
    """train-kge into the folder of an earlier run, interrupted after the new KG is saved (before its report) or
    in the middle of saving it: the earlier KG and report stay as they were, and no partial folder is left."""
    from keplm.knowledge import KnowledgeGraph

    kg.save_pretrained(tmp_path / "source")
    out = tmp_path / "kge"
    args = ["train-kge", "--kg", f"pretrained:{tmp_path / 'source'}", "--output_dir", str(out), "--dim", "4"]
    args += ["--epochs", "1", "--batch_size", "64", "--valid_fraction", "0", "--no_progress"]
    main([*args, "--seed", "1"])
    before = _files(out)
    assert {"kge_report.json", "entity_vectors.safetensors"} <= set(before)
    save = KnowledgeGraph.save_pretrained

    def interrupted(self, folder, *a, **kw):
        if fail_at == "inside_kg":
            (Path(folder) / "entity_vectors.safetensors").write_bytes(b"half a table")
            raise KeyboardInterrupt
        save(self, folder, *a, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(KnowledgeGraph, "save_pretrained", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main([*args, "--seed", "2"])
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kge", "source"]


def test_check_knowledge_interrupted_at_its_plot_keeps_the_earlier_report(tmp_path, monkeypatch):
    """check-knowledge into the folder of an earlier check, failing while it draws its plot (after the new report
    is written): the earlier report and plot stay as they were."""
    from keplm.commands import check_knowledge

    from .test_knowledge_checks import _tiny_setup

    task, splits, model, processor = _tiny_setup("relation", "composition", epochs=0)  # untrained: any model does
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"tokens": r["tokens"]}) + "\n" for r in splits["test_seen"][:6]))
    out = tmp_path / "check"
    args = ["check-knowledge", "--model", str(tmp_path / "model"), "--data", str(data), "--output_dir", str(out)]
    main([*args, "--edits", "relation"])
    before = _files(out)
    assert "knowledge_sensitivity.json" in before and json.loads(before["knowledge_sensitivity.json"])["per_relation"]

    def failing_plot(summary, path):
        Path(path).write_bytes(b"half a png")
        raise RuntimeError("plot failed")

    monkeypatch.setattr(check_knowledge, "plot", failing_plot)
    with pytest.raises(RuntimeError, match="plot failed"):
        main([*args, "--edits", "tail"])
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["check", "data.jsonl", "model"]


# ------------------------------------------------------------------ a model's save_pretrained
def _kala(tokenizer, assets, seed: int):
    from keplm import KalaForTokenClassification

    from .test_kala_model import make_model

    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    with torch.no_grad():  # a second model of the same shape with other weights
        for parameter in model.parameters():
            parameter.add_(seed * 0.01)
    return model


def _weights(folder) -> dict:
    from keplm import KalaForTokenClassification

    model = KalaForTokenClassification.from_pretrained(folder)
    return {name: value.clone() for name, value in model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("fail_at", ["weights", "knowledge", 0, 1])
def test_an_interrupted_model_save_leaves_the_earlier_model_or_a_refused_folder(
    tmp_path, tokenizer, assets, monkeypatch, fail_at
):
    """A save interrupted while writing (the weights, the knowledge assets) leaves the earlier model exactly; one
    interrupted while moving into the folder (after the k-th move) leaves a folder loading refuses (no config.json),
    never new weights beside the old config; the run's other files stay in every case."""
    import keplm.io_utils
    import keplm.modeling.base

    target = tmp_path / "model"
    old, new = _kala(tokenizer, assets, 1), _kala(tokenizer, assets, 2)
    old.save_pretrained(target)
    (target / "all_results.json").write_text("{}")
    before = _weights(target)
    if fail_at == "weights":
        monkeypatch.setattr(
            keplm.modeling.base.PreTrainedModel, "save_pretrained", lambda *a, **k: (_ for _ in ()).throw(OSError())
        )
    elif fail_at == "knowledge":
        new.set_knowledge_assets(make_assets_with_other_counts(assets))
        monkeypatch.setattr(
            type(new.knowledge_assets), "save_pretrained", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt())
        )
    else:
        moves = []
        real = keplm.io_utils.os.replace

        def replace(source, destination):
            if len(moves) == fail_at:
                raise KeyboardInterrupt
            moves.append(destination)
            real(source, destination)

        monkeypatch.setattr(keplm.io_utils.os, "replace", replace)
    with pytest.raises((OSError, KeyboardInterrupt)):
        new.save_pretrained(target)
    monkeypatch.undo()
    assert (target / "all_results.json").is_file()
    assert not list(tmp_path.glob(".model.*")), "no staging folder is left beside the model"
    if (target / "config.json").is_file():
        assert _same(_weights(target), before)
    else:
        assert isinstance(fail_at, int)
        with pytest.raises(FileNotFoundError, match="has no config.json"):
            _weights(target)
    new.save_pretrained(target)  # the next save completes
    assert not _same(_weights(target), before)


def make_assets_with_other_counts(assets):
    from keplm.knowledge.assets import KnowledgeAssets

    counts = [7] * len(assets.entity_vocab)
    return KnowledgeAssets(list(assets.entity_vocab), list(assets.relation_vocab), entity_counts=counts, kg=assets.kg)


def test_each_save_serves_itself_unsharded_sharded_then_unsharded(tmp_path, tokenizer, assets):
    """An earlier save's weight files the new save lacks are removed: after an unsharded save a sharded one loads its
    own weights (not the old model.safetensors, which loading prefers), and the other way round."""
    target = tmp_path / "model"
    for seed, shard in ((1, None), (2, "20KB"), (3, None)):
        model = _kala(tokenizer, assets, seed)
        model.save_pretrained(target, **({"max_shard_size": shard} if shard else {}))
        assert _same(_weights(target), {k: v for k, v in model.state_dict().items()})
        names = {p.name for p in target.iterdir()}
        assert ("model.safetensors" in names) == (shard is None)
        assert ("model.safetensors.index.json" in names) == (shard is not None)


def test_an_interrupted_processor_save_leaves_a_folder_loading_refuses(tmp_path, tokenizer, assets, monkeypatch):
    """processor_config.json is removed before the tokenizer is rewritten and written last: a processor save
    interrupted in between is refused on load, naming the missing file, not read as the new tokenizer with the old
    processor's settings; the next save completes."""
    from keplm import KalaProcessor

    target = tmp_path / "model"
    KalaProcessor(tokenizer, assets).save_pretrained(target)
    other = KalaProcessor(tokenizer, assets, use_inverse_relations=False)
    monkeypatch.setattr(type(tokenizer), "save_pretrained", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        other.save_pretrained(target)
    monkeypatch.undo()
    with pytest.raises((FileNotFoundError, OSError), match="processor_config.json"):
        KalaProcessor.from_pretrained(target)
    other.save_pretrained(target)
    assert KalaProcessor.from_pretrained(target).processor_config() == other.processor_config()


def test_results_files_are_written_whole(tmp_path, monkeypatch):
    """The Trainer's ``{split}_results.json`` and ``all_results.json`` go through a temporary file renamed over them:
    a write interrupted before the rename leaves the earlier file as it was and no temporary file; a finished one
    merges into all_results.json as the stock Trainer does."""
    from transformers import TrainingArguments

    import keplm.io_utils
    from keplm.training.trainer import KeplmTrainer

    from .test_reliability_nonfinite import _Regression

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, disable_tqdm=True)
    trainer = KeplmTrainer(model=_Regression(), args=args)
    trainer.save_metrics("eval", {"eval_f1": 1.0})
    before = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    monkeypatch.setattr(keplm.io_utils.os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        trainer.save_metrics("eval", {"eval_f1": 2.0})
    monkeypatch.undo()
    assert {p.name: p.read_text() for p in tmp_path.glob("*.json")} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all_results.json", "eval_results.json"]
    trainer.save_metrics("predict", {"predict_f1": 3.0})
    assert json.loads((tmp_path / "all_results.json").read_text()) == {"eval_f1": 1.0, "predict_f1": 3.0}


def _plant_scratch(folder, name: str) -> list:
    """What killed writes of ``name`` leave in ``folder``: a folder or file being written, an earlier one set aside."""
    planted = []
    for kind in ("partial", "saving", "old"):
        leftover = folder / f".{name}.{kind}-0123abcd"
        leftover.mkdir(parents=True)
        (leftover / "weights.safetensors").write_text("stale")
        planted.append(leftover)
    file_leftover = folder / f".{name}.partial-89abcdef"
    file_leftover.write_text("{")
    return [*planted, file_leftover]


def test_the_next_write_removes_what_killed_writes_left(tmp_path, tokenizer, assets):
    """A kill (no cleanup) leaves hidden staging and set-aside folders and files; the next write of the same target
    (a command's folder, a model save, a results file) removes them, including a model's ``.knowledge.old-*``
    inside its folder, and leaves other hidden files and other targets' leftovers alone."""
    from keplm.io_utils import write_json_whole

    others = [tmp_path / ".notes", tmp_path / ".other.old-0123abcd"]
    for other in others:
        other.mkdir()
    leftovers = _plant_scratch(tmp_path, "out")
    with replaced_folder(tmp_path / "out", "report.json", "tool") as staging:
        (staging / "report.json").write_text("{}")
    assert not any(p.exists() for p in leftovers)

    model = _kala(tokenizer, assets, 1)
    model.save_pretrained(tmp_path / "model")
    leftovers = _plant_scratch(tmp_path, "model") + _plant_scratch(tmp_path / "model", "knowledge")
    model.save_pretrained(tmp_path / "model")
    assert not any(p.exists() for p in leftovers)
    assert sorted(p.name for p in (tmp_path / "model").iterdir() if p.name.startswith(".")) == []

    leftovers = _plant_scratch(tmp_path, "all_results.json")
    write_json_whole(tmp_path / "all_results.json", {"f1": 1.0})
    assert not any(p.exists() for p in leftovers)
    assert all(other.is_dir() for other in others)


SAVE_LOOP = """
import sys
import torch
from keplm import KalaForTokenClassification
from tests.conftest import make_assets, make_kg, make_tokenizer
from tests.test_kala_model import make_model

assets = make_assets(make_kg())
models = [make_model(KalaForTokenClassification, make_tokenizer(), assets, num_labels=3) for _ in range(2)]
with torch.no_grad():
    for parameter in models[1].parameters():
        parameter.add_(0.01)
target, references = sys.argv[1], sys.argv[2:]
for model, reference in zip(models, references):
    model.save_pretrained(reference)
models[0].save_pretrained(target)
print("ready", flush=True)
step = 0
while True:  # saves until killed
    models[step % 2].save_pretrained(target)
    step += 1
"""


def test_a_model_save_killed_at_any_moment_leaves_a_whole_model_or_a_refused_folder(tmp_path):
    """SIGKILL (no handler, no cleanup) at several moments of a process saving two models in turn into one folder:
    what is left loads as exactly one of the two, or is refused for its missing config.json; never a mix. Where a
    kill lands is timing: with the plain save put back, these 8 kills caught a mix in 1 of 2 runs; the injected
    interruptions above pin each point deterministically."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    references = [tmp_path / "a", tmp_path / "b"]
    expected = None
    outcomes = []
    for attempt, delay in enumerate((0.0, 0.03, 0.07, 0.13, 0.19, 0.29, 0.37, 0.47)):
        target = tmp_path / f"model{attempt}"
        child = subprocess.Popen(
            [sys.executable, "-c", SAVE_LOOP, str(target), *map(str, references)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"},
            cwd=root,
        )
        try:
            lines = iter(child.stdout.readline, "")
            assert "ready" in (line.strip() for line in lines), "the saving process ended before its first save"
            time.sleep(delay)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        if expected is None:
            expected = [_weights(reference) for reference in references]
        if (target / "config.json").is_file():
            left = _weights(target)
            matches = [_same(left, weights) for weights in expected]
            assert any(matches), f"killed after {delay} s: the folder mixes the two saves"
            outcomes.append(matches.index(True))
        else:
            with pytest.raises(FileNotFoundError, match="has no config.json"):
                _weights(target)
            outcomes.append("refused")
    assert outcomes  # which of whole / refused each kill left depends on timing; every one was one of them
    from keplm import KalaForTokenClassification

    again = KalaForTokenClassification.from_pretrained(references[0])
    for attempt in range(8):  # the next save into each killed folder leaves nothing hidden beside or in it
        again.save_pretrained(tmp_path / f"model{attempt}")
    hidden = [p.name for p in tmp_path.rglob(".*")]
    assert not hidden, hidden


def _earlier_run(folder) -> None:
    """An earlier run's leftovers in ``folder`` (a later checkpoint, results, card, predictions) and a file of the
    user's."""
    (folder / "checkpoint-500").mkdir(parents=True)
    (folder / "checkpoint-500" / "trainer_state.json").write_text("{}")
    for name in ("predict_results.json", "all_results.json", "trainer_state.json"):
        (folder / name).write_text('{"predict_f1": 99.0}')
    for name in ("README.md", "predictions.txt"):
        (folder / name).write_text("earlier")
    (folder / "figures").mkdir()
    (folder / "notes.txt").write_text("mine")


def test_a_new_training_run_clears_the_earlier_runs_outputs_first(tmp_path):
    """A training run that is not resumed removes an earlier run's checkpoints, results, card and predictions before
    it writes (a user's other files and the earlier model stay until replaced); a resumed run, or one that does not
    train, removes nothing; starting from a model inside those outputs is a ValueError."""
    from keplm.training import runtime
    from keplm.training.arguments import KeplmTrainingArguments

    def args(**options):
        return KeplmTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, **options)

    project = tmp_path / "project"  # a folder no run wrote: its README.md and figures/ are the user's
    (project / "figures").mkdir(parents=True)
    (project / "README.md").write_text("mine")
    in_project = KeplmTrainingArguments(output_dir=str(project), report_to="none", use_cpu=True, do_train=True)
    assert runtime.clear_earlier_run(in_project) == []
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "figures"]
    _earlier_run(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # the earlier model: replaced by the new save, not removed here
    assert runtime.clear_earlier_run(args(do_train=False, do_predict=True)) == []
    assert runtime.clear_earlier_run(args(do_train=True, resume_from_checkpoint="last")) == []
    with pytest.raises(ValueError, match="checkpoint-500 is an earlier run's output"):
        runtime.clear_earlier_run(args(do_train=True), str(tmp_path / "checkpoint-500"))
    removed = runtime.clear_earlier_run(args(do_train=True), str(tmp_path))
    assert sorted(removed) == sorted(
        ["checkpoint-500", "predict_results.json", "all_results.json", "README.md", "predictions.txt"]
        + ["trainer_state.json", "figures"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "notes.txt", "project"]


def test_run_ner_into_an_earlier_runs_folder_leaves_no_earlier_result_beside_its_own(tmp_path, tiny):
    """run_ner trained (without predicting) into a folder an earlier run filled: the earlier predictions and the
    later checkpoint are gone, so neither passes for this run's, and resuming from the newest checkpoint finds this
    run's."""
    from .test_run_scripts import load_script, ner_args

    out = tmp_path / "run"
    _earlier_run(out)
    load_script("run_ner").main(
        ner_args(tiny, out, "vanilla", "--do_train", "--save_strategy", "steps", "--save_steps", "2")
    )
    names = {p.name for p in out.iterdir()}
    assert {"predict_results.json", "predictions.txt", "checkpoint-500"}.isdisjoint(names), names
    assert {"train_results.json", "config.json", "checkpoint-2", "notes.txt"} <= names
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
