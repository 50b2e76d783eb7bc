"""NER helpers for the run scripts: predicted ids between evaluation batches, word-level tags from token-level ones,
the data's labels renumbered to a model's."""

from __future__ import annotations

import logging

import datasets

logger = logging.getLogger(__name__)


def argmax_logits(logits, labels):
    """``preprocess_logits_for_metrics``: keep predicted ids instead of full logits between eval batches."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(dim=-1)


def word_level_tags(
    label_ids,
    predicted_ids,
    words_batch,
    gold_tags,
    tokenizer,
    id2label,
    max_length: int,
    label_all_tokens: bool = False,
) -> tuple[list, list, list, dict]:
    """Word-level NER predictions from token-level ones, mapped through each sentence's ``word_ids``.

    The Trainer's predictions are read at the positions whose gold label is not -100 (the first sub-token of each
    word, or every sub-token with ``label_all_tokens``), in word order, whatever the padding. Returns
    ``(predictions for predictions.txt, predicted tags and gold tags for the metrics, counts)``:

    * a word that yields no sub-token at all (a lone zero-width or combining character) is predicted ``"O"`` and
      stays in the metrics with its gold tag (it would otherwise shift every later tag and leave the metrics);
    * a word cut off by ``max_length`` is left out of the metrics (the model never saw it), written ``"O"``, and
      counted; counts: ``words``, ``words_without_token``, ``words_truncated``.
    """
    words_batch = [list(words) for words in words_batch]
    full = tokenizer(words_batch, is_split_into_words=True, truncation=False)
    window = tokenizer(words_batch, is_split_into_words=True, truncation=True, max_length=max_length)
    counts = {"words": 0, "words_without_token": 0, "words_truncated": 0}
    written, predicted, gold = [], [], []
    for i, words in enumerate(words_batch):
        labelled = [int(p) for p, g in zip(predicted_ids[i], label_ids[i]) if g != -100]
        word_ids = window.word_ids(i)
        order = [
            w for j, w in enumerate(word_ids) if w is not None and (label_all_tokens or j == 0 or w != word_ids[j - 1])
        ]
        first = {}
        for word, prediction in zip(order, labelled):
            first.setdefault(word, prediction)
        tokenised = {w for w in full.word_ids(i) if w is not None}
        tags, sentence_pred, sentence_gold = [], [], []
        for index in range(len(words)):
            if index in first:
                tag = id2label[first[index]]
            elif index in tokenised:  # cut off by max_length: the model never saw it
                counts["words_truncated"] += 1
                tags.append("O")
                continue
            else:  # no sub-token at all
                counts["words_without_token"] += 1
                tag = "O"
            tags.append(tag)
            sentence_pred.append(tag)
            sentence_gold.append(gold_tags[i][index])
        counts["words"] += len(words)
        written.append(tags)
        predicted.append(sentence_pred)
        gold.append(sentence_gold)
    return written, predicted, gold, counts


def count_words_cut(tokenizer, words_batch, max_length: int) -> int:
    """Words of ``words_batch`` (sentences as word lists) that have sub-tokens but none inside the first
    ``max_length`` tokens: what a cut at ``--max_seq_length`` hides from the model (in training: unlearned labels;
    :func:`word_level_tags` counts the test split's the same way, as ``words_truncated``)."""
    words_batch = [list(words) for words in words_batch]
    if not words_batch:
        return 0
    full = tokenizer(words_batch, is_split_into_words=True, truncation=False)
    window = tokenizer(words_batch, is_split_into_words=True, truncation=True, max_length=max_length)
    return sum(
        len({w for w in full.word_ids(i) if w is not None} - {w for w in window.word_ids(i) if w is not None})
        for i in range(len(words_batch))
    )


def align_labels_to_model(raw, label_list: list[str], config):
    """The dataset's NER tags renumbered to the model's own label ids (a trained checkpoint keeps its label map).

    Data that uses only some of the model's labels, or orders them differently, is legitimate; labels the model
    does not know are a ValueError naming them. Returns ``(raw, the model's label list)``."""
    model_labels = [config.id2label[i] for i in range(config.num_labels)]
    unknown = sorted(set(label_list) - set(model_labels))
    if unknown:
        raise ValueError(f"the data has labels {unknown} that the model does not know (its labels: {model_labels})")
    if list(label_list) == model_labels:
        return raw, model_labels
    mapping = [model_labels.index(label) for label in label_list]
    logger.info("renumbering the data's labels %s to the model's %s", label_list, model_labels)
    for split in list(raw):
        features = raw[split].features.copy()
        features["ner_tags"] = datasets.Sequence(datasets.ClassLabel(names=model_labels))
        raw[split] = raw[split].map(
            lambda batch: {"ner_tags": [[mapping[t] for t in tags] for tags in batch["ner_tags"]]},
            batched=True,
            features=features,
            desc=f"Renumbering {split} labels",
        )
    return raw, model_labels


__all__ = ["argmax_logits", "word_level_tags", "align_labels_to_model", "count_words_cut"]
