"""keplm's metrics as ``evaluate.Metric`` subclasses (``SquadV1``, ``Seqeval``, ``Glue``, ``SemEvalTask8``,
``PrecisionAtK``); the run scripts' ``compute_metrics`` callables built on them are in
:mod:`keplm.training.compute_metrics`.

They wrap the formulas of :mod:`keplm.training.metrics` so that they also work with ``add_batch``/``compute`` and
``evaluate.combine``, fully offline: nothing is loaded from the Hub.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

import datasets
import evaluate
import numpy as np

from .metrics import (
    GLUE_TASKS,
    _as_vector,
    _ground_truths,
    glue_metrics,
    ner_metrics,
    precision_at_k,
    semeval_task8_metrics,
    squad_v1_metrics,
)

__all__ = [
    "SquadV1",
    "Seqeval",
    "Glue",
    "PrecisionAtK",
    "SemEvalTask8",
    "squad_metric_inputs",
]


def _to_numpy(array) -> np.ndarray:
    """A Trainer output (numpy array or, under ``batch_eval_metrics``, a possibly bf16 CUDA tensor) as numpy."""
    if hasattr(array, "detach"):
        array = array.detach().cpu()
        if array.is_floating_point():
            array = array.float()
        array = array.numpy()
    return np.asarray(array)


# --------------------------------------------------------------------------- evaluate.Metric classes


class _KeplmMetric(evaluate.Metric):
    """Shared plumbing of keplm's ``evaluate.Metric`` subclasses.

    * The module name is ``metric_name`` (``keplm_...``) rather than evaluate's snake-cased class name, so cache
      folders and ``evaluate.combine`` prefixes never collide with the Hub metrics of the same name.
    * Single-process instances get a unique ``experiment_id`` unless one is given: with evaluate's shared default
      (``"default_experiment"``) a second live instance of the same metric and config waits one second on the
      first one's file lock before falling back to a random file name.
    * A missing or unexpected input field, or ``compute()`` with nothing added, raise a ``ValueError`` saying so
      (evaluate raises a bare ``KeyError`` / ``AttributeError`` there).

    Everything else (``keep_in_memory``, ``cache_dir``, ``num_process``/``process_id`` for distributed use) is
    evaluate's; by default the added examples go to an Arrow file under ``evaluate.config.HF_METRICS_CACHE``
    (``$HF_HOME/metrics``) that ``compute()`` deletes again.
    """

    metric_name = "keplm_metric"

    def __init__(
        self,
        config_name: str | None = None,
        keep_in_memory: bool = False,
        cache_dir: str | None = None,
        num_process: int = 1,
        process_id: int = 0,
        seed: int | None = None,
        experiment_id: str | None = None,
        **kwargs,
    ):
        self._auto_experiment_id = experiment_id is None and num_process == 1
        if self._auto_experiment_id:
            experiment_id = f"keplm-{uuid.uuid4().hex}"
        super().__init__(
            config_name=config_name,
            keep_in_memory=keep_in_memory,
            cache_dir=cache_dir,
            num_process=num_process,
            process_id=process_id,
            seed=seed,
            experiment_id=experiment_id,
            **kwargs,
        )
        self._module_info.module_name = self.metric_name

    def _build_data_dir(self):
        # evaluate names the module after the class just before building its cache folder: rename it first
        self._module_info.module_name = self.metric_name
        return super()._build_data_dir()

    def _format_error(self, err: KeyError) -> ValueError:
        return ValueError(
            f"{self.name}: input field {err} is missing or unexpected; expected features: {self.features}"
        )

    def _check_inputs(self, inputs: dict, batched: bool) -> None:
        """Checks the Arrow encoding would not do (e.g. it silently truncates 0.7 to the int64 class id 0)."""

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add a batch of predictions and references (see the inputs description below)."""
        self._check_inputs({"predictions": predictions, "references": references, **kwargs}, batched=True)
        try:
            return super().add_batch(predictions=predictions, references=references, **kwargs)
        except KeyError as err:
            raise self._format_error(err) from None

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one prediction and reference (see the inputs description below)."""
        self._check_inputs({"predictions": prediction, "references": reference, **kwargs}, batched=False)
        try:
            return super().add(prediction=prediction, reference=reference, **kwargs)
        except KeyError as err:
            raise self._format_error(err) from None

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Compute the metric over every example added so far plus the given ones, then forget them all
        (see the inputs description below)."""
        try:
            return super().compute(predictions=predictions, references=references, **kwargs)
        except Exception:
            if self.writer is None and self.data is not None and self.num_process == 1:
                self._discard_gathered()  # _compute failed on the gathered examples: start afresh next time
            raise
        finally:
            self._remove_own_lock_file()

    def _discard_gathered(self) -> None:
        """Forget gathered examples as a successful ``compute()`` does: free the data, delete the cache files
        and release their locks (evaluate leaves them behind when ``_compute`` raises)."""
        self.data = None
        self.buf_writer = None
        if not self.keep_in_memory and self.file_paths:
            for filelock, file_path in reversed(list(zip(self.filelocks, self.file_paths))):
                if os.path.exists(file_path):
                    os.remove(file_path)
                filelock.release()
        self.file_paths = self.filelocks = None

    def _remove_own_lock_file(self) -> None:
        """evaluate leaves an empty ``.lock`` file per cache file; with one auto-generated experiment id per
        instance they would pile up in the cache folder, so delete ours once nothing holds it."""
        if self.keep_in_memory or not self._auto_experiment_id or self.filelock is not None:
            return
        lock_path = os.path.join(self.data_dir, f"{self.experiment_id}-1-0.arrow.lock")
        if os.path.exists(lock_path) and not os.path.exists(lock_path[: -len(".lock")]):
            os.remove(lock_path)

    def _finalize(self):
        if self.writer is None and self.num_process == 1:
            raise ValueError(
                f"{self.name}: nothing to compute: call add()/add_batch() or pass predictions= and references= "
                "to compute()"
            )
        super()._finalize()


