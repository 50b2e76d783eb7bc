from datasets import Dataset, DatasetDict

from keplm.knowledge import KnowledgeAnnotation
from keplm.training.metrics import ner_metrics
from keplm.training.recipes.kala import attach_annotations
from keplm.training.subsets import UnseenEntityCounter, subset_metrics


def annotation(*ids):
    return KnowledgeAnnotation.from_dict(
        {"entities": [{"text": "x", "start": 0, "end": 1, "id": i} for i in ids], "triplets": []}
    )


def test_unseen_entities_are_those_never_mentioned_in_training():
    """Counts come from the splits' ``knowledge`` columns (the run's one linking pass)."""
    raw = DatasetDict(
        {
            "train": Dataset.from_dict({"id": ["0"]}),
            "test": Dataset.from_dict({"id": ["0", "1", "2"]}),
        }
    )
    raw = DatasetDict(
        {
            split: attach_annotations(data, by_id, None)
            for split, (data, by_id) in {
                "train": (raw["train"], {"0": annotation("a", "b")}),
                "test": (raw["test"], {"0": annotation("a", "b", "a"), "1": annotation("a", "c", "c", "d", None)}),
            }.items()
        }
    )
    counter = UnseenEntityCounter.from_splits(raw)
    assert counter.counts(raw["test"]["knowledge"]) == [0, 3, 0]  # c, d and the id-less mention; "2" has none
    assert UnseenEntityCounter.from_splits(DatasetDict({"test": raw["test"]})) is None


def test_subset_metrics_split_by_threshold():
    predictions = [["B-PER"], ["O"], ["B-LOC"]]
    references = [["B-PER"], ["B-PER"], ["B-LOC"]]
    out = subset_metrics(
        lambda p, r: ner_metrics(p, r, per_type=False), predictions, references, counts=[0, 5, 3], prefix="predict"
    )
    assert out["predict_seen_examples"] == 1 and out["predict_unseen_examples"] == 2
    assert out["predict_seen_f1"] == 1.0
    assert out["predict_unseen_f1"] == 2 / 3  # one of two unseen-context entities found
    # with threshold 1 and other names: the sentences with at least one unseen entity vs those with none
    out = subset_metrics(
        lambda p, r: ner_metrics(p, r, per_type=False),
        predictions,
        references,
        counts=[1, 0, 0],
        prefix="predict",
        threshold=1,
        names=("all_seen", "with_unseen"),
    )
    assert out["predict_with_unseen_examples"] == 1 and out["predict_all_seen_examples"] == 2
    assert out["predict_with_unseen_f1"] == 1.0 and out["predict_all_seen_f1"] == 2 / 3
