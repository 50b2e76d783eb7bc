"""KG embeddings for TRELM (keplm.knowledge.kge, ``keplm train-kge``): determinism, learning, ranking on a KG with a
clear structure, save/load round trip, the command, vector look-up with missing ids, bad arguments. Tiny, CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from keplm.cli import main
from keplm.knowledge import KnowledgeGraph
from keplm.knowledge.kge import check_kge_settings, kge_vectors, split_triples, train_kge

FAST = dict(dim=16, epochs=20, batch_size=32, progress=False)
#: the kept-vectors runs: small, every triple in training (none held out); each sets its epochs and seed
SMALL_NO_HELD_OUT = dict(dim=16, batch_size=32, valid_fraction=0.0, progress=False)


def clustered_kg() -> KnowledgeGraph:
    """4 countries of 8 cities each; every city has its country, language, currency and continent (two countries per
    continent). Any one of a city's facts follows from the other three: held-out tails are predictable."""
    triples = []
    for k in range(4):
        for i in range(8):
            city = f"c{k}_{i}"
            triples += [
                (city, "country", f"k{k}"),
                (city, "language", f"l{k}"),
                (city, "currency", f"m{k}"),
                (city, "continent", f"z{k % 2}"),
            ]
    return KnowledgeGraph.from_triples(
        triples, entity_names={"k0": "Country zero"}, entity_aliases={"k1": ["Country one"]}
    )


@pytest.fixture(scope="module")
def kg():
    return clustered_kg()


@pytest.fixture(scope="module")
def trained(kg):
    return train_kge(kg, model="transe", dim=32, epochs=50, batch_size=32, valid_fraction=0.15, seed=0, progress=False)


def test_training_is_deterministic_for_a_seed_and_leaves_the_global_rng_alone(kg):
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    first, report = train_kge(kg, seed=7, **FAST)
    assert torch.equal(torch.rand(3), before)  # the caller's RNG stream is untouched
    second, again = train_kge(kg, seed=7, **FAST)
    assert np.array_equal(first.entity_vectors, second.entity_vectors)
    assert report["losses"] == again["losses"] and report["metrics"] == again["metrics"]
    assert first.content_hash() == second.content_hash()
    other, _ = train_kge(kg, seed=8, **FAST)
    assert not np.array_equal(first.entity_vectors, other.entity_vectors)


def test_loss_decreases_and_transe_ranks_held_out_tails_far_above_chance(kg, trained):
    out, report = trained
    losses = report["losses"]
    assert len(losses) == 50 and losses[-1] < 0.6 * losses[0]
    metrics = report["metrics"]
    assert report["triples"] == {"total": 128, "train": 109, "valid": 19, "valid_requested": 19, "ranked": 19}
    assert metrics["triples"] == 19 and "raw" in metrics["protocol"]
    assert metrics["chance_mrr"] == pytest.approx(np.sum(1 / np.arange(1, 47)) / 46)
    assert metrics["mrr"] > 4 * metrics["chance_mrr"]  # chance ~0.096; TransE reaches ~0.6-0.9 here
    assert metrics["hits@10"] >= 0.8 and metrics["hits@1"] <= metrics["hits@10"]
    assert 1.0 <= metrics["mean_rank"] < 10


def test_one_ranking_pass_gives_what_torch_geometric_test_gives_for_each_k():
    """kge.tail_ranks ranks once for mean rank, MRR, Hits@1 and Hits@10; KGEModel.test ranks anew per k."""
    from torch_geometric.nn.kge import DistMult

    from keplm.knowledge.kge import _evaluate

    torch.manual_seed(0)
    model = DistMult(num_nodes=30, num_relations=3, hidden_channels=8)
    triples = torch.stack([torch.randint(0, 30, (12,)), torch.randint(0, 3, (12,)), torch.randint(0, 30, (12,))], 1)
    ours = _evaluate(model, triples, batch_size=7, progress=False)
    for k in (1, 10):
        mean_rank, mrr, hits = model.test(triples[:, 0], triples[:, 1], triples[:, 2], batch_size=7, k=k, log=False)
        assert ours[f"hits@{k}"] == pytest.approx(hits)
    assert ours["mean_rank"] == pytest.approx(mean_rank + 1) and ours["mrr"] == pytest.approx(mrr)
    assert ours["hits@1"] <= ours["hits@10"] and 0 < ours["hits@10"] < 1  # not all trivially 0 or 1


