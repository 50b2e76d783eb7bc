"""Masked-LM batches for pre-training: keplm's collator, then BERT's dynamic masking that knows entity spans."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np
import torch
from transformers import TrainerCallback

from .collator import KeplmDataCollator


def example_key(seed: int, epoch: int, input_ids) -> int:
    """The 63-bit generator seed of one example's masks: a hash of ``(seed, epoch, the example's token ids)``. The
    token ids are the stable per-example key (the Trainer drops columns the model does not read, so an index column
    would not reach the collator); identical texts therefore get identical masks within an epoch."""
    digest = hashlib.blake2b(struct.pack("<qq", seed, epoch), digest_size=8)
    digest.update(np.ascontiguousarray(np.asarray(input_ids, dtype=np.int64)).tobytes())
    return int.from_bytes(digest.digest(), "little") >> 1


@dataclass
class MaskedLMCollator:
    """Pads with ``collator`` (a :class:`KeplmDataCollator`), then masks as BERT does: ``mlm_probability`` of the
    ordinary tokens become MLM targets, 80 % replaced by ``[MASK]``, 10 % by a random token, 10 % kept. The tokens
    of knowledge targets (``cka_labels``, TRELM's tail entities) are always targets and always ``[MASK]``; tokens
    where knowledge is injected (``inject_mask``) and special tokens / padding are never. ``mask_knowledge_targets``
    off: knowledge targets are masked like any token (and ``cka_labels`` is dropped).

    Each example's random draws come from its own generator, seeded by ``(seed, epoch, its token ids)``
    (:func:`example_key`): an example gets the same masks whichever process, batch or batch position it lands in,
    so a multi-process run masks a global batch as one process does, and a resumed run as the uninterrupted one.
    :meth:`set_epoch` (called by :class:`MaskingEpochCallback` in a Trainer run) gives new masks every epoch, the
    dynamic masking of BERT / HF's ``DataCollatorForLanguageModeling``.
    Special tokens come from the features' ``special_tokens_mask`` or, when the Trainer removed that column (it is
    no model input), from ``special_token_ids`` (e.g. ``tokenizer.all_special_ids``).
    """

    collator: KeplmDataCollator
    mask_token_id: int
    vocab_size: int
    mlm_probability: float = 0.15
    mask_knowledge_targets: bool = True
    special_token_ids: tuple[int, ...] = ()
    seed: int = 0
    epoch: int = 0

    def __post_init__(self):
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability must lie in (0, 1), got {self.mlm_probability}")

    def set_epoch(self, epoch: int) -> None:
        """Draw the masks of ``epoch`` from now on."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch = int(epoch)

    def draws(self, features: list[dict], shape: torch.Size) -> torch.Tensor:
        """``[3, batch, length]`` uniform draws in [0, 1) (float64): per token, whether it is chosen, how it is
        replaced, and which random token. Each example's draws cover its own tokens only (placed where
        ``collator`` puts them, after left padding or before right padding), so padding never shifts them."""
        out = torch.ones(3, *shape, dtype=torch.float64)  # padding: never chosen (and excluded anyway)
        generator = torch.Generator()
        left = self.collator.padding_side == "left"
        for row, feature in enumerate(features):
            ids = feature["input_ids"]
            length = len(ids)
            generator.manual_seed(example_key(self.seed, self.epoch, ids))
            start = shape[1] - length if left else 0
            out[:, row, start : start + length] = torch.rand(3, length, generator=generator, dtype=torch.float64)
        return out

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
        choose, replace, token = self.draws(features, input_ids.shape)
        chosen = (choose < self.mlm_probability) & ordinary
        labels = torch.where(chosen | targets, input_ids, torch.full_like(input_ids, -100))
        masked = (chosen & (replace < 0.8)) | targets
        randomised = chosen & (replace >= 0.8) & (replace < 0.9)
        random_tokens = (token * self.vocab_size).long().clamp_(max=self.vocab_size - 1)
        input_ids = torch.where(masked, torch.full_like(input_ids, self.mask_token_id), input_ids)
        input_ids = torch.where(randomised, random_tokens, input_ids)
        batch["input_ids"], batch["labels"] = input_ids, labels
        return batch


class MaskingEpochCallback(TrainerCallback):
    """Tells a :class:`MaskedLMCollator` the Trainer's epoch at the start of each epoch, before the epoch's data
    loader iterator (and its worker processes, which copy the collator) exist; after a resume, the epoch of the
    checkpoint. Persistent data-loader workers keep their first copy of the collator, so they are refused."""

    def __init__(self, collator: MaskedLMCollator):
        self.collator = collator

    def on_train_begin(self, args, state, control, **kwargs):
        if args.dataloader_num_workers > 0 and args.dataloader_persistent_workers:
            raise ValueError(
                "dataloader_persistent_workers keeps each worker's copy of the masking collator, so the "
                "masks would never change with the epoch: drop --dataloader_persistent_workers"
            )

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.set_epoch(int(state.epoch or 0))


__all__ = ["MaskedLMCollator", "MaskingEpochCallback", "example_key"]
