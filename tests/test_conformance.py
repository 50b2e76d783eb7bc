"""One conformance matrix over every registered keplm method (tests/conformance_cases.py, the plug-in ToyKG
included), as peft's test matrix runs the same checks over every PEFT method: save -> load and push -> pull give the
same model, processor and knowledge; the model card is keplm's; the keplm pipeline returns the stock structure; a LoRA
adapter reloads with identical outputs; the counterfactual knowledge check runs, or refuses with a clear error.

A check that cannot apply to a method (no pipeline for masked-LM pre-training) is skipped with the reason its case
gives. Outputs are compared with ``torch.testing.assert_close``'s float32 tolerances: the same weights and inputs on
any thread count agree far within them.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoProcessor, BertModel

from keplm import KeplmDataCollator
from keplm.checks.counterfactual import EDITS, TASKS, knowledge_sensitivity, task_of
from keplm.hub.card import build_model_card
from keplm.modeling.lora import add_lora, load_lora, save_lora
from keplm.registration import REGISTERED_METHODS

from .conformance_cases import CASES, Ingredients
from .conftest import tiny_encoder_config


@pytest.fixture(params=CASES, ids=[case.id for case in CASES])
def case(request):
    return request.param


@pytest.fixture()
def ingredients(tokenizer, kg, assets) -> Ingredients:
    return Ingredients(tokenizer, kg, assets)


@pytest.fixture()
def built(case, ingredients):
    """The case's tiny model (eval mode) and processor."""
    return case.build(ingredients)


@pytest.fixture()
def saved(built, tmp_path):
    """A folder with the model and its processor saved side by side (what a run's output folder holds)."""
    model, processor = built
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def outputs(model, batch: dict) -> dict[str, torch.Tensor]:
    """Every tensor of the model's output on ``batch``, without gradients."""
    with torch.no_grad():
        out = model(**batch)
    return {key: value for key, value in out.items() if isinstance(value, torch.Tensor)}


def assert_same_model(case, model, processor, loaded, loaded_processor) -> None:
    """``loaded``/``loaded_processor`` are the case's classes and reproduce ``model``/``processor``: same processor
    settings and knowledge (content hash), same features of raw text, same outputs on the batch built from it."""
    assert type(loaded) is case.model_class and type(loaded_processor) is type(processor)
    assert loaded_processor.processor_config() == processor.processor_config()
    assert loaded_processor.knowledge_assets.content_hash() == processor.knowledge_assets.content_hash()
    if getattr(model, "knowledge_assets", None) is not None:
        assert loaded.knowledge_assets.content_hash() == model.knowledge_assets.content_hash()
    assert case.features(loaded_processor) == case.features(processor)
    expected = outputs(model, case.batch(processor, model))
    got = outputs(loaded, case.batch(loaded_processor, loaded))
    assert set(got) == set(expected)
    torch.testing.assert_close(got, expected)


# ------------------------------------------------------------------------------------------------ coverage
def test_every_registered_method_has_a_case():
    """Every model type registered with keplm (after the plug-in's import, which conformance_cases does) has a case,
    and every case names a registered method: a newly registered method cannot skip this suite."""
    covered = {case.model_type for case in CASES}
    assert len(covered) == len(CASES), "two cases for one model type"
    assert sorted(set(REGISTERED_METHODS) - covered) == [], "registered methods without a conformance case"
    assert sorted(covered - set(REGISTERED_METHODS)) == [], "cases of methods that are not registered"


def test_the_case_builds_the_registered_classes(case, built):
    """The case's model is the class registered under its Auto class for its model type, and its processor the
    processor class registered with AutoProcessor: the suite checks what users load, not a look-alike."""
    model, processor = built
    config_class, models, processor_class = REGISTERED_METHODS[case.model_type]
    assert type(model.config) is config_class and model.config.model_type == case.model_type
    assert models[case.auto_class] is case.model_class and type(model) is case.model_class
    assert type(processor) is processor_class
    assert not model.training
    assert bool(model.config.uses_knowledge) is case.reads_knowledge


