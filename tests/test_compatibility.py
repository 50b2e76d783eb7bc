"""Checkpoints saved by earlier keplm versions still load and give the same outputs.

``tests/data/checkpoints-d94f7f3/`` holds two tiny KALA checkpoints (relational KALA and the "+1 layer" baseline)
saved by keplm at commit d94f7f3, before the shared spine (processor base, collator, Trainer, multi-encoder
base) replaced the KALA-only layers, with the logits that version computed for two sentences.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoProcessor

import keplm  # noqa: F401  (registers the Auto classes)
from keplm.data.collator import KeplmDataCollator

CHECKPOINTS = Path(__file__).parent / "data" / "checkpoints-d94f7f3"


@pytest.mark.parametrize("system", ["relational", "more_params"])
def test_checkpoint_saved_before_the_spine_loads_with_identical_logits(system):
    path = CHECKPOINTS / system
    expected = json.loads((path / "expected_logits.json").read_text())
    model = AutoModelForTokenClassification.from_pretrained(path).eval()
    processor = AutoProcessor.from_pretrained(path)
    processor.check_model(model)
    with_knowledge = model.config.uses_knowledge
    features = [processor(text, with_knowledge=with_knowledge) for text in expected["texts"]]
    batch = KeplmDataCollator.from_processor(processor, model)(features)
    with torch.no_grad():
        logits = model(**batch).logits
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), atol=1e-5, rtol=1e-5)
