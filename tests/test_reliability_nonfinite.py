"""Non-finite values are bad input (issue 24): NaN or inf in KG entity vectors, in memory or in a saved KG folder,
and a training loss that turns NaN, which the Trainer's NaN filter would otherwise hide (train_loss 0.0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from torch import nn

from keplm.knowledge import KnowledgeGraph
from keplm.training.trainer import KeplmTrainer

from .run_args import cpu_training_args


def _kg(vectors):
    return KnowledgeGraph(["a", "b", "c"], ["r"], np.array([[0, 0, 1], [1, 0, 2]]), entity_vectors=vectors)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_entity_vectors_are_refused_and_named(bad):
    vectors = np.ones((3, 4), dtype=np.float32)
    vectors[1, 2] = bad
    with pytest.raises(ValueError, match=r"NaN or inf in 1 rows \(entities \['b'\]\)"):
        _kg(vectors)


def test_a_saved_kg_with_non_finite_vectors_names_its_file(tmp_path):
    _kg(np.ones((3, 4), dtype=np.float32)).save_pretrained(tmp_path / "kg")
    broken = np.ones((3, 4), dtype=np.float32)
    broken[0, 0] = np.nan
    save_file({"entity_vectors": broken}, str(tmp_path / "kg" / "entity_vectors.safetensors"))
    with pytest.raises(ValueError, match="entity_vectors.safetensors: entity_vectors hold NaN or inf in 1 rows"):
        KnowledgeGraph.from_pretrained(tmp_path / "kg", verify_hash=False)
    path = str(tmp_path / "kg" / "entity_vectors.safetensors")
    save_file({"entity_vectors": np.ones((2, 4), dtype=np.float32)}, path)
    with pytest.raises(ValueError, match=r"entity_vectors.safetensors: entity_vectors has shape \(2, 4\), but the KG"):
        KnowledgeGraph.from_pretrained(tmp_path / "kg", verify_hash=False)


class _Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2))

    def forward(self, x, labels):
        return {"loss": ((x * self.weight).sum(-1) - labels).pow(2).mean()}


class _Rows(torch.utils.data.Dataset):
    def __init__(self, bad_row: int | None):
        self.rows = [{"x": [1.0, float(i)], "labels": 1.0} for i in range(8)]
        if bad_row is not None:
            self.rows[bad_row]["x"] = [float("nan"), 1.0]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {k: torch.tensor(v) for k, v in self.rows[i].items()}


@pytest.mark.parametrize("bad_row", [None, 5])
def test_a_nan_training_loss_stops_the_run_with_a_clear_message(tmp_path, bad_row):
    args = cpu_training_args(tmp_path, max_steps=4, per_device_train_batch_size=2, learning_rate=1e-3, logging_steps=2)
    trainer = KeplmTrainer(model=_Regression(), args=args, train_dataset=_Rows(bad_row))
    if bad_row is None:
        assert np.isfinite(trainer.train().training_loss)
        return
    with pytest.raises(FloatingPointError, match="loss became NaN or infinite before step [24]"):
        trainer.train()


@pytest.mark.parametrize("name", ["empty.tsv", "empty.jsonl"])
def test_an_empty_kg_file_is_a_clear_error(tmp_path, name):
    from keplm.knowledge import load_kg

    (tmp_path / name).write_text("")
    with pytest.raises(ValueError, match=f"{name}: the knowledge graph is empty"):
        load_kg(f"{name.split('.')[1]}:{tmp_path / name}")


def test_a_missing_split_names_the_option_that_gives_it():
    from types import SimpleNamespace

    from keplm.training.runtime import check_splits

    args = SimpleNamespace(do_train=True, do_eval=True, do_predict=False)
    with pytest.raises(
        ValueError,
        match=r"--do_eval needs a validation split; the data has \['train'\] \(give "
        r"--validation_file\)",
    ):
        check_splits({"train": []}, args)
    from keplm.training.runtime import QA_SPLIT_HINT as hint

    assert "--split_by_article 38 5 5" in hint
    with pytest.raises(ValueError, match="--split_by_article 38 5 5"):
        check_splits({"train": []}, args, hint)
    check_splits({"train": [], "validation": []}, args)


@pytest.mark.parametrize(
    "name, text",
    [
        ("kg.tsv", b"a\tr\tb\nc\tr\td\n\xff\xfe\tr\tc\n"),
        ("kg.jsonl", b'{"h": "a", "r": "r", "t": "b"}\n\n{"h": "\xff"}\n'),
        ("kg.tsv.gz", None),
    ],
)
def test_bytes_that_are_not_utf8_name_the_file_and_line(tmp_path, name, text):
    import gzip

    from keplm.io_utils import read_json
    from keplm.knowledge import load_kg

    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(b"a\tr\tb\n" * 5000 + b"x\tr\t\xe9t\xe9\n")  # past the decoder's first chunk
        line = 5001
    else:
        path.write_bytes(text)
        line = 3
    kind = "jsonl" if ".jsonl" in name else "tsv"
    with pytest.raises(ValueError, match=f"{name}:{line}: not UTF-8 text"):
        load_kg(f"{kind}:{path}")
    (tmp_path / "x.json").write_bytes(b'{"a":\n "\xff"}')
    with pytest.raises(ValueError, match="x.json:2: not UTF-8 text"):
        read_json(tmp_path / "x.json")


def test_first_non_utf8_line_numbers_the_line_from_one(tmp_path):
    """The helper behind those errors: a (possibly gzipped) file's first line that is not UTF-8, 1-based; None for a
    clean file."""
    import gzip

    from keplm.io_utils import first_non_utf8_line

    (tmp_path / "clean.txt").write_bytes("a\nb\u00e9\n".encode())
    assert first_non_utf8_line(tmp_path / "clean.txt") is None
    (tmp_path / "bad.txt").write_bytes(b"a\nb\n\xffc\n")
    assert first_non_utf8_line(tmp_path / "bad.txt") == 3
    with gzip.open(tmp_path / "bad.txt.gz", "wb") as f:
        f.write(b"\xe9\n")
    assert first_non_utf8_line(tmp_path / "bad.txt.gz") == 1


def test_a_checkpoint_with_nan_weights_is_refused_at_load_by_name(tmp_path, tokenizer, assets):
    """NaN rows in a saved entity memory (a corrupt file, a diverged run) are a ValueError naming the parameter at
    load, not a model whose NER pipeline silently finds no entity."""
    from keplm import KalaForTokenClassification

    from .test_kala_model import make_model

    model = make_model(KalaForTokenClassification, tokenizer, assets, num_labels=3)
    model.save_pretrained(tmp_path / "clean")
    assert KalaForTokenClassification.from_pretrained(tmp_path / "clean") is not None
    with torch.no_grad():
        model.base_model.entity_memory.embeddings.weight[2] = float("nan")
    model.save_pretrained(tmp_path / "nan")
    with pytest.raises(ValueError, match=r"NaN or infinite values in \['kala.entity_memory"):
        KalaForTokenClassification.from_pretrained(tmp_path / "nan")
