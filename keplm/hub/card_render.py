"""The markdown and YAML of a keplm model card (see :mod:`keplm.hub.card`): the body's section renderers (``_intro``,
``_results_section``, ``_usage_section``, ``_limits_section``, ``_knowledge_section``, ``_training_section``,
``_versions_section``, ``_provenance_section``, ``_citation_section``, ``_raw_metrics_section``), the metadata with its
model-index (:func:`card_data_for`, :func:`eval_results_for`) and :func:`render_model_card`, which turns a
:class:`~keplm.hub.card_facts.ModelCardSpec` into a huggingface_hub ``ModelCard``. It reads only the facts of
:mod:`keplm.hub.card_facts`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .card_facts import (
    BASE_PACKAGES,
    KG_SOURCES,
    LIBRARY_NAME,
    MODEL_NOUNS,
    PAPERS,
    SYSTEM_NAMES,
    ModelCardSpec,
    ResultRow,
    _hub_id,
    _package_of,
    dataset_info,
    describe_path,
    kg_parts,
    kg_source_name,
    kg_spec_name,
)


# ============================================================================================ systems compared
def _own_label(spec: ModelCardSpec) -> str | None:
    return SYSTEM_NAMES.get(spec.system or "", spec.system)


def _comparison_groups(spec: ModelCardSpec) -> dict[str, dict[str, tuple[float, float | None]]]:
    if len(spec.comparison) < 2:
        return {}
    groups: dict[str, dict[str, tuple[float, float | None]]] = {}
    for split, subset, title in (("test", None, "test"), ("test", "unseen", "test, unseen subset")):
        for system, rows in spec.comparison.items():
            for row in rows:
                if row.split == split and row.subset == subset and "f1" in row.scores:
                    score = row.scores["f1"]
                    groups.setdefault(title, {})[system] = (score.value, score.std)
    return {k: v for k, v in groups.items() if len(v) > 1}


# ============================================================================================ rendering
def _ordinal_layers(layers: Sequence[int], depth: int | None) -> str:
    names = [str(i + 1) for i in layers]
    text = " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else (names[0] if names else "none")
    return f"{'layers' if len(names) > 1 else 'layer'} {text}" + (f" of {depth}" if depth else "")


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _dataset_name(spec: ModelCardSpec) -> str | None:
    info = dataset_info(spec.training.dataset)
    return info.name if info else describe_path(spec.training.dataset)


def _title(spec: ModelCardSpec) -> str:
    if spec.model_name:
        return spec.model_name
    if spec.repo_id:
        return spec.repo_id.split("/")[-1]
    parts = [spec.method]
    if spec.system and spec.system in SYSTEM_NAMES and spec.model_type == "kala":
        parts = [SYSTEM_NAMES[spec.system]]
    info = spec.task_info
    task = "NER" if spec.task == "token-classification" and _is_ner(spec) else (info.name if info else spec.task)
    title = " ".join(parts) + (f" for {task}" if task else "")
    dataset = _dataset_name(spec)
    return title + (f" on {dataset}" if dataset else "")


def _is_ner(spec: ModelCardSpec) -> bool:
    return bool(spec.labels) and any(label.startswith(("B-", "I-")) for label in spec.labels)


def _task_phrase(spec: ModelCardSpec) -> str:
    if spec.task == "token-classification":
        return "named-entity recognition" if _is_ner(spec) else "token classification"
    return {"question-answering": "extractive question answering", "text-classification": "text classification",
            "fill-mask": "masked-token prediction", "relation-extraction": "document-level relation extraction"
            }.get(spec.task or "", spec.task or "")


def _unit(spec: ModelCardSpec) -> str:
    """What a test example is called: SQuAD's seen/unseen subsets count questions (whose context is linked)."""
    return "questions" if spec.task == "question-answering" else "contexts"


