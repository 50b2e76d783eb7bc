"""Pieces the task heads of keplm's models share."""

from __future__ import annotations

import torch
from torch import nn

from .families import hidden_dropout


def classification_head(config) -> tuple[nn.Dropout, nn.Linear]:
    """A head's dropout and linear layer over the encoder's states, as BERT's heads build them: the config's
    ``classifier_dropout``, else the encoder's hidden dropout, then ``hidden_size`` → ``num_labels``."""
    dropout = config.classifier_dropout
    dropout = dropout if dropout is not None else hidden_dropout(config.encoder_config)
    return nn.Dropout(dropout), nn.Linear(config.encoder_config.hidden_size, config.num_labels)


def check_labels(
    labels: torch.Tensor | None, num_labels: int, name: str = "labels", meaning: str | None = None
) -> None:
    """ValueError naming the first class / tag id outside ``[0, num_labels)`` (-100 = ignored; a regression's scores,
    ``num_labels == 1`` or float labels, are not ids): a cross-entropy index error deep in torch otherwise. Checked
    where it costs no device sync or graph break (CPU tensors, not under ``torch.compile``). ``name``: the input's
    name; ``meaning``: what its ids index (default: the model's labels)."""
    if (
        labels is None
        or num_labels <= 1
        or labels.is_floating_point()
        or not labels.numel()
        or labels.device.type != "cpu"
        or torch.compiler.is_compiling()
    ):
        return
    ids = labels[labels != -100]
    bad = ids[(ids < 0) | (ids >= num_labels)]
    if bad.numel():
        meaning = meaning or f"a tag or class id must index the model's {num_labels} labels (config.id2label)"
        raise ValueError(f"{name} hold id {int(bad[0])} outside [0, {num_labels}) (-100 = ignored): {meaning}")


def check_span_positions(start_positions, end_positions, length: int) -> None:
    """ValueError naming the first answer start / end outside the feature's ``length`` tokens: transformers' span loss
    ignores such a position, and a batch of only such positions gives a NaN loss. (An answer outside a window is
    marked at [CLS], position 0, by the features, as transformers' examples do.)"""
    meaning = f"an answer position must be one of the feature's {length} tokens (0 = [CLS] for no answer in it)"
    check_labels(start_positions, length, "start_positions", meaning)
    check_labels(end_positions, length, "end_positions", meaning)
