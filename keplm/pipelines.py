"""Raw text in, answers out: transformers pipelines for keplm models, registered as tasks of keplm's own.

After ``import keplm``, ``pipeline("keplm-ner", model=repo_or_dir)``, ``pipeline("keplm-qa", model=repo_or_dir)``,
``pipeline("keplm-text-classification", model=repo_or_dir)`` and ``pipeline("keplm-text2text", model=repo_or_dir)``
load the model and its processor (with the model's KG, from the same commit), link the raw text against that KG, and
return what HF pipelines return: entity groups with character offsets and scores for NER, answer / score / start /
end for QA (long contexts in stride windows), label / score for sentence (pair) classification, ``generated_text``
for text-to-text generation (``text2text-generation`` semantics). ``batch_size`` batches through keplm's collator.
KALA serves NER, QA and (on T5 / BART) generative QA, Roof-Transformer QA and classification. transformers 5 removed
the ``question-answering`` pipeline task, hence keplm's own task names.
"""

from __future__ import annotations

import logging
import warnings
from functools import partial

import torch
from torch.utils.data import DataLoader
from transformers import (
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
    MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    Pipeline,
)
from transformers.pipelines import (
    PIPELINE_REGISTRY,
    AggregationStrategy,
    TextClassificationPipeline,
    TokenClassificationPipeline,
)
from transformers.pipelines.base import ChunkPipeline
from transformers.pipelines.pt_utils import (
    PipelineChunkIterator,
    PipelineDataset,
    PipelineIterator,
    PipelinePackIterator,
)

from keplm.data.collator import KeplmDataCollator
from keplm.knowledge.annotation import KnowledgeAnnotation, word_span
from keplm.tokenization.processing_utils import KeplmProcessor
from keplm.training.qa_postprocessing import postprocess_qa_predictions

logger = logging.getLogger(__name__)

NER_TASK = "keplm-ner"
QA_TASK = "keplm-qa"
CLASSIFICATION_TASK = "keplm-text-classification"
TEXT2TEXT_TASK = "keplm-text2text"
#: per-example values a pipeline carries from ``preprocess`` to ``postprocess`` (not model inputs)
PASSTHROUGH = (
    "sentence",
    "offset_mapping",
    "special_tokens_mask",
    "word_ids",
    "word_to_chars_map",
    "example_id",
    "is_last",
    "context",
)


def _given(**params) -> dict:
    """The parameters a pipeline call set (``None``: the method's default)."""
    return {key: value for key, value in params.items() if value is not None}


