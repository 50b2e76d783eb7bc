"""Pieces the task heads of keplm's models share."""

from __future__ import annotations

from torch import nn


def classification_head(config) -> tuple[nn.Dropout, nn.Linear]:
    """A head's dropout and linear layer over the encoder's states, as BERT's heads build them: the config's
    ``classifier_dropout``, else the encoder's hidden dropout, then ``hidden_size`` → ``num_labels``."""
    dropout = config.classifier_dropout
    dropout = dropout if dropout is not None else config.encoder_config.hidden_dropout_prob
    return nn.Dropout(dropout), nn.Linear(config.encoder_config.hidden_size, config.num_labels)
