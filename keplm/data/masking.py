"""Masked-LM batches for pre-training: keplm's collator, then BERT's dynamic masking that knows entity spans."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .collator import KeplmDataCollator


@dataclass
class MaskedLMCollator:
    """Pads with ``collator`` (a :class:`KeplmDataCollator`), then masks as BERT does: ``mlm_probability`` of the
    ordinary tokens become MLM targets, 80 % replaced by ``[MASK]``, 10 % by a random token, 10 % kept. The tokens
    of knowledge targets (``cka_labels``, TRELM's tail entities) are always targets and always ``[MASK]``; tokens
    where knowledge is injected (``inject_mask``) and special tokens / padding are never. ``mask_knowledge_targets``
    off: knowledge targets are masked like any token (and ``cka_labels`` is dropped). The random draws use torch's
    global generator (seeded by the Trainer; its state is checkpointed), so masks are dynamic per epoch.
    Special tokens come from the features' ``special_tokens_mask`` or, when the Trainer removed that column (it is
    no model input), from ``special_token_ids`` (e.g. ``tokenizer.all_special_ids``).
    """

    collator: KeplmDataCollator
    mask_token_id: int
    vocab_size: int
    mlm_probability: float = 0.15
    mask_knowledge_targets: bool = True
    special_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability must lie in (0, 1), got {self.mlm_probability}")

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = self.collator(features)
        input_ids = batch["input_ids"]
        special = batch.pop("special_tokens_mask", None)
        if special is None and self.special_token_ids:
            special = torch.isin(input_ids, torch.tensor(self.special_token_ids)).long()
        ordinary = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones_like(input_ids).bool()
        if special is not None:
            ordinary &= special == 0
        if "inject_mask" in batch:
            ordinary &= batch["inject_mask"] == 0
        targets = torch.zeros_like(ordinary)
        if "cka_labels" in batch:
            if self.mask_knowledge_targets:
                targets = batch["cka_labels"] != -100
                ordinary &= ~targets
            else:
                batch.pop("cka_labels")
                batch.pop("cka_token_index", None)
        chosen = (torch.rand(input_ids.shape) < self.mlm_probability) & ordinary
        labels = torch.where(chosen | targets, input_ids, torch.full_like(input_ids, -100))
        draw = torch.rand(input_ids.shape)
        masked = (chosen & (draw < 0.8)) | targets
        randomised = chosen & (draw >= 0.8) & (draw < 0.9)
        input_ids = torch.where(masked, torch.full_like(input_ids, self.mask_token_id), input_ids)
        input_ids = torch.where(randomised, torch.randint(self.vocab_size, input_ids.shape), input_ids)
        batch["input_ids"], batch["labels"] = input_ids, labels
        return batch


__all__ = ["MaskedLMCollator"]