# ------------------------------------------------------------------------------------------------ 1. save -> load
def test_save_then_load_through_the_auto_classes_is_identical(case, built, saved):
    """``save_pretrained`` of model and processor into one folder, then the Auto class the model is registered
    under and ``AutoProcessor``: same classes, knowledge, features and outputs."""
    model, processor = built
    loaded = getattr(transformers, case.auto_class).from_pretrained(saved)
    loaded_processor = AutoProcessor.from_pretrained(saved)
    assert_same_model(case, model, processor, loaded, loaded_processor)


# ------------------------------------------------------------------------------------------------ 2. push -> pull
def test_push_then_pull_through_the_hub_is_identical(case, built, hub_server):
    """``push_to_hub`` of model and processor to one repo of the test Hub server, then the Auto classes on
    ``org/<model type>`` (an empty cache: every file comes over HTTP): same classes, knowledge, features, outputs."""
    model, processor = built
    repo = f"org/{case.model_type.replace('_', '-')}"
    model.push_to_hub(repo)
    processor.push_to_hub(repo)
    pulled = getattr(transformers, case.auto_class).from_pretrained(repo)
    pulled_processor = AutoProcessor.from_pretrained(repo)
    assert_same_model(case, model, processor, pulled, pulled_processor)


# ------------------------------------------------------------------------------------------------ 3. card
def test_the_model_card_is_keplms(case, built):
    """``build_model_card``: library_name keplm and the model type among the tags (the Hub's filters), and a
    ``## Knowledge`` section exactly when the model reads knowledge (the card says what the model was given)."""
    model, processor = built
    card = build_model_card(model, processor=processor)
    assert card.data.library_name == "keplm"
    assert case.model_type in (card.data.tags or [])
    assert ("\n## Knowledge" in card.text) is case.reads_knowledge


# ------------------------------------------------------------------------------------------------ 4. pipeline
def assert_stock_structure(task: str, given, result, id2label: dict) -> None:
    """The structure transformers' own pipeline of the task returns."""
    if task == "keplm-ner":
        text = given
        assert isinstance(result, list) and result, "the tagger found no entity: the check would prove nothing"
        for group in result:
            assert {"entity_group", "score", "word", "start", "end"} <= set(group)
            assert isinstance(group["word"], str) and 0 <= group["start"] < group["end"] <= len(text)
            assert text[group["start"] : group["end"]].lower() == group["word"]
            assert 0.0 <= float(group["score"]) <= 1.0
            assert group["entity_group"] in {label.split("-", 1)[-1] for label in id2label.values()}
    elif task == "keplm-qa":
        assert isinstance(result, dict) and {"answer", "score", "start", "end"} <= set(result)
        assert given["context"][result["start"] : result["end"]] == result["answer"]
        assert 0.0 <= float(result["score"]) <= 1.0
    elif task == "keplm-text-classification":
        one = result[0] if isinstance(result, list) else result
        assert isinstance(one, dict) and set(one) == {"label", "score"}
        assert one["label"] in id2label.values() and 0.0 <= float(one["score"]) <= 1.0
    else:
        raise AssertionError(f"no stock structure known for {task!r}: add it to assert_stock_structure")


def keplm_pipeline_tasks() -> dict[str, set[str]]:
    """Every keplm pipeline task registered with transformers and the names of the Auto classes it loads."""
    from transformers.pipelines import PIPELINE_REGISTRY

    tasks = [task for task in PIPELINE_REGISTRY.get_supported_tasks() if task.startswith("keplm-")]
    return {task: {auto.__name__ for auto in PIPELINE_REGISTRY.check_task(task)[1]["pt"]} for task in tasks}


def test_the_keplm_pipeline_runs_on_raw_text(case, built, saved):
    """``transformers.pipeline(task, model=<saved folder>)`` (model, processor and KG read from the folder) runs on
    the case's raw input and returns the stock task's structure. A case without a pipeline is skipped only when no
    keplm pipeline loads its Auto class (a skip cannot hide a pipeline that exists)."""
    serving = sorted(task for task, autos in keplm_pipeline_tasks().items() if case.auto_class in autos)
    if case.pipeline_task is None:
        assert serving == [], f"{case.auto_class} is served by {serving}: give the case its pipeline input"
        pytest.skip(case.pipeline_skip)
    assert case.pipeline_task in serving
    runner = transformers.pipeline(case.pipeline_task, model=str(saved))
    assert type(runner.model) is case.model_class
    given = case.pipeline_input
    result = runner(**given) if case.pipeline_task == "keplm-qa" else runner(given)
    assert_stock_structure(case.pipeline_task, given, result, built[0].config.id2label)


