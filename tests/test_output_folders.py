"""The commands that write a folder (build-kg, kg-coverage, check-knowledge, train-kge) write it whole or not at all
(``keplm.io_utils.replaced_folder``): interrupted at any point (an error, Ctrl-C), the earlier output stays as it was
and no partial folder is left beside it; a folder holding other files is refused, not replaced."""

from __future__ import annotations

import json

import pytest

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
