"""``import keplm`` is light, and keplm's methods are in transformers' registries on first use, whatever the import
order (``keplm.auto_registration``). Each check runs in a fresh interpreter: registration state is per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter from the repository root; its stdout (a failure shows stderr)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_import_keplm_imports_no_torch_and_no_model_code():
    out = run_fresh("""
        import sys
        import keplm
        heavy = sorted(m for m in ("torch", "transformers.modeling_utils", "transformers.trainer",
                                   "transformers.image_processing_utils", "keplm.modeling", "torch_geometric")
                       if m in sys.modules)
        print(heavy)
    """)
    assert out.strip() == "[]"


REGISTRY_CHECKS = """
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForTokenClassification
    from transformers import AutoProcessor
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING
    from transformers.pipelines import PIPELINE_REGISTRY

    kala = AutoConfig.for_model("kala")
    print(type(kala).__name__)
    print(AutoModel._model_mapping[type(kala)].__name__)
    print(AutoModelForTokenClassification._model_mapping[type(kala)].__name__)
    print(AutoModelForMaskedLM._model_mapping[type(AutoConfig.for_model("trelm"))].__name__)
    print(PROCESSOR_MAPPING[type(kala)].__name__)
    print(all(task in PIPELINE_REGISTRY.get_supported_tasks() for task in ("keplm-ner", "keplm-qa")))
"""
EXPECTED = ["KalaConfig", "KalaModel", "KalaForTokenClassification", "TrelmForMaskedLM", "KalaProcessor", "True"]


def test_auto_classes_and_pipelines_know_keplm_after_import_keplm_first():
    assert run_fresh("import keplm\n" + textwrap.dedent(REGISTRY_CHECKS)).split() == EXPECTED


def test_auto_classes_and_pipelines_know_keplm_when_transformers_was_imported_first():
    code = """
        from transformers import AutoModel, pipeline  # the registries exist before keplm is imported
        from transformers.models.auto.processing_auto import PROCESSOR_MAPPING
        import keplm
    """
    assert run_fresh(textwrap.dedent(code) + textwrap.dedent(REGISTRY_CHECKS)).split() == EXPECTED


def test_registries_are_plain_dicts_again_after_the_first_lookup():
    out = run_fresh("""
        import keplm
        from transformers import AutoConfig, AutoModel
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
        print(type(CONFIG_MAPPING._extra_content).__name__, type(AutoModel._model_mapping._extra_content).__name__)
        AutoConfig.for_model("roof_transformer")
        print(type(CONFIG_MAPPING._extra_content).__name__, type(AutoModel._model_mapping._extra_content).__name__)
        print("kala" in CONFIG_MAPPING, "bert" in CONFIG_MAPPING)
    """)
    assert out.split() == ["_FillsOnRead", "_FillsOnRead", "dict", "dict", "True", "True"]


def test_a_lookup_while_keplm_modules_are_being_imported_waits_and_the_next_one_fills():
    # A module of keplm's own that reads the registry while it is being imported (a plug-in, say) gets
    # transformers' answer without keplm's methods; importing keplm's models then would re-enter half-built modules.
    out = run_fresh("""
        import sys, types
        import keplm
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
        import keplm.auto_registration as registration

        module = types.ModuleType("keplm._probe")
        module.__spec__ = types.SimpleNamespace(_initializing=True)
        sys.modules["keplm._probe"] = module
        print("kala" in CONFIG_MAPPING, "bert" in CONFIG_MAPPING, "keplm.modeling" in sys.modules)
        del sys.modules["keplm._probe"]
        print("kala" in CONFIG_MAPPING, "keplm.modeling" in sys.modules)
    """)
    assert out.split() == ["False", "True", "False", "True", "True"]


def test_each_sub_command_parser_is_built_without_torch():
    out = run_fresh("""
        import sys
        from keplm.cli import COMMANDS, build_parser
        for name in COMMANDS:
            assert build_parser([name, "--help"])._subparsers is not None
        print(sorted(m for m in ("torch", "datasets", "transformers") if m in sys.modules))
    """)
    assert out.strip() == "[]"


def test_the_commands_help_names_the_choices_their_modules_define():
    from keplm.checks import counterfactual
    from keplm.commands import check_knowledge, train_kge
    from keplm.knowledge.kge import KGE_MODELS

    assert train_kge.KGE_MODEL_HELP == f"one of {', '.join(sorted(KGE_MODELS))}"
    assert (check_knowledge.EDITS, check_knowledge.TASKS) == (counterfactual.EDITS, counterfactual.TASKS)


def test_keplm_help_lists_the_commands_without_importing_them():
    out = run_fresh("""
        import contextlib, io, sys
        from keplm.cli import main
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
            main(["--help"])
        print(all(name in text.getvalue() for name in ("build-kg", "train-kge", "check-knowledge")))
        print(sorted(m for m in sys.modules if m.startswith("keplm.commands.") or m == "torch"))
    """)
    assert out.split("\n")[:2] == ["True", "[]"]
