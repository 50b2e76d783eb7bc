"""SemEval-2010 Task 8 (relation classification between two marked nominals) as a ``datasets.DatasetDict``.

The official release's files hold 4-line blocks (CRLF in the release): ``id<TAB>"sentence with <e1>..</e1> and
<e2>..</e2>"``, the label (``Cause-Effect(e1,e2)`` ... or ``Other``), ``Comment: ...``, a blank line. Each example
becomes ``id`` (str), ``sentence`` (tags removed), the character spans ``e1_start``/``e1_end``/``e2_start``/``e2_end``
in it and ``label`` (a ``ClassLabel`` over :data:`SEMEVAL_LABELS`, 9 relations x 2 directions + ``Other``).
The release has no validation split; :func:`load_semeval2010_task8` holds out a seeded sample of the training
sentences.
The Hub copy (``SemEvalWorkshop/sem_eval_2010_task_8``: tagged ``sentence``, ``relation`` class names) is read
into the same schema. Malformed blocks are ValueErrors naming ``file:line``.
"""

from __future__ import annotations

import os
import random
import re

import datasets

from keplm.io_utils import open_text

from .splits import SPLITS

#: the nine relations of the task (paper order); the official score ignores ``Other``
SEMEVAL_RELATIONS = (
    "Cause-Effect",
    "Instrument-Agency",
    "Product-Producer",
    "Content-Container",
    "Entity-Origin",
    "Entity-Destination",
    "Component-Whole",
    "Member-Collection",
    "Message-Topic",
)
SEMEVAL_OTHER = "Other"
SEMEVAL_LABELS = (SEMEVAL_OTHER, *(f"{r}({d})" for r in SEMEVAL_RELATIONS for d in ("e1,e2", "e2,e1")))
SEMEVAL_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "sentence": datasets.Value("string"),
        "e1_start": datasets.Value("int32"),
        "e1_end": datasets.Value("int32"),
        "e2_start": datasets.Value("int32"),
        "e2_end": datasets.Value("int32"),
        "label": datasets.ClassLabel(names=list(SEMEVAL_LABELS)),
    }
)
#: the official release's file names (a folder as in ``../shared/data/semeval2010_task8``)
RELEASE_FILES = {"train": "TRAIN_FILE.TXT", "test": "TEST_FILE_FULL.TXT"}
SEMEVAL_HUB_ID = "SemEvalWorkshop/sem_eval_2010_task_8"

_TAG = re.compile(r"</?e[12]>")


def parse_tagged_sentence(text: str, where: str = "sentence") -> dict:
    """``sentence`` without its ``<e1>``/``<e2>`` tags and the character span of each tagged nominal."""
    tags = [(m.group(), m.start()) for m in _TAG.finditer(text)]
    if sorted(tag for tag, _ in tags) != ["</e1>", "</e2>", "<e1>", "<e2>"]:
        raise ValueError(f"{where}: needs one <e1>..</e1> and one <e2>..</e2>, found tags {[t for t, _ in tags]}")
    plain, spans, last = [], {}, 0
    for tag, start in tags:
        plain.append(text[last:start])
        last = start + len(tag)
        spans[tag] = sum(map(len, plain))
    plain.append(text[last:])
    row = {"sentence": "".join(plain)}
    for name in ("e1", "e2"):
        begin, end = spans[f"<{name}>"], spans[f"</{name}>"]
        if end <= begin:
            raise ValueError(f"{where}: <{name}> is empty or closed before it opens")
        row[f"{name}_start"], row[f"{name}_end"] = begin, end
    if row["e1_start"] < row["e2_end"] and row["e2_start"] < row["e1_end"]:
        raise ValueError(f"{where}: <e1> and <e2> overlap")
    return row


