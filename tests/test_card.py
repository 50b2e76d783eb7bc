from keplm import KalaConfig
from keplm.hub.card import build_model_card, write_model_card

from .conftest import tiny_encoder_config


def test_model_card_reports_config_assets_and_metrics(tmp_path, tokenizer, assets):
    config = KalaConfig(encoder_config=tiny_encoder_config(tokenizer), entity_vocab_size=assets.num_entities,
                        num_relations=assets.num_relations)
    card = build_model_card(config, assets, metrics={"eval_f1": 0.91234}, base_model="tiny-bert",
                            dataset="conll2003", repo_id="org/kala-tiny", auto_class="AutoModelForTokenClassification",
                            command="python run_scripts/run_ner.py ...")
    text = str(card)
    assert "library_name: keplm" in text and "base_model: tiny-bert" in text
    assert "| eval_f1 | 0.9123 |" in text
    assert f"{assets.kg.num_triples} triples" in text and "| retrieval_mode | relational |" in text
    assert 'AutoModelForTokenClassification.from_pretrained("org/kala-tiny")' in text
    path = write_model_card(tmp_path, card)
    assert path.read_text() == text


def test_model_card_keeps_local_paths_out_of_hub_metadata(tmp_path, tokenizer, assets):
    config = KalaConfig(encoder_config=tiny_encoder_config(tokenizer), entity_vocab_size=assets.num_entities,
                        num_relations=assets.num_relations)
    card = build_model_card(config, assets, base_model=str(tmp_path), dataset="../shared/data/conll2003")
    assert card.data.base_model is None and card.data.datasets is None  # the Hub takes repo ids only
    assert f"built on `{tmp_path}`" in str(card) and "fine-tuned on ../shared/data/conll2003" in str(card)
    card = build_model_card(config, assets, base_model="org/bert", dataset="conll2003")
    assert card.data.base_model == "org/bert" and card.data.datasets == ["conll2003"]
