"""LAMA-style probing (keplm.data.lama, keplm.training.probing, run_scripts/run_probe.py) on a tiny in-code
masked LM.

The tiny BERT's MLM bias is set so that "paris" (then "berlin") always wins: P@k is then known by hand. Real-file
readers are checked against the counts of ../shared/data's SOURCE.md files (skipped when the folder is absent).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import BertForMaskedLM, BertModel, pipeline

from keplm.data.lama import (
    build_queries,
    check_template,
    facts_to_dataset,
    fill_template,
    load_probe,
    predict_top_k,
    read_fact_keys,
    read_templates,
    split_held_out,
    write_fact_keys,
)
from keplm.training.probing import probe, summarize
from tests.conftest import tiny_encoder_config

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def fact(relation, sub, obj, templates=("[X] is in [Y] .",), sub_uri=None, obj_uri=None, uuid=None):
    return {
        "relation": relation,
        "sub_label": sub,
        "obj_label": obj,
        "sub_uri": sub_uri,
        "obj_uri": obj_uri,
        "uuid": uuid,
        "templates": list(templates),
        "evidences": [],
    }


@pytest.fixture(scope="module")
def biased_model(tokenizer):
    """A tiny BertForMaskedLM whose output bias makes "paris" the top-1 and "berlin" the top-2 everywhere."""
    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_encoder_config(tokenizer)).eval()
    with torch.no_grad():
        bias = model.cls.predictions.bias
        bias.zero_()
        bias[tokenizer.convert_tokens_to_ids("paris")] = 100.0
        bias[tokenizer.convert_tokens_to_ids("berlin")] = 50.0
    return model


def toy_facts():
    """P1: 2 of 3 objects are "paris"; P2: 1 of 1; P3: 0 of 2 (+ one multi-token object, skipped)."""
    return [
        fact("P1", "john", "Paris", sub_uri="Q1", obj_uri="Q90"),
        fact("P1", "mary", "Paris", sub_uri="Q2", obj_uri="Q90"),
        fact("P1", "acme bank", "Berlin", sub_uri="Q3", obj_uri="Q64"),
        fact("P2", "the seine", "Paris", ["[X] flows through [Y] ."], sub_uri="Q4", obj_uri="Q90"),
        fact("P3", "thames", "London", sub_uri="Q5", obj_uri="Q84"),
        fact("P3", "rhine", "Germany", sub_uri="Q6", obj_uri="Q183"),
        fact("P3", "usa", "New York", sub_uri="Q7", obj_uri="Q60"),
    ]


def test_fill_template_and_slot_checks(tmp_path, tokenizer):
    assert fill_template("[X] was born in [Y] .", "John", "[MASK]") == "John was born in [MASK] ."
    assert fill_template("The capital of [X] is [Y].", "France", "Paris") == "The capital of France is Paris."
    with pytest.raises(ValueError, match=r"relation P19: .* no \[X\]"):
        check_template("He was born in [Y] .", "P19")
    with pytest.raises(ValueError, match=r"relation P20: .* exactly one \[Y\].*found 0"):
        fill_template("[X] died .", "John", "[MASK]", relation="P20")
    with pytest.raises(ValueError, match=r"relation P36: .*found 2"):
        check_template("[X] [Y] [Y]", "P36")
    bad = tmp_path / "relations.jsonl"
    bad.write_text('{"relation": "P1", "template": "[X] is [Y] ."}\n{"relation": "P7", "template": "no slots"}\n')
    with pytest.raises(ValueError, match="relation P7"):
        read_templates(bad)
    patterns = tmp_path / "patterns"
    patterns.mkdir()
    (patterns / "P5.jsonl").write_text('{"pattern": "[X] is in [Y]."}\n{"pattern": "[Y] holds [X]."}\n')
    assert read_templates(patterns) == ({"P5": ["[X] is in [Y].", "[Y] holds [X]."]}, {})
    with pytest.raises(ValueError, match="relation P3"):  # a bad template met only when probing
        build_queries([fact("P3", "a", "paris", ["[X] only"])], tokenizer)


def test_single_token_filter_counts_skips(tokenizer):
    facts = [
        fact("P1", "john", "Paris"),
        fact("P1", "mary", "New York"),
        fact("P1", "acme", "Tokyo"),
        fact("P2", "rhine", "Unknownia"),
        fact("P2", "seine", "France", ["[X] is in [Y] .", "[Y] has [X] ."]),
    ]
    queries, skips = build_queries(facts, tokenizer)
    assert [(q["relation"], q["fact"]) for q in queries] == [("P1", 0), ("P2", 3), ("P2", 4), ("P2", 4)]
    assert queries[0]["input_ids"].count(tokenizer.mask_token_id) == 1
    assert tokenizer.decode(queries[0]["input_ids"], skip_special_tokens=False) == "[CLS] john is in [MASK]. [SEP]"
    assert queries[0]["target_id"] == tokenizer.convert_tokens_to_ids("paris")
    assert Counter((s["relation"], s["reason"]) for s in skips) == {
        ("P1", "multi_token_object"): 1,
        ("P1", "object_not_in_vocab"): 1,
    }  # "new york" two tokens, tokyo [UNK]
    model = BertForMaskedLM(tiny_encoder_config(tokenizer)).eval()
    results = summarize(
        facts, queries, predict_top_k(model, tokenizer, queries, 2, progress=False), skips, tokenizer, ks=(1,)
    )
    assert results["per_relation"]["P1"] == {
        **results["per_relation"]["P1"],
        "facts": 3,
        "queries": 3,
        "kept": 1,
        "facts_kept": 1,
        "skipped": {"multi_token_object": 1, "object_not_in_vocab": 1},
    }
    assert results["per_relation"]["P2"]["queries"] == 3 and results["per_relation"]["P2"]["kept"] == 3
    assert results["skipped"] == {"multi_token_object": 1, "object_not_in_vocab": 1}
    assert (results["num_facts"], results["num_queries"], results["num_queries_kept"]) == (5, 6, 4)
    short = build_queries([fact("P1", "john mary acme bank", "Paris")], tokenizer, max_length=5)
    assert short[0] == [] and short[1][0]["reason"] == "truncated"  # [CLS] john mary acme bank | is in [MASK]


def test_facts_of_multi_token_objects_only_are_a_clear_error(tokenizer, biased_model):
    """Every object more than one token (or unknown): no query is left, which build_queries says with its skips and
    probe refuses naming the reasons (an IndexError inside the tokenizer before)."""
    facts = [fact("P1", "mary", "New York"), fact("P1", "john", "Tokyo")]
    assert build_queries(facts, tokenizer)[0] == []
    message = r"none of the 2 facts .*'multi_token_object': 1, 'object_not_in_vocab': 1"
    with pytest.raises(ValueError, match=message):
        probe(biased_model, tokenizer, facts, ks=(1,), progress=False)


def test_p_at_k_macro_and_micro_in_percent_against_hand_computation(tokenizer, biased_model):
    facts = toy_facts()
    results, records = probe(biased_model, tokenizer, facts, ks=(1, 2), batch_size=2, progress=False)
    assert all(r["predictions"] == ["paris", "berlin"] for r in records)
    per = results["per_relation"]
    assert per["P1"]["precision_at_1"] == pytest.approx(200 / 3) and per["P1"]["precision_at_2"] == 100.0
    assert per["P2"]["precision_at_1"] == 100.0
    assert per["P3"]["precision_at_1"] == 0.0 and per["P3"]["skipped"] == {"multi_token_object": 1}
    assert results["precision_at_1"] == pytest.approx(100 * (2 / 3 + 1 + 0) / 3)  # macro: mean over relations
    assert results["precision_at_1_micro"] == pytest.approx(100 * 3 / 6)  # micro: mean over the 6 scored facts
    assert results["precision_at_2"] == pytest.approx(100 * (1 + 1 + 0) / 3)
    assert results["precision_at_2_micro"] == pytest.approx(100 * 4 / 6)
    assert results["num_relations_scored"] == 3 and results["num_facts_kept"] == 6


def test_common_vocabulary_restricts_objects_and_predictions(tokenizer, biased_model):
    results, records = probe(
        biased_model,
        tokenizer,
        toy_facts(),
        ks=(1,),
        progress=False,
        common_vocab=["berlin", "london", "germany", "new york"],
    )  # "new york": not one token
    assert results["common_vocab_size"] == 3
    assert {r["predictions"][0] for r in records} == {"berlin"}  # "paris" cannot win any more
    assert results["skipped"] == {"multi_token_object": 1, "not_in_common_vocab": 3}
    assert "P2" not in [r["relation"] for r in records] and results["per_relation"]["P2"]["precision_at_1"] is None
    assert results["precision_at_1"] == pytest.approx(100 * (1 + 0) / 2)  # P1: berlin 1/1, P3: 0/2; P2: nothing


def test_scores_match_the_fill_mask_pipeline(tokenizer):
    torch.manual_seed(1)
    model = BertForMaskedLM(tiny_encoder_config(tokenizer)).eval()
    facts = [fact("P1", sub, "paris") for sub in ("john", "the big apple of new york", "mary", "acme bank")]
    queries, _ = build_queries(facts, tokenizer)
    ours = predict_top_k(model, tokenizer, queries, top_k=5, batch_size=3, progress=False)  # padded batches
    assert ours == predict_top_k(model, tokenizer, queries, 5, batch_size=3, progress=False, head_at_mask_only=False)
    fill_mask = pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
    for query, ids in zip(queries, ours):
        text = fill_template(query["template"], facts[query["fact"]]["sub_label"], tokenizer.mask_token)
        assert ids == [row["token"] for row in fill_mask(text, top_k=5)]


def test_several_templates_score_per_template(tokenizer, biased_model):
    facts = [
        fact("P9", "john", "Paris", ["[X] is in [Y] .", "[Y] has [X] ."]),
        fact("P9", "mary", "Berlin", ["[X] is in [Y] .", "[Y] has [X] ."]),
    ]
    results, _ = probe(biased_model, tokenizer, facts, ks=(1,), progress=False)
    row = results["per_relation"]["P9"]
    assert (row["facts"], row["queries"], row["kept"]) == (2, 4, 4)
    assert row["templates"] == {"[X] is in [Y] .": {"precision_at_1": 50.0}, "[Y] has [X] .": {"precision_at_1": 50.0}}


def test_seen_and_held_out_facts(tmp_path, tokenizer, biased_model):
    facts = toy_facts() + [fact("P2", "london", "Paris")]  # no Wikidata ids
    seen_keys = {("Q1", "P1", "Q90"), ("Q4", "P2", "Q90"), ("Q5", "P3", "Q84")}
    path = tmp_path / "seen.tsv.gz"
    write_fact_keys(path, seen_keys)
    assert read_fact_keys(path) == seen_keys
    with pytest.raises(ValueError, match="1 facts have no sub_uri"):
        split_held_out(facts, seen_keys)
    seen, held_out, without = split_held_out(facts, seen_keys, missing="keep_apart")
    assert [f["sub_uri"] for f in seen] == ["Q1", "Q4", "Q5"] and [f["sub_label"] for f in without] == ["london"]
    assert [f["sub_uri"] for f in held_out] == ["Q2", "Q3", "Q6", "Q7"]
    results, _ = probe(biased_model, tokenizer, facts, ks=(1,), progress=False, seen_fact_keys=seen_keys)
    subsets = results["subsets"]
    assert subsets["facts_without_key"] == 1
    assert subsets["seen"]["num_facts"] == 3 and subsets["seen"]["precision_at_1"] == pytest.approx(100 * 2 / 3)
    assert subsets["held_out"]["num_facts"] == 4 and subsets["held_out"]["skipped"] == {"multi_token_object": 1}
    assert subsets["held_out"]["precision_at_1_micro"] == pytest.approx(100 / 3)  # mary/Paris hit; acme, rhine miss
    bad = tmp_path / "bad.tsv"
    bad.write_text("Q1\tP1\n")
    with pytest.raises(ValueError, match="bad.tsv:1"):
        read_fact_keys(bad)


def write_fake_data_dir(root: Path) -> Path:
    """A ../shared/data look-alike: LAMA T-REx, relations.jsonl, AutoPrompt dev, ParaRel facts and patterns."""
    lama = root / "lama"
    for sub in ("TREx", "relations", "autoprompt_trex_train_dev"):
        (lama / sub).mkdir(parents=True)
    (root / "pararel" / "patterns").mkdir(parents=True)
    (root / "pararel" / "trex_lms_vocab").mkdir(parents=True)

    def jsonl(path, rows):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    jsonl(
        lama / "relations" / "relations.jsonl",
        [
            {"relation": "P1", "template": "[X] is in [Y] .", "label": "located in"},
            {"relation": "P2", "template": "[X] flows through [Y] .", "label": "flows through"},
        ],
    )
    jsonl(
        lama / "TREx" / "P1.jsonl",
        [
            {
                "uuid": f"u{i}",
                "sub_uri": f"Q{i}",
                "obj_uri": "Q90",
                "sub_label": s,
                "obj_label": "Paris",
                "predicate_id": "P1",
                "evidences": [{"sub_surface": s, "obj_surface": "Paris", "masked_sentence": f"{s} lives in [MASK] ."}],
            }
            for i, s in enumerate(["john", "mary", "acme bank"])
        ],
    )
    jsonl(
        lama / "TREx" / "P2.jsonl",
        [
            {
                "uuid": "u9",
                "sub_uri": "Q9",
                "obj_uri": "Q142",
                "sub_label": "seine",
                "obj_label": "France",
                "predicate_id": "P2",
                "evidences": [],
            }
        ],
    )
    jsonl(
        lama / "TREx" / "P3.jsonl",
        [{"sub_uri": "Q8", "obj_uri": "Q1", "sub_label": "a", "obj_label": "b", "predicate_id": "P3"}],
    )  # no template for P3
    jsonl(
        lama / "autoprompt_trex_train_dev" / "P1_dev.jsonl",
        [{"sub_uri": "Q5", "obj_uri": "Q64", "sub_label": "rhine", "obj_label": "Berlin"}],
    )
    jsonl(
        lama / "autoprompt_trex_train_dev" / "P1_train.jsonl",
        [{"sub_uri": "Q6", "obj_uri": "Q64", "sub_label": "thames", "obj_label": "New York"}],
    )
    jsonl(
        root / "pararel" / "trex_lms_vocab" / "P1.jsonl",
        [{"sub_label": "john", "obj_label": "Paris", "uuid": "u0"}, {"sub_label": "bob", "obj_label": "Paris"}],
    )
    jsonl(root / "pararel" / "patterns" / "P1.jsonl", [{"pattern": "[X] is in [Y]."}, {"pattern": "[Y] has [X]."}])
    return root


def test_load_probe_readers_on_small_files(tmp_path):
    data = write_fake_data_dir(tmp_path / "data")
    trex = load_probe("lama_trex", data)
    assert [(f["relation"], f["sub_label"]) for f in trex["facts"]] == [
        ("P1", "john"),
        ("P1", "mary"),
        ("P1", "acme bank"),
        ("P2", "seine"),
    ]
    assert trex["skipped_relations"] == {"P3": "no template"} and trex["relation_labels"]["P1"] == "located in"
    assert trex["facts"][0]["templates"] == ["[X] is in [Y] ."]
    assert trex["facts"][0]["evidences"][0]["masked_sentence"] == "john lives in [MASK] ."
    limited = load_probe("lama_trex", data, relations=["P1", "P7"], max_facts_per_relation=2)
    assert len(limited["facts"]) == 2 and limited["skipped_relations"] == {"P7": "no facts"}
    dev = load_probe("autoprompt_dev", data)["facts"]
    assert [(f["relation"], f["obj_label"], f["obj_uri"]) for f in dev] == [("P1", "Berlin", "Q64")]
    pararel = load_probe("pararel", data)["facts"]
    assert pararel[0]["templates"] == ["[X] is in [Y].", "[Y] has [X]."]
    assert [(f["sub_uri"], f["obj_uri"]) for f in pararel] == [("Q0", "Q90"), (None, None)]  # ids by uuid
    own = load_probe(str(data / "lama" / "TREx" / "P2.jsonl"), data)["facts"]
    assert [f["obj_label"] for f in own] == ["France"]
    dataset = facts_to_dataset(trex["facts"])
    assert dataset.num_rows == 4 and dataset[0]["evidences"][0]["obj_surface"] == "Paris"
    with pytest.raises(ValueError, match="unknown probe"):
        load_probe("nope", data)


def load_run_probe():
    spec = importlib.util.spec_from_file_location("keplm_test_run_probe", ROOT / "run_scripts" / "run_probe.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses with postponed annotations look their module up
    spec.loader.exec_module(module)
    return module


def test_run_probe_end_to_end(tmp_path, tokenizer, biased_model):
    data = write_fake_data_dir(tmp_path / "data")
    model_dir = tmp_path / "model"
    biased_model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    keys = tmp_path / "seen.tsv"
    write_fact_keys(keys, [("Q0", "P1", "Q90")])
    out = tmp_path / "out"
    results = load_run_probe().main(
        [
            "--model_name_or_path",
            str(model_dir),
            "--probe",
            "lama_trex",
            "--data_dir",
            str(data),
            "--output_dir",
            str(out),
            "--top_k",
            "1",
            "2",
            "--batch_size",
            "2",
            "--seen_fact_keys",
            str(keys),
            "--save_predictions",
            "--disable_tqdm",
            "--device",
            "cpu",
        ]
    )
    saved = json.loads((out / "probe_results.json").read_text())
    assert saved == json.loads(json.dumps(results))
    assert saved["mlm_head"]["newly_initialized"] is False and saved["skipped_relations"] == {"P3": "no template"}
    assert saved["metric_unit"] == "percent"  # P@k in percent, as every run script's metrics
    assert saved["precision_at_1"] == pytest.approx(50.0) and saved["precision_at_1_micro"] == 75.0
    assert saved["per_relation"]["P1"]["precision_at_1"] == 100.0 and saved["per_relation"]["P2"]["kept"] == 1
    assert saved["subsets"]["seen"]["num_facts"] == 1 and saved["subsets"]["held_out"]["num_facts"] == 3
    table = (out / "probe_results.md").read_text()
    assert "| P1 | located in | 3 | 3 | 3 | 0 | 0 | 100.00 | 100.00 |" in table  # printed as computed, not x100
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 4

    pararel = load_run_probe().main(
        [
            "--model_name_or_path",
            str(model_dir),
            "--probe",
            "pararel",
            "--data_dir",
            str(data),
            "--output_dir",
            str(tmp_path / "pararel"),
            "--top_k",
            "1",
            "--common_vocab",
            "pararel",
            "--disable_tqdm",
        ]
    )
    assert pararel["common_vocab_size"] == 1 and pararel["num_queries_kept"] == 4 and pararel["precision_at_1"] == 100

    headless = tmp_path / "headless"  # an encoder checkpoint without MLM head, as the MiniLM package's
    BertModel(biased_model.config).save_pretrained(headless)
    tokenizer.save_pretrained(headless)
    warned = load_run_probe().main(
        [
            "--model_name_or_path",
            str(headless),
            "--probe",
            str(data / "lama" / "TREx"),
            "--templates_file",
            str(data / "lama" / "relations" / "relations.jsonl"),
            "--output_dir",
            str(tmp_path / "headless_out"),
            "--disable_tqdm",
            "--no_head_at_mask_only",
        ]
    )
    assert warned["mlm_head"]["newly_initialized"] is True
    assert "cls.predictions.bias" in warned["mlm_head"]["missing_head_keys"]
    assert "no trained MLM head" in (tmp_path / "headless_out" / "probe_results.md").read_text()


@pytest.mark.skipif(
    not (SHARED_DATA / "lama").is_dir() or not (SHARED_DATA / "pararel").is_dir(), reason="../shared/data is absent"
)
def test_real_lama_and_pararel_files():
    """The counts of lama/SOURCE.md and pararel/SOURCE.md; every template has its slots."""
    trex = load_probe("lama_trex", SHARED_DATA)
    facts = Counter(f["relation"] for f in trex["facts"])
    assert len(facts) == 28 and sum(facts.values()) == 22881 and trex["skipped_relations"] == {}
    assert (facts["P19"], facts["P1412"]) == (944, 969)
    assert sum(len(f["evidences"]) for f in trex["facts"]) == 138678
    assert all(f["sub_uri"] and f["obj_uri"] and len(f["templates"]) == 1 for f in trex["facts"])
    templates, labels = read_templates(SHARED_DATA / "lama" / "relations" / "relations.jsonl")
    assert len(templates) == 46 and templates["P19"] == ["[X] was born in [Y] ."] and labels["P19"] == "place of birth"
    dev = load_probe("autoprompt_dev", SHARED_DATA)["facts"]
    assert len(dev) == 7777 and len({f["relation"] for f in dev}) == 41
    pararel = load_probe("pararel", SHARED_DATA)
    assert pararel["skipped_relations"] == {"P31": "no template", "P527": "no template"}
    assert len(pararel["facts"]) == 29411 - 879 - 922
    patterns, _ = read_templates(SHARED_DATA / "pararel" / "patterns")
    assert len(patterns) == 39 and sum(map(len, patterns.values())) == 329
    assert sum(bool(f["sub_uri"]) for f in pararel["facts"]) == 18070  # ids from LAMA T-REx by uuid
