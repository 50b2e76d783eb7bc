"""Shared tiny, offline fixtures: an in-memory vocabulary tokenizer, a toy KG and tiny BERT configs."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import settings
from transformers import BertConfig, BertTokenizerFast

from keplm import KalaProcessor
from keplm.knowledge import KnowledgeAssets, KnowledgeGraph

from .hub_fixtures import hub_env, hub_server  # noqa: F401  (a Hub-API server on 127.0.0.1 for push/pull tests)

# Property tests (tests/test_properties_*.py): under CI the same examples every run, so a fresh clone is green on any
# day; elsewhere hypothesis draws new ones each run and hunts (--hypothesis-seed=N replays a run)
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# pytest-xdist's workers share the machine's cores: each worker, and every process its tests launch, runs its share
# of intra-op threads. Two workers on two cores with two threads each spend their time waiting on each other (a
# tiny-model test took 16 s alone and 129 s in the full suite, 2026-11-29). This is the suite's one thread rule: a run
# without -n keeps torch's default (four tiny-model modules: 28.7-29.8 s of pytest time with two threads, 28.7-33.3 s
# with one, on a quiet 2-core machine, 2026-11-29).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    _THREADS = max(1, _CORES // _WORKERS)
    torch.set_num_threads(_THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_THREADS))

WORDS = (
    "paris france berlin germany london england city capital river seine thames rhine europe is a the of in "
    "and on lives visited john mary works for acme bank river flows through country located who where what "
    "was born unknownia metropolis new york usa big apple"
).split()


def make_tokenizer() -> BertTokenizerFast:
    """The tiny tokenizer of the ``tokenizer`` fixture (for test classes that cannot take fixtures)."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "##s", "##ia", *WORDS]
    return BertTokenizerFast(vocab={token: i for i, token in enumerate(dict.fromkeys(vocab))}, do_lower_case=True)


@pytest.fixture(scope="session")
def tokenizer():
    return make_tokenizer()


def make_kg() -> KnowledgeGraph:
    """The toy KG of the ``kg`` fixture."""
    triples = [
        ("Q90", "P17", "Q142"),  # paris country france
        ("Q90", "P31", "Q515"),  # paris instance-of city
        ("Q64", "P17", "Q183"),  # berlin country germany
        ("Q64", "P31", "Q515"),
        ("Q84", "P17", "Q21"),  # london country england
        ("Q1471", "P17", "Q142"),  # seine country france
        ("Q999", "P17", "Q142"),  # unknownia country france (never seen in training)
        ("Q60", "P17", "Q30"),  # new york country usa
    ]
    names = {
        "Q90": "Paris",
        "Q142": "France",
        "Q64": "Berlin",
        "Q183": "Germany",
        "Q84": "London",
        "Q21": "England",
        "Q515": "city",
        "Q1471": "Seine",
        "Q999": "Unknownia",
        "Q60": "New York",
        "Q30": "USA",
    }
    return KnowledgeGraph.from_triples(
        triples,
        entity_names=names,
        entity_aliases={"Q60": ["big apple"]},
        relation_names={"P17": "country", "P31": "instance of"},
    )


@pytest.fixture(scope="session")
def kg():
    return make_kg()


def make_assets(kg: KnowledgeGraph) -> KnowledgeAssets:
    """The knowledge assets of the ``assets`` fixture: the toy KG's entities seen in training."""
    seen = ["Q90", "Q142", "Q64", "Q183", "Q84", "Q21", "Q515", "Q1471", "Q60", "Q30"]
    return KnowledgeAssets.build(seen, kg=kg)


@pytest.fixture(scope="session")
def assets(kg):
    return make_assets(kg)


@pytest.fixture(scope="module")
def kge_assets(kg):
    """The toy KG's assets with KG embeddings, for TRELM (``tests/test_trelm.with_kge``), once per test module."""
    from tests.test_trelm import with_kge

    return with_kge(kg)


@pytest.fixture()
def processor(tokenizer, assets):
    """A KALA processor over the tiny tokenizer and the toy KG's assets."""
    return KalaProcessor(tokenizer, assets)


def tiny_encoder_config(
    tokenizer=None, layers: int = 2, hidden: int = 32, *, vocab_size: int | None = None, max_positions: int = 128
) -> BertConfig:
    """A tiny BERT config without dropout; its vocabulary is ``tokenizer``'s, or ``vocab_size`` ids without one."""
    return BertConfig(
        vocab_size=len(tokenizer) if vocab_size is None else vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


@pytest.fixture()
def encoder_config(tokenizer):
    torch.manual_seed(0)
    return tiny_encoder_config(tokenizer)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer, kg) -> dict[str, str]:
    """The run scripts' tiny encoder, KG, CoNLL and SQuAD files (``tests/test_run_scripts.write_tiny_files``), once
    per test module."""
    from tests.test_run_scripts import write_tiny_files

    return write_tiny_files(tmp_path_factory.mktemp("tiny"), tokenizer, kg)


@pytest.fixture(autouse=True)
def _restore_launch_environment():
    """``parse_args`` sets ``ACCELERATE_USE_CPU`` and ``DS_ACCELERATOR`` for the process it configures: a test that
    calls it in-process must not leave them to later tests, whose launched runs would inherit them (a leaked
    ``ACCELERATE_USE_CPU`` turned a later DeepSpeed launch into one-process runs)."""
    keys = ("ACCELERATE_USE_CPU", "DS_ACCELERATOR")
    saved = {key: os.environ.get(key) for key in keys}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
