"""Model cards for every keplm model (huggingface_hub ``ModelCard`` / ``ModelCardData``).

A card is rendered from a :class:`ModelCardSpec`: what the model is (method, architecture, Auto class, task), the
knowledge it carries (:class:`KnowledgeFacts`), how it was trained (:class:`TrainingFacts`), its results
(:class:`ResultRow`, one per split / subset, a mean ± std where several seeds ran) and where the numbers come from.
Two ways in:

* :func:`build_model_card` (the Trainer's ``create_model_card``, ``model.push_to_hub``): the spec is read from a live
  model, its processor and a metrics dict (:func:`spec_from_model`); figures are drawn from the model itself.
* :func:`render_model_card` on a spec written by hand, e.g. ``harness/cards.py`` for reference models whose
  weights are gone and only a run summary is left.

The card's YAML holds ``library_name: keplm``, the ``pipeline_tag`` of the model's Auto class, ``language``,
``license``, ``tags``, ``base_model`` (Hub ids only: a packaged or local encoder is named by the Hub id it copies,
given or from the project's :class:`CardFacts`), ``datasets`` (Hub ids only) and a ``model-index`` in the Hub's
format (``eval_results``), so the Hub renders the evaluation results. The text never holds a machine path (commands
go through :func:`format_command`, names through :func:`describe_path`) and links only the URLs in
:data:`ALLOWED_URLS`. The module knows models through small interfaces only (config, knowledge assets, the Auto
class registries, duck-typed KFM modules for the figures); it never imports ``keplm.modeling``.

The code lives in three modules: :mod:`keplm.hub.card_facts` (the spec dataclasses, papers, datasets, KGs, tasks, path
helpers, :func:`results_from_runs`), :mod:`keplm.hub.card_render` (the markdown sections, the metadata and
:func:`render_model_card`) and this one (the spec of a live model, the figures, :func:`build_model_card`,
:func:`write_model_card`), which re-exports the other two: ``keplm.hub.card`` stays the module to import from.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import torch
from huggingface_hub import ModelCard

from keplm.configuration.method_card import MethodCard, Paper, allowed_urls, method_card  # noqa: F401

from . import figures as fig

# the facts and the renderer, re-exported: ``keplm.hub.card`` is the module every caller imports from
from .card_facts import (  # noqa: F401
    AUTO_CLASSES,
    KG_SOURCES,
    LIBRARY_NAME,
    PIPELINE_TAGS,
    TASKS,
    CardFacts,
    DatasetInfo,
    Figure,
    KgInfo,
    KnowledgeFacts,
    ModelCardSpec,
    ResultRow,
    Score,
    TaskInfo,
    TrainingFacts,
    _examples,
    auto_class_name,
    describe_path,
    format_command,
    kg_parts,
    kg_source_name,
    kg_spec_name,
    pipeline_tag_for,
    portable_argument,
    results_from_runs,
)
from .card_render import (  # noqa: F401
    _comparison_groups,
    _own_label,
    card_data_for,
    eval_results_for,
    render_model_card,
)

logger = logging.getLogger(__name__)


# ============================================================================================ spec from a model
def framework_versions() -> dict[str, str]:
    """Installed versions of keplm and the libraries a checkpoint depends on."""
    versions = {}
    for name in ("keplm", "transformers", "torch", "datasets", "torch-geometric", "huggingface-hub", "accelerate"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def knowledge_facts_from_model(
    model,
    processor=None,
    knowledge_args: dict | None = None,
    metrics: dict | None = None,
    train_linked_share: float | None = None,
    kg: str | None = None,
) -> KnowledgeFacts:
    """What a live model carries (its knowledge assets), with the run's settings and subset sizes if known."""
    assets = getattr(model, "knowledge_assets", None) or getattr(processor, "knowledge_assets", None)
    graph = getattr(assets, "kg", None)
    args = knowledge_args or {}
    metrics = metrics or {}
    counts = list(getattr(assets, "entity_counts", None) or [])[1:]
    linker = getattr(processor, "linker_kwargs", None) or {}
    case_sensitive = args.get("link_case_sensitive")
    if case_sensitive is None and "lowercase" in linker:
        case_sensitive = not linker["lowercase"]
    vectors = getattr(graph, "entity_vectors", None)
    return KnowledgeFacts(
        kge_vectors=tuple(int(n) for n in vectors.shape) if vectors is not None else None,
        method_rows=method_card(getattr(model.config, "model_type", None)).knowledge_rows(processor, metrics),
        kg_spec=kg or args.get("kg"),
        mode=args.get("knowledge"),
        kg_entities=getattr(graph, "num_entities", None),
        kg_relations=getattr(graph, "num_relations", None),
        kg_triples=getattr(graph, "num_triples", None),
        kg_hash=graph.content_hash()[:12] if graph is not None else None,
        entity_rows=getattr(assets, "num_entities", None),
        relation_rows=getattr(assets, "num_relations", None),
        entity_counts=counts or None,
        train_linked_share=train_linked_share,
        test_seen=_examples(metrics, "test", "seen"),
        test_unseen=_examples(metrics, "test", "unseen"),
        case_sensitive=case_sensitive,
        max_neighbors=args.get("max_neighbors_per_entity", linker.get("max_neighbors_per_entity")),
    )