_SQUAD_CITATION = """\
@inproceedings{rajpurkar-etal-2016-squad,
    title = "{SQ}u{AD}: 100,000+ Questions for Machine Comprehension of Text",
    author = "Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin and Liang, Percy",
    booktitle = "Proceedings of the 2016 Conference on Empirical Methods in Natural Language Processing",
    year = "2016",
    pages = "2383--2392",
}
"""

_SQUAD_INPUTS = """
Args:
    predictions: list of ``{"id": str, "prediction_text": str}``, one per answered question.
    references: list of ``{"id": str, "answers": {"text": [str, ...], "answer_start": [int, ...]}}`` (the
        SQuAD dataset's ``id`` and ``answers`` columns; no other keys).
Returns:
    exact_match: official v1.1 exact match, in percent, averaged over all reference questions.
    f1: official v1.1 token F1, in percent (a reference question without prediction scores 0 in both).
Example:
    >>> metric = SquadV1(keep_in_memory=True)
    >>> metric.compute(predictions=[{"id": "q1", "prediction_text": "the Eiffel Tower"}],
    ...                references=[{"id": "q1", "answers": {"text": ["Eiffel Tower"], "answer_start": [0]}}])
    {'exact_match': 100.0, 'f1': 100.0}
"""


def _unique_by_id(rows, field: str, what: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for row in rows:
        if row["id"] in out:
            raise ValueError(f"keplm_squad_v1: question id {row['id']!r} appears twice in the {what}")
        out[row["id"]] = row[field]
    return out


class SquadV1(_KeplmMetric):
    """SQuAD v1.1 exact match and F1 in percent, the inputs of the Hub ``squad`` metric, the numbers of
    ``squad_v1_metrics`` (the official script's normalisation and max over ground truths)."""

    metric_name = "keplm_squad_v1"

    def _info(self):
        return evaluate.MetricInfo(
            description="SQuAD v1.1 exact match and token F1 (official evaluation script), in percent.",
            citation=_SQUAD_CITATION,
            inputs_description=_SQUAD_INPUTS,
            features=datasets.Features(
                {
                    "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
                    "references": {
                        "id": datasets.Value("string"),
                        "answers": datasets.Sequence(
                            {"text": datasets.Value("string"), "answer_start": datasets.Value("int32")}
                        ),
                    },
                }
            ),
            homepage="https://rajpurkar.github.io/SQuAD-explorer/",
            codebase_urls=["https://rajpurkar.github.io/SQuAD-explorer/"],
            reference_urls=["https://aclanthology.org/D16-1264/"],
        )

    def _compute(self, predictions, references):
        predicted = _unique_by_id(predictions, "prediction_text", "predictions")
        answers = _unique_by_id(references, "answers", "references")
        return squad_v1_metrics(predicted, {qid: list(value["text"]) for qid, value in answers.items()})


def squad_metric_inputs(
    predictions: Mapping[str, str], examples
) -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    """``(predictions, references)`` in ``SquadV1``'s format, one pair per reference question, from post-processed
    predictions ``{id: text}`` and the raw examples (a Dataset or list of SQuAD-schema dicts, or ``{id: [texts]}``
    as ``squad_references`` returns; ``answer_start`` is then -1, unused by EM/F1). A question without prediction
    gets ``""``, which scores 0 as in ``squad_v1_metrics`` (unless its gold answer normalises to nothing)."""
    if isinstance(examples, Mapping):
        rows = [(qid, {"text": _ground_truths(value), "answer_start": None}) for qid, value in examples.items()]
    elif hasattr(examples, "column_names"):
        rows = list(zip(examples["id"], examples["answers"]))
    else:
        rows = [(ex["id"], ex["answers"]) for ex in examples]
    preds, refs = [], []
    for qid, answers in rows:
        texts = list(answers["text"])
        starts = answers.get("answer_start")
        starts = [-1] * len(texts) if starts is None else [int(s) for s in starts]
        preds.append({"id": str(qid), "prediction_text": predictions.get(qid, "")})
        refs.append({"id": str(qid), "answers": {"text": texts, "answer_start": starts}})
    return preds, refs


_SEQEVAL_CITATION = """\
@misc{seqeval,
  title = {{seqeval}: A Python framework for sequence labeling evaluation},
  url = {https://github.com/chakki-works/seqeval},
  author = {Hiroki Nakayama},
  year = {2018},
}
@inproceedings{tjong-kim-sang-de-meulder-2003-introduction,
    title = "Introduction to the {C}o{NLL}-2003 Shared Task: Language-Independent Named Entity Recognition",
    author = "Tjong Kim Sang, Erik F. and De Meulder, Fien",
    booktitle = "Proceedings of the Seventh Conference on Natural Language Learning at HLT-NAACL 2003",
    year = "2003",
    pages = "142--147",
}
"""

_SEQEVAL_INPUTS = """
Args:
    predictions: list of predicted tag sequences, e.g. ``[["B-PER", "I-PER", "O"], ...]``.
    references: list of gold tag sequences, each as long as its prediction.
    mode: ``None`` (conlleval-compatible, default) or ``"strict"``; scheme: e.g. ``"IOB2"`` with strict mode.
    per_type: also report ``"{TYPE}_f1"`` per entity type (default ``True``, as ``ner_metrics``).
Returns:
    precision, recall, f1: micro-averaged entity-level scores in [0, 1]; accuracy: token accuracy.
Example:
    >>> metric = Seqeval(keep_in_memory=True)
    >>> metric.compute(predictions=[["B-PER", "I-PER", "O"]], references=[["B-PER", "I-PER", "O"]], per_type=False)
    {'precision': 1.0, 'recall': 1.0, 'f1': 1.0, 'accuracy': 1.0}
"""


class Seqeval(_KeplmMetric):
    """Entity-level precision/recall/F1 and token accuracy with seqeval: the numbers of ``ner_metrics``."""

    metric_name = "keplm_seqeval"

    def _info(self):
        return evaluate.MetricInfo(
            description="Entity-level micro precision/recall/F1 (seqeval, conlleval-compatible by default) and "
            "token accuracy for sequence labelling.",
            citation=_SEQEVAL_CITATION,
            inputs_description=_SEQEVAL_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
            homepage="https://github.com/chakki-works/seqeval",
            codebase_urls=["https://github.com/chakki-works/seqeval"],
            reference_urls=["https://www.clips.uantwerpen.be/conll2003/ner/"],
        )

    def _compute(self, predictions, references, mode=None, scheme=None, per_type=True):
        return ner_metrics(predictions, references, mode=mode, scheme=scheme, per_type=per_type)


_GLUE_CITATION = """\
@inproceedings{wang2019glue,
  title = {{GLUE}: A Multi-Task Benchmark and Analysis Platform for Natural Language Understanding},
  author = {Wang, Alex and Singh, Amanpreet and Michael, Julian and Hill, Felix and Levy, Omer and
            Bowman, Samuel R.},
  booktitle = {International Conference on Learning Representations},
  year = {2019},
}
"""

_GLUE_INPUTS = """
Config name: the GLUE task, one of cola, sst2, mrpc, qqp, stsb, mnli, mnli_matched, mnli_mismatched, qnli, rte,
wnli, hans.
Args:
    predictions: predicted class ids (int), or predicted similarity scores (float) for stsb.
    references: gold class ids, or gold similarity scores for stsb.
Returns (fractions, as the Hub ``glue`` metric):
    cola: matthews_correlation; mrpc, qqp: accuracy and f1 (of class 1); stsb: pearson and spearmanr
    (average ranks for ties); every other task: accuracy.
Example:
    >>> metric = Glue("mrpc", keep_in_memory=True)
    >>> metric.compute(predictions=[1, 1, 0, 1, 0, 0], references=[1, 0, 0, 1, 1, 0])
    {'accuracy': 0.6666666666666666, 'f1': 0.6666666666666666}
"""


class Glue(_KeplmMetric):
    """The GLUE benchmark's metric for one task (the config name), as used for Roof-Transformer; the Hub ``glue``
    metric's config names, inputs and result keys, with the formulas of ``glue_metrics`` (numpy only)."""

    metric_name = "keplm_glue"

    def _info(self):
        if self.config_name not in GLUE_TASKS:
            raise ValueError(f"keplm_glue: unknown config name {self.config_name!r}; use one of {sorted(GLUE_TASKS)}")
        dtype = "float64" if self.config_name == "stsb" else "int64"
        return evaluate.MetricInfo(
            description="GLUE task metrics: accuracy, F1, Matthews correlation, Pearson and Spearman correlation.",
            citation=_GLUE_CITATION,
            inputs_description=_GLUE_INPUTS,
            features=datasets.Features(
                {
                    "predictions": datasets.Value(dtype),
                    "references": datasets.Value(dtype),
                }
            ),
            format="numpy",
            homepage="https://gluebenchmark.com/",
            codebase_urls=["https://github.com/nyu-mll/GLUE-baselines"],
            reference_urls=["https://arxiv.org/abs/1804.07461"],
        )

    def _check_inputs(self, inputs: dict, batched: bool) -> None:
        for column in ("predictions", "references"):
            values = inputs.get(column)
            if values is None:
                continue
            array = np.asarray(_to_numpy(values))
            regression = self.config_name == "stsb"
            if array.ndim != int(batched):
                what = "score" if regression else "class id (the argmax of the logits)"
                raise ValueError(f"keplm_glue: {column} must hold one {what} per example, got shape {array.shape}")
            _as_vector(f"keplm_glue ({column})", array, integral=not regression)

    def _compute(self, predictions, references):
        return glue_metrics(self.config_name, predictions, references)


_SEMEVAL_CITATION = """\
@inproceedings{hendrickx-etal-2010-semeval,
    title = "{S}em{E}val-2010 Task 8: Multi-Way Classification of Semantic Relations between Pairs of Nominals",
    author = "Hendrickx, Iris and Kim, Su Nam and Kozareva, Zornitsa and Nakov, Preslav and
      {\'O} S{\'e}aghdha, Diarmuid and Pad{\'o}, Sebastian and Pennacchiotti, Marco and Romano, Lorenza and
      Szpakowicz, Stan",
    booktitle = "Proceedings of the 5th International Workshop on Semantic Evaluation",
    year = "2010",
    pages = "33--38",
}
"""


class SemEvalTask8(_KeplmMetric):
    """The official SemEval-2010 Task 8 score (``semeval_task8_metrics``: macro-F1 over the nine relations without
    ``Other``, direction counted) of predicted and gold label names such as ``"Cause-Effect(e1,e2)"``."""

    metric_name = "keplm_semeval_task8"

    def _info(self):
        return evaluate.MetricInfo(
            description="SemEval-2010 Task 8 relation classification: official macro-F1 (evaluation (iii)), "
            "micro-F1 and accuracy.",
            citation=_SEMEVAL_CITATION,
            inputs_description="predictions, references: label names, e.g. 'Component-Whole(e2,e1)' or 'Other'.",
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            reference_urls=["https://aclanthology.org/S10-1006/"],
        )

    def _compute(self, predictions, references, relations=None):
        return semeval_task8_metrics(list(predictions), list(references), relations=relations)


_LAMA_CITATION = """\
@inproceedings{petroni-etal-2019-language,
    title = "Language Models as Knowledge Bases?",
    author = "Petroni, Fabio and Rockt{\\"a}schel, Tim and Riedel, Sebastian and Lewis, Patrick and Bakhtin, Anton and
      Wu, Yuxiang and Miller, Alexander",
    booktitle = "Proceedings of EMNLP-IJCNLP 2019",
    year = "2019",
    pages = "2463--2473",
}
"""

_PRECISION_AT_K_INPUTS = """
Config name: ``default`` (predictions and references), or ``relations`` (plus one relation id per fact).
Args:
    predictions: per fact, the ranked candidate tokens (best first, e.g. ``["paris", "lyon"]``) or the top-1
        token as a string; every batch of one computation must use the same of the two forms.
    references: per fact, the gold object token.
    relations: (config ``relations`` only) per fact, its relation id, e.g. ``"P36"``.
    k: the cut-off (default 1); ignore_case: compare case-folded tokens (default False);
    per_relation: (config ``relations``) also report each relation's value (default True).
Returns (fractions):
    precision_at_{k}: mean over facts, or with relations the macro average over relations ("mean P@1");
    precision_at_{k}_micro and {relation}_precision_at_{k}: with relations only.
Example:
    >>> metric = PrecisionAtK("relations", keep_in_memory=True)
    >>> metric.compute(predictions=[["paris", "lyon"], ["rome"], ["oslo"]], references=["paris", "milan", "oslo"],
    ...                relations=["P36", "P36", "P17"], per_relation=False)
    {'precision_at_1': 0.75, 'precision_at_1_micro': 0.6666666666666666}
"""


class PrecisionAtK(_KeplmMetric):
    """LAMA-style P@k for knowledge probing (TRELM reports macro-averaged mean P@1 over relations), with the
    formula of ``precision_at_k``. Relation ids are a third feature column, so they follow the examples through
    ``add_batch`` and distributed gathering; that column only exists under config name ``relations``, because
    evaluate requires every feature at every ``add_batch``/``compute`` call."""

    metric_name = "keplm_precision_at_k"
    CONFIGS = ("default", "relations")

    def _info(self):
        if self.config_name not in self.CONFIGS:
            raise ValueError(
                f"keplm_precision_at_k: unknown config name {self.config_name!r}; use one of {list(self.CONFIGS)}"
            )
        extra = {"relations": datasets.Value("string")} if self.config_name == "relations" else {}
        features = [
            datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                    **extra,
                }
            ),
            datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Value("string"),
                    **extra,
                }
            ),
        ]
        return evaluate.MetricInfo(
            description="Precision at k of ranked object predictions for cloze-style knowledge probing (LAMA), "
            "optionally macro-averaged over relations.",
            citation=_LAMA_CITATION,
            inputs_description=_PRECISION_AT_K_INPUTS,
            features=features,
            homepage="https://github.com/facebookresearch/LAMA",
            codebase_urls=["https://github.com/facebookresearch/LAMA"],
            reference_urls=["https://aclanthology.org/D19-1250/"],
        )

    def _compute(self, predictions, references, relations=None, k=1, ignore_case=False, per_relation=True):
        return precision_at_k(
            predictions, references, k=k, relations=relations, ignore_case=ignore_case, per_relation=per_relation
        )
