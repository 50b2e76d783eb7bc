"""NER helpers for the run scripts: Trainer metrics, word-level predictions and tagging raw text."""

from __future__ import annotations

import torch

from keplm.data.collator import KnowledgeGraphCollator
from keplm.knowledge import KnowledgeAnnotation

from .metrics import align_ner_predictions, ner_metrics


class NerMetrics:
    """``compute_metrics`` for the Trainer: seqeval P/R/F1 and accuracy over first sub-tokens."""

    def __init__(self, label_list: list[str], per_type: bool = False):
        self.label_list = list(label_list)
        self.per_type = per_type

    def __call__(self, eval_prediction) -> dict[str, float]:
        predictions, references = align_ner_predictions(
            eval_prediction.predictions, eval_prediction.label_ids, self.label_list
        )
        return ner_metrics(predictions, references, per_type=self.per_type)


def argmax_logits(logits, labels):
    """``preprocess_logits_for_metrics``: keep predicted ids instead of full logits between eval batches."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def _model_uses_knowledge(model) -> bool:
    return bool(getattr(model.config, "uses_knowledge", False))


@torch.no_grad()
def tag_words(model, processor, text: str, max_length: int = 512) -> list[tuple[str, str]]:
    """Tag a raw text: split it on whitespace, link it with the processor's KG, return ``[(word, tag)]``.

    A model that reads no knowledge (the vanilla baseline), or a processor without a KG, gets no entities.
    Words past ``max_length`` sub-tokens are tagged ``"O"``.
    """
    words = text.split()
    if not words:
        return []
    if _model_uses_knowledge(model) and processor.knowledge_assets.kg is not None:
        annotation = processor.linker.link_tokens(words)
    else:
        annotation = KnowledgeAnnotation()
    features = processor.prepare_ner_features(
        {"tokens": [words], "knowledge": [annotation]}, label_column=None, max_length=max_length
    )
    feature = {key: values[0] for key, values in features.items()}
    collator = KnowledgeGraphCollator(pad_token_id=processor.pad_token_id)
    device = next(model.parameters()).device
    batch = {key: value.to(device) for key, value in collator([feature]).items()}
    was_training = model.training
    model.eval()
    try:
        logits = model(**batch).logits[0]
    finally:
        model.train(was_training)
    pred_ids = logits.argmax(dim=-1).tolist()
    word_ids = processor.tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length).word_ids()
    id2label = model.config.id2label
    tags = ["O"] * len(words)
    seen = set()
    for position, word in enumerate(word_ids):
        if word is not None and word not in seen:
            seen.add(word)
            tags[word] = id2label[pred_ids[position]]
    return list(zip(words, tags))


__all__ = ["NerMetrics", "argmax_logits", "tag_words"]
