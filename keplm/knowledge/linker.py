"""Dictionary entity linker: Aho-Corasick alias matching against a KnowledgeGraph."""

from __future__ import annotations

import re

import ahocorasick

from keplm.io_utils import fingerprinted_map

from .annotation import KNOWLEDGE_FEATURE, EntityMention, KnowledgeAnnotation, Triplet
from .graph import KnowledgeGraph

__all__ = ["EntityLinker", "DEFAULT_STOPWORDS", "LinkFunction", "link_dataset", "linker_signature"]

DEFAULT_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she should
    so some such than that the their theirs them themselves then there these they this those through to
    too under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves s t d ll m o re ve y mr mrs ms dr st also us one two three first new
    """.split()
)

_WORD_RE = re.compile(r"\w+")
_HAS_LETTER_RE = re.compile(r"[^\W\d_]")


def _lower_same_length(s: str) -> str:
    low = s.lower()
    if len(low) == len(s):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in s)


class EntityLinker:
    """Alias matching against a KG's names and aliases (Aho-Corasick via pyahocorasick), word boundaries,
    longest match, most-connected entity wins ties."""

    def __init__(
        self,
        kg: KnowledgeGraph,
        lowercase: bool = True,
        min_alias_length: int = 2,
        max_neighbors_per_entity: int = 8,
        hops: int = 1,
        stopwords: set[str] | None = None,
        acronym_max_length: int = 4,
        ranker=None,
        mention_filter=None,
    ):
        """``acronym_max_length``: all-caps aliases up to this length ("US", "UN", "AIDS") match only in
        capitals, so "us" or "un" in running text are not linked. ``ranker``: optional
        ``ranker(text, start, end, candidates) -> entity index`` choosing among entities sharing an alias
        (default: the degree prior). ``mention_filter``: optional ``filter(text, mentions) -> mentions``
        (e.g. :class:`~keplm.knowledge.construction.SpacyMentionFilter`)."""
        if hops < 0:
            raise ValueError(f"hops must be >= 0, got {hops}")
        self.kg = kg
        self.lowercase = lowercase
        self.min_alias_length = min_alias_length
        self.max_neighbors_per_entity = max_neighbors_per_entity
        self.hops = hops
        self.acronym_max_length = acronym_max_length
        self.ranker = ranker
        self.mention_filter = mention_filter
        self.stopwords = frozenset(w.lower() for w in (DEFAULT_STOPWORDS if stopwords is None else stopwords))
        degree = kg.degree()
        candidates: dict[str, list[int]] = {}
        acronyms: dict[str, set[str]] = {}
        for idx in range(kg.num_entities):
            surfaces = [kg.entity_names[idx], *kg.entity_aliases[idx]]
            for surface in surfaces:
                key = self._alias_key(surface)
                if key is None:
                    continue
                entities = candidates.setdefault(key, [])
                if idx not in entities:
                    entities.append(idx)
                if self._is_acronym(surface):
                    acronyms.setdefault(key, set()).add(" ".join(surface.split()))
        # candidates of an alias, best prior first: most connected entity, then lowest index
        self._candidates = {k: tuple(sorted(v, key=lambda i: (-degree[i], i))) for k, v in candidates.items()}
        # an acronym alias shared with a lower-case name ("Who"/"WHO") stays case-insensitive
        self._acronyms = {k: v for k, v in acronyms.items()
                          if all(kg.entity_names[i].isupper() or any(a.isupper() for a in kg.entity_aliases[i])
                                 for i in self._candidates[k])}
        self.num_aliases = len(self._candidates)
        self._automaton = ahocorasick.Automaton()
        for key in self._candidates:
            self._automaton.add_word(key, (key, len(key)))
        if self._candidates:
            self._automaton.make_automaton()

    def candidates(self, surface: str) -> tuple[int, ...]:
        """Entity indices sharing this alias, best prior first (empty if unknown)."""
        key = self._alias_key(surface)
        return self._candidates.get(key, ()) if key is not None else ()

    def _normalize(self, s: str) -> str:
        return _lower_same_length(s) if self.lowercase else s

    def _alias_key(self, surface) -> str | None:
        if not isinstance(surface, str):
            return None
        key = self._normalize(" ".join(surface.split()))
        if len(key) < self.min_alias_length or not _HAS_LETTER_RE.search(key):
            return None
        words = _WORD_RE.findall(key.lower())
        if all(w in self.stopwords for w in words) and not self._is_acronym(surface):
            return None  # a stopword alias ("us", "who") is only linked as an acronym written in capitals
        return key

    def _is_acronym(self, surface: str) -> bool:
        surface = " ".join(surface.split())
        return surface.isupper() and len(surface) <= self.acronym_max_length

    def _match(self, text: str) -> list[tuple[int, int, int]]:
        """Non-overlapping (start, end, entity_idx), leftmost then longest, respecting word boundaries; among
        entities sharing the alias the ranker (or the degree prior) picks one."""
        if self.num_aliases == 0 or not text:
            return []
        norm = self._normalize(text)
        n = len(text)
        cands = []
        for last, (key, length) in self._automaton.iter(norm):
            start, end = last - length + 1, last + 1
            if start > 0 and text[start - 1].isalnum():
                continue
            if end < n and text[end].isalnum():
                continue
            if key in self._acronyms and text[start:end] not in self._acronyms[key]:
                continue
            cands.append((start, -length, key))
        cands.sort()
        out = []
        pos = 0
        for start, neg_len, key in cands:
            if start >= pos:
                end = start - neg_len
                entities = self._candidates[key]
                best = entities[0]
                if self.ranker is not None and len(entities) > 1:
                    best = self.ranker(text, start, end, entities)
                out.append((start, end, best))
                pos = end
        return out

    def link(self, text: str) -> KnowledgeAnnotation:
        """Mentions (non-overlapping, longest-leftmost) and the KG triples among/around them."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        kg = self.kg
        matches = self._match(text)
        if self.mention_filter is not None and matches:
            matches = self.mention_filter(text, matches)
        mentions = [EntityMention(text[s:e], s, e, kg.entity_ids[i]) for s, e, i in matches]
        triplets = []
        if matches:
            trip = kg.triples_among([i for _, _, i in matches], self.hops, self.max_neighbors_per_entity)
            ents, rels = kg.entity_ids, kg.relation_ids
            triplets = [Triplet(ents[h], rels[r], ents[t]) for h, r, t in trip.tolist()]
        return KnowledgeAnnotation(entities=mentions, triplets=triplets)

    def link_tokens(self, tokens: list[str]) -> KnowledgeAnnotation:
        """Link ``" ".join(tokens)``; offsets refer to that string."""
        if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("tokens must be a list of strings")
        return self.link(" ".join(tokens))

    def __call__(self, text) -> KnowledgeAnnotation:
        return self.link(text)

    def __repr__(self) -> str:
        return (
            f"EntityLinker(kg={self.kg!r}, aliases={self.num_aliases}, lowercase={self.lowercase}, "
            f"hops={self.hops}, max_neighbors_per_entity={self.max_neighbors_per_entity})"
        )