def read_semeval_file(path: str) -> list[dict]:
    """The examples of one file of the official release, in file order."""
    with open_text(path) as f:
        lines = [line.rstrip("\r\n") for line in f]
    rows, number = [], 0
    while number < len(lines):
        if not lines[number].strip():
            number += 1
            continue
        where = f"{path}:{number + 1}"
        head = lines[number].split("\t", 1)
        if len(head) != 2 or not head[0].strip().isdigit():
            raise ValueError(f"{where}: expected 'id<TAB>\"sentence\"', got {lines[number][:80]!r}")
        sentence = head[1].strip()
        if len(sentence) < 2 or sentence[0] != '"' or sentence[-1] != '"':
            raise ValueError(f"{where}: the sentence must be in double quotes")
        if number + 1 >= len(lines):
            raise ValueError(f"{where}: sentence {head[0]} has no label line")
        label = lines[number + 1].strip()
        if label not in SEMEVAL_LABELS:
            raise ValueError(f"{path}:{number + 2}: unknown label {label!r}; labels are {list(SEMEVAL_LABELS)}")
        rows.append({"id": head[0].strip(), **parse_tagged_sentence(sentence[1:-1], where), "label": label})
        number += 2
        if number < len(lines) and lines[number].startswith("Comment"):
            number += 1
    ids = [row["id"] for row in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: sentence ids repeat ({len(ids) - len(set(ids))} duplicates)")
    if not rows:
        raise ValueError(f"{path}: no SemEval-2010 Task 8 examples")
    return rows


def release_files(directory: str) -> dict[str, str]:
    """``{split: path}`` of the official release's training and test files in ``directory`` (``.gz`` or not)."""
    found = {}
    for split, marker in RELEASE_FILES.items():
        names = [name for name in sorted(os.listdir(directory)) if marker in name.upper()]
        if len(names) > 1:
            raise ValueError(f"{directory}: several {split} files {names}; pass the file explicitly")
        if names:
            found[split] = os.path.join(directory, names[0])
    if not found:
        raise FileNotFoundError(f"{directory}: no SemEval-2010 Task 8 file (*{'*, *'.join(RELEASE_FILES.values())}*)")
    return found


def _from_hub(name: str, **kwargs) -> dict[str, list[dict]]:
    raw = datasets.load_dataset(name, **kwargs)
    out = {}
    for split, data in raw.items():
        names = data.features["relation"].names
        out[split] = [
            {
                "id": str(i),
                **parse_tagged_sentence(row["sentence"], f"{name}[{split}][{i}]"),
                "label": names[row["relation"]],
            }
            for i, row in enumerate(data)
        ]
    return out


def load_semeval2010_task8(
    source: str | None = None,
    train_file: str | None = None,
    test_file: str | None = None,
    validation_size: int = 800,
    validation_seed: int = 0,
    validation_file: str | None = None,
    **hub_kwargs,
) -> datasets.DatasetDict:
    """Train / validation / test splits: ``source`` a release folder, a Hub id, or None with explicit files (a
    ``validation_file`` replaces the held-out sample). The release has no dev set: ``validation_size`` training
    sentences drawn with ``validation_seed`` (file order kept) become validation, 0 keeps them all for training.
    Not the last ones: the training file is not shuffled (its last 800 sentences are 31 % ``Other`` and under 2 %
    each Entity-Destination, Member-Collection and Message-Topic, against 17 % and 9-11 % in the test set)."""
    if source is not None and (os.path.exists(source) or source.startswith((".", "/", "~"))):
        if not os.path.isdir(source):  # a local path, never a Hub id: say what is wrong with it
            raise FileNotFoundError(
                f"{source}: not a folder of the SemEval-2010 Task 8 release (pass a file as train_file / test_file)"
            )
        splits = {split: read_semeval_file(path) for split, path in release_files(source).items()}
    elif source is not None and not (train_file or validation_file or test_file):
        splits = _from_hub(source, **hub_kwargs)
    else:
        splits = {}
    for split, path in (("train", train_file), ("validation", validation_file), ("test", test_file)):
        if path is not None:
            splits[split] = read_semeval_file(path)
    if not splits:
        raise ValueError("pass a SemEval-2010 Task 8 folder or Hub id, or --train_file / --test_file")
    if validation_size and "train" in splits and "validation" not in splits:
        train = splits["train"]
        if not 0 < validation_size < len(train):
            raise ValueError(
                f"validation_size {validation_size} must leave training sentences (train has {len(train)})"
            )
        held_out = set(random.Random(validation_seed).sample(range(len(train)), validation_size))
        splits["train"] = [row for i, row in enumerate(train) if i not in held_out]
        splits["validation"] = [row for i, row in enumerate(train) if i in held_out]
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_list(splits[split], features=SEMEVAL_FEATURES)
            for split in SPLITS
            if split in splits
        }
    )


def mark_entities(sentence: str, e1: tuple[int, int], e2: tuple[int, int], markers=("@", "#")) -> str:
    """The sentence with each nominal between its marker (``@ e1 @`` and ``# e2 #``): punctuation every BERT
    vocabulary has, so the encoder needs no new tokens (typed-marker style of Zhou & Chen, 2021)."""
    # ascending; where one nominal ends as the other begins, the closing marker comes first
    events = sorted(
        [
            (e1[0], 1, f"{markers[0]} "),
            (e1[1], 0, f" {markers[0]}"),
            (e2[0], 1, f"{markers[1]} "),
            (e2[1], 0, f" {markers[1]}"),
        ]
    )
    pieces, last = [], 0
    for position, _, text in events:
        pieces += [sentence[last:position], text]
        last = position
    return "".join(pieces) + sentence[last:]


__all__ = [
    "SEMEVAL_RELATIONS",
    "SEMEVAL_LABELS",
    "SEMEVAL_OTHER",
    "SEMEVAL_FEATURES",
    "SEMEVAL_HUB_ID",
    "parse_tagged_sentence",
    "read_semeval_file",
    "release_files",
    "load_semeval2010_task8",
    "mark_entities",
]
