"""The markdown and YAML of a keplm model card (see :mod:`keplm.hub.card`): :func:`render_model_card` renders the
Jinja template ``templates/modelcard_template.md`` (the layout, headings and fixed prose) with huggingface_hub's
``ModelCard.from_template``; this module computes what it fills in (:func:`template_values`: the title, the data-
dependent tables and paragraphs) and the metadata with its model-index (:func:`card_data_for`,
:func:`eval_results_for`) from a :class:`~keplm.hub.card_facts.ModelCardSpec`. It reads only the facts of
:mod:`keplm.hub.card_facts`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from keplm.configuration.method_card import method_card

from .card_facts import (
    KG_SOURCES,
    LIBRARY_NAME,
    ModelCardSpec,
    _hub_id,
    _package_of,
    describe_path,
    kg_parts,
    kg_source_name,
    kg_spec_name,
)


# ============================================================================================ systems compared
def _own_label(spec: ModelCardSpec) -> str | None:
    return method_card(spec.model_type).system_names.get(spec.system or "", spec.system)


def _comparison_groups(spec: ModelCardSpec) -> dict[str, dict[str, tuple[float, float | None]]]:
    """``{row label: {system: (mean, std)}}`` of the test F1 (whole test split, then its unseen subset) of the
    systems compared, where more than one system has it."""
    groups: dict[str, dict[str, tuple[float, float | None]]] = {}
    for subset in (None, "unseen"):
        for system, rows in spec.comparison.items():
            for row in rows:
                if (row.split, row.subset) == ("test", subset) and "f1" in row.scores:
                    groups.setdefault(row.label, {})[system] = (row.scores["f1"].value, row.scores["f1"].std)
    return {k: v for k, v in groups.items() if len(v) > 1}


# ============================================================================================ rendering
def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(str, value))}]"
    return str(value)


def _dataset_name(spec: ModelCardSpec) -> str | None:
    info = spec.training.dataset_info
    return info.name if info else describe_path(spec.training.dataset)


def _title(spec: ModelCardSpec) -> str:
    if spec.model_name:
        return spec.model_name
    if spec.repo_id:
        return spec.repo_id.split("/")[-1]
    info = spec.task_info
    task = "NER" if spec.task == "token-classification" and _is_ner(spec) else (info.name if info else spec.task)
    title = (method_card(spec.model_type).title(spec) or spec.method) + (f" for {task}" if task else "")
    dataset = _dataset_name(spec)
    return title + (f" on {dataset}" if dataset else "")


def _is_ner(spec: ModelCardSpec) -> bool:
    return any(label.startswith(("B-", "I-")) for label in spec.labels or ())


def _task_phrase(spec: ModelCardSpec) -> str:
    if spec.task == "token-classification":
        return "named-entity recognition" if _is_ner(spec) else "token classification"
    return {
        "question-answering": "extractive question answering",
        "text-classification": "text classification",
        "text2text-generation": "generative question answering",
        "fill-mask": "masked-token prediction",
        "relation-extraction": "document-level relation extraction",
    }.get(spec.task or "", spec.task or "")


def _unit(spec: ModelCardSpec) -> str:
    """What a test example is called: SQuAD's seen/unseen subsets count questions (whose context is linked)."""
    return "questions" if spec.task in ("question-answering", "text2text-generation") else "contexts"