def knowledge_hyperparameters(knowledge_args: dict | None, card: MethodCard | None = None) -> dict:
    """The run's knowledge options that the method's card lists (``card.knowledge_options``), for the card's
    hyper-parameter table beside the training arguments."""
    card = card if card is not None else MethodCard()
    args = knowledge_args or {}
    return {
        label: args.get(name)
        for label, name in card.knowledge_options
        if args.get(name) not in (None, False, [], "") or (name in card.stated_when_false and name in args)
    }


def lora_target_names(target_modules) -> list[str]:
    """The module names a LoRA adapter targets, as a user gave them: peft stores a list, or the regular expression
    keplm builds from the names (``^(?:encoder)\\..*\\.(?:query|value)$``), whose last group lists them."""
    if isinstance(target_modules, str):
        found = re.search(r"\(\?:([^()]*)\)\$$", target_modules)
        return [re.sub(r"\\(.)", r"\1", name) for name in found.group(1).split("|")] if found else [target_modules]
    return sorted(target_modules or [])


def spec_from_model(
    model,
    metrics: dict | None = None,
    base_model: str | None = None,
    dataset: str | None = None,
    repo_id: str | None = None,
    command: str | Sequence[str] | None = None,
    processor=None,
    license: str | None = None,
    language: str | list[str] | None = None,
    tags: Iterable[str] | None = None,
    model_name: str | None = None,
    knowledge_args: dict | None = None,
    train_linked_share: float | None = None,
    kg: str | None = None,
    example_text: str | None = None,
    card_facts: CardFacts | None = None,
    base_model_id: str | None = None,
) -> ModelCardSpec:
    """Everything the card says about a live model: config, knowledge assets, Auto class, the run's metrics and
    arguments, and what ``card_facts`` (the project's) say about its dataset and base model. A peft model (LoRA) is
    described by the keplm model inside it, with a note on the adapter. ``base_model_id``: the Hub id of the card's
    ``base_model`` metadata (default: what ``card_facts`` say a packaged or local ``base_model`` copies)."""
    facts = card_facts if card_facts is not None else CardFacts()
    adapter = None
    if callable(getattr(model, "get_base_model", None)) and hasattr(model, "peft_config"):
        adapter = next(iter(model.peft_config.values()), None)
        model = model.get_base_model()
    config = model.config
    card = method_card(config.model_type)
    auto_class = auto_class_name(model)
    pipeline_tag = pipeline_tag_for(auto_class)
    values = config.to_dict()
    encoder_config = getattr(config, "encoder_config", None)
    uses_knowledge = bool(getattr(config, "uses_knowledge_assets", False))
    task = pipeline_tag or card.task
    labels = None
    if pipeline_tag == "token-classification" and getattr(config, "id2label", None):
        labels = [config.id2label[i] for i in sorted(config.id2label)]
    metrics = dict(metrics or {})
    if isinstance(command, (list, tuple)):
        command = format_command(command, facts.command_aliases)
    splits = (("train", "train_samples"), ("validation", "eval_samples"), ("test", "predict_samples"))
    training = TrainingFacts(
        dataset=dataset,
        dataset_info=facts.dataset(dataset),
        examples={split: int(metrics[key]) for split, key in splits if isinstance(metrics.get(key), (int, float))},
        hyperparameters=knowledge_hyperparameters(knowledge_args, card),
        command=command,
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    )
    kfm = list(getattr(config, "kfm_layer_indices", []) or [])
    try:
        num_parameters = int(model.num_parameters())
    except Exception:  # noqa: BLE001 - a count is a nicety
        num_parameters = None
    raw = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    notes = []
    if adapter is not None:
        tags = [*(tags or []), "peft", "lora"]
        notes.append(
            f"Trained with a LoRA adapter (peft; r = {getattr(adapter, 'r', '?')}, on "
            f"{lora_target_names(getattr(adapter, 'target_modules', None))}): the encoder's own weights stayed "
            "frozen, the knowledge modules and the head trained fully."
        )
    return ModelCardSpec(
        notes=notes,
        lora=adapter is not None,
        model_type=config.model_type,
        architecture=type(model).__name__,
        auto_class=auto_class,
        pipeline_tag=pipeline_tag,
        task=task,
        processor_class=type(processor).__name__ if processor is not None else None,
        system=card.system(config),
        uses_knowledge=uses_knowledge,
        kfm_layers=kfm if uses_knowledge else [],
        encoder={
            "model_type": getattr(encoder_config, "model_type", None),
            "layers": getattr(encoder_config, "num_hidden_layers", None),
            "hidden_size": getattr(encoder_config, "hidden_size", None),
        }
        if encoder_config is not None
        else {},
        settings={k: values[k] for k in getattr(config, "card_settings", ()) if k in values},
        labels=labels,
        num_parameters=num_parameters,
        base_model=base_model,
        base_model_description=facts.base_model(base_model),
        base_model_id=base_model_id or facts.base_model_id(base_model),
        repo_id=repo_id,
        model_name=model_name,
        language=language,
        license=license,
        tags=list(tags or []),
        knowledge=knowledge_facts_from_model(model, processor, knowledge_args, metrics, train_linked_share, kg)
        if uses_knowledge
        else KnowledgeFacts(
            kg_spec=kg or (knowledge_args or {}).get("kg"),
            test_seen=_examples(metrics, "test", "seen"),
            test_unseen=_examples(metrics, "test", "unseen"),
        ),
        training=training,
        results=results_from_runs([metrics], task),
        raw_metrics=raw,
        versions=framework_versions(),
        example_text=example_text,
    )


