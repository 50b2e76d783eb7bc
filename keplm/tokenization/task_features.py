"""The task features every keplm processor makes (NER, sentence pairs, extractive and generative QA): tokens, labels
and each text's knowledge aligned to its tokens (:meth:`KeplmProcessor.knowledge_features`, the method's part).
:class:`TaskFeatures` is a base of :class:`~keplm.tokenization.processing_utils.KeplmProcessor`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from keplm.knowledge.annotation import KnowledgeAnnotation

from .alignment import char_spans_to_token_spans, word_offsets

logger = logging.getLogger(__name__)


def annotation_columns_for(num_texts: int) -> list[str]:
    """Default annotation columns of an example's texts: ``knowledge``, ``knowledge_2``, ``knowledge_3``, ..."""
    return ["knowledge"] + [f"knowledge_{i}" for i in range(2, num_texts + 1)]


def as_annotation(value) -> KnowledgeAnnotation | None:
    """An annotation from a dict (a dataset row), an annotation, or None (= link the text)."""
    if value is None or isinstance(value, KnowledgeAnnotation):
        return value
    return KnowledgeAnnotation.from_dict(value)


class TaskFeatures:
    """``datasets.map(batched=True)`` functions of the tasks; they read ``self.tokenizer``, ``self.text_annotation``
    and ``self.knowledge_features`` of the processor."""

    def _question_annotation(self, given, raw: str, question: str) -> KnowledgeAnnotation | None:
        """A given question annotation, whose spans count in the question as written (``raw``), checked there and
        moved onto ``question``, the question with its leading whitespace cut; None when none is given."""
        if given is None:
            return None
        cut = len(raw) - len(raw.lstrip())
        return self.text_annotation(as_annotation(given).validate(raw).shifted(-cut), question)

    # ------------------------------------------------------------------ NER
    def prepare_ner_features(
        self,
        examples: dict,
        label_column: str | None = "ner_tags",
        annotation_column: str | None = "knowledge",
        max_length: int = 128,
        label_all_tokens: bool = False,
        with_knowledge: bool = True,
    ) -> dict:
        """``datasets.map(batched=True)`` function for word-level NER data (``tokens`` + tags).

        Mention offsets refer to ``" ".join(tokens)``. The first sub-token of each word carries the label (every
        sub-token with ``label_all_tokens``); special tokens get -100.
        """
        words_batch = examples["tokens"]
        encoding = self.tokenizer(
            words_batch, is_split_into_words=True, truncation=True, max_length=max_length, return_offsets_mapping=True
        )
        annotations = examples.get(annotation_column) if annotation_column and with_knowledge else None
        out: dict[str, list] = {}
        for i, words in enumerate(words_batch):
            word_ids = encoding.word_ids(i)
            if with_knowledge:
                starts = word_offsets(words)[:, 0]
                local = np.asarray(encoding["offset_mapping"][i], dtype=np.int64)
                offsets = np.zeros_like(local)
                for position, word in enumerate(word_ids):
                    if word is not None:
                        offsets[position] = local[position] + starts[word]
                text = " ".join(words)
                annotation = self.text_annotation(annotations[i] if annotations is not None else None, text)
                knowledge = self.knowledge_features(offsets, [[w is not None for w in word_ids]], [annotation])
                for key, value in knowledge.items():
                    out.setdefault(key, []).append(value)
            if label_column is not None:
                out.setdefault("labels", []).append(
                    align_word_labels(examples[label_column][i], word_ids, label_all_tokens)
                )
        encoding.pop("offset_mapping")
        return {**encoding, **out}

    # ------------------------------------------------------------------ sentence (pair) classification
    def prepare_pair_features(
        self,
        examples: dict,
        text_columns: Sequence[str] = ("sentence1", "sentence2"),
        label_column: str | None = "label",
        max_length: int = 128,
        annotation_columns: Sequence[str | None] | None = None,
        with_knowledge: bool = True,
    ) -> dict:
        """``datasets.map(batched=True)`` function for sentence(-pair) classification / regression: one feature per
        example, ``[CLS] s1 [SEP] s2 [SEP]`` truncated to ``max_length`` (one text column: one sentence), ``labels``
        from ``label_column`` (None: no labels), and the knowledge of both texts (:meth:`knowledge_features` over
        each text's tokens) from ``annotation_columns`` (default ``knowledge``, ``knowledge_2``) or by linking."""
        texts, encoding, out = self.encode_pairs(examples, text_columns, label_column, max_length, offsets=True)
        offsets_batch = encoding["offset_mapping"]
        if not with_knowledge:
            return out
        columns = annotation_columns if annotation_columns is not None else annotation_columns_for(len(texts))
        given = [examples.get(c) if c is not None else None for c in columns]
        for i, offsets in enumerate(offsets_batch):
            sequence_ids = encoding.sequence_ids(i)
            masks, annotations = [], []
            for part, text in enumerate(texts):
                annotations.append(self.text_annotation(given[part][i] if given[part] is not None else None, text[i]))
                masks.append([s == part for s in sequence_ids])
            for key, value in self.knowledge_features(offsets, masks, annotations).items():
                out.setdefault(key, []).append(value)
        return out

    def encode_pairs(
        self,
        examples: dict,
        text_columns: Sequence[str],
        label_column: str | None,
        max_length: int,
        offsets: bool = False,
    ) -> tuple[list, object, dict]:
        """``(texts, tokenizer encoding, features)`` of one or two text columns: ``[CLS] s1 [SEP] s2 [SEP]`` truncated
        to ``max_length``, ``labels`` from ``label_column``; a ValueError for a missing column. ``offsets``: the
        encoding keeps its ``offset_mapping`` (the features never do)."""
        if not 1 <= len(text_columns) <= 2:
            raise ValueError(f"text_columns must name one or two columns, got {list(text_columns)}")
        for column in (*text_columns, *([label_column] if label_column is not None else [])):
            if column not in examples:
                raise ValueError(f"the examples have no {column!r} column (they have {sorted(examples)})")
        texts = [examples[column] for column in text_columns]
        encoding = self.tokenizer(*texts, truncation=True, max_length=max_length, return_offsets_mapping=offsets)
        out = {key: value for key, value in encoding.items() if key != "offset_mapping"}
        if label_column is not None:
            out["labels"] = list(examples[label_column])
        return texts, encoding, out

    # ------------------------------------------------------------------ QA
    def _check_context_room(self, questions: list[str], max_length: int, doc_stride: int) -> None:
        """A ValueError naming the first question that leaves the context windows no more than ``doc_stride`` tokens
        of ``max_length`` (the tokenizer would stop deep inside with a truncation or stride error)."""
        specials = self.tokenizer.num_special_tokens_to_add(pair=True)
        lengths = self.tokenizer(questions, add_special_tokens=False, return_length=True)["length"]
        for index, (question, length) in enumerate(zip(questions, lengths)):
            room = max_length - specials - length
            if room <= doc_stride:
                raise ValueError(
                    f"question {index} ({question[:40]!r}) takes {length} of max_length={max_length} tokens "
                    f"({specials} special), leaving {room} for each context window, which must exceed "
                    f"doc_stride={doc_stride}: raise max_length, lower doc_stride or shorten the question"
                )

    def prepare_qa_features(
        self,
        examples: dict,
        max_length: int = 384,
        doc_stride: int = 128,
        training: bool = True,
        annotation_column: str | None = "knowledge",
        question_annotation_column: str | None = "question_knowledge",
        with_knowledge: bool = True,
    ) -> dict:
        """``datasets.map(batched=True)`` function for SQuAD-style data with stride windows over the context.

        Every window keeps the context mentions (and the question mentions) that fall inside it. Training
        features carry start/end positions (CLS when the answer is outside the window); evaluation features
        carry ``example_id`` and context-only ``offset_mapping``.
        """
        pad_right = self.tokenizer.padding_side == "right"
        questions = [q.lstrip() for q in examples["question"]]
        self._check_context_room(questions, max_length, doc_stride)
        encoding = self.tokenizer(
            questions if pad_right else examples["context"],
            examples["context"] if pad_right else questions,
            truncation="only_second" if pad_right else "only_first",
            max_length=max_length,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        context_part = 1 if pad_right else 0
        sample_map = encoding.pop("overflow_to_sample_mapping")
        context_annotations = examples.get(annotation_column) if annotation_column and with_knowledge else None
        question_annotations = (
            examples.get(question_annotation_column) if question_annotation_column and with_knowledge else None
        )
        cache: dict[int, tuple] = {}
        checked: set[int] = set()
        out: dict[str, list] = {}
        extra = {"start_positions": [], "end_positions": []} if training else {"example_id": [], "offset_mapping": []}
        for i, offsets in enumerate(encoding["offset_mapping"]):
            sample = sample_map[i]
            sequence_ids = encoding.sequence_ids(i)
            context_mask = [s == context_part for s in sequence_ids]
            if with_knowledge:
                if sample not in cache:
                    context = examples["context"][sample]
                    annotation = self.text_annotation(
                        context_annotations[sample] if context_annotations is not None else None, context
                    )
                    question = question_annotations[sample] if question_annotations is not None else None
                    question = self._question_annotation(question, examples["question"][sample], questions[sample])
                    cache[sample] = (annotation, question)
                question_mask = [s == 1 - context_part for s in sequence_ids]
                knowledge = self.knowledge_features(offsets, [context_mask, question_mask], list(cache[sample]))
                for key, value in knowledge.items():
                    out.setdefault(key, []).append(value)
            if training:
                if sample not in checked:
                    check_answer(examples, sample)
                    checked.add(sample)
                start, end = answer_token_positions(examples["answers"][sample], offsets, context_mask)
                extra["start_positions"].append(start)
                extra["end_positions"].append(end)
            else:
                extra["example_id"].append(examples["id"][sample])
                extra["offset_mapping"].append([o if m else None for o, m in zip(offsets, context_mask)])
        encoding.pop("offset_mapping")
        return {**encoding, **out, **extra}

    # ------------------------------------------------------------------ generative QA (encoder-decoder models)
    def prepare_generative_qa_features(
        self,
        examples: dict,
        max_length: int = 512,
        max_target_length: int = 32,
        annotation_column: str | None = "knowledge",
        question_annotation_column: str | None = "question_knowledge",
        with_knowledge: bool = True,
        question_prefix: str = "question: ",
        context_prefix: str = " context: ",
    ) -> dict:
        """``datasets.map(batched=True)`` function for SQuAD-style data answered by generation (T5-style input
        ``question: <q> context: <c>``, cut at ``max_length`` tokens; one feature per example, no windows).

        The knowledge of the context (and of the question, with ``question_annotation_column``) is aligned to the
        tokens of its part of the input; ``labels`` are the tokens of the first gold answer (up to
        ``max_target_length``; an example without answer gets the empty target). ``answer_cut`` says whether the
        first answer lies (partly) beyond the cut, so a run can count the questions it cannot answer from its input."""
        questions = [q.strip() for q in examples["question"]]
        sources = [f"{question_prefix}{q}{context_prefix}{c}" for q, c in zip(questions, examples["context"])]
        encoding = self.tokenizer(sources, max_length=max_length, truncation=True, return_offsets_mapping=True)
        context_annotations = examples.get(annotation_column) if annotation_column and with_knowledge else None
        question_annotations = (
            examples.get(question_annotation_column) if question_annotation_column and with_knowledge else None
        )
        out: dict[str, list] = {}
        for i, offsets in enumerate(encoding["offset_mapping"] if with_knowledge else ()):
            question_start = len(question_prefix)
            context_start = question_start + len(questions[i]) + len(context_prefix)
            sequence_ids = encoding.sequence_ids(i)
            # each part's tokens, with offsets into that part's own text (what its annotation counts in)
            parts = ((context_start, len(sources[i])), (question_start, question_start + len(questions[i])))
            masks = [
                [
                    s == 0 and end > start and first <= start and end <= last
                    for s, (start, end) in zip(sequence_ids, offsets)
                ]
                for first, last in parts
            ]
            local = [
                (start - parts[0][0], end - parts[0][0])
                if masks[0][t]
                else (start - parts[1][0], end - parts[1][0])
                if masks[1][t]
                else (0, 0)
                for t, (start, end) in enumerate(offsets)
            ]
            context = self.text_annotation(
                context_annotations[i] if context_annotations is not None else None, examples["context"][i]
            )
            question = question_annotations[i] if question_annotations is not None else None
            question = self._question_annotation(question, examples["question"][i], questions[i])
            for key, value in self.knowledge_features(local, masks, [context, question]).items():
                out.setdefault(key, []).append(value)
        if "answers" in examples:
            out["answer_cut"] = [
                answer_cut(a, len(source) - len(c), offsets)
                for a, source, c, offsets in zip(
                    examples["answers"], sources, examples["context"], encoding["offset_mapping"]
                )
            ]
        encoding.pop("offset_mapping")
        answers = [a["text"][0] if a["text"] else "" for a in examples["answers"]] if "answers" in examples else None
        if answers is not None:
            out["labels"] = self.tokenizer(text_target=answers, max_length=max_target_length, truncation=True)[
                "input_ids"
            ]
        return {**encoding, **out}


def align_word_labels(tags, word_ids, label_all_tokens: bool = False) -> list[int]:
    """Token labels from word labels: the first sub-token of a word gets its tag (every sub-token with
    ``label_all_tokens``), other sub-tokens and special tokens -100."""
    labels, previous = [], None
    for word in word_ids:
        if word is None:
            labels.append(-100)
        elif word != previous or label_all_tokens:
            labels.append(tags[word])
        else:
            labels.append(-100)
        previous = word
    return labels


def check_answer(examples: dict, sample: int) -> None:
    """ValueError naming the example when its first answer's ``answer_start`` does not point at the answer text in
    its context (a training label on the wrong tokens otherwise)."""
    answers, context = examples["answers"][sample], examples["context"][sample]
    if not answers["answer_start"]:
        return
    start, text = answers["answer_start"][0], answers["text"][0]
    if context[start : start + len(text)] != text:
        name = examples["id"][sample] if "id" in examples else f"#{sample} of the batch"
        raise ValueError(
            f"QA example {name}: answer_start {start} does not point at the answer {text!r} (the context "
            f"holds {context[start : start + len(text)]!r} there); fix the data, or load SQuAD files with "
            "fix_answer_starts='nearest'"
        )


def answer_token_positions(answers: dict, offsets, context_mask) -> tuple[int, int]:
    """Token span of the first answer in one window, ``(0, 0)`` (CLS) when it is not fully inside the window."""
    if not answers["answer_start"]:
        return 0, 0
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    ((first, last),) = char_spans_to_token_spans(offsets, [(start_char, end_char)], context_mask)
    context_positions = [i for i, m in enumerate(context_mask) if m]
    if first < 0 or offsets[context_positions[0]][0] > start_char or offsets[context_positions[-1]][1] < end_char:
        return 0, 0
    return int(first), int(last)


def answer_cut(answers: dict, context_start: int, offsets) -> bool:
    """Whether the first answer (``answer_start`` in the context, which starts at ``context_start`` of the input text)
    ends after the last character the cut input keeps."""
    if not answers["answer_start"]:
        return False
    kept = max((end for start, end in offsets if end > start), default=0)
    return context_start + answers["answer_start"][0] + len(answers["text"][0]) > kept


__all__ = [
    "TaskFeatures",
    "align_word_labels",
    "annotation_columns_for",
    "as_annotation",
    "answer_cut",
    "answer_token_positions",
    "check_answer",
]
