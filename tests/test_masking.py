"""MLM masking per example (issue 27): each example's masks come from ``(seed, epoch, its token ids)``, so they do not
depend on the batch, the batch position, the padding or the process, and change from one epoch to the next. A
2-process gloo run whose batches accelerate shards as the Trainer does masks a global batch as one process does."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from keplm import TrelmProcessor
from keplm.data.collator import KeplmDataCollator
from keplm.data.masking import MaskedLMCollator, MaskingEpochCallback

from .distributed_helpers import spawn_two

SENTENCES = [
    ("john visited paris in france .", ("paris", "Q90"), ("france", "Q142")),
    ("mary lives in berlin , the capital of germany .", ("berlin", "Q64"), ("germany", "Q183")),
    ("the seine river flows through paris in france .", ("seine", "Q1471"), ("paris", "Q90")),
    (
        "london is a city of england and a capital in europe on the thames river .",
        ("london", "Q84"),
        ("england", "Q21"),
    ),
]
FACTS = {"Q90": "Q142", "Q64": "Q183", "Q1471": "Q142", "Q84": "Q21"}


def make_rows(tokenizer, assets) -> list[dict]:
    """TRELM features of SENTENCES (different lengths, with mentions, injected tokens and a CKA target)."""
    texts, annotations = [], []
    for text, *mentions in SENTENCES:
        entities = [{"text": m, "start": text.index(m), "end": text.index(m) + len(m), "id": q} for m, q in mentions]
        head = mentions[0][1]
        texts.append(text)
        annotations.append({"entities": entities, "triplets": [{"h": head, "r": "P17", "t": FACTS[head]}]})
    out = TrelmProcessor(tokenizer, assets).prepare_pretraining_features({"text": texts, "knowledge": annotations})
    return [{key: values[i] for key, values in out.items()} for i in range(len(texts))]


def make_collator(tokenizer, assets, padding_side="right", seed=0) -> MaskedLMCollator:
    processor = TrelmProcessor(tokenizer, assets)
    return MaskedLMCollator(
        KeplmDataCollator.from_processor(processor, padding_side=padding_side),
        tokenizer.mask_token_id,
        len(tokenizer),
        mlm_probability=0.5,
        seed=seed,
    )


def per_example(batch, lengths, padding_side="right") -> list[tuple[list[int], list[int]]]:
    """Each row's masked input ids and labels over its own tokens (padding cut off)."""
    width = batch["input_ids"].shape[1]
    out = []
    for row, length in enumerate(lengths):
        start = width - length if padding_side == "left" else 0
        out.append(
            (
                batch["input_ids"][row, start : start + length].tolist(),
                batch["labels"][row, start : start + length].tolist(),
            )
        )
    return out


def test_an_example_gets_the_same_masks_in_any_batch_position_or_padding(tokenizer, kge_assets):
    rows = make_rows(tokenizer, kge_assets)
    lengths = [len(r["input_ids"]) for r in rows]
    assert len(set(lengths)) == len(rows)  # every batch below pads some row differently
    collator = make_collator(tokenizer, kge_assets)
    torch.manual_seed(0)
    alone = [per_example(collator([row]), [n])[0] for row, n in zip(rows, lengths)]
    torch.manual_seed(1)  # the global generator plays no part
    together = per_example(collator(rows), lengths)
    reversed_ = per_example(collator(rows[::-1]), lengths[::-1])[::-1]
    left = make_collator(tokenizer, kge_assets, padding_side="left")
    padded_left = per_example(left(rows[1:] + rows[:1]), lengths[1:] + lengths[:1], "left")
    assert together == alone and reversed_ == alone and padded_left[-1:] + padded_left[:-1] == alone
    masked = sum(label != -100 for _, labels in alone for label in labels)
    assert masked > len(rows)  # MLM targets beyond the CKA targets