def linker_signature(kg: KnowledgeGraph, linker_kwargs: dict) -> dict:
    """What determines a linking run's output besides the text: the KG's hash and the linker's settings (objects
    such as a mention filter or a ranker are named by their ``repr``)."""
    settings = {key: (value if isinstance(value, (str, int, float, bool, type(None))) else repr(value))
                for key, value in sorted(linker_kwargs.items())}
    return {"kg": kg.content_hash(), "linker": settings}


class LinkFunction:
    """Picklable ``datasets.map(batched=True)`` function that links one text column into a ``knowledge`` column
    of annotation dicts. ``split_into_words``: the column holds word lists, linked as ``" ".join(words)``.

    Each worker process builds its own linker from the KG once; a linker built in the main process can be
    passed in (it is not pickled). Identical texts within a batch (a QA context repeated over its questions)
    are linked once. ``annotate``: optional ``annotate(text, annotation) -> annotation`` applied after linking
    (e.g. facts from a relation-extraction model).
    """

    def __init__(self, kg: KnowledgeGraph, linker_kwargs: dict, column: str, split_into_words: bool = False,
                 output_column: str = "knowledge", linker: EntityLinker | None = None, annotate=None):
        self.kg, self.linker_kwargs, self.column = kg, dict(linker_kwargs), column
        self.split_into_words, self.output_column, self.annotate = split_into_words, output_column, annotate
        self._linker = linker

    def __getstate__(self):
        return {**self.__dict__, "_linker": None}

    @property
    def linker(self) -> EntityLinker:
        if self._linker is None:
            self._linker = EntityLinker(self.kg, **self.linker_kwargs)
        return self._linker

    def __call__(self, batch: dict) -> dict:
        texts = [" ".join(words) for words in batch[self.column]] if self.split_into_words else batch[self.column]
        done: dict[str, dict] = {}
        for text in texts:
            if text not in done:
                annotation = self.linker.link(text)
                if self.annotate is not None:
                    annotation = self.annotate(text, annotation)
                done[text] = annotation.to_dict()
        return {self.output_column: [done[text] for text in texts]}


def link_dataset(dataset, kg: KnowledgeGraph, linker_kwargs: dict, column: str, split_into_words: bool = False,
                 output_column: str = "knowledge", linker: EntityLinker | None = None, annotate=None,
                 annotate_signature=None, num_proc: int | None = None, desc: str | None = None):
    """The dataset with a ``knowledge`` column: the annotation (mentions + facts) of every row's text.

    This is the one linking pass of a split: entity-vocabulary building, the seen/unseen subsets, the model
    features and ``keplm build-kg`` all read this column. Cached by ``datasets`` under a fingerprint of the data,
    the KG and the linker settings (``annotate_signature`` names what ``annotate`` adds).
    """
    if column not in dataset.column_names:
        raise ValueError(f"cannot link column {column!r}: the dataset has {dataset.column_names}")
    function = LinkFunction(kg, linker_kwargs, column, split_into_words, output_column, linker, annotate)
    signature = {**linker_signature(kg, linker_kwargs), "column": column, "words": split_into_words,
                 "output": output_column, "annotate": annotate_signature}
    features = dataset.features.copy()
    features[output_column] = KNOWLEDGE_FEATURE
    return fingerprinted_map(dataset, function, signature, num_proc=num_proc, batch_size=256, features=features,
                             desc=desc or f"Linking {column}")
