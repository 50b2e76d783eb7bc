"""Tests that kill one-line bugs the suite used to miss (issue 43, "what the suite does not catch"): each checks a
value by hand where a plausible slip (a hash over shapes, a vocabulary left out of a hash, the shorter of two aliases,
an off-by-one rank) would give another one."""

from __future__ import annotations

import numpy as np
import pytest

from keplm.knowledge import EntityLinker, KnowledgeAssets, KnowledgeGraph


def _kg(triples) -> KnowledgeGraph:
    return KnowledgeGraph.from_triples(triples)


def test_the_kg_hash_covers_the_triples_values_not_only_their_shape():
    def graph(triples):
        return KnowledgeGraph(["A", "B", "C"], ["r"], np.array(triples))

    one, other = graph([[0, 0, 1], [1, 0, 2]]), graph([[0, 0, 2], [1, 0, 1]])  # same entities, same shape
    assert one.content_hash() != other.content_hash()
    assert one.content_hash() == graph([[0, 0, 1], [1, 0, 2]]).content_hash()


def test_the_vocabulary_hash_covers_the_relation_vocabulary():
    kg = _kg([("A", "r", "B")])
    entities = ["A", "B"]
    first = KnowledgeAssets.build(entities, ["r1"], kg=None)
    second = KnowledgeAssets.build(entities, ["r2"], kg=None)
    assert first.entity_vocab == second.entity_vocab and first.relation_vocab != second.relation_vocab
    assert first.content_hash() != second.content_hash()
    assert (
        KnowledgeAssets.build(entities, kg=kg).content_hash() == KnowledgeAssets.build(entities, kg=kg).content_hash()
    )


def test_the_longest_alias_wins_among_matches_at_one_start():
    kg = KnowledgeGraph.from_triples([("Q1", "P1", "Q2")], entity_names={"Q1": "New York", "Q2": "New York City"})
    text = "She moved to New York City last year ."
    mentions = EntityLinker(kg).link(text).entities
    assert [(m.id, text[m.start : m.end]) for m in mentions] == [("Q2", "New York City")]
    assert [m.id for m in EntityLinker(kg).link("Back in New York .").entities] == ["Q1"]


def test_an_all_caps_alias_of_exactly_the_acronym_length_is_an_acronym():
    """ "WHO" (a stopword alias) links in capitals when ``acronym_max_length`` is its length, not when it is one less;
    the lower-case word never links."""
    kg = KnowledgeGraph.from_triples([("Q7817", "P31", "Q484652")], {"Q7817": "WHO", "Q484652": "organisation"})
    at_length = EntityLinker(kg, acronym_max_length=3)
    assert [m.id for m in at_length.link("the WHO said so").entities] == ["Q7817"]
    assert at_length.link("who said so").entities == []
    assert EntityLinker(kg, acronym_max_length=2).link("the WHO said so").entities == []


def test_kge_metrics_count_a_true_tail_at_0_based_rank_9_in_hits_at_10_and_not_rank_10(monkeypatch):
    """Raw tail ranks 9 and 10 (0-based): Hits@10 = 1/2, Hits@1 = 0, mean rank (1-based) 10.5, MRR (1/10 + 1/11)/2."""
    import types

    import torch

    from keplm.knowledge import kge

    monkeypatch.setattr(kge, "tail_ranks", lambda *args, **kwargs: torch.tensor([9.0, 10.0], dtype=torch.float64))
    metrics = kge._evaluate(types.SimpleNamespace(num_nodes=20), torch.zeros(2, 3, dtype=torch.long), 64, False)
    assert metrics["hits@10"] == 0.5 and metrics["hits@1"] == 0.0
    assert metrics["mean_rank"] == 10.5 and abs(metrics["mrr"] - (1 / 10 + 1 / 11) / 2) < 1e-12


def test_a_warmup_of_1_is_one_step_and_a_value_below_1_a_share():
    from keplm.training.optim import warmup_step_count

    assert warmup_step_count(1, 100) == 1 and warmup_step_count(2, 100) == 2
    assert warmup_step_count(0.25, 10) == 3 and warmup_step_count(0.5, 100) == 50


