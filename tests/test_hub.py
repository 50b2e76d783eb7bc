"""Push and pull over real HTTP against a local Hub-API server (tests/hub_server.py): every keplm model type with
its knowledge assets, loaded back in a fresh process with an empty cache; revisions; missing assets; no pickles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, ModelCard

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaForQuestionAnswering, KalaForTokenClassification, KalaProcessor
from keplm.configuration import RelationExtractionConfig
from keplm.data.collator import KeplmDataCollator
from keplm.knowledge import KnowledgeAssets, KnowledgeGraph
from keplm.modeling import KeplmForRelationExtraction

from .conftest import tiny_encoder_config
from .hub_fixtures import MODEL_REPO_FILES, push_model_and_processor
from .test_kala_model import make_model

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["john visited paris and unknownia in france .", "berlin is a city"]

#: what the fresh process runs: load through the Auto classes from the Hub, print the outputs as JSON
LOAD_AND_RUN = """
import json, sys, torch, keplm
from transformers import AutoProcessor, {auto}
from keplm.data.collator import KeplmDataCollator
repo, revision, texts = sys.argv[1], sys.argv[2] or None, json.loads(sys.argv[3])
model = {auto}.from_pretrained(repo, revision=revision).eval()
processor = AutoProcessor.from_pretrained(repo, revision=revision)
batch = KeplmDataCollator.from_processor(processor, model)([processor(t) for t in texts])
with torch.no_grad():
    out = model(**batch)
print(json.dumps({{"logits": (out.logits if hasattr(out, "logits") else out.start_logits).tolist(),
                   "kg_triples": processor.kg.num_triples, "vocab": processor.knowledge_assets.content_hash()}}))
"""


def _outputs(model, processor, texts=TEXTS):
    batch = KeplmDataCollator.from_processor(processor, model)([processor(t) for t in texts])
    with torch.no_grad():
        out = model.eval()(**batch)
    return out.logits if hasattr(out, "logits") else out.start_logits


def last_line_of(hub_env, code: str, *args: str) -> str:
    """The last line ``python -c code *args`` prints, run in a fresh process on the test Hub."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**hub_env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()[-1]


def _load_in_fresh_process(hub_env, repo: str, auto: str, revision: str | None = None) -> dict:
    return json.loads(last_line_of(hub_env, LOAD_AND_RUN.format(auto=auto), repo, revision or "", json.dumps(TEXTS)))


@pytest.mark.parametrize(
    "cls,auto",
    [
        (KalaForTokenClassification, "AutoModelForTokenClassification"),
        (KalaForQuestionAnswering, "AutoModelForQuestionAnswering"),
    ],
)
def test_push_then_load_in_a_fresh_process_gives_identical_outputs(hub_server, hub_env, tokenizer, assets, cls, auto):
    """model.push_to_hub + processor.push_to_hub upload everything (nested knowledge/kg/ included, weights through
    LFS, keplm's card, no pickle); a fresh process with an empty cache loads it through the Auto classes."""
    model = make_model(cls, tokenizer, assets, "relational", num_labels=3)
    processor = KalaProcessor(tokenizer, assets)
    files = push_model_and_processor(model, processor, "org/kala-tiny")
    assert (
        MODEL_REPO_FILES
        | {"knowledge/assets_config.json", "knowledge/kg/triples.tsv", "knowledge/kg/kg_config.json", "tokenizer.json"}
        <= files
    )
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert any(method == "PUT" and path.startswith("/__lfs/") for method, path, _ in hub_server.requests)
    card = ModelCard.load("org/kala-tiny")
    assert card.data.library_name == "keplm"
    loaded = _load_in_fresh_process(hub_env, "org/kala-tiny", auto)
    torch.testing.assert_close(torch.tensor(loaded["logits"]), _outputs(model, processor))
    assert loaded["vocab"] == assets.content_hash() and loaded["kg_triples"] == assets.kg.num_triples