class _KeplmPipeline:
    """What keplm's pipelines share: the processor (loaded with the model unless given), model-aware batching."""

    _load_processor = False  # KeplmProcessor is not a ProcessorMixin: loaded here, from the model's own commit
    _load_tokenizer = False
    _load_image_processor = False
    _load_feature_extractor = False

    def __init__(self, *args, processor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_processor(processor)

    def check_model_type(self, supported_models):
        """The stock pipelines' model check (NER's and text classification's, the pipelines that call it) against
        the class's ``model_mapping``, the Auto API's mapping for the task, which holds keplm's registered models
        (the stock check lists transformers' own names only)."""
        model = getattr(self.model, "get_base_model", lambda: self.model)()  # a LoRA adapter: the model inside
        if type(model.config) not in self.model_mapping:
            raise ValueError(f"the {self.task} pipeline cannot run {type(model).__name__}: no model for its task")

    def _max_length(self, max_length: int | None, default: int) -> int:
        """The token limit of one input: the caller's, which the model's positions must hold (else a ValueError naming
        both), or ``default`` cut to the model's positions (a 128-position encoder reads 128 tokens, not 512)."""
        positions = getattr(self.model.config, "max_text_length", None)
        if max_length is None:
            return min(default, positions or default)
        if positions and max_length > positions:
            raise ValueError(
                f"max_length={max_length} exceeds the {positions} positions the model's encoder reads: pass "
                f"max_length={positions} or less"
            )
        return max_length

    def _init_processor(self, processor):
        if processor is None:
            processor = KeplmProcessor.from_pretrained(
                self.model.name_or_path,
                revision=getattr(self.model, "source_revision", None),  # the processor from the weights' commit
                knowledge_assets=getattr(self.model, "knowledge_assets", None),  # the model's KG, not read again
            )
        if not isinstance(processor, KeplmProcessor):
            raise ValueError(f"keplm pipelines need a keplm processor, got {type(processor).__name__}")
        processor.check_model(self.model)
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.with_knowledge = bool(getattr(self.model.config, "uses_knowledge", False))
        self.collator = KeplmDataCollator.from_processor(processor, self.model)

    def _collate(self, items: list[dict], unbatched: bool = False) -> dict:
        """Model inputs through keplm's collator; the pass-through values as lists, which the pipeline's iterator
        unbatches, or as the values themselves for ``unbatched`` batches of one (the iterator does not unbatch
        those: transformers turns ``batch_size=1`` unrolling off)."""
        batch = self.collator([{k: v for k, v in item.items() if k not in PASSTHROUGH} for item in items])
        for key in PASSTHROUGH:
            if key in items[0]:
                batch[key] = items[0][key] if unbatched else [item[key] for item in items]
        return batch

    def get_iterator(self, inputs, num_workers, batch_size, preprocess_params, forward_params, postprocess_params):
        """The stock iterators, batched by the DataLoader through keplm's collator: one feature per input unbatched
        per input, or (a ``ChunkPipeline``: NER windows over a long text, QA stride windows) the features of an input
        packed back for ``postprocess``."""
        chunked = isinstance(self, ChunkPipeline)
        dataset = (PipelineChunkIterator if chunked else PipelineDataset)(inputs, self.preprocess, preprocess_params)
        loader = DataLoader(
            dataset,
            num_workers=min(num_workers, 1) if chunked else num_workers,  # a chunk iterator is read by one worker
            batch_size=batch_size,
            collate_fn=partial(self._collate, unbatched=batch_size == 1),
        )
        outputs = (PipelinePackIterator if chunked else PipelineIterator)(
            loader, self.forward, forward_params, loader_batch_size=batch_size
        )
        return PipelineIterator(outputs, self.postprocess, postprocess_params)

    def run_single(self, inputs, preprocess_params, forward_params, postprocess_params):
        """One input as a batch of one, through keplm's collator."""
        return next(iter(self.get_iterator([inputs], 0, 1, preprocess_params, forward_params, postprocess_params)))

    def _forward(self, inputs: dict) -> dict:
        """Model outputs first (the pipeline reads the batch size from the first value), then the token ids and mask
        and the pass-through values."""
        outputs = self.model(**{k: v for k, v in inputs.items() if k not in PASSTHROUGH})
        return {
            **{key: value for key, value in outputs.items() if key in ("logits", "start_logits", "end_logits")},
            **{key: inputs[key] for key in ("input_ids", "attention_mask", *PASSTHROUGH) if key in inputs},
        }


class _QuestionContextCall:
    """``pipe(question=..., context=...)`` as ``pipe({"question": ..., "context": ...})``."""

    def __call__(self, *args, **kwargs):
        if "question" in kwargs and "context" in kwargs and not args:
            args = ({"question": kwargs.pop("question"), "context": kwargs.pop("context")},)
        return super().__call__(*args, **kwargs)


def word_windows(word_ids: list[int | None], num_words: int, budget: int, stride: int = 0) -> list[tuple[int, int]]:
    """``[start, end)`` word ranges of at most ``budget`` sub-tokens each (a longer word alone), covering all
    ``num_words`` words in order; consecutive windows share up to ``stride`` sub-tokens of whole words."""
    sizes = [0] * num_words
    for word in word_ids:
        if word is not None:
            sizes[word] += 1
    windows, start = [], 0
    while True:
        end, used = start, 0
        while end < num_words and (end == start or used + sizes[end] <= budget):
            used, end = used + sizes[end], end + 1
        windows.append((start, end))
        if end >= num_words:
            return windows
        overlap, next_start = 0, end
        while next_start - 1 > start and overlap + sizes[next_start - 1] <= stride:
            next_start -= 1
            overlap += sizes[next_start]
        start = next_start


class KeplmTokenClassificationPipeline(_KeplmPipeline, TokenClassificationPipeline):
    """Named-entity recognition on raw text with a keplm token-classification model (task ``"keplm-ner"``):
    transformers' token-classification pipeline, with the text linked against the processor's KG.

    The text is split into words by the tokenizer's pre-tokenizer (whitespace and punctuation, as CoNLL-style
    training data; or given as words with ``is_split_into_words=True``), linked, and read in windows of whole words
    of at most ``max_length`` tokens, so a long text is tagged to its end (``stride``: tokens consecutive windows
    share; overlapping entities resolved as the stock pipeline does). Outputs are the stock pipeline's; the default
    ``aggregation_strategy`` is ``"first"``, each word tagged from its first sub-token, as keplm trains NER.
    """

    model_mapping = MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING

    def _sanitize_parameters(
        self,
        aggregation_strategy=None,
        ignore_labels=None,
        max_length=None,
        stride=None,
        is_split_into_words=False,
        delimiter=None,
        offset_mapping=None,
    ):
        if offset_mapping is not None:
            raise ValueError(f"{NER_TASK} finds word offsets itself: pass the text (or its words), not offset_mapping")
        if aggregation_strategy is not None:  # a name in any case, or an AggregationStrategy (a str enum)
            try:
                aggregation_strategy = AggregationStrategy(aggregation_strategy.lower())
            except ValueError:
                raise ValueError(
                    f"aggregation_strategy must be one of {[s.value for s in AggregationStrategy]}, got "
                    f"{aggregation_strategy!r}"
                ) from None
        return (
            _given(is_split_into_words=is_split_into_words, max_length=max_length, stride=stride, delimiter=delimiter),
            {},
            _given(aggregation_strategy=aggregation_strategy, ignore_labels=ignore_labels),
        )

    def preprocess(self, sentence, max_length=None, stride=0, is_split_into_words=False, delimiter=" "):
        if is_split_into_words:
            if not isinstance(sentence, list) or not all(isinstance(word, str) for word in sentence):
                raise ValueError(f"{NER_TASK} with is_split_into_words=True takes a list of words, got {sentence!r}")
            words, spans, position = list(sentence), [], 0
            for word in words:
                spans.append((position, position + len(word)))
                position += len(word) + len(delimiter)
            sentence = delimiter.join(words)
        elif isinstance(sentence, str):
            pieces = self.tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(sentence)
            words, spans = [word for word, _ in pieces], [span for _, span in pieces]
        else:
            raise ValueError(
                f"{NER_TASK} takes a string (or a list of words with is_split_into_words=True), got "
                f"{type(sentence).__name__}"
            )
        if not words:
            words, spans = [""], [(0, 0)]
        max_length = self._max_length(max_length, 512)
        budget = max(1, max_length - self.tokenizer.num_special_tokens_to_add())  # one text: no pair
        if stride >= budget:
            raise ValueError(f"stride={stride} must be smaller than the {budget} word tokens a window holds")
        counts = self.tokenizer(words, is_split_into_words=True, add_special_tokens=False).word_ids()
        windows = word_windows(counts, len(words), budget, stride)
        examples = {"tokens": [words[start:end] for start, end in windows]}  # no annotation column: linked
        if self.with_knowledge and self.processor.kg is None:  # e.g. trained on annotation files: nothing to link with
            logger.warning("the processor holds no KG to link raw text against: the text is tagged without knowledge")
            examples["knowledge"] = [KnowledgeAnnotation() for _ in windows]
        features = self.processor.prepare_ner_features(
            examples, label_column=None, max_length=max_length, with_knowledge=self.with_knowledge
        )
        encoding = self.tokenizer(
            examples["tokens"],
            is_split_into_words=True,
            truncation=True,
            max_length=max_length,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )
        for i, (start, _) in enumerate(windows):
            yield {
                **{key: values[i] for key, values in features.items()},
                "sentence": sentence,
                "offset_mapping": encoding["offset_mapping"][i],
                "special_tokens_mask": encoding["special_tokens_mask"][i],
                # the text's word ids and spans: the stock post-processing reads the first window's map for all
                "word_ids": [None if word is None else start + word for word in encoding.word_ids(i)],
                "word_to_chars_map": spans,
                "is_last": i == len(windows) - 1,
            }

    def postprocess(self, all_outputs, aggregation_strategy=AggregationStrategy.FIRST, ignore_labels=None):
        """The stock post-processing on each window's own tokens (the collator's padding taken off)."""
        for window in all_outputs:
            own = window["attention_mask"][0].bool()
            window.update(
                logits=window["logits"][:, own],
                input_ids=window["input_ids"][:, own],
                offset_mapping=[window["offset_mapping"]],
                special_tokens_mask=torch.tensor([window["special_tokens_mask"]]),
            )
        return super().postprocess(all_outputs, aggregation_strategy, ignore_labels)

    def gather_pre_entities(self, *args, word_ids=None, **kwargs) -> list[dict]:
        """The stock pre-entities, with a token a sub-word exactly when it continues the word before it (the words
        keplm tagged, not the stock pipeline's guess from the token's text)."""
        with warnings.catch_warnings():  # the stock guess warns for tokenizers without a sub-word prefix; unused here
            warnings.filterwarnings("ignore", message="Tokenizer does not support real words")
            entities = super().gather_pre_entities(*args, word_ids=word_ids, **kwargs)
        for entity in entities:  # a pre-entity is no special token: it has a word
            index = entity["index"]
            entity["is_subword"] = index > 0 and word_ids[index] == word_ids[index - 1]
        return entities


class KeplmQuestionAnsweringPipeline(_QuestionContextCall, _KeplmPipeline, ChunkPipeline):
    """Extractive QA on a raw question and context with a keplm QA model (task ``"keplm-qa"``).

    The context is linked with the processor's KG once and cut into stride windows (``max_length``,
    ``doc_stride``); answers are pooled over windows by keplm's n-best post-processing
    (:func:`keplm.training.qa_postprocessing.postprocess_qa_predictions`). Returns ``{"answer", "score", "start",
    "end"}`` (``top_k > 1``: a list of them, best first).
    """

    def _sanitize_parameters(
        self, max_length=None, doc_stride=None, top_k=None, max_answer_length=None, n_best_size=None, **kwargs
    ):
        preprocess = _given(max_length=max_length, doc_stride=doc_stride)
        return preprocess, {}, _given(top_k=top_k, max_answer_length=max_answer_length, n_best_size=n_best_size)

    def preprocess(self, example: dict, max_length: int | None = None, doc_stride: int | None = None):
        if not isinstance(example, dict) or not {"question", "context"} <= set(example):
            raise ValueError(f'{QA_TASK} takes {{"question": ..., "context": ...}}, got {example!r}')
        max_length = self._max_length(max_length, 384)
        doc_stride = max_length // 3 if doc_stride is None else doc_stride  # 128 of 384, as transformers' default
        features = self.processor.prepare_qa_features(  # no annotation columns: question and context linked
            {"id": ["0"], "question": [example["question"]], "context": [example["context"]]},
            max_length=max_length,
            doc_stride=doc_stride,
            training=False,
            with_knowledge=self.with_knowledge,
        )
        count = len(features["input_ids"])
        for i in range(count):
            yield {
                **{key: values[i] for key, values in features.items()},
                "context": example["context"],
                "is_last": i == count - 1,
            }

    def postprocess(self, windows: list[dict], top_k: int = 1, max_answer_length: int = 30, n_best_size: int = 20):
        tokens = [w["attention_mask"][0].bool() for w in windows]  # each window's own tokens, whichever padding side
        starts = [w["start_logits"][0, t].float().numpy() for w, t in zip(windows, tokens)]
        ends = [w["end_logits"][0, t].float().numpy() for w, t in zip(windows, tokens)]
        _, nbest = postprocess_qa_predictions(
            [{"id": "0", "context": windows[0]["context"]}],
            windows,  # each with its example_id and context offset_mapping
            starts,
            ends,
            n_best_size=max(n_best_size, top_k),
            max_answer_length=max_answer_length,
            return_nbest=True,
            disable_tqdm=True,
        )
        answers = whole_word_answers(windows[0]["context"], nbest["0"])[:top_k]
        return answers[0] if top_k == 1 else answers


def whole_word_answers(context: str, candidates: list[dict]) -> list[dict]:
    """n-best answer spans widened to the words they cut through (a sub-word span gives its whole word: "Merkel",
    not "kel"; ``keplm.knowledge.annotation.word_span``, the linker's per-script rule); spans that become the same
    words are one answer, with their probabilities summed, best first."""
    merged: dict[tuple[int, int], dict] = {}
    for candidate in candidates:
        start, end = candidate["start"], candidate["end"]
        if start < end:  # an empty answer (no span in any window) stays empty
            start, end = word_span(context, start, end)
        answer = {"answer": context[start:end], "score": 0.0, "start": start, "end": end}
        merged.setdefault((start, end), answer)["score"] += candidate["probability"]
    return sorted(merged.values(), key=lambda a: -a["score"])


class KeplmTextClassificationPipeline(_KeplmPipeline, TextClassificationPipeline):
    """Sentence or sentence-pair classification (and regression) on raw text with a keplm sequence-classification
    model, e.g. Roof-Transformer (task ``"keplm-text-classification"``): transformers' text-classification pipeline,
    with both texts linked against the processor's KG and the model's knowledge selected from them, as in training.

    Input: a string, or ``{"text": ..., "text_pair": ...}`` for pairs (GLUE's RTE, MRPC, ...). Outputs, ``top_k``
    and ``function_to_apply`` are the stock pipeline's (a regression model, STS-B, returns its raw score), and so is
    the parameter handling: ``max_length``, the input's token limit, reaches ``preprocess`` as the stock pipeline's
    tokenizer keyword arguments do.
    """

    model_mapping = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

    def preprocess(self, inputs, max_length: int | None = None) -> dict:
        max_length = self._max_length(max_length, 512)
        if isinstance(inputs, str):
            examples = {"sentence": [inputs]}
        elif isinstance(inputs, dict) and set(inputs) <= {"text", "text_pair"} and "text" in inputs:
            examples = {"sentence1": [inputs["text"]]}
            if inputs.get("text_pair") is not None:
                examples["sentence2"] = [inputs["text_pair"]]
        else:
            raise ValueError(
                f'{CLASSIFICATION_TASK} takes a string or {{"text": ..., "text_pair": ...}}, got {inputs!r}'
            )
        features = self.processor.prepare_pair_features(
            examples,
            text_columns=tuple(examples),
            label_column=None,
            max_length=max_length,
            with_knowledge=self.with_knowledge,
        )
        return {key: values[0] for key, values in features.items() if not key.startswith("num_")}


class KeplmText2TextGenerationPipeline(_QuestionContextCall, _KeplmPipeline, Pipeline):
    """Text-to-text generation on raw text with a keplm encoder-decoder model, e.g. KALA on T5 (task
    ``"keplm-text2text"``, transformers' ``text2text-generation`` semantics).

    Input: a string (the whole text is linked and encoded), or ``{"question": ..., "context": ...}`` for generative
    QA (encoded as in training, ``question: ... context: ...``, the context linked with the processor's KG). Keyword
    arguments other than ``max_length`` (the input's token limit) go to ``generate()`` (``max_new_tokens``,
    ``num_beams``, ``num_return_sequences``, ...). Returns ``[{"generated_text": ...}]``, one dict per returned
    sequence.
    """

    def _sanitize_parameters(self, max_length=None, **generate_kwargs):
        return _given(max_length=max_length), generate_kwargs, {}

    def preprocess(self, inputs, max_length: int | None = None) -> dict:
        max_length = self._max_length(max_length, 512)
        if isinstance(inputs, str):
            return self.processor(inputs, max_length=max_length, with_knowledge=self.with_knowledge)
        if isinstance(inputs, dict) and set(inputs) == {"question", "context"}:
            features = self.processor.prepare_generative_qa_features(  # no annotation columns: the texts linked
                {key: [text] for key, text in inputs.items()}, max_length=max_length, with_knowledge=self.with_knowledge
            )
            return {key: values[0] for key, values in features.items()}
        raise ValueError(f'{TEXT2TEXT_TASK} takes a string or {{"question": ..., "context": ...}}, got {inputs!r}')

    def _forward(self, inputs: dict, **generate_kwargs) -> dict:
        """``generate()`` on the batch: model inputs only (the processor's encodings carry no pass-through values)."""
        generated = self.model.generate(**inputs, **generate_kwargs)
        # [inputs, sequences, length]
        return {"output_ids": generated.reshape(len(inputs["input_ids"]), -1, generated.shape[-1])}

    def postprocess(self, outputs: dict) -> list[dict]:
        texts = self.tokenizer.batch_decode(outputs["output_ids"][0], skip_special_tokens=True)
        return [{"generated_text": text.strip()} for text in texts]


def register_pipelines() -> None:
    """Register ``keplm-ner``, ``keplm-qa``, ``keplm-text-classification`` and ``keplm-text2text`` with transformers'
    pipeline registry (``import keplm`` does). Idempotent."""
    if TEXT2TEXT_TASK in PIPELINE_REGISTRY.get_supported_tasks():
        return
    for task, pipeline_class, model_class in (
        (NER_TASK, KeplmTokenClassificationPipeline, AutoModelForTokenClassification),
        (QA_TASK, KeplmQuestionAnsweringPipeline, AutoModelForQuestionAnswering),
        (CLASSIFICATION_TASK, KeplmTextClassificationPipeline, AutoModelForSequenceClassification),
        (TEXT2TEXT_TASK, KeplmText2TextGenerationPipeline, AutoModelForSeq2SeqLM),
    ):
        PIPELINE_REGISTRY.register_pipeline(task, pipeline_class=pipeline_class, pt_model=model_class, type="text")


__all__ = [
    "KeplmTokenClassificationPipeline",
    "KeplmQuestionAnsweringPipeline",
    "KeplmTextClassificationPipeline",
    "KeplmText2TextGenerationPipeline",
    "register_pipelines",
    "word_windows",
    "NER_TASK",
    "QA_TASK",
    "CLASSIFICATION_TASK",
    "TEXT2TEXT_TASK",
]
