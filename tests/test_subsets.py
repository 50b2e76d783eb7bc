from keplm.hub.assets import KnowledgeAssets
from keplm.knowledge import KnowledgeAnnotation
from keplm.training.metrics import ner_metrics
from keplm.training.subsets import count_unseen_entities, subset_metrics


def annotation(*ids):
    return KnowledgeAnnotation.from_dict(
        {"entities": [{"text": "x", "start": 0, "end": 1, "id": i} for i in ids], "triplets": []})


def test_unseen_entities_are_those_outside_the_entity_vocabulary():
    assets = KnowledgeAssets.build(["a", "b"])
    assert count_unseen_entities(annotation("a", "b", "a"), assets) == 0
    assert count_unseen_entities(annotation("a", "c", "c", "d", None), assets) == 3


def test_subset_metrics_split_by_threshold():
    predictions = [["B-PER"], ["O"], ["B-LOC"]]
    references = [["B-PER"], ["B-PER"], ["B-LOC"]]
    out = subset_metrics(lambda p, r: ner_metrics(p, r, per_type=False), predictions, references,
                         counts=[0, 5, 3], prefix="predict")
    assert out["predict_seen_examples"] == 1 and out["predict_unseen_examples"] == 2
    assert out["predict_seen_f1"] == 1.0
    assert out["predict_unseen_f1"] == 2 / 3  # one of two unseen-context entities found