@pytest.mark.parametrize("auto", ["AutoModelForSequenceClassification", "AutoModelForQuestionAnswering"])
def test_roof_transformer_push_then_load_in_a_fresh_process(hub_server, hub_env, tokenizer, kg, auto):
    """Roof-Transformer with its KG: pushed model + processor load through the Auto classes in a fresh process and
    select the same knowledge (the cached KB encoder's encodings are not part of the repo)."""
    from keplm import RoofTransformerConfig, RoofTransformerProcessor
    from keplm.modeling.modeling_roof_transformer import (
        RoofTransformerForQuestionAnswering,
        RoofTransformerForSequenceClassification,
    )

    cls = {
        "AutoModelForSequenceClassification": RoofTransformerForSequenceClassification,
        "AutoModelForQuestionAnswering": RoofTransformerForQuestionAnswering,
    }[auto]
    torch.manual_seed(0)
    processor = RoofTransformerProcessor(
        tokenizer, KnowledgeAssets(kg=kg), selection="no_tail", max_knowledge_length=40
    )
    model = cls(
        RoofTransformerConfig(
            encoder_config=tiny_encoder_config(tokenizer),
            max_knowledge_length=40,
            fusion_layers=1,
            knowledge_encoding="cached",
            num_labels=3,
        )
    )
    model.set_knowledge_assets(processor.knowledge_assets)
    model.push_to_hub("org/roof-tiny")
    processor.push_to_hub("org/roof-tiny")
    files = set(HfApi().list_repo_files("org/roof-tiny"))
    assert {"config.json", "model.safetensors", "processor_config.json", "knowledge/kg/triples.tsv"} <= files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl")) or "knowledge_encodings" in f]
    loaded = _load_in_fresh_process(hub_env, "org/roof-tiny", auto)
    torch.testing.assert_close(torch.tensor(loaded["logits"]), _outputs(model, processor))
    assert loaded["kg_triples"] == kg.num_triples


