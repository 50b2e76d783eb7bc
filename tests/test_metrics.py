"""keplm's ``evaluate.Metric`` subclasses (SquadV1, Seqeval, Glue, PrecisionAtK), the numpy GLUE / P@k formulas
they wrap, and the Trainer ``compute_metrics`` helpers: hand-computed values, agreement with the existing pure
functions, ``add_batch`` and ``evaluate.combine``, clear errors, offline use and cache-file hygiene."""

from __future__ import annotations

import doctest
import math
import os
import socket

import evaluate
import numpy as np
import pytest
from transformers import EvalPrediction

from keplm.metric_units import METRIC_UNIT_KEY, percent_factor, to_percent
from keplm.training.compute_metrics import GlueComputeMetrics, NerComputeMetrics, word_level_scores
from keplm.training.evaluate_metrics import Glue, PrecisionAtK, Seqeval, SquadV1, squad_metric_inputs
from keplm.training.metrics import (
    GLUE_TASKS,
    accuracy,
    align_ner_predictions,
    average_ranks,
    binary_f1,
    glue_metrics,
    matthews_correlation,
    ner_metrics,
    pearson_correlation,
    precision_at_k,
    spearman_correlation,
    squad_references,
    squad_v1_metrics,
)

# MRPC-like toy: TP = 2 (0, 3), FP = 1 (1), FN = 1 (4), TN = 2 (2, 5)
MRPC_PREDS = [1, 1, 0, 1, 0, 0]
MRPC_REFS = [1, 0, 0, 1, 1, 0]


@pytest.fixture(autouse=True)
def default_cache(tmp_path, monkeypatch):
    """evaluate's default cache folder (``$HF_HOME/metrics``, read at import) redirected into the test's tmp dir:
    even ``keep_in_memory=True`` metrics create their (empty) folder there."""
    path = tmp_path / "default_metrics_cache"
    monkeypatch.setattr(evaluate.config, "HF_METRICS_CACHE", path)
    return path


@pytest.fixture()
def in_memory():
    """Keyword arguments of a metric that keeps its examples in memory (no Arrow file)."""
    return {"keep_in_memory": True}


@pytest.fixture()
def on_disk(tmp_path):
    """Keyword arguments of a metric caching its examples in Arrow files under a test-private folder."""
    return {"cache_dir": str(tmp_path / "metrics_cache")}


@pytest.fixture(params=["memory", "disk"])
def storage(request, tmp_path):
    """Both evaluate storage modes: every metric must give the same numbers in each."""
    if request.param == "memory":
        return {"keep_in_memory": True}
    return {"cache_dir": str(tmp_path / "metrics_cache")}


def _files_under(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(root, f), path) for root, _, files in os.walk(path) for f in files)


# --------------------------------------------------------------------------- GLUE formulas (numpy), by hand


def test_accuracy_and_binary_f1_by_hand():
    assert accuracy(MRPC_PREDS, MRPC_REFS) == pytest.approx(4 / 6)
    assert binary_f1(MRPC_PREDS, MRPC_REFS) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert binary_f1([0, 0], [0, 0]) == 0.0  # no positive anywhere: 0, as sklearn's zero_division=0
    assert binary_f1([1, 1], [1, 1]) == 1.0
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        binary_f1([0, 2], [0, 1])