def _q(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return json.dumps(text, ensure_ascii=False)


def _repo(spec: ModelCardSpec) -> str:
    return spec.repo_id or "path/to/checkpoint"


def _method_intro(spec: ModelCardSpec) -> list[str]:
    """The method's paragraph under the first sentence, its paper linked where the method gives a URL."""
    card = method_card(spec.model_type)
    paper = card.paper
    cite = f"[{paper.title}]({paper.url})" if paper and paper.url else (f"*{paper.title}*" if paper else None)
    venue = (
        f" ({', '.join(a.split()[-1] for a in paper.authors[:1])} et al., {paper.venue})"
        if paper and paper.venue
        else ""
    )
    return card.intro(spec, cite, venue)


def _what(spec: ModelCardSpec) -> str:
    """The card's first words: the method's own, else "A <noun> for **<task>**"."""
    card = method_card(spec.model_type)
    noun = card.noun or f"{spec.method} model"
    return card.what(spec, _task_phrase(spec)) or (
        f"A {noun} for **{_task_phrase(spec)}**" if spec.task else f"A {noun}"
    )


def _base_phrase(spec: ModelCardSpec) -> str:
    base = spec.base_model
    encoder = spec.encoder
    shape = ""
    if encoder.get("model_type"):
        shape = f" ({encoder['model_type']}, {encoder.get('layers')} layers, hidden size {encoder.get('hidden_size')})"
    if not base:
        return f"an encoder{shape}"
    held = spec.base_model_description
    if not held and spec.base_model_id and spec.base_model_id != base:
        held = f"a copy of `{spec.base_model_id}`{shape}"
    package = _package_of(str(base))
    if package:
        return f"the encoder of the `{package}` pip package{f', {held}' if held else shape}"
    if _hub_id(base):
        return f"`{base}`{f', {held}' if held else shape}"
    return f"a local encoder (`{describe_path(base)}`){f', {held}' if held else shape}"


def _results(spec: ModelCardSpec) -> list[str]:
    """The results section's text and tables (the heading and figures are the template's)."""
    info = spec.task_info
    if info is None or not (spec.results or spec.comparison):
        return []
    runs = max((s.runs for r in spec.results for s in r.scores.values()), default=1)
    dataset = _dataset_name(spec) or "the evaluation data"
    seeds = f"mean ± sample std over {runs} seeds" if runs > 1 else "one run"
    intro = f"On {dataset}: {info.metric_note}; {seeds}."
    if spec.knowledge.test_unseen is not None:
        unit = _unit(spec)
        intro += (
            f" The *unseen subset* holds the test {unit} with at least 3 linked entities that never "
            "occur in the training data (KALA §5.4), the *seen subset* the others; "
            f"{_fmt(spec.knowledge.test_unseen)} and {_fmt(spec.knowledge.test_seen)} {unit} here."
        )
    lines = [intro, ""]
    if spec.results:
        metrics = [(k, name) for k, name in info.metrics if any(k in r.scores for r in spec.results)]
        counted = any(r.examples is not None for r in spec.results)  # the examples column only where known
        names = " | ".join(name for _, name in metrics)
        lines += [
            f"| split | {'examples | ' if counted else ''}{names} |",
            f"|---|{'---:|' if counted else ''}{'---:|' * len(metrics)}",
        ]
        for row in spec.results:
            cells = [row.scores[k].cell() if k in row.scores else "" for k, _ in metrics]
            count = (f"{_fmt(row.examples) if row.examples is not None else ''} | ") if counted else ""
            lines.append(f"| {row.label} | {count}{' | '.join(cells)} |")
        lines.append("")
    if len(spec.comparison) > 1:
        lines += _comparison_table(spec, info)
    return lines


def _comparison_table(spec: ModelCardSpec, info) -> list[str]:
    """The systems of the same runs side by side, the best value of each row in bold."""
    own = _own_label(spec)
    systems = list(spec.comparison)
    lines = [
        spec.comparison_intro
        or "Compared with the other systems of the same runs (same data, KG, seeds "
        "and hyper-parameters); the best value of each row in bold:",
        "",
    ]
    header = [f"**{s}** (this model)" if s == own else s for s in systems]
    lines += [f"| split | metric | {' | '.join(header)} |", "|---|---|" + "---:|" * len(systems)]
    keys = [(key, name) for key, name in info.metrics if key in ("f1", "exact_match", "p@1")]
    for row in spec.comparison[systems[0]]:
        where = (row.split, row.subset)
        same = {s: next((r.scores for r in spec.comparison[s] if (r.split, r.subset) == where), {}) for s in systems}
        for key, name in keys:
            values = {s: same[s][key] for s in systems if key in same[s]}
            if not values:
                continue
            best = max(values, key=lambda s: values[s].value)  # in bold
            cells = [
                f"**{values[s].cell()}**" if s == best else values[s].cell() if s in values else "" for s in systems
            ]
            lines.append(f"| {row.label} | {name} | {' | '.join(cells)} |")
    lines.append("")
    if spec.comparison_note:
        lines += [spec.comparison_note, ""]
    return lines


_INTENDED_USE = {
    "token-classification": "tagging entities in text like the training data",
    "question-answering": "answering questions whose answer is a span of a given context",
    "text2text-generation": "answering questions about a given context by generating the answer",
    "relation-extraction": "proposing relations between linked entities of a document as KG facts",
}


def _data_terms(spec: ModelCardSpec) -> list[str]:
    """The terms of the training data and of the KG sources whose licence binds the model's uses."""
    info = spec.training.dataset_info
    terms = [f"{info.name}: {info.terms}"] if info and info.terms else []
    return terms + [
        f"{KG_SOURCES[k].name}: {KG_SOURCES[k].description}"
        for k in kg_parts(spec.knowledge.kg_spec)
        if spec.uses_knowledge and "CC" in KG_SOURCES[k].description
    ]


def _knowledge_rows(spec: ModelCardSpec) -> list[tuple[str, str]]:
    """The knowledge table: the KG, how the data were linked, the vocabularies and how often training met them."""
    k = spec.knowledge
    card = method_card(spec.model_type)
    rows = []
    source = kg_source_name(k.kg_spec)
    if source:
        rows.append(("knowledge graph", f"{source} (`--kg {kg_spec_name(k.kg_spec)}`)"))
    elif k.mode == "annotations":
        rows.append(("knowledge graph", "from KALA annotation files (no KG spec)"))
    if k.kg_entities is not None:
        rows.append(
            (
                "KG size",
                f"{_fmt(k.kg_entities)} entities, {_fmt(k.kg_relations)} relations, "
                f"{_fmt(k.kg_triples)} triples" + (f" (sha256 `{k.kg_hash}`)" if k.kg_hash else ""),
            )
        )
    if k.kge_vectors is not None:
        rows.append(
            (
                "KG embeddings",
                f"{_fmt(k.kge_vectors[0])} entity vectors of dimension {k.kge_vectors[1]} "
                "(`keplm train-kge`), injected at important entity mentions",
            )
        )
    if k.mode:
        rows.append(
            (
                "knowledge source",
                {
                    "link": "text linked against the KG (dictionary matching of names and "
                    "aliases), 1-hop facts of each linked entity",
                    "annotations": "KALA annotation files: mentions and facts precomputed "
                    "(e.g. by `keplm build-kg`); the checkpoint then holds the "
                    "entity vocabulary but no KG",
                }.get(k.mode, k.mode),
            )
        )
    if k.case_sensitive is not None:
        rows.append(("case-sensitive linking", _fmt(k.case_sensitive)))
    if k.max_neighbors is not None:
        rows.append(("facts per linked entity (max)", _fmt(k.max_neighbors)))
    if k.entity_rows is not None and card.entity_rows_label:
        rows.append(
            (
                card.entity_rows_label,
                f"{_fmt(k.entity_rows)} rows (row 0 = null entity), one per entity {card.entity_rows_source} data",
            )
        )
    rows += k.method_rows
    if k.relation_rows is not None and card.relation_rows:
        rows.append(("relation vocabulary", f"{_fmt(k.relation_rows)} ids (self loop and unknown included)"))
    if k.train_mentions is not None:
        rows.append(
            (
                "training mentions",
                f"{_fmt(k.train_mentions)} mentions of {_fmt(k.train_entities)} entities; "
                f"{_fmt(k.seen_once)} entities seen once, the most frequent "
                f"{_fmt(k.max_frequency)} time{'' if k.max_frequency == 1 else 's'}",
            )
        )
    if k.train_linked_share is not None:
        rows.append(
            (
                "linking coverage (training data)",
                f"{100 * k.train_linked_share:.1f} % of the training examples have at least one linked mention",
            )
        )
    if k.mentions_per_example is not None:
        per = "question (in its context)" if spec.task == "question-answering" else "example"
        rows.append((f"linked mentions per training {per}", f"{k.mentions_per_example:.2f}"))
    if k.test_unseen is not None:
        rows.append(
            (
                f"test {_unit(spec)} seen / unseen",
                f"{_fmt(k.test_seen)} / {_fmt(k.test_unseen)} (unseen: at "
                "least 3 entities absent from the training data)",
            )
        )
    return rows


def _knowledge_notes(spec: ModelCardSpec) -> list[str]:
    """The paragraphs under the knowledge table: the KFM modulation magnitudes, where the numbers come from."""
    lines = []
    if spec.modulation:
        parts = [
            f"layer {layer + 1}: |γ₁ − 1| {med['gamma1']:.3g}, |β₁| {med['beta1']:.3g}, "
            f"|γ₂ − 1| {med['gamma2']:.3g}, |β₂| {med['beta2']:.3g}"
            for layer, med in spec.modulation.items()
        ]
        used, total = spec.modulation_rows or (0, 0)
        sample = f" (computed on a sample of {used:,} of {total:,} rows)" if used < total else ""
        lines += [
            f"Median over entity-memory rows of the mean modulation magnitude{sample}: {'; '.join(parts)}.",
            "",
        ]
    if spec.knowledge.note:
        lines += [spec.knowledge.note, ""]
    return lines


def _training_data(spec: ModelCardSpec) -> str:
    """The training section's first line: the data, its split sizes and labels."""
    t = spec.training
    dataset = _dataset_name(spec)
    if not dataset:
        return ""
    source = ""
    if t.dataset and not _hub_id(t.dataset):
        source = " (read from a local copy of the public dataset)" if t.dataset_info else " (local files)"
    sizes = ", ".join(f"{_fmt(n)} {split}" for split, n in t.examples.items())
    line = f"Data: {dataset}{source}" + (f"; {sizes} examples" if sizes else "") + "."
    if spec.labels:
        line += f" Labels: {', '.join(f'`{label}`' for label in spec.labels)}."
    return line


def _training_run(spec: ModelCardSpec) -> str:
    """Steps, epochs, device, date and wall time of the run, those known."""
    t = spec.training
    facts = [
        f"{_fmt(t.steps)} optimizer steps" if t.steps else None,
        f"{t.epochs:g} epochs" if t.epochs else None,
        f"on {t.device}" if t.device else None,
        t.date,
        t.wall_time,
    ]
    facts = [fact for fact in facts if fact]
    return f"Run: {', '.join(facts)}." if facts else ""


def _figures(spec: ModelCardSpec, where: str) -> list[dict]:
    """The figures of one section (``results``: systems compared, ``training``: curves, ``knowledge``: the rest)."""
    kinds = {"systems.png": ("results", "systems compared"), "training_curves.png": ("training", "training curves")}
    out = []
    for figure in spec.figures:
        other = ("knowledge", Path(figure.path).stem.replace("_", " "))
        kind, alt = next((v for k, v in kinds.items() if figure.path.endswith(k)), other)
        if kind == where:
            out.append({"alt": alt, "path": figure.path, "caption": figure.caption})
    return out


def _lines(lines: list[str]) -> str:
    return "\n".join(lines).strip()


def _load_model(spec: ModelCardSpec) -> str:
    """The usage snippet's model line: the Auto class (for a LoRA adapter, the base encoder named in
    ``keplm_adapter.json`` with the adapter merged, :mod:`keplm.modeling.lora`)."""
    load = f"{spec.auto_class}.from_pretrained({_q(_repo(spec))})"
    if spec.lora:
        load += (
            "  # base encoder + this LoRA adapter, merged (keplm.modeling.lora.load_lora: the peft model, to train on)"
        )
    return load


def template_values(spec: ModelCardSpec) -> dict:
    """What the card template (``templates/modelcard_template.md``) fills in: every value computed from ``spec``."""
    card = method_card(spec.model_type)
    info = spec.training.dataset_info
    text = spec.example_text or (
        "Barack Obama met Angela Merkel in Berlin ." if spec.task == "token-classification" else None
    )
    raw = [
        (key, f"{value:.4f}" if isinstance(value, float) else str(value))
        for key, value in sorted(spec.raw_metrics.items())
    ]
    return {
        "title": _title(spec),
        "weights_available": spec.weights_available,
        "what": _what(spec),
        "dataset": _dataset_name(spec),
        "base": _base_phrase(spec),
        "architecture": spec.architecture,
        "auto_class": spec.auto_class,
        "processor_class": spec.processor_class,
        "method_intro": _lines(_method_intro(spec)),
        "results": _lines(_results(spec)),
        "results_figures": _figures(spec, "results"),
        "task": spec.task,
        "repo": _q(_repo(spec)),
        "example_text": _q(text) if text else None,
        "lora": spec.lora,
        "load_model": _load_model(spec),
        "links_raw_text": spec.uses_knowledge and spec.knowledge.mode != "annotations",
        "usage_notes": _lines(card.usage_notes(spec)),
        "intended_use": _INTENDED_USE.get(spec.task or "", "the task it was trained for"),
        "english": bool(info and info.language == "en"),
        "limits": [*card.limits(spec), *spec.notes],
        "license": spec.license,
        "data_terms": _data_terms(spec),
        "knowledge_section": card.knowledge_section,
        "uses_knowledge": spec.uses_knowledge,
        "kg_source": kg_source_name(spec.knowledge.kg_spec),
        "kg_spec": kg_spec_name(spec.knowledge.kg_spec),
        "knowledge_rows": _knowledge_rows(spec) if spec.uses_knowledge else [],
        "knowledge_notes": _lines(_knowledge_notes(spec)),
        "knowledge_figures": _figures(spec, "knowledge"),
        "training_data": _training_data(spec),
        "training_run": _training_run(spec),
        "hyperparameters": [(name, _fmt(value)) for name, value in spec.training.hyperparameters.items()],
        "settings": [(name, _fmt(value)) for name, value in spec.settings.items()],
        "command": spec.training.command,
        "command_note": spec.training.command_note,
        "training_figures": _figures(spec, "training"),
        "versions": list(spec.versions.items()),
        "versions_note": spec.versions_note,
        "provenance": spec.provenance,
        "paper": card.paper,
        "raw_metrics": raw,
        "raw_metrics_title": spec.raw_metrics_title,
    }


def card_data_for(spec: ModelCardSpec) -> ModelCardData:
    """The card's YAML metadata (``ModelCardData``) with the model-index of the spec's own results."""
    info = spec.training.dataset_info
    dataset_hub = _hub_id(spec.training.dataset) if not info else info.hub_id
    tags = [LIBRARY_NAME, spec.model_type, "knowledge-enhanced", *method_card(spec.model_type).tags(spec)]
    if spec.task == "relation-extraction":
        tags.append("relation-extraction")
    if spec.task == "token-classification" and _is_ner(spec):
        tags.append("ner")
    tags += [KG_SOURCES[kind].tag for kind in kg_parts(spec.knowledge.kg_spec) if spec.uses_knowledge]
    tags = list(dict.fromkeys([*tags, *spec.tags]))
    return ModelCardData(
        library_name=LIBRARY_NAME,
        pipeline_tag=spec.pipeline_tag,
        language=spec.language or (info.language if info else None),
        license=spec.license,
        tags=tags,
        base_model=spec.base_model_id
        or (_hub_id(spec.base_model) if spec.base_model and not _package_of(spec.base_model) else None),
        datasets=[hub for hub in (dataset_hub, *(info.more_hub_ids if info else ())) if hub] or None,
        model_name=_title(spec),
        eval_results=eval_results_for(spec) or None,
    )


def eval_results_for(spec: ModelCardSpec) -> list[EvalResult]:
    """The model-index entries (Hub format) of the spec's own results: one per split/subset and metric."""
    info = spec.task_info
    if info is None:
        return []
    dataset = spec.training.dataset_info
    dataset_type = (
        ((dataset.hub_id or dataset.key) if dataset else None)
        or _hub_id(spec.training.dataset)
        or describe_path(spec.training.dataset)
        or "custom"
    )
    dataset_name = _dataset_name(spec) or dataset_type
    task_name = "Named-entity recognition" if _is_ner(spec) else info.name
    names = dict(info.metrics)
    results = []
    for row in spec.results:
        for key, score in row.scores.items():
            metric_name = names.get(key, key)
            if score.runs > 1:
                metric_name += f" (mean of {score.runs} seeds, std {score.std:.2f})"
            results.append(
                EvalResult(
                    task_type=spec.task,
                    task_name=task_name,
                    dataset_type=dataset_type,
                    dataset_name=dataset_name,
                    dataset_split=f"{row.split} ({row.subset.replace('_', '-')} subset)" if row.subset else row.split,
                    metric_type=key,
                    metric_value=round(score.value, 2),
                    metric_name=metric_name,
                )
            )
    return results


#: the card's layout and fixed prose, a Jinja template shipped in the package (``package_data`` in setup.cfg)
TEMPLATE_PATH = Path(__file__).parent / "templates" / "modelcard_template.md"


def render_model_card(spec: ModelCardSpec, template_path: str | Path | None = None) -> ModelCard:
    """The card of ``spec``: keplm's template (or ``template_path``) rendered by ``ModelCard.from_template`` with the
    YAML metadata (model-index included) and :func:`template_values`; runs of blank lines are collapsed."""
    card = ModelCard.from_template(
        card_data_for(spec), template_path=str(template_path or TEMPLATE_PATH), **template_values(spec)
    )
    return ModelCard(re.sub(r"\n{3,}", "\n\n", str(card)).strip() + "\n")
