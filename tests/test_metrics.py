"""keplm's metric functions (GLUE through scikit-learn / scipy, SQuAD v1.1, P@k) and the Trainer ``compute_metrics``
helpers over them: hand-computed values, agreement with the libraries, clear errors, both Trainer modes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from transformers import EvalPrediction

from keplm.metric_units import METRIC_UNIT_KEY, percent_factor, to_percent
from keplm.training.compute_metrics import GlueComputeMetrics, NerComputeMetrics, word_level_scores
from keplm.training.metrics import (
    GLUE_TASKS,
    accuracy,
    align_ner_predictions,
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


# --------------------------------------------------------------------------- SQuAD v1.1


def test_squad_v1_metrics_by_hand_and_duplicate_ids():
    examples = [
        {"id": "a", "answers": {"text": ["Paris", "the city of Paris"]}},
        {"id": "b", "answers": {"text": ["1990"]}},
        {"id": "c", "answers": {"text": ["blue whale"]}},
    ]
    predictions = {"a": "paris", "b": "in 1990 or so"}  # a: exact after normalisation; c: no prediction
    scores = squad_v1_metrics(predictions, squad_references(examples))
    # b: one shared token of 4 predicted and 1 gold: precision 1/4, recall 1, F1 0.4; c: missing, scores 0
    assert scores == pytest.approx({"exact_match": 100 / 3, "f1": 100 * (1 + 0.4) / 3})
    with pytest.raises(ValueError, match="question id 'a' appears twice"):
        squad_references([*examples, examples[0]])


# --------------------------------------------------------------------------- P@k

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