def test_masks_change_with_the_epoch_and_the_seed_and_repeat_with_both(tokenizer, kge_assets):
    rows = make_rows(tokenizer, kge_assets)
    lengths = [len(r["input_ids"]) for r in rows]
    collator = make_collator(tokenizer, kge_assets)
    first = per_example(collator(rows), lengths)
    collator.set_epoch(1)
    second = per_example(collator(rows), lengths)
    assert per_example(make_collator(tokenizer, kge_assets)(rows), lengths) == first
    other_seed = per_example(make_collator(tokenizer, kge_assets, seed=1)(rows), lengths)
    for other in (second, other_seed):
        assert sum(a != b for a, b in zip(first, other)) >= len(rows) - 1  # (almost) every example masked anew
    # the rules hold in every epoch: CKA targets masked, special tokens never
    for row, (ids, labels) in zip(rows, second):
        for token, label, target, special in zip(ids, labels, row["cka_labels"], row["special_tokens_mask"]):
            assert (token == tokenizer.mask_token_id) if target != -100 else True
            assert label == -100 if special else True
    with pytest.raises(ValueError, match="epoch"):
        collator.set_epoch(-1)


def test_masking_epoch_callback_follows_the_trainer_epoch_and_refuses_persistent_workers(tokenizer, kge_assets):
    collator = make_collator(tokenizer, kge_assets)
    callback = MaskingEpochCallback(collator)
    args = SimpleNamespace(dataloader_num_workers=2, dataloader_persistent_workers=False)
    callback.on_train_begin(args, None, None)
    for epoch, expected in ((0, 0), (1.0, 1), (2.5, 2)):  # 2.5: resumed from a checkpoint mid-epoch 2
        callback.on_epoch_begin(args, SimpleNamespace(epoch=epoch), None)
        assert collator.epoch == expected
    with pytest.raises(ValueError, match="persistent"):
        callback.on_train_begin(
            SimpleNamespace(dataloader_num_workers=2, dataloader_persistent_workers=True), None, None
        )


# ------------------------------------------------------------------------------------------------ two processes
def _worker(rank: int, port: int, rows: list[dict], collator: MaskedLMCollator, queue) -> None:
    """One of two torchrun-like processes: accelerate shards a sequential loader of 2 rows per process as the
    Trainer's loader is sharded; the process's first batch is masked in epochs 0 and 1 and gathered."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        OMP_NUM_THREADS="1",
    )
    import torch.distributed as dist
    from accelerate import PartialState
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader

    state = PartialState(cpu=True)
    try:
        torch.manual_seed(0)  # set_seed: the same global generator in both processes
        loader = prepare_data_loader(DataLoader(rows, batch_size=2, collate_fn=collator), put_on_device=False)
        mine = []
        for epoch in (0, 1):
            collator.set_epoch(epoch)
            batch = next(iter(loader))
            lengths = batch["attention_mask"].sum(1).tolist()
            mine.append(per_example(batch, lengths))
        gathered = [None, None]
        dist.all_gather_object(gathered, (state.num_processes, mine))
        if rank == 0:
            queue.put(gathered)
    finally:
        state.destroy_process_group()


@pytest.mark.slow
def test_two_processes_mask_a_global_batch_as_one_process_does(tokenizer, kge_assets):
    rows = make_rows(tokenizer, kge_assets)
    lengths = [len(r["input_ids"]) for r in rows]
    collator = make_collator(tokenizer, kge_assets, seed=42)
    gathered = spawn_two(_worker, rows, collator, results=1)[0]
    assert [size for size, _ in gathered] == [2, 2]  # a real 2-process run
    single = make_collator(tokenizer, kge_assets, seed=42)
    for epoch in (0, 1):
        single.set_epoch(epoch)
        torch.manual_seed(123)  # whatever the global generator holds
        expected = per_example(single(rows), lengths)  # one process, the global batch of 4
        # rank 0 got rows 0-1, rank 1 rows 2-3 (accelerate's BatchSamplerShard)
        assert gathered[0][1][epoch] + gathered[1][1][epoch] == expected, f"epoch {epoch}"
    assert gathered[0][1][0] != gathered[0][1][1]  # new masks in the second epoch