def test_returned_kg_has_vectors_and_round_trips(kg, trained, tmp_path):
    out, report = trained
    assert kg.entity_vectors is None  # the input is not changed
    assert out.entity_vectors.dtype == np.float32 and out.entity_vectors.shape == (46, 32)
    assert out.entity_ids == kg.entity_ids and out.entity_names == kg.entity_names
    assert out.entity_aliases == kg.entity_aliases and np.array_equal(out.triples, kg.triples)
    # TransE's score sees L1-normalised entity vectors: those are what is stored
    assert np.allclose(np.abs(out.entity_vectors).sum(1), 1.0, atol=1e-5)
    assert out.content_hash() != kg.content_hash() and report["kg"]["content_hash"] == out.content_hash()
    assert report["kg"]["input_content_hash"] == kg.content_hash()
    out.save_pretrained(tmp_path / "kg")
    assert (tmp_path / "kg" / "entity_vectors.safetensors").is_file()
    loaded = KnowledgeGraph.from_pretrained(tmp_path / "kg")
    assert np.array_equal(loaded.entity_vectors, out.entity_vectors)
    assert loaded.content_hash() == out.content_hash()
    json.dumps(report)  # JSON-ready


@pytest.mark.parametrize("model, width", [("distmult", 16), ("complex", 16), ("rotate", 16)])
def test_other_models_store_vectors_of_the_asked_width(kg, model, width):
    out, report = train_kge(kg, model=model, dim=width, epochs=3, batch_size=64, progress=False)
    assert out.entity_vectors.shape == (kg.num_entities, width) and np.isfinite(out.entity_vectors).all()
    assert report["hidden_channels"] == (width // 2 if model in ("complex", "rotate") else width)
    assert ("imaginary" in report["vectors"]) == (model in ("complex", "rotate"))


def test_dense_gradients_follow_the_torch_geometric_example_optimizers(kg):
    _, report = train_kge(kg, model="distmult", sparse=False, **FAST)
    assert (report["optimizer"], report["lr"], report["weight_decay"]) == ("adam", 1e-4, 1e-6)
    _, report = train_kge(kg, model="transe", **FAST)
    assert (report["optimizer"], report["weight_decay"], report["sparse_gradients"]) == ("sparse_adam", 0.0, True)
    with pytest.raises(ValueError, match="weight_decay=0.1 needs dense gradients"):
        train_kge(kg, weight_decay=0.1, **FAST)


def test_held_out_triples_keep_their_entities_in_training(kg):
    train, valid = split_triples(kg.triples, 0.3, seed=3)
    assert len(np.intersect1d(train, valid)) == 0 and len(train) + len(valid) == kg.num_triples
    seen = set(kg.triples[train][:, [0, 2]].ravel())
    assert all(h in seen and t in seen for h, _, t in kg.triples[valid])
    assert np.array_equal(split_triples(kg.triples, 0.3, seed=3)[1], valid)
    # a star: every leaf has one triple, so none can be held out without losing its entity
    star = KnowledgeGraph.from_triples([("hub", "r", f"leaf{i}") for i in range(10)])
    assert len(split_triples(star.triples, 0.5, seed=0)[1]) == 0
    _, report = train_kge(star, valid_fraction=0.5, **FAST)
    assert report["metrics"] is None and report["triples"]["valid_requested"] == 5


def test_max_eval_triples_ranks_a_sample(kg):
    _, report = train_kge(kg, valid_fraction=0.15, max_eval_triples=5, **FAST)
    assert report["triples"]["valid"] == 19 and report["triples"]["ranked"] == 5 and report["metrics"]["triples"] == 5


def test_kge_vectors_name_missing_ids_or_skip_and_count_them(trained):
    out, _ = trained
    rows = kge_vectors(out, ["k0", "l1"])
    assert np.array_equal(rows.vectors, out.entity_vectors[[out.entity_index("k0"), out.entity_index("l1")]])
    assert rows.positions.tolist() == [0, 1] and rows.missing == []
    with pytest.raises(ValueError, match=r"2 of 4 entity ids missing from the KGE table.*'Q404'.*'Q405'"):
        kge_vectors(out, ["k0", "Q404", "l1", "Q405"])
    skipped = kge_vectors(out, ["k0", "Q404", "l1", "Q404"], missing="skip")
    assert skipped.missing == ["Q404", "Q404"] and skipped.positions.tolist() == [0, 2]
    assert np.array_equal(skipped.vectors, rows.vectors)
    assert kge_vectors(out, [], missing="skip").vectors.shape == (0, 32)
    with pytest.raises(ValueError, match="no entity vectors.*train-kge"):
        kge_vectors(clustered_kg(), ["k0"])
    with pytest.raises(ValueError, match="missing must be 'error' or 'skip'"):
        kge_vectors(out, ["k0"], missing="zero")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(model="transh"), "unknown KGE model 'transh'"),
        (dict(dim=0), "dim must be a positive integer"),
        (dict(dim=-4), "dim must be a positive integer"),
        (dict(model="complex", dim=15), "dim must be even"),
        (dict(epochs=0), "epochs must be a positive integer"),
        (dict(valid_fraction=1.0), r"valid_fraction must be in \[0, 1\)"),
        (dict(model="complex", margin=2.0), "complex takes no 'margin'"),
        (dict(model="distmult", p_norm=2.0), "distmult takes no 'p_norm'"),
        (dict(margin=-1.0), "margin must be a positive number"),
        (dict(lr=0.0), "lr must be > 0"),
        (dict(max_eval_triples=0), "max_eval_triples must be a positive integer"),
    ],
)
def test_bad_arguments_are_clear_errors(kg, kwargs, message):
    with pytest.raises(ValueError, match=message):
        train_kge(kg, **{**FAST, **kwargs})


