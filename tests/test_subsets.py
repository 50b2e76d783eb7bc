from types import SimpleNamespace

from keplm.knowledge import KnowledgeAnnotation
from keplm.training.metrics import ner_metrics
from keplm.training.subsets import UnseenEntityCounter, subset_metrics


def annotation(*ids):
    return KnowledgeAnnotation.from_dict(
        {"entities": [{"text": "x", "start": 0, "end": 1, "id": i} for i in ids], "triplets": []})


def test_unseen_entities_are_those_never_mentioned_in_training():
    annotations = {"train": {"0": annotation("a", "b")},
                   "test": {"0": annotation("a", "b", "a"), "1": annotation("a", "c", "c", "d", None)}}
    args = SimpleNamespace(knowledge="annotations")
    raw = {"train": {"id": ["0"]}, "test": {"id": ["0", "1", "2"]}}
    counter = UnseenEntityCounter.from_arguments(args, raw, "ner", annotations)
    assert counter.counts("test", raw["test"]) == [0, 3, 0]  # c, d and the id-less mention; "2" has none
    assert UnseenEntityCounter.from_arguments(SimpleNamespace(knowledge="none", kg=None), raw, "ner", {}) is None


def test_subset_metrics_split_by_threshold():
    predictions = [["B-PER"], ["O"], ["B-LOC"]]
    references = [["B-PER"], ["B-PER"], ["B-LOC"]]
    out = subset_metrics(lambda p, r: ner_metrics(p, r, per_type=False), predictions, references,
                         counts=[0, 5, 3], prefix="predict")
    assert out["predict_seen_examples"] == 1 and out["predict_unseen_examples"] == 2
    assert out["predict_seen_f1"] == 1.0
    assert out["predict_unseen_f1"] == 2 / 3  # one of two unseen-context entities found