def _device_name(device) -> str | None:
    if device is None:
        return None
    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        try:
            return f"GPU ({torch.cuda.get_device_name(device)})"
        except Exception:  # noqa: BLE001
            return "GPU"
    return {"cpu": "CPU", "mps": "Apple MPS"}.get(kind, kind)


# ============================================================================================ figures
def add_figures(
    spec: ModelCardSpec,
    figures_dir: str | os.PathLike,
    card_dir: str | os.PathLike,
    model=None,
    log_history: Sequence[dict] | None = None,
) -> list[Figure]:
    """Draw the figures the spec's facts allow into ``figures_dir`` (PNG) and link them from the card with paths
    relative to ``card_dir``: the entity-frequency long tail (entity counts), KFM γ/β magnitudes (a live KALA model),
    training curves (``log_history``) and the systems compared (comparison rows over several seeds).

    Without matplotlib nothing is drawn and one log line says so. Returns the figures added to ``spec.figures``.
    """
    if not fig.matplotlib_available():
        logger.warning(
            "matplotlib is not installed: the model card is written without figures "
            "(pip install 'keplm[reports]' to draw them)"
        )
        return []
    figures_dir = Path(figures_dir)
    drawn: list[tuple[Path, str]] = []  # (the PNG, its caption)
    counts = spec.knowledge.entity_counts
    if spec.uses_knowledge and counts and any(c > 0 for c in counts):
        path = fig.entity_frequency_figure(counts, figures_dir / fig.ENTITY_FREQUENCY_PNG)
        drawn.append(
            (
                path,
                "Entity memory: training mentions per entity (log-log rank/frequency and "
                "histogram). Most rows are rare entities that few training examples update "
                "(KALA appendix, Fig. 13-14).",
            )
        )
    if model is not None and spec.uses_knowledge:
        tables = fig.kfm_modulation_table(model)
        if tables:
            used, total = next(iter(tables.values())).shape[0], fig.entity_memory_rows(model)
            spec.modulation = fig.modulation_summary(tables)
            spec.modulation_rows = (used, total)
            path = fig.modulation_figure(tables, figures_dir / fig.MODULATION_PNG, spec.encoder.get("layers"), total)
            rows = (
                f"a seeded sample of {used:,} of the {total:,} entity-memory rows v"
                if used < total
                else "every entity-memory row v"
            )
            held = fig.held_entity_memory_rows(model)
            if held is not None:  # a row-sharded table: the rows this process holds, never the gathered table
                rows = (
                    f"{'a seeded sample of ' if used < held[1] - held[0] - (held[0] == 0) else ''}{used:,} of "
                    f"the {total:,} entity-memory rows v, from rows [{held[0]:,}, {held[1]:,}) (those this "
                    "process holds of the row-sharded table)"
                )
            drawn.append(
                (
                    path,
                    f"KFM modulation magnitudes: {rows} (null row left "
                    "out) through each KFM layer's four MLPs, mean |h(v)| per row; γ = 1 + h(v), "
                    "β = h(v). The pointwise view of the memory: with relational retrieval the vector "
                    "a token meets is its entity's neighbourhood aggregate, which differs per context.",
                )
            )
    if log_history:
        try:
            path = fig.training_curves_figure(log_history, figures_dir / fig.TRAINING_CURVES_PNG)
            drawn.append((path, "Training loss and learning rate per optimizer step (from the Trainer's log history)."))
        except ValueError as error:
            logger.info("no training-curve figure: %s", error)
    groups = _comparison_groups(spec)
    runs = max((s.runs for rows in spec.comparison.values() for r in rows for s in r.scores.values()), default=1)
    if groups and runs > 1:
        path = fig.comparison_figure(groups, figures_dir / fig.COMPARISON_PNG, "F1 (%)", _own_label(spec), runs)
        drawn.append(
            (
                path,
                "Test F1 of the systems compared, mean ± std over seeds (this model in red). "
                "Overlapping whiskers: differences within seed noise.",
            )
        )
    added = [Figure(Path(os.path.relpath(path, card_dir)).as_posix(), caption) for path, caption in drawn]
    spec.figures.extend(added)
    return added


