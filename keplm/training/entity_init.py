"""Entity-memory initialisation from the pretrained encoder (KALA appendix B.1)."""

from __future__ import annotations

import logging

import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

_ENCODER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@torch.no_grad()
def initialize_entity_memory_from_encoder(
    model, dataset, collator, batch_size: int = 32, disable_tqdm: bool = False
) -> int:
    """Set every entity-memory row to the mean last-layer state of the tokens of its training mentions.

    ``dataset`` is a ``datasets.Dataset`` of processor features. The wrapped HF encoder runs alone (no
    knowledge modulation: the KFM hooks see no knowledge state) over the features that have a mention; each
    token inside a mention is credited to the entity-memory row of its graph node
    (``node_entity_ids[entity_token_map]``). Rows never mentioned, and the null row 0, are left as they are.
    Returns the number of rows written. A ``ShardedEntityMemory`` takes the rows it holds, but the sums here are
    table-sized: initialise before ``shard_entity_memory`` where memory is short.
    """
    base = model.base_model
    memory = getattr(base, "entity_memory", None)
    if memory is None:
        logger.info(
            "model has no entity memory (retrieval_mode=%r): nothing to initialise",
            getattr(model.config, "retrieval_mode", None),
        )
        return 0
    encoder = base.encoder
    hidden_size = encoder.config.hidden_size
    if memory.entity_dim != hidden_size:
        raise ValueError(
            f"entity_dim {memory.entity_dim} differs from the encoder's hidden size {hidden_size}: "
            "the memory cannot be initialised from encoder states"
        )
    device = next(memory.parameters()).device  # an EntityMemory or a ShardedEntityMemory
    sums = torch.zeros(memory.num_entities, hidden_size, dtype=torch.float32, device=device)
    counts = torch.zeros(memory.num_entities, dtype=torch.float32, device=device)
    was_training = model.training
    model.eval()
    base._state = None  # the KFM hooks become the identity: plain encoder states
    # only features with a mention matter; length-sorted batches waste little compute on padding
    lengths = [len(ids) for ids in dataset["input_ids"]]
    with_mentions = [i for i, row in enumerate(dataset["entity_token_map"]) if max(row, default=-1) >= 0]
    with_mentions.sort(key=lambda i: lengths[i])
    loader = DataLoader(dataset.select(with_mentions), batch_size=batch_size, shuffle=False, collate_fn=collator)
    try:
        for batch in tqdm(loader, desc="Initialising entity memory", disable=disable_tqdm):
            token_map = batch["entity_token_map"].to(device)
            in_mention = token_map >= 0
            if not in_mention.any():
                continue
            inputs = {k: batch[k].to(device) for k in _ENCODER_INPUTS if k in batch}
            hidden = encoder(**inputs, return_dict=True).last_hidden_state.float()
            rows = batch["node_entity_ids"].to(device)[token_map[in_mention]]
            sums.index_add_(0, rows, hidden[in_mention])
            counts.index_add_(0, rows, torch.ones_like(rows, dtype=counts.dtype))
    finally:
        base._state = None
        model.train(was_training)
    counts[0] = 0  # the null entity stays zero
    rows = torch.nonzero(counts > 0).squeeze(-1)
    if rows.numel():
        memory.initialize_rows(rows, sums[rows] / counts[rows].unsqueeze(-1))
    logger.info(
        "Initialised %d of %d entity-memory rows from mean mention states", rows.numel(), memory.num_entities - 1
    )
    return int(rows.numel())


__all__ = ["initialize_entity_memory_from_encoder"]
