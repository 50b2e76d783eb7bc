"""The learning curve's harness (harness/curve.py): the step rule, the queue order, the run commands, and the
tables' paired intervals checked by hand on made-up run folders."""

from __future__ import annotations

import json
import math

import pytest

from harness import curve


def test_step_budget_and_queue_order():
    assert [curve.train_steps(n) for n in curve.SIZES] == [150, 150, 313, 320, 320, 320]
    plan = curve.plan(["conll", "ncbi"], [50, 100], ["1", "2"], list(curve.SYSTEMS))
    assert [p[2] for p in plan] == ["1"] * (len(plan) // 2) + ["2"] * (len(plan) // 2)  # seed-major
    assert {(p[1], p[3]) for p in plan if p[3] == "more_params"} == {(100, "more_params")}  # +1 layer at 100 only
    assert len(plan) == 2 * 2 * (2 * 3 + 1)


def test_run_commands_draw_nested_sentences_and_stop_early(tmp_path):
    train, check, clean = curve.run_commands("ncbi", 250, "3", "relational_eq3", str(tmp_path / "run"))

    def value(option):
        return train[len(train) - 1 - train[::-1].index(option) + 1]  # the last occurrence wins in argparse

    assert value("--system") == "relational" and value("--relation_message") == "entity"
    assert value("--train_sample_seed") == "3" and value("--max_train_samples") == "250"
    assert value("--max_steps") == "313" and value("--eval_steps") == value("--save_steps") == "63"
    assert value("--save_strategy") == "steps" and value("--metric_for_best_model") == "f1"
    assert "--load_best_model_at_end" in train and value("--kg") == "hpo:"
    assert "check-knowledge" in check and check[check.index("--max_examples") + 1] == "100"
    assert clean[-1] == str(tmp_path / "run")
    assert len(curve.run_commands("conll", 50, "1", "vanilla", str(tmp_path / "v"))) == 2  # no check for vanilla


def _run(root, dataset, size, seed, system, f1, flips=None):
    run = root / dataset / f"n{size}" / f"seed{seed}" / system
    run.mkdir(parents=True)
    (run / "all_results.json").write_text(json.dumps({"predict_f1": f1, "predict_with_unseen_f1": f1 - 1}))
    (run / "predict_results.json").write_text(json.dumps({"predict_f1": f1}))
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 150, "best_global_step": 120}))
    if flips is not None:
        (run / "knowledge_check").mkdir()
        (run / "knowledge_check" / "knowledge_sensitivity.json").write_text(
            json.dumps(
                {
                    "examples_with_facts": 7,
                    "overall": {
                        e: {"edits": 10, "flip_rate": flips, "mean_shift": flips / 2}
                        for e in ("relation", "tail", "remove")
                    },
                }
            )
        )


def test_tables_pair_by_seed(tmp_path):
    for seed, (vanilla, kala) in enumerate([(50.0, 53.0), (52.0, 53.0), (51.0, 55.0)], start=1):
        _run(tmp_path, "conll", 50, seed, "vanilla", vanilla)
        _run(tmp_path, "conll", 50, seed, "relational", kala, flips=0.1 * seed)
    _run(tmp_path, "conll", 100, 1, "vanilla", 60.0)  # no KALA run at this size yet: no difference
    # runs in progress: training (run_ner wrote all_results.json with its data results), and tested but unchecked
    training = tmp_path / "conll" / "n100" / "seed1" / "relational"
    training.mkdir(parents=True)
    (training / "all_results.json").write_text(json.dumps({"data_linked_share": 0.5}))
    _run(tmp_path, "conll", 100, 2, "relational", 61.0)
    rows = curve.collect(str(tmp_path))
    assert len(rows) == 7 and {r["steps"] for r in rows} == {150}
    stats = curve.aggregate(rows)
    assert stats[("conll", 50)]["relational"] == [53.0, 53.0, 55.0]
    mean, low, high, n = stats[("conll", 50, "relational", "diff")]
    # differences 3, 1, 4: mean 8/3, sd sqrt(7/3), t(0.975, 2) = 4.3027
    half = 4.302652729911275 * math.sqrt(7 / 3) / math.sqrt(3)
    assert n == 3 and mean == pytest.approx(8 / 3) and (low, high) == pytest.approx((8 / 3 - half, 8 / 3 + half))
    assert ("conll", 100, "relational", "diff") not in stats
    text = curve.table(rows)
    assert f"+2.67 [{8 / 3 - half:+.2f}, {8 / 3 + half:+.2f}] (n=3)" in text
    assert "| conll | 50 | relational | 3 | 20.0 ± 10.0 |" in curve.knowledge_table(rows)
    report = curve.report(str(tmp_path), str(tmp_path / "record"), str(tmp_path / "plots"), "cmd")
    assert "Test F1" in report and (tmp_path / "plots" / "learning-curve-conll.png").is_file()
    assert len((tmp_path / "record" / "runs.jsonl").read_text().splitlines()) == 7
    with pytest.raises(FileNotFoundError, match="no finished curve run"):
        curve.report(str(tmp_path / "empty"), None, None, "cmd")