def test_an_empty_kg_is_a_clear_error():
    with pytest.raises(ValueError, match="no triples to train KG embeddings on"):
        train_kge(KnowledgeGraph(["a", "b"], ["r"]), **FAST)
    with pytest.raises(ValueError, match="no triples"):
        train_kge(KnowledgeGraph([], []), **FAST)
    assert check_kge_settings("TransE", 8) == "transe"


def test_cli_writes_the_kg_folder_and_report(kg, tmp_path, capsys):
    kg.save_pretrained(tmp_path / "source")
    out_dir = tmp_path / "kge"
    spec = f"pretrained:{tmp_path / 'source'}"
    assert (
        main(
            [
                "train-kge",
                "--kg",
                spec,
                "--output_dir",
                str(out_dir),
                "--dim",
                "8",
                "--epochs",
                "3",
                "--batch_size",
                "64",
                "--valid_fraction",
                "0.1",
                "--seed",
                "5",
                "--no_progress",
            ]
        )
        == 0
    )
    loaded = KnowledgeGraph.from_pretrained(out_dir)
    assert loaded.entity_vectors.shape == (46, 8) and loaded.num_triples == 128
    report = json.loads((out_dir / "kge_report.json").read_text())
    assert report["kg_spec"] == spec and report["model"] == "transe" and report["seed"] == 5
    assert report["kg"]["content_hash"] == loaded.content_hash() and len(report["losses"]) == 3
    assert report["triples"]["valid"] == 13 and report["metrics"]["triples"] == 13
    assert set(report["seconds"]) == {"load_kg", "train", "rank", "total"}  # training and ranking timed apart
    printed = capsys.readouterr().out
    assert "# KG embeddings" in printed and "| 13 |" in printed and "TransE dim 8" in printed
    # the report times training as the log does, the ranking apart
    assert f"in {report['seconds']['train']:.1f}s of training" in printed
    assert f"(ranking the held-out triples: {report['seconds']['rank']:.1f}s)" in printed
    # the same settings give the same vectors through the command as through the function
    direct, _ = train_kge(kg, dim=8, epochs=3, batch_size=64, valid_fraction=0.1, seed=5, progress=False)
    assert np.array_equal(direct.entity_vectors, loaded.entity_vectors)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "transh"], "unknown KGE model"),
        (["--dim", "0"], "dim must be a positive integer"),
        (["--num_threads", "0"], "--num_threads must be positive"),
    ],
)
def test_cli_rejects_bad_settings_before_loading_the_kg(tmp_path, argv, message):
    missing_kg = str(tmp_path / "no-such-kg")  # never read: the settings are checked first
    with pytest.raises(ValueError, match=message):
        main(["train-kge", "--kg", missing_kg, "--output_dir", str(tmp_path / "out"), *argv])
    assert not (tmp_path / "out").exists()