# ------------------------------------------------------------------------------------------------ 5. LoRA
@pytest.fixture()
def base_dir(tmp_path, tokenizer):
    """A saved tiny BERT encoder: the base a LoRA adapter records and ``load_lora`` rebuilds on."""
    torch.manual_seed(0)
    BertModel(tiny_encoder_config(tokenizer)).save_pretrained(tmp_path / "base")
    return tmp_path / "base"


def test_a_saved_lora_adapter_reloads_with_identical_outputs(case, ingredients, base_dir, tmp_path):
    """``add_lora`` on a model built ``from_base_pretrained``, adapters and fully trained modules moved off their
    initial values (LoRA's B starts at zero: an untouched adapter is the identity and would prove nothing);
    ``save_lora`` then ``load_lora`` rebuilds the same class on the base encoder with the same knowledge and gives
    the in-memory peft model's outputs in eval mode."""
    model, processor = case.from_base(base_dir, ingredients)
    peft_model = add_lora(model, r=2, alpha=4, dropout=0.0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in peft_model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    peft_model.eval()
    batch = case.batch(processor, peft_model.get_base_model())
    expected = outputs(peft_model, batch)
    with peft_model.disable_adapter():
        base_only = outputs(peft_model, batch)
    key = next(iter(expected))
    assert not torch.allclose(expected[key], base_only[key]), "the adapter changes nothing: the check is vacuous"
    save_lora(peft_model, tmp_path / "adapter")
    loaded = load_lora(tmp_path / "adapter").eval()
    assert type(loaded.get_base_model()) is case.model_class
    if getattr(model, "knowledge_assets", None) is not None:
        assert loaded.get_base_model().knowledge_assets.content_hash() == model.knowledge_assets.content_hash()
    torch.testing.assert_close(outputs(loaded, batch), expected)


# ------------------------------------------------------------------------------------------------ 6. check-knowledge
def test_check_knowledge_tells_the_task_from_the_saved_head(case, saved):
    """``keplm check-knowledge`` picks its task from the saved architecture (``task_of``): the case's task, or a
    ValueError asking for ``--task`` for a head it cannot check (masked LM, relation extraction)."""
    config = AutoConfig.from_pretrained(saved)
    if case.check_task is not None:
        assert task_of(config) == case.check_task
    else:
        with pytest.raises(ValueError, match=rf"cannot tell the task of architectures \['{case.model_class.__name__}"):
            task_of(config)


def test_check_knowledge_runs_with_consistent_counts_or_refuses(case, built):
    """Where the counterfactual measure applies, it runs on the case's raw examples and its report's counts agree:
    every example counted, examples with facts as the case expects, each such example edited at least once (a
    ``remove`` is always possible), edit kinds and shifts in range, the summary totalling the results. Where it does
    not apply, a ValueError with the case's message."""
    model, processor = built
    if case.check_task is None and case.check_refusal is None:
        pytest.skip(case.check_skip)
    if case.check_task is None:
        with pytest.raises(ValueError, match=case.check_refusal):
            knowledge_sensitivity(model, processor, [{"text": "john visited paris ."}], task="ner")
        return
    examples = list(case.check_examples)
    report = knowledge_sensitivity(model, processor, examples, task=case.check_task, max_facts_per_example=2)
    assert report.task == case.check_task and report.num_examples == len(examples)
    assert report.examples_with_facts == case.check_examples_with_facts
    assert len({result.example for result in report.results}) == report.examples_with_facts
    per_example = {}
    for result in report.results:
        assert 0 <= result.example < len(examples) and result.edit in EDITS
        assert isinstance(result.flip, bool) and 0.0 <= result.shift <= 1.0
        assert (result.new_relation is not None) is (result.edit == "relation")
        assert result.new_relation != result.relation
        per_example[result.example] = per_example.get(result.example, 0) + 1
    assert all(count <= 2 * len(EDITS) for count in per_example.values())  # max_facts_per_example=2
    summary = report.summary()
    assert summary["examples"] == len(examples) and summary["examples_with_facts"] == report.examples_with_facts
    assert sum(stats["edits"] for stats in summary["overall"].values()) == len(report.results)
    per_relation = sum(
        stats["edits"]
        for edits in summary["per_relation"].values()
        for stats in edits.values()
        if isinstance(stats, dict)
    )
    assert per_relation == len(report.results)
    assert all(0.0 <= stats["flip_rate"] <= 1.0 for stats in summary["overall"].values())


def test_check_knowledge_refuses_a_task_the_head_does_not_predict(case, built):
    """The counterfactual measure on a task the model's head does not predict is a ValueError naming the head and
    the task it does predict (before: a QA check of a token classifier crashed on ``start_logits``, a classification
    check of a token classifier read each token's softmax as a class distribution, and TRELM's masked LM gave a
    report of zero flips)."""
    model, processor = built
    if processor.kg is None:
        pytest.skip("no KG in the processor: refused before the head is read (checked above)")
    for task in TASKS:
        if task == case.check_task:
            continue
        expected = rf"{case.model_class.__name__} predicts " + (f"'{case.check_task}'" if case.check_task else "none")
        with pytest.raises(ValueError, match=expected):
            knowledge_sensitivity(model, processor, [{"text": "john visited paris ."}], task=task)


# ------------------------------------------------------------------------------------------------ 7. batch shapes
def _compare_by_example(batched: dict, singles: list[dict]) -> int:
    """Each example's outputs alone against the batch's: a per-example output (a batch dimension) against the
    example's row, cut to its own length (right padding); a flat one (one row per graph node or entity pair of the
    whole batch) against the examples' outputs concatenated in order. Scalars (the loss) are left out. Returns how
    many outputs were compared."""
    compared = 0
    for key, full in batched.items():
        if full.dim() == 0:
            continue
        if full.shape[0] == len(singles) and all(single[key].shape[0] == 1 for single in singles):
            for row, single in enumerate(singles):
                cut = full[row : row + 1][tuple(slice(0, n) for n in single[key].shape)]
                torch.testing.assert_close(cut, single[key], rtol=1e-4, atol=1e-5, msg=f"{key}, example {row}")
        else:
            torch.testing.assert_close(full, torch.cat([single[key] for single in singles]), rtol=1e-4, atol=1e-5)
        compared += 1
    return compared


def test_each_example_of_a_batch_gets_the_outputs_it_gets_alone(case, built):
    """Batched = single, cut by example: transformers' batching test slices inputs by row, which the flat batched
    knowledge graph cannot take; here each example is collated alone (its own sub-graph) and its outputs must be
    its part of the batch's."""
    model, processor = built
    items = case.items(processor)
    assert len(items) >= 2
    collator = KeplmDataCollator.from_processor(processor, model)
    singles = [outputs(model, collator([item])) for item in items]
    assert _compare_by_example(outputs(model, collator(items)), singles) >= 1


def test_eager_and_sdpa_attention_give_the_same_outputs(case, built):
    """transformers' eager-vs-SDPA test slices inputs by row; on the case's whole batch the model with eager
    attention gives the SDPA model's outputs."""
    model, processor = built
    batch = case.batch(processor, model)
    sdpa = outputs(model, batch)
    model.set_attn_implementation("eager")
    eager = outputs(model, batch)
    torch.testing.assert_close(eager, sdpa, rtol=1e-4, atol=1e-5)


def test_token_ids_beyond_the_vocabulary_are_refused_by_name(case, built):
    """A token id the encoder has no embedding for (ids from another model's tokenizer) is a ValueError naming
    ``input_ids`` and the vocabulary size, not an index error inside the embedding."""
    model, processor = built
    batch = case.batch(processor, model)
    vocab_size = model.config.encoder_config.vocab_size
    batch["input_ids"] = batch["input_ids"].clone()
    batch["input_ids"][0, 1] = vocab_size
    with pytest.raises(ValueError, match=rf"input_ids must lie in \[0, {vocab_size}\)"):
        model(**batch)