@pytest.mark.parametrize("argv", [["--model_type", "roof_transformer"], ["--model_type=roof_transformer"]])
def test_model_type_is_read_in_both_forms(argv):
    """The recipe choice and the scripts' full parse (``MethodChoice``) both read ``--model_type X`` and
    ``--model_type=X``; the other arguments are left to the full parse."""
    from keplm.training.arguments import parse_args
    from keplm.training.run_recipe import MethodChoice, choose_recipe

    assert choose_recipe([*argv, "--do_train"], "kala")[0] == "roof_transformer"
    (choice,) = parse_args((MethodChoice,), argv)
    assert choice.model_type == "roof_transformer"


def test_a_span_found_in_two_overlapping_windows_keeps_its_higher_score():
    """ "paris" scores 1 + 1 in the first window and 3 + 3 in the second; "france" 2.5 + 2.5 in the first only: the
    answer is "paris" with score 6 (keeping the lower window's score would make "france" win)."""
    from keplm.training.qa_postprocessing import postprocess_qa_predictions

    examples = [{"id": "q", "context": "paris france"}]
    offsets = [None, (0, 5), (6, 12), None]
    features = [{"example_id": "q", "offset_mapping": offsets}, {"example_id": "q", "offset_mapping": offsets}]
    starts = np.array([[-9.0, 1.0, 2.5, -9.0], [-9.0, 3.0, -9.0, -9.0]])
    ends = np.array([[-9.0, 1.0, 2.5, -9.0], [-9.0, 3.0, -9.0, -9.0]])
    predictions, nbest = postprocess_qa_predictions(
        examples, features, starts, ends, return_nbest=True, disable_tqdm=True
    )
    assert predictions == {"q": "paris"}
    assert nbest["q"][0]["score"] == 6.0 and nbest["q"][1]["text"] == "france" and nbest["q"][1]["score"] == 5.0


def test_two_facts_joining_the_same_entities_by_different_relations_are_two_edges(tokenizer):
    """Paris → France as its country (P17) and as a shared-border fact (P47): the graph keeps one edge per relation
    (a duplicate check on the node pair alone would drop the second); the same fact twice is one edge."""
    from keplm import KalaProcessor

    kg = KnowledgeGraph.from_triples(
        [("Q90", "P17", "Q142"), ("Q90", "P47", "Q142"), ("Q90", "P17", "Q142")],
        {"Q90": "Paris", "Q142": "France"},
    )
    processor = KalaProcessor(tokenizer, KnowledgeAssets.build(["Q90", "Q142"], kg=kg), use_inverse_relations=False)
    features = processor("john visited paris .")
    assets = processor.knowledge_assets
    assert sorted(features["edge_relation_ids"]) == sorted(assets.relation_row(r) for r in ("P17", "P47"))
    assert len(features["edge_index"][0]) == 2


def test_an_edit_flips_a_prediction_when_any_read_token_changes_its_arg_max(monkeypatch, tokenizer, assets):
    """Two tokens read for a fact, the edit changes the arg-max of one of them: that is a flip (the share of edits
    with a changed prediction), and the shift is the mean total variation over the two (0.8 and 0: 0.4)."""
    import torch

    from keplm import KalaForTokenClassification, KalaProcessor
    from keplm.checks import counterfactual

    from .test_kala_model import make_model

    before = torch.tensor([[0.9, 0.1], [0.9, 0.1]])
    after = torch.tensor([[0.1, 0.9], [0.9, 0.1]])
    # the model's prediction is stood in for by the annotation it read: the first read is the unedited one
    monkeypatch.setattr(counterfactual, "_predict", lambda model, collator, adapter, linked: linked["knowledge"])
    monkeypatch.setattr(
        counterfactual, "_read", lambda adapter, read, annotation, fact: before if read is annotation else after
    )
    model = make_model(KalaForTokenClassification, tokenizer, assets, "relational", num_labels=2)
    report = counterfactual.knowledge_sensitivity(
        model, KalaProcessor(tokenizer, assets), [{"text": "john visited paris ."}], edits=("tail",)
    )
    assert report.examples_with_facts == 1 and report.results
    assert all(result.flip for result in report.results)
    assert all(abs(result.shift - 0.4) < 1e-6 for result in report.results)
    assert report.summary()["overall"]["tail"]["flip_rate"] == 1.0