# ============================================================================================ the library's entry
def build_model_card(
    model,
    metrics: dict | None = None,
    *,
    figures_dir: str | os.PathLike | None = None,
    card_dir: str | os.PathLike | None = None,
    log_history: Sequence[dict] | None = None,
    **facts,
) -> ModelCard:
    """A model card whose numbers come from the model's config and knowledge assets and the given metrics.

    ``facts`` are :func:`spec_from_model`'s keywords (``base_model``, ``dataset``, ``repo_id``, ``command``,
    ``processor``, ``license``, ``language``, ``tags``, ``model_name``, ``knowledge_args``, ``train_linked_share``,
    ``kg``, ``example_text``, ``card_facts``, ``base_model_id``). With ``figures_dir`` the figures are drawn there and
    linked relative to ``card_dir`` (default: ``figures_dir``'s parent, where ``write_model_card`` is expected to
    write ``README.md``).
    """
    spec = spec_from_model(model, metrics, **facts)
    if figures_dir is not None:
        add_figures(
            spec,
            figures_dir,
            card_dir if card_dir is not None else Path(figures_dir).parent,
            model=model,
            log_history=log_history,
        )
    return render_model_card(spec)


def write_model_card(directory: str | os.PathLike, card: ModelCard) -> Path:
    """Write README.md into a checkpoint directory (``push_to_hub`` then publishes it)."""
    path = Path(directory) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    card.save(path)
    return path


__all__ = [
    "ModelCardSpec",
    "KnowledgeFacts",
    "TrainingFacts",
    "ResultRow",
    "Score",
    "Figure",
    "MethodCard",
    "Paper",
    "allowed_urls",
    "method_card",
    "CardFacts",
    "DatasetInfo",
    "KG_SOURCES",
    "build_model_card",
    "render_model_card",
    "spec_from_model",
    "results_from_runs",
    "add_figures",
    "card_data_for",
    "eval_results_for",
    "write_model_card",
    "format_command",
    "describe_path",
    "portable_argument",
    "auto_class_name",
    "pipeline_tag_for",
    "kg_spec_name",
    "kg_source_name",
    "framework_versions",
    "knowledge_hyperparameters",
]