def test_part_two_variants_change_one_setting_each(tmp_path):
    plan = curve.plan(["conll"], [50, 100, 500], ["1"], list(curve.HYPOTHESES))
    assert {size for _, size, _, _ in plan} == {100, 500} and len(plan) == 2 * len(curve.HYPOTHESES)
    default = curve.run_commands("conll", 100, "1", "relational", str(tmp_path / "a"))[0]
    random_memory = curve.run_commands("conll", 100, "1", "relational_random_memory", str(tmp_path / "a"))[0]
    longer = curve.run_commands("conll", 100, "1", "relational_2x_steps", str(tmp_path / "a"))[0]
    dropout = curve.run_commands("conll", 100, "1", "relational_dropout0", str(tmp_path / "a"))[0]
    assert "--init_entity_memory" in default and set(default) - set(random_memory) == {"--init_entity_memory"}
    assert longer[longer.index("--max_steps") + 1] == "300" and longer[longer.index("--eval_steps") + 1] == "60"
    assert dropout[dropout.index("--entity_dropout") + 1] == "0" and "--entity_dropout" not in default
    assert len(curve.run_commands("conll", 100, "1", "relational_klr2e-3", str(tmp_path / "a"))) == 3  # + the check


def test_part_two_table_pairs_with_the_default_relational_runs(tmp_path):
    for seed, (default, variant) in enumerate([(60.0, 62.0), (61.0, 61.5)], start=1):
        _run(tmp_path, "ncbi", 100, seed, "relational", default, flips=0.1)
        _run(tmp_path, "ncbi", 100, seed, "relational_dropout0", variant, flips=0.3)
        _run(tmp_path, "ncbi", 250, seed, "relational", default, flips=0.1)  # no variant at this size
    text = curve.hypotheses_table(curve.collect(str(tmp_path)))
    assert "| ncbi | 250 |" not in text
    # differences 2.0 and 0.5: mean 1.25, sd 1.0607, t(0.975, 1) = 12.706
    half = 12.706204736174698 * 1.0606601717798212 / 2**0.5
    assert (
        f"| ncbi | 100 | relational_dropout0 | 2 | 61.75 ± 0.35 | +1.25 [{1.25 - half:+.2f}, {1.25 + half:+.2f}]"
        in text
    )
    assert "| 30.0 ± 0.0 | 30.0 ± 0.0 |" in text and "| ncbi | 100 | relational | 2 | 60.50 ± 0.71 |  |" in text