def _q(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return json.dumps(text, ensure_ascii=False)


def _repo(spec: ModelCardSpec) -> str:
    return spec.repo_id or "path/to/checkpoint"


def _intro(spec: ModelCardSpec) -> list[str]:
    paper = PAPERS.get(spec.model_type)
    cite = f"[{paper.title}]({paper.url})" if paper and paper.url else (f"*{paper.title}*" if paper else None)
    venue = f" ({', '.join(a.split()[-1] for a in paper.authors[:1])} et al., {paper.venue})" \
        if paper and paper.venue else ""
    lines = []
    if not spec.weights_available:
        lines += ["> **The weights of this model were not kept.** This card records a training run: it was "
                  "regenerated by keplm from the run's saved summary (see *Where the numbers come from*). The "
                  "usage snippet shows how a checkpoint trained with the same command is loaded.", ""]
    base = _base_phrase(spec)
    noun = MODEL_NOUNS.get(spec.model_type, f"{spec.method} model")
    what = f"A {noun} for **{_task_phrase(spec)}**" if spec.task else f"A {noun}"
    if spec.model_type == "kala" and spec.system:
        what = f"A **{SYSTEM_NAMES.get(spec.system, spec.system)}** model for **{_task_phrase(spec)}**"
    dataset = _dataset_name(spec)
    lines.append(f"{what}{f' trained on {dataset}' if dataset else ''}, built with keplm on {base}. "
                 f"Class `{spec.architecture}`, loaded with `{spec.auto_class}` after `import keplm`"
                 f"{f'; processor `{spec.processor_class}`' if spec.processor_class else ''}.")
    lines.append("")
    if spec.model_type == "kala":
        depth = spec.encoder.get("layers")
        if spec.uses_knowledge:
            retrieval = ("its row of the entity memory" if spec.system == "pointwise" else
                         "an attention-weighted aggregate of its neighbours in the context's knowledge graph "
                         f"({spec.settings.get('gnn_layers', 2)} relational GNN layers over the entity memory)")
            lines.append(
                f"KALA{venue} ({cite}) adapts a pre-trained encoder with domain knowledge during fine-tuning: the "
                "hidden states of the tokens of each linked entity mention are scaled and shifted after both "
                "LayerNorms of the chosen encoder layers (knowledge-conditioned feature modulation, KFM: "
                "γ = 1 + h(v), β = h(v)), where v is the mention's entity vector: " + retrieval + ". Tokens outside "
                f"mentions are left unchanged. Here KFM sits on encoder {_ordinal_layers(spec.kfm_layers, depth)}.")
        else:
            extra = spec.settings.get("num_extra_layers") or 0
            lines.append(
                f"This is a **baseline** of KALA{venue} ({cite}): the same architecture and training, but it reads no "
                "knowledge" + (f" and adds {extra} randomly initialised transformer layer(s) on top of the encoder "
                               "(the paper's \"+ more parameters\" baseline)." if extra else
                               " (plain fine-tuning of the encoder with a task head)."))
    elif paper:
        lines.append(f"Method: {cite}{venue}.")
    return lines


def _base_phrase(spec: ModelCardSpec) -> str:
    base = spec.base_model
    encoder = spec.encoder
    shape = ""
    if encoder.get("model_type"):
        shape = f" ({encoder['model_type']}, {encoder.get('layers')} layers, hidden size {encoder.get('hidden_size')})"
    if not base:
        return f"an encoder{shape}"
    package = _package_of(str(base))
    if package:
        held = BASE_PACKAGES.get(package)
        return f"the encoder of the `{package}` pip package{f', {held}' if held else shape}"
    if _hub_id(base):
        return f"`{base}`{shape}"
    return f"a local encoder (`{describe_path(base)}`){shape}"


def _results_section(spec: ModelCardSpec) -> list[str]:
    info = spec.task_info
    if info is None or not (spec.results or spec.comparison):
        return []
    lines = ["## Results", ""]
    runs = max((s.runs for r in spec.results for s in r.scores.values()), default=1)
    dataset = _dataset_name(spec) or "the evaluation data"
    lines.append(f"On {dataset}: {info.metric_note}" + (f"; mean ± sample std over {runs} seeds" if runs > 1 else
                                                          "; one run") + ".")
    if spec.knowledge.test_unseen is not None:
        unit = _unit(spec)
        lines[-1] += (f" The *unseen subset* holds the test {unit} with at least 3 linked entities that never "
                      "occur in the training data (KALA §5.4), the *seen subset* the others; "
                      f"{_fmt(spec.knowledge.test_unseen)} and {_fmt(spec.knowledge.test_seen)} {unit} here.")
    lines.append("")
    if spec.results:
        metrics = [(k, name) for k, name in info.metrics if any(k in r.scores for r in spec.results)]
        counted = any(r.examples is not None for r in spec.results)  # the examples column only where known
        lines.append("| split | " + ("examples | " if counted else "") + " | ".join(name for _, name in metrics) + " |")
        lines.append("|---|" + ("---:|" if counted else "") + "---:|" * len(metrics))
        for row in spec.results:
            cells = [row.scores[k].cell() if k in row.scores else "" for k, _ in metrics]
            count = (f"{_fmt(row.examples) if row.examples is not None else ''} | ") if counted else ""
            lines.append(f"| {row.label} | {count}" + " | ".join(cells) + " |")
        lines.append("")
    if len(spec.comparison) > 1:
        own = _own_label(spec)
        systems = list(spec.comparison)
        lines += [spec.comparison_intro or "Compared with the other systems of the same runs (same data, KG, seeds "
                  "and hyper-parameters); the best value of each row in bold:", ""]
        header = [f"**{s}** (this model)" if s == own else s for s in systems]
        lines.append("| split | metric | " + " | ".join(header) + " |")
        lines.append("|---|---|" + "---:|" * len(systems))
        keys = [k for k, _ in info.metrics if k in ("f1", "exact_match", "p@1")]
        order = [(r.split, r.subset) for r in spec.comparison[systems[0]]]
        for split, subset in order:
            for key in keys:
                cells, best = [], None
                values = {}
                for system in systems:
                    row = next((r for r in spec.comparison[system] if (r.split, r.subset) == (split, subset)), None)
                    if row is not None and key in row.scores:
                        values[system] = row.scores[key]
                if not values:
                    continue
                best = max(values, key=lambda s: values[s].value)
                for system in systems:
                    score = values.get(system)
                    text = score.cell() if score else ""
                    cells.append(f"**{text}**" if system == best and text else text)
                label = ResultRow(split, {}, subset).label
                name = dict(info.metrics)[key]
                lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
        lines.append("")
        if spec.comparison_note:
            lines += [spec.comparison_note, ""]
    for figure in spec.figures:
        if figure.path.endswith("systems.png"):
            lines += [f"![systems compared]({figure.path})", "", f"*{figure.caption}*", ""]
    return lines


def _usage_section(spec: ModelCardSpec) -> list[str]:
    repo = _repo(spec)
    text = spec.example_text or ("Barack Obama met Angela Merkel in Berlin ." if spec.task == "token-classification"
                                 else None)
    lines = ["## How to use", ""]
    if spec.task == "token-classification":
        lines += ["```python", "import keplm  # registers keplm's models, processors and pipelines with transformers",
                  "from transformers import AutoModelForTokenClassification, AutoProcessor, pipeline",
                  "from keplm.training.tagging import tag_words", "",
                  f"model = {spec.auto_class}.from_pretrained({_q(repo)})",
                  f"processor = AutoProcessor.from_pretrained({_q(repo)})  # tokenizer + entity vocabulary + KG",
                  f"print(tag_words(model, processor, {_q(text)}))  # [(word, tag), ...]", "",
                  'ner = pipeline("keplm-ner", model=model, processor=processor)',
                  f"print(ner({_q(text)}))  # entity groups with character offsets and scores",
                  "```", ""]
        if spec.uses_knowledge and spec.knowledge.mode != "annotations":
            lines += ["Both link the raw text against the KG shipped in the checkpoint (`knowledge/`) with the "
                      "processor's entity linker: `tag_words` tags every whitespace-separated word, the "
                      "`keplm-ner` pipeline returns entity groups like transformers' token-classification "
                      "pipeline.", ""]
    elif spec.task == "question-answering":
        lines += ["```python", "import keplm  # registers keplm's models, processors and pipelines with transformers",
                  "from transformers import AutoModelForQuestionAnswering, AutoProcessor, pipeline", "",
                  f"model = AutoModelForQuestionAnswering.from_pretrained({_q(repo)})",
                  f"processor = AutoProcessor.from_pretrained({_q(repo)})  # tokenizer + entity vocabulary + KG",
                  'qa = pipeline("keplm-qa", model=model, processor=processor)',
                  'print(qa(question="Where does John live?", context="John lives in Paris, the capital of France."))',
                  "```", "",
                  "The `keplm-qa` pipeline links the context against the model's KG, reads long contexts in stride "
                  "windows and returns `answer`, `score`, `start` and `end` (transformers 5 has no "
                  "`question-answering` pipeline task).", ""]
    else:
        lines += ["```python", "import keplm  # registers the keplm models with the Auto classes",
                  f"from transformers import {spec.auto_class}", "",
                  f"model = {spec.auto_class}.from_pretrained({_q(repo)})", "```", ""]
        if spec.model_type == "keplm_relation_extraction":
            lines += ["As KALA's fact source: `keplm.RelationExtractor.from_pretrained(<checkpoint>)`, then "
                      "`extractor.annotate(text, annotation)` adds the extracted triplets to an annotation's linked "
                      "mentions (`keplm build-kg --relation_source model --re_model <checkpoint>` does it for a "
                      "dataset).", ""]
    return lines


def _limits_section(spec: ModelCardSpec) -> list[str]:
    lines = ["## Intended use and limits", ""]
    dataset = _dataset_name(spec) or "its training data"
    info = dataset_info(spec.training.dataset)
    use = {"token-classification": "tagging entities in text like the training data",
           "question-answering": "answering questions whose answer is a span of a given context",
           "relation-extraction": "proposing relations between linked entities of a document as KG facts"
           }.get(spec.task or "", "the task it was trained for")
    lines.append(f"- Intended for {use} ({dataset}), and for research on knowledge-enhanced language models. It "
                 "was evaluated on that dataset only; how it behaves on other domains or text styles was not "
                 "measured.")
    if info and info.language == "en":
        lines.append("- English only.")
    if spec.model_type == "kala" and spec.uses_knowledge:
        case = {True: " (case-sensitive)", False: " (ignoring case)", None: ""}[spec.knowledge.case_sensitive]
        lines.append(f"- Knowledge comes from dictionary matching of KG names and aliases in the text{case}, with no "
                     "disambiguation beyond a degree prior: ambiguous names can be linked to the wrong entity and "
                     "entities missing from the KG are not linked. Entities not seen in training map to the null "
                     "row of the entity memory" + (
                         "; relational retrieval still represents them through their KG neighbours that were seen."
                         if spec.system == "relational" else " and get no modulation.")
                     )
        if spec.knowledge.mode != "annotations":
            lines.append("- The KG is part of the checkpoint (`knowledge/`); swapping it for another one changes what "
                         "is linked but not the entity memory the model was trained with.")
    if spec.task == "relation-extraction":
        lines.append("- Predicts at most one relation per ordered entity pair (top-1, or top-2 when `no_relation` "
                     "wins and the runner-up is above the threshold); precision is low with the paper's 0.1 rule "
                     "(see Results).")
    lines += [f"- {note}" for note in spec.notes]
    if spec.license is None:
        lines.append("- No license was set when this card was generated (pass `license=` to "
                     "`Trainer.create_model_card` or `push_to_hub`).")
    terms = [f"{info.name}: {info.terms}"] if info and info.terms else []
    terms += [f"{KG_SOURCES[k].name}: {KG_SOURCES[k].description}" for k in kg_parts(spec.knowledge.kg_spec)
              if spec.uses_knowledge and "CC" in KG_SOURCES[k].description]
    if terms:
        lines.append("- Terms of the data it was built from (they bind uses of this model too): " + "; ".join(terms)
                     + ".")
    lines.append("")
    return lines


def _knowledge_section(spec: ModelCardSpec) -> list[str]:
    k = spec.knowledge
    if spec.model_type not in ("kala", "roof_transformer", "trelm"):
        return []
    lines = ["## Knowledge", ""]
    source = kg_source_name(k.kg_spec)
    if not spec.uses_knowledge:
        lines.append("This checkpoint reads no knowledge." + (
            f" Its run linked the data against {source} (`--kg {kg_spec_name(k.kg_spec)}`) only to define the "
            "seen/unseen test subsets, the same for every system." if source else ""))
        return lines + [""]
    rows = []
    if source:
        rows.append(("knowledge graph", f"{source} (`--kg {kg_spec_name(k.kg_spec)}`)"))
    elif k.mode == "annotations":
        rows.append(("knowledge graph", "from KALA annotation files (no KG spec)"))
    if k.kg_entities is not None:
        rows.append(("KG size", f"{_fmt(k.kg_entities)} entities, {_fmt(k.kg_relations)} relations, "
                                f"{_fmt(k.kg_triples)} triples" + (f" (sha256 `{k.kg_hash}`)" if k.kg_hash else "")))
    if k.kge_vectors is not None:
        rows.append(("KG embeddings", f"{_fmt(k.kge_vectors[0])} entity vectors of dimension {k.kge_vectors[1]} "
                                      "(`keplm train-kge`), injected at important entity mentions"))
    if k.mode:
        rows.append(("knowledge source", {"link": "text linked against the KG (dictionary matching of names and "
                                                  "aliases), 1-hop facts of each linked entity",
                                          "annotations": "KALA annotation files: mentions and facts precomputed "
                                                         "(e.g. by `keplm build-kg`); the checkpoint then holds the "
                                                         "entity vocabulary but no KG"}.get(k.mode, k.mode)))
    if k.case_sensitive is not None:
        rows.append(("case-sensitive linking", _fmt(k.case_sensitive)))
    if k.max_neighbors is not None:
        rows.append(("facts per linked entity (max)", _fmt(k.max_neighbors)))
    if k.entity_rows is not None and spec.model_type != "roof_transformer":  # Roof reads triples, no entity rows
        rows.append(("entity memory" if spec.model_type == "kala" else "entity vocabulary",
                     f"{_fmt(k.entity_rows)} rows (row 0 = null entity), one per entity "
                     f"{'linked in the training' if spec.model_type == 'kala' else 'mentioned in the pre-training'} "
                     "data"))
    rows += k.method_rows
    if k.relation_rows is not None and spec.model_type == "kala":
        rows.append(("relation vocabulary", f"{_fmt(k.relation_rows)} ids (self loop and unknown included)"))
    if k.train_mentions is not None:
        rows.append(("training mentions", f"{_fmt(k.train_mentions)} mentions of {_fmt(k.train_entities)} entities; "
                                          f"{_fmt(k.seen_once)} entities seen once, the most frequent "
                                          f"{_fmt(k.max_frequency)} time{'' if k.max_frequency == 1 else 's'}"))
    if k.train_linked_share is not None:
        rows.append(("linking coverage (training data)", f"{100 * k.train_linked_share:.1f} % of the training "
                                                        "examples have at least one linked mention"))
    if k.mentions_per_example is not None:
        per = "question (in its context)" if spec.task == "question-answering" else "example"
        rows.append((f"linked mentions per training {per}", f"{k.mentions_per_example:.2f}"))
    if k.test_unseen is not None:
        rows.append((f"test {_unit(spec)} seen / unseen", f"{_fmt(k.test_seen)} / {_fmt(k.test_unseen)} (unseen: at "
                                                         "least 3 entities absent from the training data)"))
    lines += ["| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows] + [""]
    if spec.modulation:
        parts = []
        for layer, med in spec.modulation.items():
            parts.append(f"layer {layer + 1}: |γ₁ − 1| {med['gamma1']:.3g}, |β₁| {med['beta1']:.3g}, "
                         f"|γ₂ − 1| {med['gamma2']:.3g}, |β₂| {med['beta2']:.3g}")
        lines += ["Median over entity-memory rows of the mean modulation magnitude: " + "; ".join(parts) + ".", ""]
    if k.note:
        lines += [k.note, ""]
    for figure in spec.figures:
        if not figure.path.endswith(("systems.png", "training_curves.png")):
            lines += [f"![{Path(figure.path).stem.replace('_', ' ')}]({figure.path})", "", f"*{figure.caption}*", ""]
    return lines


def _training_section(spec: ModelCardSpec) -> list[str]:
    t = spec.training
    lines = ["## Training", ""]
    dataset = _dataset_name(spec)
    info = dataset_info(t.dataset)
    if dataset:
        source = ""
        if t.dataset and not _hub_id(t.dataset):
            source = " (read from a local copy of the public dataset)" if info else " (local files)"
        sizes = ", ".join(f"{_fmt(n)} {split}" for split, n in t.examples.items())
        lines.append(f"Data: {dataset}{source}" + (f"; {sizes} examples" if sizes else "") + ".")
        if spec.labels:
            lines[-1] += f" Labels: {', '.join(f'`{label}`' for label in spec.labels)}."
        lines.append("")
    facts = []
    if t.steps:
        facts.append(f"{_fmt(t.steps)} optimizer steps")
    if t.epochs:
        facts.append(f"{t.epochs:g} epochs")
    if t.device:
        facts.append(f"on {t.device}")
    if t.date:
        facts.append(t.date)
    if t.wall_time:
        facts.append(t.wall_time)
    if facts:
        lines += ["Run: " + ", ".join(facts) + ".", ""]
    if t.hyperparameters:
        lines += ["| hyper-parameter | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(value)} |" for name, value in t.hyperparameters.items()] + [""]
    if spec.settings:
        lines += ["Model settings (`config.json`):", "", "| setting | value |", "|---|---|"]
        lines += [f"| {name} | {_fmt(value)} |" for name, value in spec.settings.items()] + [""]
    if t.command:
        lines += ["Command (from the repository root of keplm):", "", "```bash", t.command, "```", ""]
        if t.command_note:
            lines += [t.command_note, ""]
    for figure in spec.figures:
        if figure.path.endswith("training_curves.png"):
            lines += [f"![training curves]({figure.path})", "", f"*{figure.caption}*", ""]
    return lines


def _versions_section(spec: ModelCardSpec) -> list[str]:
    if not spec.versions:
        return []
    lines = ["## Framework versions", ""]
    lines += [f"- {name} {version}" for name, version in spec.versions.items()]
    if spec.versions_note:
        lines += ["", spec.versions_note]
    return lines + [""]


def _provenance_section(spec: ModelCardSpec) -> list[str]:
    if not spec.provenance:
        return []
    return ["## Where the numbers come from", "", *[f"- {line}" for line in spec.provenance], ""]


def _citation_section(spec: ModelCardSpec) -> list[str]:
    paper = PAPERS.get(spec.model_type)
    if paper is None:
        return []
    lines = ["## Citation", ""]
    if paper.bibtex:
        venue = f", {paper.venue}" if paper.venue else ""
        lines += [f"{paper.title} ({', '.join(paper.authors)}{venue}):", "", "```bibtex", paper.bibtex, "```"]
    else:
        lines.append(f"*{paper.title}* ({', '.join(paper.authors)}).")
    if paper.code_url:
        lines += ["", f"The paper's authors published their own implementation at {paper.code_url}; keplm is an "
                      "independent implementation on Hugging Face transformers."]
    return lines + [""]


def _raw_metrics_section(spec: ModelCardSpec) -> list[str]:
    if not spec.raw_metrics:
        return []
    lines = ["<details>", f"<summary>{spec.raw_metrics_title}</summary>", "",
             "| metric | value |", "|---|---|"]
    for key, value in sorted(spec.raw_metrics.items()):
        lines.append(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |")
    return lines + ["", "</details>", ""]


def card_data_for(spec: ModelCardSpec) -> ModelCardData:
    """The card's YAML metadata (``ModelCardData``) with the model-index of the spec's own results."""
    info = dataset_info(spec.training.dataset)
    dataset_hub = _hub_id(spec.training.dataset) if not info else info.hub_id
    language = spec.language or (info.language if info else None)
    tags = [LIBRARY_NAME, spec.model_type, "knowledge-enhanced"]
    if spec.model_type == "kala" and spec.system:
        tags.append(f"kala-{spec.system.replace('_', '-')}")
    if spec.task == "relation-extraction":
        tags.append("relation-extraction")
    if spec.task == "token-classification" and _is_ner(spec):
        tags.append("ner")
    tags += [KG_SOURCES[kind].tag for kind in kg_parts(spec.knowledge.kg_spec) if spec.uses_knowledge]
    tags = list(dict.fromkeys([*tags, *spec.tags]))
    name = _title(spec)
    return ModelCardData(
        library_name=LIBRARY_NAME,
        pipeline_tag=spec.pipeline_tag,
        language=language,
        license=spec.license,
        tags=tags,
        base_model=_hub_id(spec.base_model) if spec.base_model and not _package_of(spec.base_model) else None,
        datasets=[dataset_hub] if dataset_hub else None,
        model_name=name,
        eval_results=eval_results_for(spec) or None,
    )


def eval_results_for(spec: ModelCardSpec) -> list[EvalResult]:
    """The model-index entries (Hub format) of the spec's own results: one per split/subset and metric."""
    info = spec.task_info
    if info is None:
        return []
    dataset = dataset_info(spec.training.dataset)
    dataset_type = ((dataset.hub_id or dataset.key) if dataset else None) or _hub_id(spec.training.dataset) \
        or describe_path(spec.training.dataset) or "custom"
    dataset_name = _dataset_name(spec) or dataset_type
    task_name = "Named-entity recognition" if _is_ner(spec) else info.name
    names = dict(info.metrics)
    results = []
    for row in spec.results:
        for key, score in row.scores.items():
            metric_name = names.get(key, key)
            if score.runs > 1:
                metric_name += f" (mean of {score.runs} seeds, std {score.std:.2f})"
            results.append(EvalResult(
                task_type=spec.task, task_name=task_name, dataset_type=dataset_type,
                dataset_name=dataset_name,
                dataset_split=f"{row.split} ({row.subset.replace('_', '-')} subset)" if row.subset else row.split,
                metric_type=key,
                metric_value=round(score.value, 2), metric_name=metric_name,
            ))
    return results


def render_model_card(spec: ModelCardSpec) -> ModelCard:
    """The card of ``spec``: YAML metadata with model-index, then the body."""
    data = card_data_for(spec)
    body = [f"# {_title(spec)}", "", *_intro(spec), ""]
    for section in (_results_section, _usage_section, _limits_section, _knowledge_section, _training_section,
                    _versions_section, _provenance_section, _citation_section, _raw_metrics_section):
        body += section(spec)
    text = "\n".join(body)
    text = re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{text}")