def test_ner_flips_read_the_edited_facts_mentions_only(tokenizer, assets):
    """In "paris and berlin ." an edit of a fact about Paris is judged on Paris's first token alone (one row, its
    logits), not on every mention's (Berlin's token would count flips the edit did not cause)."""
    import types

    import torch

    from keplm import KalaProcessor
    from keplm.checks import counterfactual
    from keplm.data.collator import KeplmDataCollator

    processor = KalaProcessor(tokenizer, assets)
    adapter = counterfactual._ADAPTERS["ner"](processor, 64)
    linked = adapter.link({"text": "paris and berlin ."})
    assert {m["id"] for m in linked["knowledge"]["entities"]} == {"Q90", "Q64"}
    batch = KeplmDataCollator.from_processor(processor)(adapter.features(linked))
    logits = torch.randn(1, batch["input_ids"].shape[1], 3)
    fact = {"h": "Q90", "r": "P17", "t": "Q142"}
    rows = adapter.probabilities(types.SimpleNamespace(logits=logits), batch, 0, linked["knowledge"], fact)
    paris = int((batch["entity_token_map"][0] >= 0).nonzero()[0])  # the first mention token is Paris's
    torch.testing.assert_close(rows, logits[0, paris : paris + 1].softmax(-1))


def test_the_cached_knowledge_layout_takes_its_cls_state_from_the_first_unit(tmp_path, tokenizer):
    """``[CLS] u1 [SEP] u2 [SEP]`` from the cache: position 0 is the [CLS] state of ``[CLS] u1 [SEP]`` encoded alone
    (Roof §4.4), each unit's tokens and [SEP] their own encoding's."""
    import torch
    from transformers import BertModel

    from keplm.modeling.knowledge_cache import KnowledgeEncodingCache

    from .conftest import tiny_encoder_config

    torch.manual_seed(0)
    encoder = BertModel(tiny_encoder_config(tokenizer)).eval()
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    first, second = tokenizer.convert_tokens_to_ids(["paris"]), tokenizer.convert_tokens_to_ids(["berlin", "city"])
    ids = torch.tensor([[cls, *first, sep, *second, sep]])
    units = torch.tensor([[-1, 0, -1, 1, 1, -1]])
    with torch.no_grad():
        out = KnowledgeEncodingCache(tmp_path).encode(encoder, ids, torch.ones_like(ids), units)

        def alone(unit):
            sequence = torch.tensor([[cls, *unit, sep]])
            return encoder(input_ids=sequence, token_type_ids=torch.zeros_like(sequence)).last_hidden_state[0]

        one, two = alone(first), alone(second)
    torch.testing.assert_close(out[0, 0], one[0])
    torch.testing.assert_close(out[0, 1:3], one[1:])
    torch.testing.assert_close(out[0, 3:6], two[1:])


def test_the_global_memory_adds_a_contexts_cls_once_per_entity_it_mentions():
    """Eq. (6): context 0 mentions entity 2 twice and entity 3 once, context 1 mentions entity 2 once. The global
    memory of entity 2 is the mean of the two contexts' [CLS] states (count 2, not 3), entity 3's context 0's."""
    import torch

    from keplm.modeling.trelm_modules import MemoryBank

    torch.manual_seed(0)
    bank = MemoryBank(entity_vocab_size=5, hidden_size=4, window=1, momentum=0.5, lam=1.0, decay=1.0)
    states = torch.randn(2, 6, 4)
    entity_ids = torch.tensor([[0, 2, 0, 3, 2, 0], [0, 0, 2, 0, 0, 0]])
    mention_map = torch.tensor([[-1, 0, -1, 1, 2, -1], [-1, -1, 0, -1, -1, -1]])
    assert bank.update(states, torch.ones(2, 6), entity_ids, mention_map) == 4  # four mentions
    assert bank.global_count[2] == 2 and bank.global_count[3] == 1
    torch.testing.assert_close(bank.global_sum[2], states[0, 0] + states[1, 0])
    torch.testing.assert_close(bank.global_sum[3], states[0, 0])


@pytest.mark.parametrize("axis", ["out", "in"])
def test_rerouting_folds_the_old_neurons_delta_and_keeps_the_function(axis):
    """A routed layer with a trained delta on units 0-1, re-routed to units 3-4: its output is unchanged (the old
    delta is merged into the weight, not carried over to the new units) and the new delta starts at zero."""
    import torch

    from keplm.modeling.knowledge_routing import RoutedLinear

    torch.manual_seed(0)
    layer = RoutedLinear(torch.nn.Linear(6, 5), axis, num_routed=2)
    with torch.no_grad():
        for parameter in layer.delta_parameters():
            parameter.normal_()
    x = torch.randn(3, 6)
    before = layer(x)
    layer.route(torch.tensor([3, 4]))
    torch.testing.assert_close(layer(x), before)
    assert all(not parameter.any() for parameter in layer.delta_parameters())