def test_h6_control_is_vanilla_at_twice_the_steps_and_pairs_with_relational_at_the_same_budget(tmp_path):
    plan = curve.plan(["ncbi"], [50, 100, 500], ["1"], list(curve.PART_TWO))
    assert ("ncbi", 500, "1", "vanilla_2x_steps") in plan and ("ncbi", 50, "1", "vanilla_2x_steps") not in plan
    control = curve.run_commands("ncbi", 100, "1", "vanilla_2x_steps", str(tmp_path / "c"))
    assert control[0][control[0].index("--system") + 1] == "vanilla" and "--init_entity_memory" not in control[0]
    assert control[0][control[0].index("--max_steps") + 1] == "300" and len(control) == 2  # no knowledge check
    runs = {  # seed: (vanilla, relational, vanilla 2x, relational 2x); seed 3 has no control yet
        1: (50.0, 51.0, 54.0, 58.0),
        2: (52.0, 51.0, 55.0, 56.0),
        3: (49.0, 53.0, None, 57.0),
    }
    for seed, f1s in runs.items():
        for system, f1 in zip(("vanilla", "relational", "vanilla_2x_steps", "relational_2x_steps"), f1s):
            if f1 is not None:
                _run(tmp_path, "ncbi", 100, seed, system, f1, flips=None if "vanilla" in system else 0.1)
    text = curve.h6_control_table(curve.collect(str(tmp_path)))
    # 2x: differences 4 and 1 (mean 2.5, sd 2.1213); curve's budget, seeds 1-2: 1 and -1 (mean 0, sd 1.4142)
    t = 12.706204736174698
    half_2x, half_1x = t * 2.1213203435596424 / 2**0.5, t * 1.4142135623730951 / 2**0.5
    assert (
        f"| ncbi | 100 | 2 | 54.50 ± 0.71 | 57.00 ± 1.00 | +2.50 [{2.5 - half_2x:+.2f}, {2.5 + half_2x:+.2f}] (n=2) | "
        f"+0.00 [{-half_1x:+.2f}, {half_1x:+.2f}] (n=2) |" in text
    ), text


def test_report_merges_an_earlier_runs_jsonl_and_refuses_a_run_recorded_otherwise(tmp_path):
    _run(tmp_path / "old", "conll", 50, 1, "vanilla", 50.0)
    _run(tmp_path / "old", "conll", 50, 1, "relational", 53.0, flips=0.1)
    curve.report(str(tmp_path / "old"), str(tmp_path / "record"), None, "cmd")
    records = str(tmp_path / "record" / "runs.jsonl")
    _run(tmp_path / "new", "conll", 50, 2, "vanilla", 52.0)
    _run(tmp_path / "new", "conll", 50, 2, "relational", 53.0, flips=0.2)
    text = curve.report(str(tmp_path / "new"), str(tmp_path / "merged"), None, "cmd", records=records)
    merged = [json.loads(line) for line in (tmp_path / "merged" / "runs.jsonl").read_text().splitlines()]
    assert sorted((r["seed"], r["system"]) for r in merged) == [
        (1, "relational"),
        (1, "vanilla"),
        (2, "relational"),
        (2, "vanilla"),
    ]
    assert "+2.00 [" in text and "(n=2)" in text  # differences 3 and 1, paired across the two sources
    # the merged file as the records of the next report: the same runs again, nothing doubled
    merged_records = str(tmp_path / "merged" / "runs.jsonl")
    curve.report(str(tmp_path / "new"), str(tmp_path / "merged"), None, "cmd", records=merged_records)
    assert len((tmp_path / "merged" / "runs.jsonl").read_text().splitlines()) == 4
    _run(tmp_path / "new", "conll", 50, 1, "vanilla", 49.0)  # in the records with another F1
    with pytest.raises(ValueError, match="conll/50/1/vanilla differs between"):
        curve.report(str(tmp_path / "new"), None, None, "cmd", records=records)
    with pytest.raises(FileNotFoundError, match="--records: no file"):
        curve.report(str(tmp_path / "new"), None, None, "cmd", records=str(tmp_path / "missing.jsonl"))
    (tmp_path / "bad.jsonl").write_text('{"dataset": "conll"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: a curve row needs"):
        curve.report(str(tmp_path / "new"), None, None, "cmd", records=str(tmp_path / "bad.jsonl"))