def test_second_push_and_load_at_the_first_commit(hub_server, hub_env, tokenizer, assets):
    """A load at the first commit's revision returns the first weights and the first KG, also for the processor."""
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    processor = KalaProcessor(tokenizer, assets)
    model.push_to_hub("org/versions")
    first = processor.push_to_hub("org/versions").oid
    first_logits = _outputs(model, processor)
    kg = assets.kg
    bigger = KnowledgeGraph.from_triples(
        [
            *((kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in kg.triples.tolist()),
            ("Q64", "P31", "Q21"),
        ],
        entity_names=dict(zip(kg.entity_ids, kg.entity_names)),
    )
    second_assets = KnowledgeAssets(assets.entity_vocab, assets.relation_vocab, assets.entity_counts, bigger)
    with torch.no_grad():
        model.classifier.weight.add_(1.0)
    model.set_knowledge_assets(second_assets)
    model.push_to_hub("org/versions")
    KalaProcessor(tokenizer, second_assets).push_to_hub("org/versions")
    old = _load_in_fresh_process(hub_env, "org/versions", "AutoModelForTokenClassification", revision=first)
    torch.testing.assert_close(torch.tensor(old["logits"]), first_logits)
    assert old["kg_triples"] == kg.num_triples
    new = _load_in_fresh_process(hub_env, "org/versions", "AutoModelForTokenClassification")
    assert new["kg_triples"] == kg.num_triples + 1
    assert not torch.allclose(torch.tensor(new["logits"]), first_logits)


def test_repo_without_knowledge_fails_before_the_weights_are_downloaded(hub_server, tmp_path, tokenizer, assets):
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    model.save_pretrained(tmp_path / "saved")
    HfApi().create_repo("org/no-knowledge")
    HfApi().upload_folder(repo_id="org/no-knowledge", folder_path=tmp_path / "saved", ignore_patterns=["knowledge/*"])
    hub_server.requests.clear()
    with pytest.raises(FileNotFoundError, match="org/no-knowledge has no knowledge/assets_config.json"):
        KalaForTokenClassification.from_pretrained("org/no-knowledge")
    assert not any(path.endswith("model.safetensors") and method == "GET" for method, path, _ in hub_server.requests)


def test_hub_options_are_honoured(hub_server, tmp_path, tokenizer, assets):
    """cache_dir receives every file (weights and knowledge), local_files_only then works offline."""
    model = make_model(KalaForTokenClassification, tokenizer, assets, "pointwise", num_labels=3)
    model.push_to_hub("org/options")
    cache = tmp_path / "cache"
    with pytest.raises(OSError):
        KalaForTokenClassification.from_pretrained("org/options", cache_dir=cache, local_files_only=True)
    loaded = KalaForTokenClassification.from_pretrained("org/options", cache_dir=cache)
    assert list(cache.rglob("entity_vocab.json")) and list(cache.rglob("model.safetensors"))
    again = KalaForTokenClassification.from_pretrained("org/options", cache_dir=cache, local_files_only=True)
    assert again.knowledge_assets.content_hash() == loaded.knowledge_assets.content_hash() == assets.content_hash()
    KalaForTokenClassification.from_pretrained("org/options", cache_dir=cache, force_download=True)


def test_relation_extraction_model_push_and_pull(hub_server, hub_env, tokenizer):
    torch.manual_seed(0)
    config = RelationExtractionConfig(
        encoder_config=tiny_encoder_config(tokenizer), id2label={0: "no_relation", 1: "P17"}, bilinear_dim=8
    )
    model = KeplmForRelationExtraction(config).eval()
    model.push_to_hub("org/re-tiny")
    tokenizer.push_to_hub("org/re-tiny")
    script = (
        "import sys, torch, keplm; from transformers import AutoModel; "
        "m = AutoModel.from_pretrained('org/re-tiny'); "
        "print(sum(float(p.sum()) for p in m.parameters()))"
    )
    expected = sum(float(p.detach().sum()) for p in model.parameters())
    assert abs(float(last_line_of(hub_env, script)) - expected) < 1e-3
    assert ModelCard.load("org/re-tiny").data.library_name == "keplm"


#: the fresh process for TRELM: the stock Auto class and processor, the given features, the logits as JSON
LOAD_AND_RUN_MLM = """
import json, sys, torch, keplm
from transformers import AutoModelForMaskedLM, AutoProcessor
repo, features = sys.argv[1], json.loads(sys.argv[2])
model = AutoModelForMaskedLM.from_pretrained(repo).eval()
processor = AutoProcessor.from_pretrained(repo)
with torch.no_grad():
    logits = model(**{k: torch.tensor(v) for k, v in features.items()}).logits
print(json.dumps({"logits": logits.tolist(), "kge": model.knowledge_assets.kg.entity_vectors.tolist(),
                  "processor": type(processor).__name__}))
"""


def test_trelm_push_then_load_in_a_fresh_process(hub_server, hub_env, tokenizer, kg):
    """TRELM with its KG embeddings (the injection's input): pushed with routing deltas folded in, loaded through
    AutoModelForMaskedLM in a fresh process: same logits, same KGE table, the TRELM processor."""
    from keplm import TrelmProcessor

    from .test_trelm import ANNOTATION, TEXT, features, make_model, with_kge

    assets = with_kge(kg)
    model = make_model(tokenizer, assets).eval()
    router = model.enable_knowledge_routing()
    with torch.no_grad():
        for parameter in router.delta_parameters():
            parameter.normal_()
    processor = TrelmProcessor(tokenizer, assets)
    batch = {
        k: v
        for k, v in features(processor, (TEXT,), (ANNOTATION,)).items()
        if k not in ("special_tokens_mask", "cka_labels", "cka_token_index")
    }
    with torch.no_grad():
        expected = model(**{k: torch.tensor(v) for k, v in batch.items()}).logits
    files = push_model_and_processor(model, processor, "org/trelm-tiny")
    assert MODEL_REPO_FILES | {"knowledge/kg/triples.tsv", "knowledge/kg/entity_vectors.safetensors"} <= files
    card = ModelCard.load("org/trelm-tiny")
    assert card.data.library_name == "keplm" and card.data.pipeline_tag == "fill-mask" and "TRELM" in card.text
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    loaded = json.loads(last_line_of(hub_env, LOAD_AND_RUN_MLM, "org/trelm-tiny", json.dumps(batch)))
    torch.testing.assert_close(torch.tensor(loaded["logits"]), expected)
    assert loaded["processor"] == "TrelmProcessor"
    assert torch.equal(torch.tensor(loaded["kge"]), torch.from_numpy(assets.kg.entity_vectors))
