"""NER helpers for the run scripts: predicted ids between evaluation batches, and tagging raw text."""

from __future__ import annotations

import logging

import torch

from keplm.data.collator import KeplmDataCollator
from keplm.knowledge import KnowledgeAnnotation
from keplm.pipelines import word_tags

logger = logging.getLogger(__name__)


def argmax_logits(logits, labels):
    """``preprocess_logits_for_metrics``: keep predicted ids instead of full logits between eval batches."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def _model_uses_knowledge(model) -> bool:
    return bool(getattr(model.config, "uses_knowledge", False))


@torch.no_grad()
def tag_words(model, processor, text: str, max_length: int = 512) -> list[tuple[str, str]]:
    """Tag a raw text: split it on whitespace, link it with the processor's KG, return ``[(word, tag)]`` (what
    ``run_ner.py --tag_text`` prints; ``pipeline("keplm-ner")`` is the general raw-text entry point).

    A model that reads no knowledge (the vanilla baseline), or a processor without a KG, gets no entities.
    Words past ``max_length`` sub-tokens are tagged ``"O"``.
    """
    words = text.split()
    if not words:
        return []
    with_knowledge = _model_uses_knowledge(model)
    examples = {"tokens": [words]}
    if with_knowledge and processor.kg is None:  # e.g. a model trained on annotation files without a KG
        logger.warning("the processor holds no KG to link raw text against: the text is tagged without knowledge")
        examples["knowledge"] = [KnowledgeAnnotation()]
    features = processor.prepare_ner_features(examples, label_column=None, max_length=max_length,
                                              with_knowledge=with_knowledge)
    feature = {key: values[0] for key, values in features.items()}
    collator = KeplmDataCollator.from_processor(processor, model)
    device = next(model.parameters()).device
    batch = {key: value.to(device) for key, value in collator([feature]).items()}
    was_training = model.training
    model.eval()
    try:
        probabilities = model(**batch).logits[0].float().softmax(-1).cpu().numpy()
    finally:
        model.train(was_training)
    word_ids = processor.tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length).word_ids()
    tags = word_tags(probabilities, [-1 if w is None else w for w in word_ids], len(words), model.config.id2label)
    return [(word, tag if tag is not None else "O") for word, (tag, _) in zip(words, tags)]


__all__ = ["argmax_logits", "tag_words"]
