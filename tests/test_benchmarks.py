"""The benchmarks package: its one entry point (``python -m benchmarks <name>``) and worker command line, the shared
report table, and the KALA benchmark's entity-memory scale option (``SYSTEM@ROWS``): parsing, the resized preset and
model, and the memory-growth target it reports."""

from __future__ import annotations

import pytest


@pytest.fixture()
def bench():
    from benchmarks import harness, kala, synthetic

    return harness, synthetic, kala


def test_system_at_rows_parses_and_names_what_is_wrong(bench):
    harness, _, _ = bench
    assert harness.split_system("relational") == ("relational", None)
    assert harness.split_system("relational-rowwise@5M") == ("relational-rowwise", 5_000_000)
    assert harness.split_system("pointwise@500k") == ("pointwise", 500_000)
    assert harness.split_system("relational@1.5m") == ("relational", 1_500_000)
    assert harness.system_label("relational-rowwise@500k").endswith(", 500,000 entities")
    for name, message in (
        ("vanilla@5M", "no entity memory"),
        ("relational@5x", "row count"),
        ("nope@5M", "unknown system"),
        ("relational@1", "at least 2 rows"),
    ):
        with pytest.raises(ValueError, match=message):
            harness.split_system(name)
    with pytest.raises(SystemExit):
        bench[2].parse_args(["--systems", "vanilla,stock-bert@5M"])


def test_resized_memory_keeps_the_graphs_and_spreads_ids_over_the_table(bench):
    harness, synthetic, _ = bench
    preset = synthetic.PRESETS["cpu-small"]
    base, scaled = harness.system_preset("relational-rowwise@2M", preset)
    assert base == "relational-rowwise" and scaled.entity_vocab_size == 2_000_000
    assert harness.system_preset("relational", preset)[1] is preset
    small = synthetic.make_features(preset, 8, seed=3)
    large = synthetic.make_features(scaled, 8, seed=3)
    for a, b in zip(small, large):  # the same graphs and mentions: only the entity ids differ
        assert a["edge_index"] == b["edge_index"] and a["entity_token_map"] == b["entity_token_map"]
        assert [i == 0 for i in a["node_entity_ids"]] == [i == 0 for i in b["node_entity_ids"]]
    ids = [i for f in large for i in f["node_entity_ids"]]
    assert max(ids) < 2_000_000 and max(ids) >= preset.entity_vocab_size  # drawn over the larger table
    model = harness.build_model("pointwise@70k", preset)
    assert model.kala.entity_memory.num_entities == 70_000


def test_table_growth_is_peak_growth_over_the_fp32_table_growth(bench):
    _, _, kala = bench
    table_params_m = 2.0  # 2M more fp32 weights = 7.63 MiB
    results = {
        "relational-rowwise": {"params_m": 1.0, "peak_memory_mib": 100.0},
        "relational-rowwise@9M": {"params_m": 1.0 + table_params_m, "peak_memory_mib": 100.0 + 2e6 * 4 / 2**20},
    }
    assert kala.table_growth(results, "relational-rowwise@9M") == pytest.approx(1.0)
    assert kala.table_growth(results, "relational-rowwise") is None
    rows = {r["target"]: r for r in kala.check_targets(results, compiled=False)}
    growth = next(r for t, r in rows.items() if "relational-rowwise@9M peak-memory growth" in t)
    assert growth["result"] == "PASS"
    del results["relational-rowwise"]  # no same-run reference at the preset's size: not measured, not guessed
    growth = next(r for r in kala.check_targets(results, compiled=False) if "growth" in r["target"])
    assert growth["result"] == "n/a"


def test_one_entry_point_lists_every_benchmark_and_imports_as_a_package(capsys):
    """``python -m benchmarks --help`` lists each benchmark with one line; each names a module of the package with a
    ``main(argv)``; no benchmark module puts folders on ``sys.path`` (they import as ``benchmarks.*``)."""
    import importlib.util
    from pathlib import Path

    from benchmarks import BENCHMARKS
    from benchmarks.__main__ import main

    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    for name, (module, summary) in BENCHMARKS.items():
        assert f"  {name} " in listed and summary in listed
        assert importlib.util.find_spec(f"benchmarks.{module}") is not None
    assert main(["no-such-benchmark"]) == 2 and "unknown benchmark" in capsys.readouterr().err
    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    assert not [p.name for p in folder.glob("*.py") if "sys.path" in p.read_text()]


def test_worker_command_reruns_the_entry_point_with_the_root_importable():
    import os
    import sys
    from pathlib import Path

    from benchmarks import worker_command

    command, env = worker_command("roof", ["--preset", "cpu-small"], "--worker", "bert")
    assert command == [sys.executable, "-m", "benchmarks", "roof", "--preset", "cpu-small", "--worker", "bert"]
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).resolve().parent.parent)


def test_system_table_gives_a_failed_worker_an_error_row():
    from benchmarks.report import system_table

    lines = system_table(
        "| System | A | B | Notes |",
        "|---|---:|---:|---|",
        {"x": {"label": "X", "a": 1}, "y": {"label": "Y", "error": "exit 1: boom | bang"}},
        lambda system, r: f"| {r['label']} | {r['a']} | | |",
    )
    assert lines[2:] == ["| X | 1 | | |", "| Y | | | ERROR: exit 1: boom / bang |"]
