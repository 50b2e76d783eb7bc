"""After ``import keplm``, transformers' Auto classes and pipeline registry know keplm's methods, whatever the import
order, through transformers' documented registration APIs only (``AutoConfig.register``, ``AutoModel*.register``,
``AutoProcessor.register``, ``PIPELINE_REGISTRY.register_pipeline``). The registry checks run in a fresh interpreter:
registration state is per process."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter from the repository root; its stdout (a failure shows stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


REGISTRY_CHECKS = """
    import transformers
    from transformers import AutoConfig, AutoProcessor
    from transformers.pipelines import PIPELINE_REGISTRY

    kala = AutoConfig.for_model("kala")
    print(type(kala).__name__)
    print(transformers.MODEL_MAPPING[type(kala)].__name__)
    print(transformers.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING[type(kala)].__name__)
    print(transformers.MODEL_FOR_MASKED_LM_MAPPING[type(AutoConfig.for_model("trelm"))].__name__)
    print(transformers.PROCESSOR_MAPPING[type(kala)].__name__)
    print(all(task in PIPELINE_REGISTRY.get_supported_tasks() for task in ("keplm-ner", "keplm-qa")))
"""
EXPECTED = ["KalaConfig", "KalaModel", "KalaForTokenClassification", "TrelmForMaskedLM", "KalaProcessor", "True"]


def test_auto_classes_and_pipelines_know_keplm_after_import_keplm_first():
    assert run_fresh("import keplm\n" + textwrap.dedent(REGISTRY_CHECKS)).split() == EXPECTED


def test_auto_classes_and_pipelines_know_keplm_when_transformers_was_imported_first():
    code = """
        from transformers import AutoModel, AutoProcessor, pipeline  # the registries exist before keplm is imported
        import keplm
    """
    assert run_fresh(textwrap.dedent(code) + textwrap.dedent(REGISTRY_CHECKS)).split() == EXPECTED


#: private transformers attributes, methods and keywords, and import machinery, that keplm must not read or write
PRIVATE = re.compile(
    r"_extra_content|_model_mapping|_LazyAutoMapping|\.supported_tasks\b|sys\.meta_path|"
    r"CONFIG_MAPPING_NAMES|transformers\.models\.auto\.|_commit_hash|_raise_exceptions_for|_memory_tracker|"
    r"_finish_current_push|_maybe_prepare_encoder_kwargs|_prepare_text_encoder_decoder|\._from_config\(|"
    r"_created_lr_scheduler|self\._save\(|_initial_global_step"
)


def test_keplm_uses_no_private_transformers_registries():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "keplm").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if PRIVATE.search(line)
    ]
    assert found == []


def test_keplm_help_lists_the_commands_without_importing_them():
    out = run_fresh("""
        import contextlib, io, sys
        from keplm.cli import main
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
            main(["--help"])
        print(all(name in text.getvalue() for name in ("build-kg", "train-kge", "check-knowledge", "kg-coverage")))
        print(sorted(m for m in sys.modules if m.startswith("keplm.commands.")))
    """)
    assert out.split("\n")[:2] == ["True", "[]"]
