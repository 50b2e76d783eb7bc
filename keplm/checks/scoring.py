"""Scores of a trained model on the splits of a synthetic knowledge task (:mod:`keplm.checks.synthetic`).

Each split is linked against the processor's KG as it is (for ``test_added``: after
:meth:`~keplm.tokenization.processing_utils.KeplmProcessor.update_knowledge` with the full KG). Besides accuracy,
:func:`follow_rate` measures whether a prediction follows an edit of the fact that holds the answer: the typing
fact of each entity is pointed at another type (its relation swapped for another type's relation, or its anchor
for an anchor of another type) and the new prediction is compared with that type.
"""

from __future__ import annotations

import random

import torch
from transformers import pipeline

from keplm.data.collator import KeplmDataCollator
from keplm.pipelines import CLASSIFICATION_TASK, QA_TASK

from .synthetic import ANCHOR_LABEL, KnowledgeTask


@torch.no_grad()
def ner_type_predictions(
    model, processor, rows: list[dict], annotations: list[dict] | None = None, batch_size: int = 32
) -> list[str]:
    """The predicted type (tag without its B-/I- prefix, ``O`` for none) of each row's entity word (its first
    sub-token). ``annotations``: one knowledge annotation per row, else each row is linked."""
    model.eval()
    with_knowledge = bool(getattr(model.config, "uses_knowledge", False))
    collator = KeplmDataCollator.from_processor(processor, model)
    id2label = model.config.id2label
    types = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        examples = {"tokens": [r["tokens"] for r in chunk]}
        if annotations is not None:
            examples["knowledge"] = annotations[start : start + batch_size]
        features = processor.prepare_ner_features(
            examples,
            label_column=None,
            with_knowledge=with_knowledge,
            annotation_column="knowledge" if annotations is not None else None,
        )
        batch = collator([{k: v[i] for k, v in features.items()} for i in range(len(chunk))])
        for row, logits in zip(chunk, model(**batch).logits):
            word_ids = processor.tokenizer(row["tokens"], is_split_into_words=True).word_ids()
            label = id2label[int(logits[word_ids.index(row["entity_word"])].argmax())]
            types.append(label.split("-", 1)[-1])  # "O" stays "O"
    return types


def ner_accuracy(model, processor, task: KnowledgeTask, rows: list[dict]) -> float:
    """Share of rows whose entity gets its own type."""
    predicted = ner_type_predictions(model, processor, rows)
    return sum(p == g for p, g in zip(predicted, _gold_types(task, rows))) / max(1, len(rows))


def _gold_types(task: KnowledgeTask, rows: list[dict]) -> list[str]:
    labels = {e.id: ANCHOR_LABEL if e.type < 0 else task.labels[e.type] for e in task.entities}
    return [labels[r["entity"]] for r in rows]


def retarget_fact(task: KnowledgeTask, entity_id: str, rng: random.Random) -> tuple[tuple[str, str, str], str]:
    """The entity's typing fact pointed at another type, and that type's label: the relation swapped for another
    type's (``relation`` tasks) or the anchor for one of another type (``neighbour`` tasks; ``two_hop`` tasks: the
    bridge's anchor)."""
    h, r, t = task.informative[entity_id]
    own = next(e.type for e in task.entities if e.id == entity_id)
    other = rng.choice([i for i in range(len(task.labels)) if i != own])
    if task.kind == "relation":
        return (h, f"R_{task.labels[other]}", t), task.labels[other]
    anchors = [a.id for a in task.group("anchor")]
    per_type = len(anchors) // len(task.labels)
    return (h, r, rng.choice(anchors[other * per_type : (other + 1) * per_type])), task.labels[other]


def follow_rate(model, processor, task: KnowledgeTask, rows: list[dict], seed: int = 0) -> float:
    """Share of rows whose prediction becomes the type that the retargeted typing fact names
    (:func:`retarget_fact`); every other fact of the row's annotation stays."""
    rng = random.Random(seed)
    annotations, targets = [], []
    for row in rows:
        annotation = processor.link(" ".join(row["tokens"])).to_dict()
        fact, target = retarget_fact(task, row["entity"], rng)
        original = task.informative[row["entity"]]
        annotation["triplets"] = [
            dict(zip("hrt", fact)) if (f["h"], f["r"], f["t"]) == original else f for f in annotation["triplets"]
        ]
        annotations.append(annotation)
        targets.append(target)
    predicted = ner_type_predictions(model, processor, rows, annotations)
    return sum(p == t for p, t in zip(predicted, targets)) / max(1, len(rows))


def qa_accuracy(model, processor, rows: list[dict], max_length: int = 256, doc_stride: int = 64) -> float:
    """Share of QA rows whose predicted answer is exactly the gold entity name (the stock-style QA pipeline)."""
    qa = pipeline(QA_TASK, model=model, processor=processor)
    hits = 0
    for row in rows:
        answer = qa(question=row["question"], context=row["context"], max_length=max_length, doc_stride=doc_stride)
        hits += answer["answer"].strip() == row["answers"]["text"][0]
    return hits / max(1, len(rows))


def classification_accuracy(model, processor, rows: list[dict], batch_size: int = 32) -> float:
    """Share of ``{"sentence", "label"}`` rows classified as their label (the keplm text-classification pipeline)."""
    classify = pipeline(CLASSIFICATION_TASK, model=model, processor=processor)
    predictions = classify([r["sentence"] for r in rows], batch_size=batch_size)
    label2id = model.config.label2id
    return sum(
        label2id.get(p["label"], -1) == int(r["label"]) or p["label"] == str(r["label"])
        for p, r in zip(predictions, rows)
    ) / max(1, len(rows))


__all__ = [
    "classification_accuracy",
    "follow_rate",
    "ner_accuracy",
    "ner_type_predictions",
    "qa_accuracy",
    "retarget_fact",
]
