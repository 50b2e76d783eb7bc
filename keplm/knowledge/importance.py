"""Which entity mentions are important enough for knowledge injection (TRELM 3.1, eq. 1)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from .annotation import KnowledgeAnnotation

logger = logging.getLogger(__name__)

SELECTION_RULES = ("si", "long_tail", "si_long_tail", "all")


def sentence_representation(encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the encoder's last hidden states over the attended tokens ([B, H])."""
    hidden = encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)


def importance_score(original: torch.Tensor, replaced: torch.Tensor) -> torch.Tensor:
    """TRELM eq. (1): ``SI(e) = ‖h_o‖·‖h_rep‖ / (h_o·h_rep)``, the inverse cosine of the sentence representations
    with and without the entity: 1 when replacing e changes nothing, larger the more e matters (a negative or
    zero dot product gives +inf)."""
    dot = (original * replaced).sum(-1)
    norms = original.norm(dim=-1) * replaced.norm(dim=-1)
    return torch.where(dot > 0, norms / dot, torch.full_like(dot, float("inf")))


@torch.no_grad()
def semantic_importance(
    encoder,
    tokenizer,
    texts: Sequence[str],
    annotations: Sequence[KnowledgeAnnotation],
    batch_size: int = 32,
    max_length: int = 128,
) -> list[list[float]]:
    """SI of every mention of every text (eq. 1): the sentence with the mention replaced by one mask token against
    the original, under ``encoder`` (the pre-training start checkpoint, in eval mode). Returns one list per text,
    aligned with its annotation's entities. All variants of a batch of texts run in batches of ``batch_size``."""
    starts, variants = [], []  # each text's row, then a row per mention with that mention masked
    for text, annotation in zip(texts, annotations):
        starts.append(len(variants))
        variants += [text, *(f"{text[: m.start]}{tokenizer.mask_token}{text[m.end :]}" for m in annotation.entities)]
    if not variants:
        return []
    device = next(encoder.parameters()).device
    representations = []
    for start in range(0, len(variants), batch_size):
        encoding = tokenizer(
            variants[start : start + batch_size],
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        ).to(device)
        representations.append(
            sentence_representation(encoder, encoding["input_ids"], encoding["attention_mask"]).float().cpu()
        )
    representations = torch.cat(representations)
    return [
        [float(importance_score(representations[row], representations[row + k])) for k in range(1, len(a.entities) + 1)]
        for row, a in zip(starts, annotations)
    ]


def select_important(
    scores: Sequence[Sequence[float]],
    entity_ids: Sequence[Sequence[str | None]],
    counts: dict[str, int],
    rule: str = "si_long_tail",
    si_quantile: float = 0.5,
    long_tail_quantile: float = 0.5,
) -> tuple[list[list[bool]], dict]:
    """Important mentions (3.1): ``"si"`` — SI at or above the corpus ``si_quantile`` of all mention scores;
    ``"long_tail"`` — the entity's corpus count at or below the ``long_tail_quantile`` of the entity counts (rare
    entities, whose representations pre-training leaves poorest, 3.2); ``"si_long_tail"`` — both (the paper prefers
    long-tail entities among the semantically important ones); ``"all"`` — every mention with an entity id.
    Returns the flags (aligned with ``scores``) and a report of the thresholds and counts."""
    if rule not in SELECTION_RULES:
        raise ValueError(f"rule must be one of {SELECTION_RULES}, got {rule!r}")
    flat = np.array([s for row in scores for s in row], dtype=np.float64)
    finite = flat[np.isfinite(flat)]
    si_threshold = float(np.quantile(finite, si_quantile)) if finite.size else float("inf")
    entity_counts = np.array(list(counts.values()), dtype=np.float64)
    tail_threshold = float(np.quantile(entity_counts, long_tail_quantile)) if entity_counts.size else 0.0
    flags, selected = [], 0
    for row_scores, row_ids in zip(scores, entity_ids):
        if len(row_scores) != len(row_ids):
            raise ValueError(f"{len(row_scores)} scores for {len(row_ids)} mentions")
        row = []
        for score, entity in zip(row_scores, row_ids):
            keep = entity is not None
            if keep and rule in ("si", "si_long_tail"):
                keep = score >= si_threshold
            if keep and rule in ("long_tail", "si_long_tail"):
                keep = counts.get(str(entity), 0) <= tail_threshold
            row.append(bool(keep))
            selected += keep
        flags.append(row)
    report = {
        "rule": rule,
        "mentions": int(flat.size),
        "selected": int(selected),
        "si_threshold": si_threshold,
        "long_tail_max_count": tail_threshold,
    }
    logger.info(
        "Important mentions (%s): %d of %d (SI >= %.4f, count <= %.0f)",
        rule,
        selected,
        flat.size,
        si_threshold,
        tail_threshold,
    )
    return flags, report


__all__ = ["importance_score", "semantic_importance", "select_important", "sentence_representation", "SELECTION_RULES"]
