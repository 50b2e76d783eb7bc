from keplm import KalaConfig, KalaForTokenClassification, KalaProcessor
from keplm.hub.card import build_model_card, write_model_card

from .conftest import tiny_encoder_config


def _model(tokenizer, assets):
    config = KalaConfig(encoder_config=tiny_encoder_config(tokenizer), entity_vocab_size=assets.num_entities,
                        num_relations=assets.num_relations)
    model = KalaForTokenClassification(config)
    model.set_knowledge_assets(assets)
    return model


def test_model_card_reports_config_assets_and_metrics(tmp_path, tokenizer, assets):
    """Settings come from the config's ``card_settings``, the Auto class and the processor from the registries."""
    card = build_model_card(_model(tokenizer, assets), metrics={"eval_f1": 0.91234}, base_model="tiny-bert",
                            dataset="conll2003", repo_id="org/kala-tiny", command="python run_scripts/run_ner.py ...",
                            processor=KalaProcessor(tokenizer, assets))
    text = str(card)
    assert "library_name: keplm" in text and "base_model: tiny-bert" in text
    assert "| eval_f1 | 0.9123 |" in text
    assert f"{assets.kg.num_triples} triples" in text and "| retrieval_mode | relational |" in text
    assert "| use_inverse_relations | True |" in text and "| kfm_hidden_size |" not in text  # card_settings only
    assert 'AutoModelForTokenClassification.from_pretrained("org/kala-tiny")' in text
    assert "KalaProcessor.from_pretrained" in text
    path = write_model_card(tmp_path, card)
    assert path.read_text() == text


def test_model_card_keeps_local_paths_out_of_hub_metadata(tmp_path, tokenizer, assets):
    model = _model(tokenizer, assets)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "some_encoder" / "model"
    site.mkdir(parents=True)
    card = build_model_card(model, base_model=str(site), dataset="../shared/data/conll2003")
    assert card.data.base_model is None and card.data.datasets is None  # the Hub takes repo ids only
    text = str(card)
    assert "built on `the some_encoder package`" in text and "fine-tuned on data/conll2003" in text
    assert str(tmp_path) not in text  # no machine path in the card
    card = build_model_card(model, base_model="org/bert", dataset="conll2003")
    assert card.data.base_model == "org/bert" and card.data.datasets == ["conll2003"]