def test_matthews_correlation_by_hand():
    # binary: (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (4 - 1) / sqrt(3^4) = 1/3
    assert matthews_correlation(MRPC_PREDS, MRPC_REFS) == pytest.approx(1 / 3)
    # three classes: confusion rows (gold) [[2,0,0],[0,0,1],[0,0,1]], t=[2,1,1], p=[2,0,2], c=3, s=4:
    # (3*4 - (2*2 + 1*0 + 1*2)) / sqrt((16 - 8) * (16 - 6)) = 6 / sqrt(80)
    assert matthews_correlation([0, 2, 2, 0], [0, 1, 2, 0]) == pytest.approx(6 / math.sqrt(80))
    assert matthews_correlation([1, 1, 1], [0, 1, 0]) == 0.0  # constant prediction: undefined -> 0
    assert matthews_correlation([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    assert matthews_correlation([0, 1, 0], [1, 0, 1]) == pytest.approx(-1.0)


def test_average_ranks_share_ties():
    np.testing.assert_allclose(average_ranks([10, 20, 20, 5]), [2.0, 3.5, 3.5, 1.0])
    np.testing.assert_allclose(average_ranks([3, 3, 3]), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(average_ranks([0.5]), [1.0])


def test_pearson_and_spearman_by_hand():
    # means 2 and 7/3; deviations [-1,0,1] and [-4/3,-1/3,5/3]: r = 3 / sqrt(2 * 42/9) = 9 / sqrt(84)
    assert pearson_correlation([1, 2, 3], [1, 2, 4]) == pytest.approx(9 / math.sqrt(84))
    assert spearman_correlation([1, 2, 3], [1, 2, 4]) == pytest.approx(1.0)  # monotone
    # ties: ranks [1, 2.5, 2.5, 4] vs [1, 3, 2, 4]: r = 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert spearman_correlation([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    assert math.isnan(pearson_correlation([2, 2, 2], [1, 2, 3]))  # constant: undefined, as scipy
    assert math.isnan(spearman_correlation([1], [1]))
    with pytest.raises(ValueError, match="finite"):
        pearson_correlation([1.0, float("nan")], [1.0, 2.0])


def test_glue_formulas_match_scipy_and_sklearn():
    stats = pytest.importorskip("scipy.stats")
    sk_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(5):
        preds, refs = rng.integers(0, 2, 50), rng.integers(0, 2, 50)
        assert binary_f1(preds, refs) == pytest.approx(sk_metrics.f1_score(refs, preds))
        assert matthews_correlation(preds, refs) == pytest.approx(sk_metrics.matthews_corrcoef(refs, preds))
        preds3, refs3 = rng.integers(0, 3, 50), rng.integers(0, 3, 50)
        assert matthews_correlation(preds3, refs3) == pytest.approx(sk_metrics.matthews_corrcoef(refs3, preds3))
        scores, gold = rng.normal(size=40), rng.integers(0, 6, 40) / 1.0  # many tied gold scores, as STS-B
        np.testing.assert_allclose(average_ranks(gold), stats.rankdata(gold))
        assert pearson_correlation(scores, gold) == pytest.approx(stats.pearsonr(scores, gold)[0])
        assert spearman_correlation(scores, gold) == pytest.approx(stats.spearmanr(scores, gold)[0])


def test_glue_metrics_keys_per_task_and_errors():
    assert glue_metrics("mrpc", MRPC_PREDS, MRPC_REFS) == pytest.approx({"accuracy": 4 / 6, "f1": 2 / 3})
    assert glue_metrics("cola", MRPC_PREDS, MRPC_REFS) == pytest.approx({"matthews_correlation": 1 / 3})
    assert glue_metrics("rte", MRPC_PREDS, MRPC_REFS) == pytest.approx({"accuracy": 4 / 6})
    assert set(glue_metrics("stsb", [1.0, 2.5, 2.0], [1.0, 3.0, 2.0])) == {"pearson", "spearmanr"}
    for task in ("sst2", "qnli", "mnli", "mnli_matched", "mnli_mismatched", "wnli", "hans"):
        assert GLUE_TASKS[task] == ("accuracy",)
    with pytest.raises(ValueError, match="unknown GLUE task"):
        glue_metrics("squad", [1], [1])
    with pytest.raises(ValueError, match="3 predictions vs 2 references"):
        accuracy([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="no examples"):
        accuracy([], [])
    with pytest.raises(ValueError, match="class ids must be integers"):
        accuracy([0.7, 1.0], [0, 1])


# --------------------------------------------------------------------------- Glue metric


def test_glue_metric_equals_formulas_for_every_task(storage):
    for task in GLUE_TASKS:
        if task == "stsb":
            preds, refs = [0.5, 2.0, 2.0, 4.5, 3.0], [1.0, 2.0, 3.0, 5.0, 3.0]
        else:
            preds, refs = MRPC_PREDS, MRPC_REFS
        assert Glue(task, **storage).compute(predictions=preds, references=refs) == pytest.approx(
            glue_metrics(task, preds, refs)
        )


def test_glue_add_batch_over_two_batches_equals_one_compute(storage):
    metric = Glue("mrpc", **storage)
    metric.add_batch(predictions=MRPC_PREDS[:4], references=MRPC_REFS[:4])
    metric.add_batch(predictions=np.array(MRPC_PREDS[4:]), references=np.array(MRPC_REFS[4:]))
    assert len(metric) == 6
    assert metric.compute() == pytest.approx({"accuracy": 4 / 6, "f1": 2 / 3})
    for prediction, reference in zip(MRPC_PREDS, MRPC_REFS):  # and add() one at a time
        metric.add(prediction=prediction, reference=reference)
    assert metric.compute() == pytest.approx({"accuracy": 4 / 6, "f1": 2 / 3})
    stsb = Glue("stsb", **storage)
    stsb.add_batch(predictions=[1.0, 2.0], references=[1.0, 3.0])
    stsb.add_batch(predictions=[2.0, 3.0], references=[2.0, 4.0])
    assert stsb.compute() == pytest.approx({"pearson": math.sqrt(0.9), "spearmanr": math.sqrt(0.9)})


def test_glue_metric_rejects_bad_inputs(in_memory):
    metric = Glue("mrpc", **in_memory)
    with pytest.raises(ValueError, match=r"Mismatch in the number of predictions \(3\) and references \(2\)"):
        metric.compute(predictions=[1, 0, 1], references=[1, 0])
    with pytest.raises(ValueError, match="class ids must be integers"):  # Arrow would truncate 0.7 to 0
        metric.add_batch(predictions=[0.7, 1.0], references=[0, 1])
    with pytest.raises(ValueError, match="argmax"):
        metric.add_batch(predictions=np.zeros((2, 2)), references=[0, 1])
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        metric.compute(predictions=[0, 2], references=[0, 1])
    with pytest.raises(ValueError, match="unknown config name 'squad'"):
        Glue("squad", **in_memory)
    with pytest.raises(ValueError, match="unknown config name 'default'"):
        Glue(**in_memory)


# --------------------------------------------------------------------------- SquadV1

SQUAD_PREDICTIONS = [
    {"id": "q1", "prediction_text": "the Eiffel Tower"},  # EM 1 against "Eiffel Tower" (article dropped)
    {"id": "q2", "prediction_text": "in Paris France"},  # F1 vs "Paris": P 1/3, R 1 -> 0.5; EM 0
]
SQUAD_REFERENCES = [
    {"id": "q1", "answers": {"text": ["Eiffel Tower", "tower"], "answer_start": [10, 17]}},
    {"id": "q2", "answers": {"text": ["Paris"], "answer_start": [3]}},
]


def test_squad_v1_by_hand_and_equal_to_squad_v1_metrics(storage):
    result = SquadV1(**storage).compute(predictions=SQUAD_PREDICTIONS, references=SQUAD_REFERENCES)
    assert result == pytest.approx({"exact_match": 50.0, "f1": 75.0})
    legacy = squad_v1_metrics(
        {p["id"]: p["prediction_text"] for p in SQUAD_PREDICTIONS}, squad_references(SQUAD_REFERENCES)
    )
    assert result == legacy


def test_squad_v1_add_batch_over_two_batches_equals_one_compute(storage):
    metric = SquadV1(**storage)
    metric.add_batch(predictions=SQUAD_PREDICTIONS[:1], references=SQUAD_REFERENCES[:1])
    metric.add_batch(predictions=SQUAD_PREDICTIONS[1:], references=SQUAD_REFERENCES[1:])
    assert metric.compute() == pytest.approx({"exact_match": 50.0, "f1": 75.0})


def test_squad_v1_rejects_bad_inputs(storage):
    metric = SquadV1(**storage)
    with pytest.raises(ValueError, match=r"Mismatch in the number of predictions \(2\) and references \(1\)"):
        metric.compute(predictions=SQUAD_PREDICTIONS, references=SQUAD_REFERENCES[:1])
    with pytest.raises(ValueError, match="'answer_start' is missing or unexpected"):
        metric.add_batch(predictions=SQUAD_PREDICTIONS[:1], references=[{"id": "q1", "answers": {"text": ["x"]}}])
    with pytest.raises(ValueError, match="'context' is missing or unexpected"):
        metric.add_batch(predictions=SQUAD_PREDICTIONS[:1], references=[{**SQUAD_REFERENCES[0], "context": "c"}])
    with pytest.raises(ValueError, match="appears twice in the predictions"):
        metric.compute(predictions=[SQUAD_PREDICTIONS[0]] * 2, references=SQUAD_REFERENCES)
    # the failed compute() left nothing behind: the next one sees only its own examples
    assert metric.compute(predictions=SQUAD_PREDICTIONS, references=SQUAD_REFERENCES) == pytest.approx(
        {"exact_match": 50.0, "f1": 75.0}
    )
    if "cache_dir" in storage:
        assert _files_under(storage["cache_dir"]) == []


def test_squad_metric_inputs_from_examples_dataset_and_mapping():
    datasets = pytest.importorskip("datasets")
    examples = [{"title": "t", "context": "c", "question": "q", **ref} for ref in SQUAD_REFERENCES]
    predictions = {"q1": "Eiffel Tower"}  # q2 unanswered: scores 0, as in squad_v1_metrics
    expected = squad_v1_metrics(predictions, squad_references(examples))
    assert expected == pytest.approx({"exact_match": 50.0, "f1": 50.0})
    for source in (examples, datasets.Dataset.from_list(examples), squad_references(examples)):
        preds, refs = squad_metric_inputs(predictions, source)
        assert [p["id"] for p in preds] == ["q1", "q2"] and preds[1]["prediction_text"] == ""
        assert SquadV1(keep_in_memory=True).compute(predictions=preds, references=refs) == pytest.approx(expected)
    _, refs = squad_metric_inputs(predictions, squad_references(examples))
    assert refs[0]["answers"] == {"text": ["Eiffel Tower", "tower"], "answer_start": [-1, -1]}


# --------------------------------------------------------------------------- Seqeval

NER_REFS = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"], ["O", "B-LOC", "I-LOC"]]
NER_PREDS = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"], ["O", "B-LOC", "O"]]


def test_seqeval_by_hand_and_equal_to_ner_metrics(storage):
    # gold entities PER, LOC, ORG, LOC(2 tokens); predicted PER, ORG(wrong type), ORG, LOC(1 token, wrong span)
    # correct: PER and the second-sentence ORG -> P = 2/4, R = 2/4; tokens right: 7 of 9
    result = Seqeval(**storage).compute(predictions=NER_PREDS, references=NER_REFS)
    assert result["precision"] == pytest.approx(0.5) and result["recall"] == pytest.approx(0.5)
    assert result["f1"] == pytest.approx(0.5) and result["accuracy"] == pytest.approx(7 / 9)
    assert result["PER_f1"] == pytest.approx(1.0) and result["LOC_f1"] == 0.0
    assert result["ORG_f1"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)  # ORG: P 1/2, R 1/1
    assert result == ner_metrics(NER_PREDS, NER_REFS)
    compact = Seqeval(**storage).compute(predictions=NER_PREDS, references=NER_REFS, per_type=False)
    assert compact == ner_metrics(NER_PREDS, NER_REFS, per_type=False) and set(compact) == {
        "precision",
        "recall",
        "f1",
        "accuracy",
    }


def test_seqeval_options_are_passed_through(in_memory):
    refs, preds = [["B-PER", "I-PER"]], [["I-PER", "I-PER"]]
    assert Seqeval(**in_memory).compute(predictions=preds, references=refs)["f1"] == pytest.approx(1.0)
    strict = Seqeval(**in_memory).compute(predictions=preds, references=refs, mode="strict", scheme="IOB2")
    assert strict["f1"] == 0.0 and strict == ner_metrics(preds, refs, mode="strict", scheme="IOB2")


def test_seqeval_add_batch_over_two_batches_equals_one_compute(storage):
    metric = Seqeval(**storage)
    metric.add_batch(predictions=NER_PREDS[:2], references=NER_REFS[:2])
    metric.add_batch(predictions=NER_PREDS[2:], references=NER_REFS[2:])
    assert metric.compute() == ner_metrics(NER_PREDS, NER_REFS)


def test_seqeval_rejects_bad_inputs(in_memory):
    metric = Seqeval(**in_memory)
    with pytest.raises(ValueError, match=r"Mismatch in the number of predictions \(3\) and references \(2\)"):
        metric.compute(predictions=NER_PREDS, references=NER_REFS[:2])
    with pytest.raises(ValueError, match="sequence 0 has 1 predicted tags vs 2 reference tags"):
        metric.compute(predictions=[["O"]], references=[["O", "O"]])
    with pytest.raises(ValueError, match="Got a string but expected a list"):
        metric.add_batch(predictions=["O"], references=["O"])


# --------------------------------------------------------------------------- PrecisionAtK

LAMA_PREDS = [["paris", "lyon"], ["berlin", "bonn"], ["rome", "milan"], ["oslo", "bergen"]]
LAMA_REFS = ["paris", "bonn", "milan", "madrid"]
LAMA_RELATIONS = ["P36", "P36", "P36", "P17"]


def test_precision_at_k_by_hand():
    # P@1 hits [1, 0, 0, 0]; P@2 hits [1, 1, 1, 0]
    assert precision_at_k(LAMA_PREDS, LAMA_REFS) == {"precision_at_1": 0.25}
    assert precision_at_k(LAMA_PREDS, LAMA_REFS, k=2) == {"precision_at_2": 0.75}
    by_relation = precision_at_k(LAMA_PREDS, LAMA_REFS, relations=LAMA_RELATIONS)
    assert by_relation == pytest.approx(
        {  # macro: mean of P36 = 1/3 and P17 = 0
            "precision_at_1": 1 / 6,
            "precision_at_1_micro": 0.25,
            "P17_precision_at_1": 0.0,
            "P36_precision_at_1": 1 / 3,
        }
    )
    assert precision_at_k(LAMA_PREDS, LAMA_REFS, k=2, relations=LAMA_RELATIONS, per_relation=False) == {
        "precision_at_2": 0.5,
        "precision_at_2_micro": 0.75,
    }
    assert precision_at_k(["Paris", "Rome"], ["paris", "milan"]) == {"precision_at_1": 0.0}
    assert precision_at_k(["Paris", "Rome"], ["paris", "milan"], ignore_case=True) == {"precision_at_1": 0.5}
    with pytest.raises(ValueError, match="k must be a positive integer"):
        precision_at_k(LAMA_PREDS, LAMA_REFS, k=0)
    with pytest.raises(ValueError, match="3 relations vs 4 references"):
        precision_at_k(LAMA_PREDS, LAMA_REFS, relations=LAMA_RELATIONS[:3])


def test_precision_at_k_metric_equals_function(storage):
    metric = PrecisionAtK(**storage)
    assert metric.compute(predictions=LAMA_PREDS, references=LAMA_REFS, k=2) == {"precision_at_2": 0.75}
    top1 = [ranked[0] for ranked in LAMA_PREDS]  # top-1 strings instead of ranked lists
    assert metric.compute(predictions=top1, references=LAMA_REFS) == {"precision_at_1": 0.25}
    grouped = PrecisionAtK("relations", **storage)
    grouped.add_batch(predictions=LAMA_PREDS[:3], references=LAMA_REFS[:3], relations=LAMA_RELATIONS[:3])
    grouped.add_batch(predictions=LAMA_PREDS[3:], references=LAMA_REFS[3:], relations=LAMA_RELATIONS[3:])
    assert grouped.compute() == pytest.approx(precision_at_k(LAMA_PREDS, LAMA_REFS, relations=LAMA_RELATIONS))


def test_precision_at_k_metric_rejects_bad_inputs(in_memory):
    with pytest.raises(ValueError, match=r"inputs are missing: \['relations'\]"):
        PrecisionAtK("relations", **in_memory).compute(predictions=LAMA_PREDS, references=LAMA_REFS)
    with pytest.raises(ValueError, match="Bad inputs"):
        PrecisionAtK(**in_memory).add_batch(predictions=LAMA_PREDS, references=LAMA_REFS, relations=LAMA_RELATIONS)
    with pytest.raises(ValueError, match=r"Mismatch in the number of predictions \(4\) and references \(3\)"):
        PrecisionAtK(**in_memory).compute(predictions=LAMA_PREDS, references=LAMA_REFS[:3])
    with pytest.raises(ValueError, match="unknown config name"):
        PrecisionAtK("per_relation", **in_memory)
    metric = PrecisionAtK(**in_memory)
    metric.add_batch(predictions=LAMA_PREDS[:2], references=LAMA_REFS[:2])
    with pytest.raises(ValueError, match="Got a string but expected a list"):  # one form per computation
        metric.add_batch(predictions=["rome"], references=["milan"])


# --------------------------------------------------------------------------- evaluate.combine


def test_combine_glue_modules(in_memory):
    # CoLA reported with Matthews correlation and accuracy, over two batches
    cola = evaluate.combine([Glue("cola", **in_memory), Glue("sst2", **in_memory)])
    cola.add_batch(predictions=MRPC_PREDS[:3], references=MRPC_REFS[:3])
    cola.add_batch(predictions=MRPC_PREDS[3:], references=MRPC_REFS[3:])
    assert cola.compute() == pytest.approx({"matthews_correlation": 1 / 3, "accuracy": 4 / 6})
    # clashing keys are prefixed with the dict names; unique ones ("f1") are not
    named = evaluate.combine({"mrpc": Glue("mrpc", **in_memory), "rte": Glue("rte", **in_memory)})
    assert named.compute(predictions=MRPC_PREDS, references=MRPC_REFS) == pytest.approx(
        {"mrpc_accuracy": 4 / 6, "f1": 2 / 3, "rte_accuracy": 4 / 6}
    )
    # unnamed modules of the same metric: evaluate prefixes with the module name and an index
    twice = evaluate.combine([Glue("rte", **in_memory), Glue("sst2", **in_memory)])
    assert twice.compute(predictions=MRPC_PREDS, references=MRPC_REFS) == pytest.approx(
        {"keplm_glue_0_accuracy": 4 / 6, "keplm_glue_1_accuracy": 4 / 6}
    )


def test_combine_single_squad_and_seqeval(on_disk):
    squad = evaluate.combine([SquadV1(**on_disk)])
    squad.add_batch(predictions=SQUAD_PREDICTIONS, references=SQUAD_REFERENCES)
    assert squad.compute() == squad_v1_metrics(
        {p["id"]: p["prediction_text"] for p in SQUAD_PREDICTIONS}, squad_references(SQUAD_REFERENCES)
    )
    ner = evaluate.combine({"ner": Seqeval(**on_disk)}, force_prefix=True)
    result = ner.compute(predictions=NER_PREDS, references=NER_REFS, per_type=False)
    assert result == {f"ner_{k}": v for k, v in ner_metrics(NER_PREDS, NER_REFS, per_type=False).items()}


# --------------------------------------------------------------------------- evaluate plumbing: names, cache, offline


def test_metric_names_and_info(in_memory):
    metrics = [SquadV1(**in_memory), Seqeval(**in_memory), Glue("cola", **in_memory), PrecisionAtK(**in_memory)]
    assert [m.name for m in metrics] == ["keplm_squad_v1", "keplm_seqeval", "keplm_glue", "keplm_precision_at_k"]
    for metric in metrics:
        assert isinstance(metric, evaluate.Metric)
        assert metric.citation.startswith("@") and metric.description and metric.inputs_description
        assert metric.inputs_description in metric.compute.__doc__  # evaluate appends it to compute's docstring


def test_documented_examples_run():
    """The ``Example:`` of each metric's inputs description gives the output it shows."""
    globs = {"SquadV1": SquadV1, "Seqeval": Seqeval, "Glue": Glue, "PrecisionAtK": PrecisionAtK}
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for metric in (
        SquadV1(keep_in_memory=True),
        Seqeval(keep_in_memory=True),
        Glue("mrpc", keep_in_memory=True),
        PrecisionAtK("relations", keep_in_memory=True),
    ):
        test = parser.get_doctest(metric.inputs_description, dict(globs), metric.name, None, 0)
        assert test.examples, metric.name
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_cache_files_live_under_cache_dir_and_are_cleaned_up(tmp_path):
    cache = tmp_path / "cache"
    first, second = Glue("rte", cache_dir=str(cache)), Glue("rte", cache_dir=str(cache))
    assert first.data_dir == str(cache / "keplm_glue" / "rte")
    assert first.experiment_id != second.experiment_id  # no lock wait / clash between live instances
    first.add_batch(predictions=[1, 1], references=[1, 1])
    second.add_batch(predictions=[0, 0], references=[1, 1])
    assert len(_files_under(cache)) == 4  # one Arrow file and one lock per instance
    assert first.compute() == {"accuracy": 1.0}
    assert second.compute() == {"accuracy": 0.0}
    assert _files_under(cache) == []  # Arrow files deleted by evaluate, our own lock files by keplm
    assert Glue("rte", cache_dir=str(cache), experiment_id="run-7").experiment_id == "run-7"


def test_keep_in_memory_writes_no_file(default_cache):
    metric = Seqeval(keep_in_memory=True)
    assert metric.data_dir == str(default_cache / "keplm_seqeval" / "default")
    metric.add_batch(predictions=NER_PREDS, references=NER_REFS)
    assert os.path.isdir(metric.data_dir) and _files_under(default_cache) == []  # an empty folder only
    assert metric.compute() == ner_metrics(NER_PREDS, NER_REFS)


def test_compute_with_nothing_added_is_a_clear_error(storage):
    for metric in (SquadV1(**storage), Glue("cola", **storage)):
        with pytest.raises(ValueError, match="nothing to compute|call `add` or `add_batch`"):
            metric.compute()


def test_metrics_work_without_network(monkeypatch, in_memory):
    def refuse(*args, **kwargs):
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert SquadV1(**in_memory).compute(predictions=SQUAD_PREDICTIONS, references=SQUAD_REFERENCES)["f1"] == 75.0
    assert Seqeval(**in_memory).compute(predictions=NER_PREDS, references=NER_REFS)["f1"] == pytest.approx(0.5)
    assert Glue("stsb", **in_memory).compute(predictions=[1, 2, 3], references=[1, 2, 4])["spearmanr"] == 1.0
    assert PrecisionAtK(**in_memory).compute(predictions=LAMA_PREDS, references=LAMA_REFS)["precision_at_1"] == 0.25


# --------------------------------------------------------------------------- Trainer compute_metrics helpers

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC"]


def _ner_eval_prediction():
    gold = np.array([[-100, 1, 2, 0, 3, -100], [-100, 3, 0, -100, -100, -100]])
    pred_ids = np.array([[0, 1, 2, 0, 0, 0], [3, 3, 0, 1, 1, 1]])
    logits = np.eye(len(NER_LABELS))[pred_ids] * 5.0  # (batch, seq, labels), argmax = pred_ids
    return logits, gold


def test_ner_compute_metrics_equals_ner_metrics_of_aligned_tags_in_percent():
    logits, gold = _ner_eval_prediction()
    fractions = ner_metrics(*align_ner_predictions(logits, gold, NER_LABELS), per_type=False)
    # kept gold [B-PER I-PER O B-LOC], [B-LOC O]; predicted [B-PER I-PER O O], [B-LOC O]: P 2/2, R 2/3
    assert fractions == pytest.approx({"precision": 1.0, "recall": 2 / 3, "f1": 0.8, "accuracy": 5 / 6})
    expected = {"precision": 100.0, "recall": 200 / 3, "f1": 80.0, "accuracy": 500 / 6}  # the run scripts' unit
    assert NerComputeMetrics(NER_LABELS)(EvalPrediction(predictions=logits, label_ids=gold)) == pytest.approx(expected)
    assert NerComputeMetrics(NER_LABELS)(EvalPrediction(predictions=(logits, None), label_ids=gold)) == pytest.approx(
        expected
    )
    per_type = NerComputeMetrics(NER_LABELS, per_type=True)(EvalPrediction(predictions=logits, label_ids=gold))
    assert per_type == pytest.approx(to_percent(ner_metrics(*align_ner_predictions(logits, gold, NER_LABELS))))
    assert per_type["PER_f1"] == pytest.approx(100.0) and per_type["LOC_f1"] == pytest.approx(200 / 3)


def test_word_level_scores_are_ner_metrics_in_percent():
    preds, refs = [["B-PER", "I-PER", "O"], ["B-LOC", "O"]], [["B-PER", "I-PER", "O"], ["O", "B-LOC"]]
    assert word_level_scores(preds, refs) == pytest.approx(
        {"precision": 50.0, "recall": 50.0, "f1": 50.0, "accuracy": 300 / 5}
    )


def test_to_percent_scales_scores_and_keeps_counts():
    scores = {"f1": 0.25, "mcc": np.float32(-0.5), "num_gold": 3, "flag": True, "none": None}
    assert to_percent(scores) == {"f1": 25.0, "mcc": -50.0, "num_gold": 3, "flag": True, "none": None}
    assert isinstance(to_percent(scores)["mcc"], float)


def test_percent_factor_reads_the_record_unit_else_the_legacy_one():
    assert percent_factor({"eval_f1": 81.0, METRIC_UNIT_KEY: "percent"}, "fraction") == 1.0
    assert percent_factor({"eval_f1": 0.81}, "fraction") == 100.0  # an old record: its task's unit then
    assert percent_factor({"eval_f1": 81.0}, "percent") == 1.0
    assert percent_factor({"eval_f1": 0.81, METRIC_UNIT_KEY: "fraction"}, "percent") == 100.0
    with pytest.raises(ValueError, match="unknown metric unit 'permille'"):
        percent_factor({METRIC_UNIT_KEY: "permille"}, "fraction")
    with pytest.raises(ValueError, match="unknown metric unit"):
        percent_factor({}, "ratio")


def test_ner_compute_metrics_batch_eval_mode_with_tensors():
    torch = pytest.importorskip("torch")
    logits, gold = _ner_eval_prediction()
    compute_metrics = NerComputeMetrics(NER_LABELS)
    expected = compute_metrics(EvalPrediction(predictions=logits, label_ids=gold))
    for step, last in ((0, False), (1, True)):  # as Trainer(batch_eval_metrics=True) calls it, one row per batch
        batch = EvalPrediction(
            predictions=torch.tensor(logits[step : step + 1], dtype=torch.bfloat16),
            label_ids=torch.tensor(gold[step : step + 1]),
        )
        result = compute_metrics(batch, compute_result=last)
    assert result == expected
    assert compute_metrics(EvalPrediction(predictions=logits, label_ids=gold)) == expected  # state was reset


def test_glue_compute_metrics_from_logits():
    logits = np.array([[0.1, 0.9], [0.2, 0.8], [0.9, 0.1], [0.3, 0.7], [0.6, 0.4], [0.8, 0.2]])  # argmax MRPC_PREDS
    labels = np.array(MRPC_REFS)
    result = GlueComputeMetrics("mrpc")(EvalPrediction(predictions=logits, label_ids=labels))  # in percent
    assert result == pytest.approx({"accuracy": 400 / 6, "f1": 200 / 3, "combined_score": (400 / 6 + 200 / 3) / 2})
    assert GlueComputeMetrics("rte")(EvalPrediction(predictions=logits, label_ids=labels)) == pytest.approx(
        {"accuracy": 400 / 6}
    )
    scores = np.array([[1.0], [2.0], [2.0], [3.0]])  # regression head output (batch, 1)
    stsb = GlueComputeMetrics("stsb", combined_score=False)(
        EvalPrediction(predictions=scores, label_ids=np.array([1.0, 3.0, 2.0, 4.0]))
    )
    assert stsb == pytest.approx({"pearson": 100 * math.sqrt(0.9), "spearmanr": 100 * math.sqrt(0.9)})
    batched = GlueComputeMetrics("mrpc")
    assert batched(EvalPrediction(predictions=logits[:2], label_ids=labels[:2]), compute_result=False) == {}
    assert batched(EvalPrediction(predictions=logits[2:], label_ids=labels[2:]), compute_result=True) == result