def test_cli_rejects_an_empty_kg(tmp_path):
    KnowledgeGraph(["a"], ["r"]).save_pretrained(tmp_path / "empty")
    with pytest.raises(ValueError, match="no triples"):
        main(["train-kge", "--kg", str(tmp_path / "empty"), "--output_dir", str(tmp_path / "out")])


# ---------------------------------------------------------------------------------------------- kept vectors
def grown_kg(kg: KnowledgeGraph) -> KnowledgeGraph:
    """``kg`` plus two new cities of country 0 and one of country 3, each with its four facts."""
    triples = [(kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in kg.triples.tolist()]
    for city, k in (("new_a", 0), ("new_b", 0), ("new_c", 3)):
        triples += [
            (city, "country", f"k{k}"),
            (city, "language", f"l{k}"),
            (city, "currency", f"m{k}"),
            (city, "continent", f"z{k % 2}"),
        ]
    return KnowledgeGraph.from_triples(triples)


@pytest.mark.parametrize("model", ["transe", "distmult", "complex", "rotate"])
def test_kept_vectors_stay_exactly_and_only_new_entities_train(kg, model):
    old, _ = train_kge(kg, model=model, epochs=5, seed=0, **SMALL_NO_HELD_OUT)
    grown = grown_kg(kg)
    new, report = train_kge(grown, model=model, epochs=5, seed=3, keep_vectors=old, **SMALL_NO_HELD_OUT)
    for entity in kg.entity_ids:
        kept = new.entity_vectors[grown.entity_index(entity)]
        assert np.array_equal(kept, old.entity_vectors[kg.entity_index(entity)])
    assert report["kept_vectors"]["entities"] == kg.num_entities and report["kept_vectors"]["trained"] == 3
    assert report["kept_vectors"]["source_content_hash"] == old.content_hash()
    fresh, _ = train_kge(grown, model=model, epochs=5, seed=3, **SMALL_NO_HELD_OUT)
    rows = [grown.entity_index(e) for e in ("new_a", "new_b", "new_c")]
    assert np.isfinite(new.entity_vectors[rows]).all()
    assert not np.array_equal(new.entity_vectors[rows], fresh.entity_vectors[rows])  # trained against kept rows


def test_new_entities_land_beside_their_kind_in_the_kept_space(kg, trained):
    """A new city of country 0 gets a TransE vector nearer to country 0's cities than to country 3's: its facts
    place it in the space the old vectors define (the point of keeping them)."""
    old, _ = trained
    grown = grown_kg(kg)
    new, _ = train_kge(
        grown, dim=32, epochs=100, batch_size=32, valid_fraction=0.0, seed=1, progress=False, keep_vectors=old
    )
    vectors = new.entity_vectors / np.linalg.norm(new.entity_vectors, axis=1, keepdims=True)

    def mean_cos(entity, k):
        city = vectors[grown.entity_index(entity)]
        return float(np.mean([vectors[grown.entity_index(f"c{k}_{i}")] @ city for i in range(8)]))

    assert mean_cos("new_a", 0) > mean_cos("new_a", 3) + 0.2
    assert mean_cos("new_c", 3) > mean_cos("new_c", 0) + 0.2


def test_bad_kept_vectors_are_clear_errors(kg, trained):
    old, _ = trained
    with pytest.raises(ValueError, match="width 32, but dim is 16"):
        train_kge(kg, dim=16, epochs=1, progress=False, keep_vectors=old)
    with pytest.raises(ValueError, match="with entity vectors"):
        train_kge(kg, dim=32, epochs=1, progress=False, keep_vectors=kg)
    other = KnowledgeGraph(["x", "y"], ["r"], np.array([[0, 0, 1]]), entity_vectors=np.ones((2, 32), np.float32))
    with pytest.raises(ValueError, match="shares no entity"):
        train_kge(kg, dim=32, epochs=1, progress=False, keep_vectors=other)
    broken = np.array(old.entity_vectors)
    broken[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):  # such vectors never make a KG to keep
        KnowledgeGraph(old.entity_ids, old.relation_ids, old.triples, entity_vectors=broken)


def test_cli_keeps_vectors_of_an_earlier_run_and_checks_its_settings(kg, tmp_path, capsys):
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    kg.save_pretrained(tmp_path / "source")
    grown_kg(kg).save_pretrained(tmp_path / "grown")
    common = ["--dim", "8", "--epochs", "3", "--batch_size", "64", "--valid_fraction", "0", "--no_progress"]
    grown = str(tmp_path / "grown")

    def keep_from(source, output_dir, *options):
        """train-kge on the grown KG, keeping the vectors of ``source``."""
        return main(
            ["train-kge", "--kg", grown, "--output_dir", str(output_dir), "--keep_vectors_from", str(source), *options]
        )

    assert main(["train-kge", "--kg", str(tmp_path / "source"), "--output_dir", str(old_dir), *common]) == 0
    assert keep_from(old_dir, new_dir, *common) == 0
    old, new = KnowledgeGraph.from_pretrained(old_dir), KnowledgeGraph.from_pretrained(new_dir)
    assert all(
        np.array_equal(new.entity_vectors[new.entity_index(e)], old.entity_vectors[old.entity_index(e)])
        for e in old.entity_ids
    )
    report = json.loads((new_dir / "kge_report.json").read_text())
    assert report["kept_vectors"]["from"] == str(old_dir) and report["kept_vectors"]["trained"] == 3
    assert "Kept the stored vectors of 46 entities" in capsys.readouterr().out
    with pytest.raises(ValueError, match="holds transe vectors of dim 8"):
        keep_from(old_dir, tmp_path / "x", "--dim", "16")
    with pytest.raises(ValueError, match="no entity vectors"):
        keep_from(tmp_path / "source", tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="no saved KG"):
        keep_from(tmp_path, tmp_path / "x")


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("TransE", {}),
        ("TransE", {"p_norm": 2.0}),
        ("DistMult", {}),
        ("ComplEx", {}),
        ("RotatE", {"margin": 9.0}),
        ("RotatE", {"margin": 2.0}),
    ],
)
def test_all_tail_scores_equal_the_models_forward_for_every_entity(name, kwargs):
    """The vectorised scores (one distance or matrix product against the entity table) are torch_geometric's
    forward of each (h, r, t) pair, for every entity as t."""
    import torch_geometric.nn.kge as kge

    from keplm.knowledge.kge import all_tail_scores

    torch.manual_seed(0)
    model = getattr(kge, name)(num_nodes=50, num_relations=4, hidden_channels=8, **kwargs).eval()
    head, rel, every = torch.randint(0, 50, (6,)), torch.randint(0, 4, (6,)), torch.arange(50)
    with torch.no_grad():
        expected = model(head.repeat_interleave(50), rel.repeat_interleave(50), every.repeat(6)).view(6, 50)
        assert torch.allclose(all_tail_scores(model, head, rel), expected, rtol=1e-5, atol=1e-5)


def test_kept_vectors_hold_their_values_at_every_training_step(kg, monkeypatch):
    """The new entities train against the kept vectors as stored: before every batch's loss the kept rows equal the
    stored values (putting them back only at the end would let them drift while the new rows learn)."""
    import torch

    from keplm.knowledge import kge

    old, _ = train_kge(kg, model="distmult", epochs=2, seed=0, **SMALL_NO_HELD_OUT)
    grown = grown_kg(kg)
    rows = torch.tensor([grown.entity_index(e) for e in kg.entity_ids])
    stored = torch.tensor(np.asarray(old.entity_vectors, dtype=np.float32))
    drift, original = [], kge._model_class

    def spying(name):
        class Spy(original(name)):
            def loss(self, head, rel, tail):
                drift.append(float((self.node_emb.weight[rows].detach() - stored).abs().max()))
                return super().loss(head, rel, tail)

        return Spy

    monkeypatch.setattr(kge, "_model_class", spying)
    train_kge(grown, model="distmult", epochs=3, seed=3, keep_vectors=old, **SMALL_NO_HELD_OUT)
    assert len(drift) > 3 and max(drift) == 0.0
