"""The model card's figures over a large entity memory (issue 27): the KFM modulation numbers and figure read a
seeded sample of ``CARD_SAMPLE_ROWS`` rows (said in the card), exact over every row of a smaller memory; the
entity-frequency figure thins its rank curve, never its histogram; of a row-sharded memory the card reads the rows
the writing process holds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from keplm import KalaConfig, KalaForTokenClassification
from keplm.hub import figures
from keplm.hub.card import build_model_card

from .conftest import tiny_encoder_config
from .test_card import NER_METRICS, _ner_model


def _big_model(tokenizer, rows: int) -> KalaForTokenClassification:
    """A KALA model whose entity memory has ``rows`` rows besides the null row (no knowledge assets)."""
    torch.manual_seed(0)
    config = KalaConfig(
        encoder_config=tiny_encoder_config(tokenizer),
        entity_vocab_size=rows + 1,
        entity_dim=8,
        num_relations=2,
        kfm_layers=[-1],
        num_labels=3,
    )
    return KalaForTokenClassification(config).eval()


def _modulation_inputs(model) -> list[int]:
    """Records how many rows each call of a KFM layer's modulation reads."""
    seen = []
    for layer in model.base_model.knowledge_layers.values():
        layer.modulation.register_forward_pre_hook(lambda module, args: seen.append(int(args[0].shape[0])))
    return seen


def test_a_card_of_a_large_memory_reads_a_seeded_sample_and_says_so(tmp_path, tokenizer):
    pytest.importorskip("matplotlib")
    rows = figures.CARD_SAMPLE_ROWS * 2 + 7
    model = _big_model(tokenizer, rows)
    seen = _modulation_inputs(model)
    text = str(build_model_card(model, metrics=NER_METRICS, figures_dir=tmp_path / "figures"))
    assert seen == [figures.CARD_SAMPLE_ROWS]  # the KFM MLPs never see the whole memory
    sample = f"{figures.CARD_SAMPLE_ROWS:,} of {rows:,}"
    assert f"mean modulation magnitude (computed on a sample of {sample} rows): layer 2:" in text
    assert f"a seeded sample of {figures.CARD_SAMPLE_ROWS:,} of the {rows:,} entity-memory rows v" in text
    assert (tmp_path / "figures" / figures.MODULATION_PNG).is_file()
    # the sample: seeded, sorted, without repeats, never the null row; the table holds exactly those rows
    chosen = figures.sample_rows(rows, 50, seed=0)
    assert np.array_equal(chosen, figures.sample_rows(rows, 50, seed=0))
    assert not np.array_equal(chosen, figures.sample_rows(rows, 50, seed=1))
    assert np.all(np.diff(chosen) > 0) and 0 <= chosen[0] and chosen[-1] < rows
    sampled = figures.kfm_modulation_table(model, max_rows=50)[1]
    layer = model.base_model.knowledge_layers["1"]
    weight = model.base_model.entity_memory.embeddings.weight.detach()[1:]
    with torch.no_grad():
        want = layer.modulation(weight[torch.as_tensor(chosen)], torch.ones(50, dtype=torch.bool))
    torch.testing.assert_close(sampled, want.float(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="max_rows"):
        figures.sample_rows(rows, 0)


def test_a_memory_within_the_sample_gives_every_row_as_before(tmp_path, tokenizer, assets):
    pytest.importorskip("matplotlib")
    model = _ner_model(tokenizer, assets)
    seen = _modulation_inputs(model)
    text = str(build_model_card(model, metrics=NER_METRICS, figures_dir=tmp_path / "figures"))
    assert seen == [assets.num_entities - 1]
    assert "Median over entity-memory rows of the mean modulation magnitude: layer 2:" in text
    assert "computed on a sample" not in text and "every entity-memory row v (null row left out)" in text
    table = figures.kfm_modulation_table(model)[1]
    weight = model.base_model.entity_memory.embeddings.weight.detach()[1:]
    with torch.no_grad():
        want = model.base_model.knowledge_layers["1"].modulation(weight, torch.ones(len(weight), dtype=torch.bool))
    torch.testing.assert_close(table, want.float(), rtol=0, atol=0)  # every row, in row order
    assert torch.equal(figures.kfm_modulation_table(model, max_rows=len(weight))[1], table)


@pytest.mark.parametrize("max_points", [1000, 20])
def test_the_entity_frequency_figure_thins_its_rank_curve_not_its_histogram(tmp_path, monkeypatch, max_points):
    pytest.importorskip("matplotlib")
    counts = [0, *np.random.default_rng(0).zipf(1.6, 300).tolist(), 0, 1, 1]
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda figure, path: drawn.append(figure))
    figures.entity_frequency_figure(counts, tmp_path / "f.png", max_points=max_points)
    rank_axis, hist_axis = drawn[0].axes
    ranks, values = rank_axis.lines[0].get_xdata(), rank_axis.lines[0].get_ydata()
    frequencies = sorted((c for c in counts if c > 0), reverse=True)
    if max_points >= len(frequencies):  # every rank, as before
        assert ranks.tolist() == list(range(1, len(frequencies) + 1))
    else:  # at most max_points ranks, log-spaced, the first and the last among them
        assert len(ranks) <= max_points and ranks[0] == 1 and ranks[-1] == len(frequencies)
    assert values.tolist() == [frequencies[r - 1] for r in ranks]
    buckets = [0] * (max(frequencies).bit_length())
    for frequency in frequencies:
        buckets[frequency.bit_length() - 1] += 1  # floor(log2): every row counted
    assert [patch.get_height() for patch in hist_axis.patches] == buckets
    assert hist_axis.get_title() == f"{len(frequencies):,} entities, {sum(f == 1 for f in frequencies):,} seen once"


def test_a_card_of_a_row_sharded_memory_reads_the_rows_this_process_holds(tmp_path, tokenizer):
    """A ``ShardedEntityMemory`` holding rows [4, 25) of 31 (a block set by hand in one process): the card's
    modulation reads those rows only (the table is never gathered for it), sampled the same way, and says so; the
    null row (global row 0) is not among them, so none is left out."""
    pytest.importorskip("matplotlib")
    from keplm.modeling.sharded_entity_memory import ShardedEntityMemory

    from .distributed_helpers import free_port

    model = _big_model(tokenizer, 30)
    whole = model.base_model.entity_memory.embeddings.weight.detach().clone()
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        memory = ShardedEntityMemory.from_full(whole)
        memory.start, memory.stop = 4, 25  # the block another process count would give this process
        memory.weight = torch.nn.Parameter(whole[4:25].clone())
        model.base_model.entity_memory = memory
        seen = _modulation_inputs(model)
        table = figures.kfm_modulation_table(model)[1]
        assert figures.held_entity_memory_rows(model) == (4, 25) and figures.entity_memory_rows(model) == 30
        with torch.no_grad():
            want = model.base_model.knowledge_layers["1"].modulation(whole[4:25], torch.ones(21, dtype=torch.bool))
        torch.testing.assert_close(table, want.float(), rtol=0, atol=0)
        sampled = figures.kfm_modulation_table(model, max_rows=5)[1]
        assert sampled.shape[0] == 5 and seen[-1] == 5
        text = str(build_model_card(model, metrics=NER_METRICS, figures_dir=tmp_path / "figures"))
    finally:
        torch.distributed.destroy_process_group()
    assert "21 of the 30 entity-memory rows v, from rows [4, 25) (those this process holds of the row-sharded" in text
